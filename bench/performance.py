#!/usr/bin/python3
"""Every speed target of the GRU model and the attention kernel, measured side by side in one run
on this machine, printed and written to --report (docs/PERFORMANCE.md lists the targets):

  - the fused attention kernel against the LibTorch composite, with SGEMM measured in the same
    run, and peak memory at long sequences (bench/compare_kernels.py);
  - training and translation against the same model in PyTorch (bench/compare_seq2seq.py);
  - model FLOPs utilisation of training against the machine's peak at the training's threads:
    the faster of OpenBLAS's SGEMM and attnkit's packed block, both measured in the same run.

    /usr/bin/python3 bench/performance.py [--seconds 120] [--threads 2] [--openblas-coretype SkylakeX]

--openblas-coretype runs both sides with OPENBLAS_CORETYPE set (OpenBLAS 0.3.21 does not know
Zen 5 and runs its AVX2 kernels there unless told): the strongest baseline on such a CPU.

Takes about 4 * seconds plus 3 minutes. Run it on an idle machine.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_kernels  # noqa: E402
import compare_seq2seq  # noqa: E402


def gemm_gflops(build_dir, threads, case="Sgemm"):
    """1024^3 GFLOP/s on `threads` threads: OpenBLAS's SGEMM owning them (case Sgemm), or
    attnkit's packed block (case PackedGemm). The best of 5 repetitions, as a peak should be; a
    busy neighbour only ever lowers a repetition."""
    policy = "--blas" if case == "Sgemm" else "--kernels"
    out = subprocess.run([os.path.join(build_dir, "bench", "attnkit_bench"), f"--threads={threads}", policy,
                          f"--benchmark_filter=^{case}/1024$", "--benchmark_min_time=0.5",
                          "--benchmark_repetitions=5", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    return max(b["GFLOP/s"] for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration")


def fma_peak_gflops(build_dir, threads):
    """The cores' multiply-add ceiling on `threads` threads at once (attnkit_bench's FmaPeak:
    vector FMAs, no memory), the best of 3 repetitions: what no product can exceed, where the
    1024^3 SGEMM is what a good one reaches."""
    out = subprocess.run([os.path.join(build_dir, "bench", "attnkit_bench"), f"--threads={threads}", "--kernels",
                          "--benchmark_filter=^FmaPeak$", "--benchmark_repetitions=3", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    return max(b["GFLOP/s"] for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration")


def encoder_flops_per_token(config):
    """Forward FLOPs (2 per multiply-add) per source token: the GRU layers and the score's keys."""
    m = config["model"]
    E, H = m["embed_size"], m["hidden_size"]
    dirs = 2 if m["bidirectional"] else 1
    return dirs * (2 * E * 3 * H + 2 * H * 3 * H) + 2 * H * dirs * H


def decoder_step_flops(config, S, embedding_projection=True):
    """Forward FLOPs of one decoder step for one row, attending over S source positions.
    embedding_projection=False leaves out the embedding's part of the first GRU layer's input
    product, which attnkit's inference step looks up in a table instead of computing."""
    m = config["model"]
    E, H, V = m["embed_size"], m["hidden_size"], m["target_vocab"]
    Hm, A = H * (2 if m["bidirectional"] else 1), H  # memory width; the additive score's width
    feed = H if m["input_feeding"] else 0
    return (2 * ((E if embedding_projection else 0) + feed) * 3 * H + 2 * H * 3 * H  # GRU
            + 2 * H * A + 2 * S * A + 2 * S * Hm  # query, scores, context
            + 2 * (H + Hm) * H + 2 * H * V)  # combine, output layer


def training_flops_per_target_token(tokens_file, config):
    """Model FLOPs (2 per multiply-add; backward = 2x forward) per target token, from the
    corpus's mean source and target lengths. Padding and recomputation are not model FLOPs."""
    src = tgt = pairs = 0
    with open(tokens_file, encoding="utf-8") as f:
        for line in f:
            s, t = line.rstrip("\n").split("\t")[:2]
            src += len(s.split())
            tgt += len(t.split()) + 1  # + <eos>
            pairs += 1
    S, T = src / pairs, tgt / pairs
    forward = S * encoder_flops_per_token(config) + T * decoder_step_flops(config, S)
    return 3 * forward / T, S, T


