#!/usr/bin/python3
"""Data-parallel training on one machine: 2 processes x 1 thread against 1 process x 2 threads.

Same corpus as `make demo` (the zh_CN gettext catalogs, or the shipped sample), same model and
global batch, a fixed wall-clock budget each; reports target tokens per second (all ranks).

    /usr/bin/python3 bench/compare_distributed.py --seconds 60 [--markdown out/distributed.md]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--out", default="out/bench-distributed")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--markdown")
    args = ap.parse_args()
    attnkit = os.path.join(args.build_dir, "attnkit")
    os.makedirs(args.out, exist_ok=True)
    corpus = os.path.join(args.out, "corpus.tsv")
    if subprocess.run([attnkit, "corpus", "gettext", "--lang", "zh_CN", "--out", corpus], capture_output=True).returncode:
        shutil.copy(os.path.join(HERE, "..", "data", "en-zh_CN.sample.tsv"), corpus)
    subprocess.run([attnkit, "corpus", "prepare", corpus, "--out-dir", os.path.join(args.out, "data"), "--max-len", "12",
                    "--source-tokenizer", "en-lower", "--target-tokenizer", "zh"], check=True, capture_output=True)
    train = os.path.join(args.out, "data", "train.tsv")
    rows = []
    for name, threads, extra in [("1 process x 1 thread", "1", []), ("1 process x 2 threads", "2", []),
                                 ("2 processes x 1 thread (Gloo)", "1", ["--nproc", "2"])]:
        model = os.path.join(args.out, "model")
        shutil.rmtree(model, ignore_errors=True)
        p = subprocess.run([attnkit, "--threads", threads, "train", "--train", train, "--model-dir", model,
                            "--source-tokenizer", "en-lower", "--target-tokenizer", "zh", "--min-freq", "2",
                            "--time-limit", str(args.seconds), "--epochs", "1000", "--quiet", *extra],
                           capture_output=True, text=True)
        if p.returncode:
            sys.exit(p.stderr)
        rows.append((name, float(re.search(r"(\d+) target tokens/s", p.stdout).group(1))))
    base = rows[1][1]
    lines = [f"Seq2Seq (GRU 256, batch 64), English -> zh_CN, {args.seconds:.0f} s of training each, "
             "target tokens/s over all ranks.", "", "| setup | target tokens/s | vs 1 process x 2 threads |",
             "|---|---:|---:|"]
    lines += [f"| {n} | {v:.0f} | {v / base:.2f}x |" for n, v in rows]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
