#!/usr/bin/python3
"""attnkit's Transformer against the same model in PyTorch (Python), side by side in one run.

Same corpus (the zh_CN gettext catalogs, as `make demo` builds it), tokens, vocabularies, sizes
(3+3 layers, d_model 256, 4 heads, FFN 1024, pre-norm, tied output), training recipe and threads
on both sides; PyTorch is bench/transformer_pytorch.py (torch.nn.Transformer, decoding with cached
keys and values, the same search). Measures:
  - training: target tokens per second, the best of ROUNDS runs of --seconds per side, alternating;
    model FLOPs utilisation against the machine's best SGEMM at the same threads, and against the
    cores' multiply-add ceiling (attnkit_bench's FmaPeak);
  - translation: sentences per second, greedy at batch 1 and beam 5 at batch 32, each side's
    best of one batch at a time and --threads batches at once, both sides decoding attnkit's
    trained weights (`attnkit export`; the names are the same), so that they do the same work;
  - BLEU (sacreBLEU zh tokenizer) of each side's beam-5 test translations after its first run;
  - each search's work (forward FLOPs per sentence, from attnkit's `translate --timing`), each
    side's fraction of the peak, and the ratio attnkit would reach at 100 % of it.

    /usr/bin/python3 bench/compare_transformer.py --seconds 60 --threads 2 --markdown out/transformer.md
        [--openblas-coretype SkylakeX]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_seq2seq import run  # noqa: E402
from performance import fma_peak_gflops, gemm_gflops  # noqa: E402

ROUNDS = 2
SPEED_SENTENCES = 1000


def flops_per_target_token(tokens_file, m):
    """Model FLOPs (2 per multiply-add, backward = 2x forward) per target token of training, from
    the corpus's mean lengths: the projections, feed-forward blocks, attention products and the
    output layer. Padding is not model work."""
    src = tgt = pairs = 0
    with open(tokens_file, encoding="utf-8") as f:
        for line in f:
            s, t = line.rstrip("\n").split("\t")[:2]
            src, tgt, pairs = src + len(s.split()), tgt + len(t.split()) + 1, pairs + 1
    S, T = src / pairs, tgt / pairs
    d, f, L, V = m["d_model"], m["ffn"], m["encoder_layers"], m["target_vocab"]
    encoder = S * L * (2 * 4 * d * d + 2 * 2 * d * f + 2 * 2 * S * d)
    decoder = L * (T * (2 * 4 * d * d + 2 * 2 * d * d + 2 * 2 * d * f + 2 * 2 * T * d + 2 * 2 * S * d)
                   + S * 2 * 2 * d * d)
    output = T * 2 * d * V
    return 3 * (encoder + decoder + output) / T


def decoding_flops_per_sentence(work, m):
    """Forward FLOPs per sentence of a search, from the work attnkit reported (`translate --timing`:
    sentences, source tokens encoded, decoder rows stepped). Each source token passes the encoder,
    and each decoder layer projects it once to cross-attention keys and values; each decoder row
    passes every layer (its self-attention projections, cross-attention query and output, the
    feed-forward block, attention over the S source positions and its own cached positions, taken
    at half the mean row count per hypothesis) and the output layer."""
    sentences, source_tokens, rows = work
    d, f, L, V = m["d_model"], m["ffn"], m["encoder_layers"], m["target_vocab"]
    S, positions = source_tokens / sentences, rows / sentences / 2
    per_token = L * (2 * 4 * d * d + 2 * 2 * d * f + 2 * 2 * S * d) + m["decoder_layers"] * 2 * 2 * d * d
    per_row = m["decoder_layers"] * (2 * 4 * d * d + 2 * 2 * d * d + 2 * 2 * d * f
                                     + 2 * 2 * (S + positions) * d) + 2 * d * V
    return (source_tokens * per_token + rows * per_row) / sentences


def measure(build_dir, out, seconds, threads):
    attnkit = os.path.join(build_dir, "attnkit")
    os.makedirs(out, exist_ok=True)
    T = ["--threads", str(threads)]
    corpus, data = os.path.join(out, "corpus.tsv"), os.path.join(out, "data")
    if subprocess.run([attnkit, "corpus", "gettext", "--lang", "zh_CN", "--out", corpus],
                      capture_output=True).returncode != 0:
        shutil.copy(os.path.join(HERE, "..", "data", "en-zh_CN.sample.tsv"), corpus)
    run([attnkit, "corpus", "prepare", corpus, "--out-dir", data, "--max-len", "12",
         "--source-tokenizer", "en-lower", "--target-tokenizer", "zh", "--valid", "0.03", "--test", "0.03"])
    tokenize = ["--source-tokenizer", "en-lower", "--target-tokenizer", "zh"]
    tok_train, tok_test = os.path.join(out, "train.tok"), os.path.join(out, "test.tok")
    run([attnkit, "corpus", "tokenize", os.path.join(data, "train.tsv"), "--out", tok_train, *tokenize])
    run([attnkit, "corpus", "tokenize", os.path.join(data, "test.tsv"), "--out", tok_test, *tokenize])
    with open(os.path.join(data, "test.tsv"), encoding="utf-8") as f:
        test = [line.split("\t")[:2] for line in f.read().splitlines()]
    sources, refs = os.path.join(out, "test.src"), os.path.join(out, "test.ref")
    with open(sources, "w", encoding="utf-8") as s, open(refs, "w", encoding="utf-8") as r:
        for src, ref in test:
            s.write(src + "\n")
            r.write(ref + "\n")

    model = os.path.join(out, "attnkit_model")

    def ak_train(model_dir):
        shutil.rmtree(model_dir, ignore_errors=True)
        p = run([attnkit, *T, "train", "--arch", "transformer", "--train", os.path.join(data, "train.tsv"),
                 "--model-dir", model_dir, *tokenize, "--min-freq", "2", "--time-limit", str(seconds),
                 "--epochs", "1000", "--quiet"])
        return float(re.search(r"(\d+) target tokens/s", p.stdout).group(1))

    py = [sys.executable, os.path.join(HERE, "transformer_pytorch.py")]

    def pt_train(model_dir):
        r = json.loads(run(py + ["train", "--model-dir", model_dir, "--vocab-dir", model, "--train", tok_train,
                                 "--seconds", str(seconds), "--threads", str(threads)]).stdout)
        return r["target_tokens_per_s"]

    scratch = os.path.join(out, "speed_runs")
    os.makedirs(scratch, exist_ok=True)
    train = [ak_train(model), pt_train(out)]  # the models the rest measures
    for _ in range(ROUNDS - 1):
        train = [max(train[0], ak_train(os.path.join(scratch, "attnkit_model"))), max(train[1], pt_train(scratch))]

    copies = max(1, -(-SPEED_SENTENCES // len(test)))
    speed_src, speed_tok = os.path.join(out, "speed.src"), os.path.join(out, "speed.tok")
    for single, repeated in [(sources, speed_src), (tok_test, speed_tok)]:
        with open(single, encoding="utf-8") as f:
            text = f.read()
        with open(repeated, "w", encoding="utf-8") as f:
            f.write(text * copies)

    work = {}  # (beam, batch) -> (sentences, source tokens, decoder rows): the same in every mode

    def ak_translate(beam, batch, parallel, inp=speed_src, hyp=None):
        p = run([attnkit, *T, "translate", "--model", model, "--input", inp,
                 "--output", hyp or os.path.join(out, "attnkit_speed.txt"), "--beam", str(beam),
                 "--batch-size", str(batch), "--timing", "--parallel-batches", str(threads if parallel else 1)])
        found = re.search(r"translated (\d+) sentences .*: ([\d.]+) sentences/s \((\d+) source tokens "
                          r"encoded, (\d+) decoder rows\)", p.stderr)
        if inp == speed_src:
            work[(beam, batch)] = tuple(int(found.group(i)) for i in (1, 3, 4))
        return float(found.group(2))

    weights = os.path.join(out, "attnkit_weights.pt")
    run([attnkit, "export", "--model", model, "--out", weights])

    def pt_translate(beam, batch, parallel, inp=speed_tok, hyp=None, own=False):
        policies = [["--parallel-batches", str(threads)]] if parallel else \
            [["--thread-policy", "blas"], ["--thread-policy", "intra-op"]]
        mine = [] if own else ["--weights", weights]
        return max(json.loads(run(py + ["translate", "--model-dir", out, "--vocab-dir", model, "--input", inp, *mine,
                                        "--output", hyp or os.path.join(out, "pytorch_speed.txt"),
                                        "--beam", str(beam), "--batch-size", str(batch),
                                        "--threads", str(threads), *policy]).stdout)["sentences_per_s"]
                   for policy in policies)

    settings = {"greedy, batch 1": (1, 1), "beam 5, batch 32": (5, 32)}
    speeds = {key: [0.0, 0.0] for key in settings}
    for _ in range(ROUNDS):
        for key, (beam, batch) in settings.items():
            for parallel in (False, True):
                speeds[key][0] = max(speeds[key][0], ak_translate(beam, batch, parallel))
                speeds[key][1] = max(speeds[key][1], pt_translate(beam, batch, parallel))
    ak_hyp, pt_hyp = os.path.join(out, "attnkit_b5.txt"), os.path.join(out, "pytorch_b5.txt")
    ak_translate(5, 32, True, sources, ak_hyp)
    pt_translate(5, 32, False, tok_test, pt_hyp, own=True)  # PyTorch's own trained weights

    def bleu(hyp):
        p = run([attnkit, "bleu", "--ref", refs, "--hyp", hyp, "--tokenize", "zh"])
        return float(re.search(r"BLEU = ([\d.]+)", p.stdout).group(1))

    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)["model"]
    flops = flops_per_target_token(tok_train, config)
    peak = max(gemm_gflops(build_dir, threads, "Sgemm"), gemm_gflops(build_dir, threads, "PackedGemm"))
    ceiling = fma_peak_gflops(build_dir, threads)
    rows = [("training, target tokens/s", *train)]
    rows += [(f"translation, {key}, sentences/s", *speeds[key]) for key in settings]
    rows.append((f"test BLEU (zh), beam 5, after {seconds:.0f} s of training", bleu(ak_hyp), bleu(pt_hyp)))
    lines = [f"Transformer (3+3 layers, d_model {config['d_model']}, {config['heads']} heads, FFN {config['ffn']}, "
             f"pre-norm, tied output, batch 64), English -> zh_CN gettext corpus ({len(test)} test sentences), "
             f"{threads} thread(s), same tokens and vocabularies. Training: the best of {ROUNDS} runs of "
             f"{seconds:.0f} s per side, alternating. Translation: the test sentences repeated {copies} times, "
             f"each side's best of one batch at a time and {threads} at once, {ROUNDS} alternating rounds, "
             f"both sides decoding attnkit's trained weights. BLEU: each side's own model.", "",
             "| measure | attnkit | PyTorch (Python) | attnkit / PyTorch |", "|---|---:|---:|---:|"]
    for name, a, b in rows:
        # No ratio for BLEU: a quality row, and at 0.01 against 13 the ratio means nothing.
        ratio = f"{a / b:.2f}x" if b and not name.startswith("test BLEU") else "—"
        lines.append(f"| {name} | {a:.1f} | {b:.1f} | {ratio} |")
    mfu = [tps * flops / 1e9 / peak for tps in train]
    lines += ["", f"Training model FLOPs: {flops / 1e6:.1f} MFLOP per target token; the machine's best SGEMM at "
              f"{threads} thread(s): {peak:.0f} GFLOP/s. Model FLOPs utilisation: attnkit {100 * mfu[0]:.0f} %, "
              f"PyTorch {100 * mfu[1]:.0f} %. At 100 % of the peak, attnkit would train at {1 / mfu[1]:.2f}x "
              f"PyTorch's measured speed. Against the cores' multiply-add ceiling ({ceiling:.0f} GFLOP/s, "
              f"FmaPeak), attnkit {100 * mfu[0] * peak / ceiling:.0f} % and PyTorch {100 * mfu[1] * peak / ceiling:.0f} %."]
    lines += ["", "Decoding work, from attnkit's searches of the speed rows (`translate --timing`: source tokens "
              "encoded, decoder rows stepped; forward FLOPs). Both sides decode attnkit's weights with the same "
              "search, so they do the same work; the last column is the ratio attnkit would reach at 100 % of "
              "the peak against PyTorch's measured speed.", "",
              "| search | MFLOP per sentence | attnkit, fraction of peak | PyTorch, fraction of peak "
              "| attnkit / PyTorch at 100 % of the peak |", "|---|---:|---:|---:|---:|"]
    for key, (beam, batch) in settings.items():
        per_sentence = decoding_flops_per_sentence(work[(beam, batch)], config)
        ak, pt = (speed * per_sentence / 1e9 / peak for speed in speeds[key])
        lines.append(f"| {key} | {per_sentence / 1e6:.0f} | {100 * ak:.0f} % | {100 * pt:.0f} % | {1 / pt:.2f}x |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--out", default="out/bench-transformer")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--markdown")
    ap.add_argument("--openblas-coretype", default=None,
                    help="run both sides with OPENBLAS_CORETYPE set to this (e.g. SkylakeX: the strongest "
                         "PyTorch on a CPU OpenBLAS 0.3.21 does not know)")
    args = ap.parse_args()
    if args.openblas_coretype:  # inherited by every process of both sides
        os.environ["OPENBLAS_CORETYPE"] = args.openblas_coretype
    lines = measure(args.build_dir, args.out, args.seconds, args.threads)
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# Transformer: attnkit against PyTorch\n\nGenerated by `bench/compare_transformer.py`.\n\n"
                    + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