def decoding_flops_per_sentence(work, config):
    """The FLOPs attnkit's search computed per sentence, from the work it reported: every
    source token encoded and every decoder row stepped."""
    sentences, source_tokens, rows = work
    S = source_tokens / sentences
    return (source_tokens * encoder_flops_per_token(config)
            + rows * decoder_step_flops(config, S, embedding_projection=False)) / sentences


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    compare_seq2seq.add_arguments(ap)
    ap.add_argument("--report", default=None,
                    help="where the full report goes (default: out/performance[-openblas-CORE].md)")
    ap.add_argument("--openblas-coretype", default=None,
                    help="run both sides with OPENBLAS_CORETYPE set to this (e.g. SkylakeX)")
    args = ap.parse_args()
    suffix = f"-openblas-{args.openblas_coretype.lower()}" if args.openblas_coretype else ""
    args.report = args.report or os.path.join("out", f"performance{suffix}.md")
    if args.openblas_coretype:  # inherited by every process of both sides
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            if args.openblas_coretype.lower() in ("skylakex", "cooperlake", "sapphirerapids") and \
                    " avx512f" not in f.read():
                sys.exit(f"--openblas-coretype {args.openblas_coretype}: this CPU has no AVX-512")
        os.environ["OPENBLAS_CORETYPE"] = args.openblas_coretype

    kernel_lines, k = compare_kernels.measure(args.build_dir, threads=1)
    s = compare_seq2seq.measure(args.build_dir, args.out, args.seconds, args.threads, args.test_sentences)
    sgemm = gemm_gflops(args.build_dir, args.threads, "Sgemm")
    packed = gemm_gflops(args.build_dir, args.threads, "PackedGemm")
    peak = max(sgemm, packed)
    with open(os.path.join(s["model_dir"], "config.json")) as f:
        config = json.load(f)
    flops, S, T = training_flops_per_target_token(s["train_tokens"], config)
    (ak_tps, pt_tps) = s["measures"]["train"]
    ak_mfu, pt_mfu = ak_tps * flops / 1e9 / peak, pt_tps * flops / 1e9 / peak
    ratio = {name: a / b for name, (a, b) in s["measures"].items()}
    ceiling = peak * 1e9 / flops / pt_tps  # attnkit/PyTorch at 100% of the peak
    decoding = []  # (name, sentences/s, FLOPs per sentence, utilisation, ceiling vs PyTorch)
    for key, name in (("greedy", "greedy, batch 1"), ("beam", "beam 5, batch 32")):
        per_sentence = decoding_flops_per_sentence(s["work"][key], config)
        ak, pt = s["measures"][key]
        decoding.append((name, ak, per_sentence, ak * per_sentence / 1e9 / peak,
                         peak * 1e9 / per_sentence / pt))

    def verdict(value, target):
        return "met" if value >= target else "not met"

    targets = [
        ("attention kernel forward vs composite (16, 512, 64)", "2x or 85% of the peak",
         f"{k['speedup_fwd']:.2f}x ({k['peak_fwd']:.0%})",
         "met" if k["speedup_fwd"] >= 2 or k["peak_fwd"] >= 0.85 else "not met"),
        ("attention kernel forward + backward vs composite", "1.5x or 85% of the peak",
         f"{k['speedup_fwdbwd']:.2f}x ({k['peak_fwdbwd']:.0%})",
         "met" if k["speedup_fwdbwd"] >= 1.5 or k["peak_fwdbwd"] >= 0.85 else "not met"),
        ("attention kernel peak memory at T = 4096", "10x lower", f"{k['memory_4096']:.1f}x lower",
         verdict(k["memory_4096"], 10)),
        ("training target tokens/s vs PyTorch", "3x", f"{ratio['train']:.2f}x", verdict(ratio["train"], 3)),
        ("greedy, batch 1, sentences/s vs PyTorch", "5x", f"{ratio['greedy']:.2f}x", verdict(ratio["greedy"], 5)),
        ("beam 5, batch 32, sentences/s vs PyTorch", "3x", f"{ratio['beam']:.2f}x", verdict(ratio["beam"], 3)),
        ("training model FLOPs utilisation", "report", f"{ak_mfu:.0%} (PyTorch {pt_mfu:.0%})", "reported"),
    ]
    lines = ["# Performance", "",
             f"Generated by `bench/performance.py --seconds {args.seconds:.0f} --threads {args.threads}"
             + (f" --openblas-coretype {args.openblas_coretype}" if args.openblas_coretype else "")
             + f"` on {datetime.date.today().isoformat()}; every ratio comes from one run on this machine"
             + (f", with OPENBLAS_CORETYPE={args.openblas_coretype} for both sides (LibTorch's own "
                "products in the attnkit processes too)." if args.openblas_coretype else
                ", with Debian's defaults (OpenBLAS picks its kernels itself)."), "",
             "## Targets", "", "| target | wanted | measured | |", "|---|---:|---:|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in targets]
    lines += ["", "## Attention kernel", ""] + kernel_lines
    lines += ["", "## Translation model", ""] + s["lines"]
    lines += ["", "## Model FLOPs utilisation", "",
              f"Training FLOPs per target token: {flops / 1e6:.1f} MFLOP (mean source {S:.1f} and target "
              f"{T:.1f} tokens; 2 FLOPs per multiply-add, backward counted as twice the forward; padding "
              f"and recomputation not counted). Peak: the faster of OpenBLAS's SGEMM ({sgemm:.1f} GFLOP/s) "
              f"and attnkit's packed block ({packed:.1f} GFLOP/s), both 1024³ on {args.threads} thread(s) "
              "in this run.", "",
              "| | target tokens/s | GFLOP/s | fraction of peak |", "|---|---:|---:|---:|",
              f"| attnkit | {ak_tps:.0f} | {ak_tps * flops / 1e9:.1f} | {ak_mfu:.0%} |",
              f"| PyTorch (Python) | {pt_tps:.0f} | {pt_tps * flops / 1e9:.1f} | {pt_mfu:.0%} |", "",
              f"At 100% of the peak, attnkit would train at {ceiling:.2f}x PyTorch's measured speed.", "",
              "Decoding, from the work attnkit's searches report (`translate --timing`: source tokens "
              "encoded, decoder rows stepped; forward FLOPs only, and without the embedding's part "
              "of the first GRU layer, which attnkit looks up). Both sides decode attnkit's weights with "
              "the same search, so they step the same rows. Each side at its best mode:", "",
              "| search | attnkit sentences/s | MFLOP per sentence | GFLOP/s | fraction of peak "
              "| attnkit / PyTorch at 100% of the peak |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {name} | {ak:.0f} | {f / 1e6:.1f} | {ak * f / 1e9:.1f} | {u:.0%} | {c:.2f}x |"
              for name, ak, f, u, c in decoding]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
    with open(args.report, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"report written to {args.report}")


if __name__ == "__main__":
    main()
