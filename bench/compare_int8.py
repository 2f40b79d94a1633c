#!/usr/bin/python3
"""attnkit's int8 compute type against its float32, side by side in one run on the same models and
test sets (issue 17's int8 targets: >= 1.5x the sentences/s greedy and beam 5, BLEU within 0.3,
model files >= 3.5x smaller).

For each float32 model directory: `attnkit quantize` writes its int8 directory; translation speed
is measured on the first test set's sources repeated to SPEED_SENTENCES lines, greedy at batch 1
and beam 5 at batch 32, each compute type's best of one batch at a time and --threads batches at
once, ROUNDS rounds alternating the two; BLEU and chrF (sacreBLEU's zh tokenizer) with beam 5 on
every test set.

The defaults are bench/compare_quality.sh's models and sets (the in-domain test split, and whole
packages' catalogs that training never saw): run it first.

    /usr/bin/python3 bench/compare_int8.py [--models DIR ...] [--sets TSV ...] [--threads 2]
"""
import argparse
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_seq2seq import run  # noqa: E402

ROUNDS = 3
SPEED_SENTENCES = 1500
QUALITY = os.path.join(HERE, "..", "out", "quality")


def measure(build_dir="build", models=None, sets=None, threads=2, out="out/bench-int8"):
    """The markdown lines of the comparison."""
    attnkit = os.path.join(build_dir, "attnkit")
    models = models or [os.path.join(QUALITY, "rnn-10min"), os.path.join(QUALITY, "transformer-10min")]
    sets = sets or [os.path.join(QUALITY, "data", "test.tsv"), os.path.join(QUALITY, "heldout.tsv")]
    for path in models + sets:
        if not os.path.exists(path):
            sys.exit(f"{path}: missing (bench/compare_quality.sh makes the default models and sets)")
    os.makedirs(out, exist_ok=True)
    T = ["--threads", str(threads)]
    sources = {}
    for s in sets:
        name = os.path.splitext(os.path.basename(s))[0]
        src, ref = os.path.join(out, name + ".src"), os.path.join(out, name + ".ref")
        with open(s, encoding="utf-8") as f, open(src, "w", encoding="utf-8") as fs, \
                open(ref, "w", encoding="utf-8") as fr:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                fs.write(fields[0] + "\n")
                fr.write(fields[1] + "\n")
        sources[name] = (src, ref)
    first = next(iter(sources.values()))[0]
    with open(first, encoding="utf-8") as f:
        text = f.read()
    speed = os.path.join(out, "speed.src")
    with open(speed, "w", encoding="utf-8") as f:
        f.write(text * max(1, -(-SPEED_SENTENCES // text.count("\n"))))

    def translate(model, beam, batch, parallel, inp=speed, hyp=None):
        p = run([attnkit, *T, "translate", "--model", model, "--input", inp,
                 "--output", hyp or os.path.join(out, "speed.hyp"), "--beam", str(beam), "--batch-size",
                 str(batch), "--timing", "--parallel-batches", str(threads if parallel else 1)])
        return float(re.search(r"([\d.]+) sentences/s", p.stderr).group(1))

    def scores(model, src, ref):
        hyp = os.path.join(out, "quality.hyp")
        translate(model, 5, 32, True, src, hyp)
        p = run([attnkit, "bleu", "--ref", ref, "--hyp", hyp, "--tokenize", "zh"]).stdout
        return (float(re.search(r"BLEU = ([\d.]+)", p).group(1)),
                float(re.search(r"chrF2 = ([\d.]+)", p).group(1)))

    lines = [f"int8 against float32, attnkit on both sides, {threads} thread(s): the same model before and "
             f"after `attnkit quantize`. Speed on {SPEED_SENTENCES}+ sentences (the first set's sources "
             f"repeated), each compute type's best of one batch at a time and {threads} at once, {ROUNDS} "
             f"alternating rounds; BLEU and chrF2 (sacreBLEU zh) with beam 5.", "",
             "| model | measure | float32 | int8 | int8 / float32 |", "|---|---|---:|---:|---:|"]
    for model in models:
        name = os.path.basename(os.path.normpath(model))
        int8 = os.path.join(out, name + "-int8")
        shutil.rmtree(int8, ignore_errors=True)
        run([attnkit, "quantize", "--model", model, "--out", int8])
        sizes = [os.path.getsize(os.path.join(d, "model.pt")) / 1e6 for d in (model, int8)]
        lines.append(f"| {name} | model.pt, MB | {sizes[0]:.2f} | {sizes[1]:.2f} | "
                     f"{sizes[0] / sizes[1]:.2f}x smaller |")
        for label, (beam, batch) in (("greedy, batch 1", (1, 1)), ("beam 5, batch 32", (5, 32))):
            best = [0.0, 0.0]
            for _ in range(ROUNDS):
                for parallel in (False, True):
                    for i, d in enumerate((model, int8)):
                        best[i] = max(best[i], translate(d, beam, batch, parallel))
            lines.append(f"| {name} | {label}, sentences/s | {best[0]:.1f} | {best[1]:.1f} | "
                         f"{best[1] / best[0]:.2f}x |")
        for set_name, (src, ref) in sources.items():
            (fb, fc), (ib, ic) = scores(model, src, ref), scores(int8, src, ref)
            lines.append(f"| {name} | {set_name} BLEU / chrF2 | {fb:.2f} / {fc:.2f} | {ib:.2f} / {ic:.2f} | "
                         f"{ib - fb:+.2f} / {ic - fc:+.2f} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--sets", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="out/bench-int8")
    args = ap.parse_args()
    print("\n".join(measure(args.build_dir, args.models, args.sets, args.threads, args.out)))


if __name__ == "__main__":
    main()
