#!/usr/bin/python3
"""attnkit's Seq2Seq against the same model in PyTorch (Python), side by side in one run.

Same corpus (the zh_CN gettext catalogs, as `make demo` builds it), same tokenisation and
vocabularies, same architecture and hyperparameters, same threads. Measures:
  - training: target tokens per second over a fixed wall-clock budget;
  - BLEU (sacreBLEU zh tokenizer) on the test split after that same budget;
  - translation: sentences per second, greedy at batch 1 and beam 5 at batch 32.
Writes the table to stdout and, with --markdown, to a file.

    /usr/bin/python3 bench/compare_seq2seq.py --seconds 120 --threads 2 --markdown out/seq2seq.md
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRANSLATION_RUNS = 3
SPEED_SENTENCES = 1500
TRAINING_SPEED_RUNS = 2
SPEED_SECONDS = 40


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p


def measure(build_dir="build", out="out/bench-seq2seq", seconds=120, threads=2, test_sentences=300):
    """Runs both sides; returns a dict of the measures, the markdown lines and the paths used."""
    attnkit = os.path.join(build_dir, "attnkit")
    os.makedirs(out, exist_ok=True)
    T = ["--threads", str(threads)]

    corpus = os.path.join(out, "corpus.tsv")
    if subprocess.run([attnkit, "corpus", "gettext", "--lang", "zh_CN", "--out", corpus],
                      capture_output=True).returncode != 0:
        shutil.copy(os.path.join(HERE, "..", "data", "en-zh_CN.sample.tsv"), corpus)
    run([attnkit, "corpus", "prepare", corpus, "--out-dir", os.path.join(out, "data"), "--max-len", "12",
         "--source-tokenizer", "en-lower", "--target-tokenizer", "zh", "--valid", "0.03", "--test", "0.03"])
    data = os.path.join(out, "data")
    test = os.path.join(out, "test.tsv")
    with open(os.path.join(data, "test.tsv"), encoding="utf-8") as f:
        lines = f.read().splitlines()[:test_sentences]
    with open(test, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    sources = os.path.join(out, "test.src")
    refs = os.path.join(out, "test.ref")
    with open(sources, "w", encoding="utf-8") as s, open(refs, "w", encoding="utf-8") as r:
        for line in lines:
            src, ref = line.split("\t")[:2]
            s.write(src + "\n")
            r.write(ref + "\n")

    # attnkit: train for the budget (no validation, so all of it is training).
    def ak_train(model_dir, budget):
        shutil.rmtree(model_dir, ignore_errors=True)
        p = run([attnkit, *T, "train", "--train", os.path.join(data, "train.tsv"), "--model-dir",
                 model_dir, "--source-tokenizer", "en-lower", "--target-tokenizer", "zh",
                 "--min-freq", "2", "--time-limit", str(budget), "--epochs", "1000", "--quiet"])
        return float(re.search(r"(\d+) target tokens/s", p.stdout).group(1))

    model = os.path.join(out, "attnkit_model")
    ak_tps = ak_train(model, seconds)

    def bleu(hyp):
        p = run([attnkit, "bleu", "--ref", refs, "--hyp", hyp, "--tokenize", "zh"])
        return float(re.search(r"BLEU = ([\d.]+)", p.stdout).group(1))

    # PyTorch: the same ids (attnkit's tokens and vocabularies), the same budget.
    tok_train, tok_test = os.path.join(out, "train.tok"), os.path.join(out, "test.tok")
    for src, dst in [(os.path.join(data, "train.tsv"), tok_train), (test, tok_test)]:
        run([attnkit, "corpus", "tokenize", src, "--out", dst, "--source-tokenizer", "en-lower",
             "--target-tokenizer", "zh"])
    py = [sys.executable, os.path.join(HERE, "seq2seq_pytorch.py")]
    common = ["--model-dir", out, "--vocab-dir", model, "--threads", str(threads)]
    # PyTorch trains with OpenBLAS owning the threads, its faster policy on this model (as
    # attnkit's).
    def pt_train(model_dir, budget):
        r = json.loads(run(py + ["train", *common[2:], "--model-dir", model_dir, "--train", tok_train,
                                 "--seconds", str(budget), "--thread-policy", "blas"]).stdout)
        return r["target_tokens_per_s"]

    pt_tps = pt_train(out, seconds)
    # A 120 s run can lose 15% to a busy neighbour on a shared machine: TRAINING_SPEED_RUNS more
    # runs of SPEED_SECONDS each, the sides alternating, and each side keeps its fastest.
    scratch = os.path.join(out, "speed_runs")
    os.makedirs(scratch, exist_ok=True)
    for _ in range(TRAINING_SPEED_RUNS):
        ak_tps = max(ak_tps, ak_train(os.path.join(scratch, "attnkit_model"), SPEED_SECONDS))
        pt_tps = max(pt_tps, pt_train(scratch, SPEED_SECONDS))

    # Speed is measured on the test sources repeated to at least SPEED_SENTENCES lines, so a pass
    # lasts seconds rather than a fraction of one; BLEU on the test set itself.
    copies = max(1, -(-SPEED_SENTENCES // len(lines)))
    speed_src, speed_tok = os.path.join(out, "speed.src"), os.path.join(out, "speed.tok")
    for single, repeated in [(sources, speed_src), (tok_test, speed_tok)]:
        with open(single, encoding="utf-8") as f:
            text = f.read()
        with open(repeated, "w", encoding="utf-8") as f:
            f.write(text * copies)

    work = {}  # beam size -> (sentences, source tokens, decoder rows) of attnkit's passes
    # The speed passes decode attnkit's trained weights on both sides (the names map one to one),
    # so both step the same rows; BLEU is each side's own model.
    weights = os.path.join(out, "attnkit_weights.pt")
    run([attnkit, "export", "--model", model, "--out", weights])

    # Two ways to use the threads, on each side: one batch at a time with every thread inside
    # its products, or one batch per thread (single-threaded products) side by side.
    def ak_translate(beam, batch, mode, inp=speed_src, hyp=None):
        hyp = hyp or os.path.join(out, "attnkit_speed.txt")
        p = run([attnkit, *T, "translate", "--model", model, "--input", inp, "--output", hyp,
                 "--beam", str(beam), "--batch-size", str(batch), "--timing",
                 "--parallel-batches", "1" if mode == "sequential" else str(threads)])
        work[beam] = tuple(int(x) for x in re.search(
            r"translated (\d+) sentences.*\((\d+) source tokens encoded, (\d+) decoder rows\)",
            p.stderr).groups())
        return float(re.search(r"([\d.]+) sentences/s", p.stderr).group(1))

    def pt_translate(beam, batch, mode, inp=speed_tok, hyp=None, own=False):
        hyp = hyp or os.path.join(out, "pytorch_speed.txt")
        mine = [] if own else ["--weights", weights]
        # One batch at a time: under either thread policy, keeping the faster.
        policies = [["--thread-policy", "blas"], ["--thread-policy", "intra-op"]] \
            if mode == "sequential" else [["--parallel-batches", str(threads)]]
        best = 0.0
        for policy in policies:
            r = json.loads(run(py + ["translate", *common, *mine, "--input", inp, "--output", hyp,
                                     "--beam", str(beam), "--batch-size", str(batch), *policy]).stdout)
            best = max(best, r["sentences_per_s"])
        return best

    # A busy neighbour on a shared machine can slow one pass by 15%: the sides alternate,
    # TRANSLATION_RUNS rounds, and each keeps its best pass.
    settings = {"greedy": (1, 1), "beam": (5, 32)}
    modes = ("sequential", "parallel")
    speeds = {(key, mode): [0.0, 0.0] for key in settings for mode in modes}
    for _ in range(TRANSLATION_RUNS):
        for key, (beam, batch) in settings.items():
            for mode in modes:
                best = speeds[key, mode]
                best[0] = max(best[0], ak_translate(beam, batch, mode))
                best[1] = max(best[1], pt_translate(beam, batch, mode))
    ak_hyp, pt_hyp = os.path.join(out, "attnkit_b5_n32.txt"), os.path.join(out, "pytorch_b5_n32.txt")
    ak_translate(5, 32, "parallel", sources, ak_hyp)
    pt_translate(5, 32, "sequential", tok_test, pt_hyp, own=True)
    ak_bleu, pt_bleu = bleu(ak_hyp), bleu(pt_hyp)

    # Each side's best mode against the other's best: the targets' measure.
    best = {key: tuple(max(speeds[key, mode][i] for mode in modes) for i in (0, 1)) for key in settings}
    m = {"train": (ak_tps, pt_tps), "greedy": best["greedy"],
         "beam": best["beam"], "bleu": (ak_bleu, pt_bleu)}
    for key in settings:
        for mode in modes:
            m[f"{key} {mode}"] = tuple(speeds[key, mode])
    rows = [("training, target tokens/s", *m["train"])]
    for key, name in (("greedy", "greedy, batch 1"), ("beam", "beam 5, batch 32")):
        rows += [(f"translation, {name}, sentences/s: one batch at a time", *m[f"{key} sequential"]),
                 (f"translation, {name}, sentences/s: {threads} batches at once", *m[f"{key} parallel"]),
                 (f"translation, {name}, sentences/s: each side's best", *m[key])]
    rows.append((f"test BLEU (zh) after {seconds:.0f} s of training, beam 5", *m["bleu"]))
    table = [f"Seq2Seq (GRU 256, embed 128, bidirectional encoder, Bahdanau attention, input feeding, "
             f"batch 64), English -> zh_CN gettext corpus, {threads} thread(s), same tokens and "
             f"vocabularies. Training speed: the best of a {seconds:.0f} s run and "
             f"{TRAINING_SPEED_RUNS} runs of {SPEED_SECONDS} s per side, alternating; BLEU after the "
             f"{seconds:.0f} s run. Translation speeds on the {len(lines)} test sentences repeated "
             f"{copies} times, both sides decoding attnkit's trained weights (the same rows); BLEU on the "
             f"test sentences, each side's own model. Translation runs one batch at a time (all threads in its products; "
             f"PyTorch under either thread policy, the faster kept) or {threads} batches at once "
             f"(one per thread, single-threaded products: attnkit's --parallel-batches, and Python "
             f"threads in the PyTorch script). The sides alternate for {TRANSLATION_RUNS} rounds and "
             f"each keeps its fastest pass.", "",
             "| measure | attnkit | PyTorch (Python) | attnkit / PyTorch |", "|---|---:|---:|---:|"]
    for name, a, b in rows:
        table.append(f"| {name} | {a:.1f} | {b:.1f} | {a / b if b else float('nan'):.2f}x |")
    return {"measures": m, "lines": table, "train_tokens": tok_train, "model_dir": model,
            "work": {key: work[beam] for key, (beam, _) in settings.items()}}


def add_arguments(ap):
    """The options of measure(), shared with bench/performance.py."""
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--out", default="out/bench-seq2seq")
    ap.add_argument("--seconds", type=float, default=120, help="training budget of each side")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--test-sentences", type=int, default=300)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(ap)
    ap.add_argument("--markdown")
    args = ap.parse_args()
    r = measure(args.build_dir, args.out, args.seconds, args.threads, args.test_sentences)
    text = "\n".join(r["lines"])
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# Seq2Seq: attnkit against PyTorch\n\nGenerated by `bench/compare_seq2seq.py`.\n\n" + text + "\n")


if __name__ == "__main__":
    main()
