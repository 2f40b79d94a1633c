#!/usr/bin/python3
"""kill -9 at random moments, then --resume, over and over: nothing is lost.

A small training run (validation on, a checkpoint every 2 steps) is killed with SIGKILL at a
random moment (during a step, a checkpoint write or validation) KILLS times in a row, each time
resumed with --resume. After every kill the directory must load (`translate` works as soon as a
checkpoint exists) and hold no partial file: the writer fills an unnamed file and names it
X.tmp only once it is complete, so a kill can leave at most a complete X.tmp (in the moment
between that link and the rename), which must pass its archive's CRCs and be gone once the
run has written X again. At the end, the same run never interrupted must
have the same model.pt (byte for byte) and the same checkpoint: latest weights, random generator,
position and metrics bit for bit. The optimizer's moments are compared through their effect: both
runs train one more epoch and must still agree bit for bit (LibTorch keys Adam's state by memory
address, so two processes never write the same bytes for it).

  /usr/bin/python3 tests/robustness/kill_resume.py --bin build/attnkit [--kills 20] [--seed 1]
"""
import argparse
import hashlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import zipfile
import time

import torch


def make_data(d, rng):
    """A copy task: sentences of 3-7 letters, the target the same letters."""
    def lines(n):
        out = []
        for _ in range(n):
            words = " ".join(rng.choice("abcdefghij") for _ in range(rng.randrange(3, 8)))
            out.append(f"{words}\t{words}\n")
        return out
    for name, n in (("train.tsv", 400), ("valid.tsv", 40)):
        with open(os.path.join(d, name), "w") as f:
            f.writelines(lines(n))


def train_args(binary, data, model_dir, epochs=3):
    return [binary, "--threads", "1", "train", "--train", os.path.join(data, "train.tsv"),
            "--valid", os.path.join(data, "valid.tsv"), "--model-dir", model_dir,
            "--source-tokenizer", "en", "--target-tokenizer", "en", "--embed", "8", "--hidden", "16",
            "--batch-size", "16", "--epochs", str(epochs), "--checkpoint-every", "2", "--quiet"]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def checkpoint_tensors(path):
    """Everything in checkpoint.pt but the optimizer's state, by name."""
    return {name: t for name, t in torch.load(path).items() if not name.startswith("optimizer.")}


def same_checkpoint(a, b):
    ta, tb = checkpoint_tensors(a), checkpoint_tensors(b)
    if ta.keys() != tb.keys():
        return f"different entries: {sorted(ta.keys() ^ tb.keys())}"
    differ = [n for n in ta if not same_bits(ta[n], tb[n])]
    return f"differ: {differ}" if differ else None


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool((a.detach().reshape(-1).view(torch.uint8) == b.detach().reshape(-1).view(torch.uint8)).all())


def temporaries(model_dir):
    return sorted(f for f in os.listdir(model_dir) if f.endswith(".tmp")) if os.path.isdir(model_dir) else []


def check_loads(binary, model_dir):
    """The directory after a kill: no partial temporary, and it translates once it has weights."""
    for name in temporaries(model_dir):
        # Killed between naming a complete temporary and renaming it: every member's CRC holds.
        path = os.path.join(model_dir, name)
        try:
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
        except zipfile.BadZipFile as e:
            return f"a partial temporary was left: {name} ({e})"
        if bad is not None:
            return f"a partial temporary was left: {name} (member {bad} fails its CRC)"
    if not os.path.exists(os.path.join(model_dir, "checkpoint.pt")):
        return None  # killed before the first checkpoint: resuming starts over
    p = subprocess.run([binary, "translate", "--model", model_dir], input="a b c\n",
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0 or not p.stdout.strip():
        return f"does not translate after the kill: {p.stderr.strip()}"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    with tempfile.TemporaryDirectory() as tmp:
        make_data(tmp, rng)
        reference = os.path.join(tmp, "reference")
        start = time.monotonic()
        subprocess.run(train_args(args.bin, tmp, reference), check=True, capture_output=True, timeout=600)
        duration = time.monotonic() - start

        model_dir = os.path.join(tmp, "killed")
        problems, kills, moments = [], 0, []
        while kills < args.kills:
            # Killed before its first checkpoint, a run leaves config.json and the vocabularies:
            # --resume then starts from the beginning with them.
            resume = ["--resume"] if os.path.exists(os.path.join(model_dir, "config.json")) else []
            proc = subprocess.Popen(train_args(args.bin, tmp, model_dir) + resume,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            moment = rng.uniform(0.05, 0.8) * duration
            try:
                proc.wait(timeout=moment)
                # Finished before the kill: start the series again from nothing.
                err = proc.stderr.read()
                if proc.returncode != 0:
                    problems.append(f"a resumed run failed ({proc.returncode}): {err.strip()}")
                    break
                subprocess.run(["rm", "-rf", model_dir], check=True)
                continue
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc.stderr.close()
            kills += 1
            moments.append(round(moment, 2))
            problem = check_loads(args.bin, model_dir)
            if problem:
                problems.append(f"kill {kills} at {moment:.2f} s: {problem}")
        # The last run goes to the end.
        resume = ["--resume"] if os.path.exists(os.path.join(model_dir, "config.json")) else []
        final = subprocess.run(train_args(args.bin, tmp, model_dir) + resume, capture_output=True,
                               text=True, timeout=600)
        if final.returncode != 0:
            problems.append(f"the last resume failed: {final.stderr.strip()}")
        else:
            if temporaries(model_dir):
                problems.append(f"temporaries still there after the last run: {temporaries(model_dir)}")
            if digest(os.path.join(model_dir, "model.pt")) != digest(os.path.join(reference, "model.pt")):
                problems.append("model.pt differs from the uninterrupted run's")
            for when in ("at the end", "one epoch later"):
                if when == "one epoch later":
                    for d in (reference, model_dir):
                        more = train_args(args.bin, tmp, d, epochs=4) + ["--resume"]
                        subprocess.run(more, check=True, capture_output=True, timeout=600)
                problem = same_checkpoint(os.path.join(reference, "checkpoint.pt"),
                                          os.path.join(model_dir, "checkpoint.pt"))
                if problem:
                    problems.append(f"checkpoint.pt {when}: {problem}")

        print(f"uninterrupted run: {duration:.2f} s; {kills} kills at {moments} s; "
              f"final checkpoint.pt and model.pt {'equal' if not problems else 'checked'}")
        for p in problems:
            print("FAIL:", p, file=sys.stderr)
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
