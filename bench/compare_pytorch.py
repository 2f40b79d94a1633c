#!/usr/bin/python3
"""attnkit against PyTorch (Python), side by side in one run, with the same threads.

Runs build/bench/attnkit_bench (Google Benchmark), then times the same computations in
PyTorch, written the same way (split concat weights, keys projected once for decoder steps),
and prints the ratio table (> 1 means attnkit is faster). Usage:
    /usr/bin/python3 bench/compare_pytorch.py [--build-dir build] [--threads 1] [--filter REGEX]
                                             [--markdown out/attention.md]
"""
import argparse
import ctypes
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn

B, T, D = 64, 50, 256


def masked_softmax(scores):
    return torch.softmax(scores, -1)


def make_attention(score, weighting):
    """Parameters and closures mirroring attnkit's Attention module (eval mode, no mask)."""
    torch.manual_seed(0)
    p = {}
    if score == "concat":
        p["lin"] = nn.Linear(2 * D, 1)
    elif score in ("additive", "bahdanau"):
        p["lin"] = nn.Linear(2 * D, D)
        if score == "bahdanau":
            p["v"] = nn.Linear(D, 1, bias=False)
    elif score == "general":
        p["lin"] = nn.Linear(D, D, bias=False)
    if weighting == "local":
        p["w_p"] = nn.Linear(D, D, bias=False)
        p["v_p"] = nn.Linear(D, 1, bias=False)

    def project_keys(k):
        if score == "concat" or score in ("additive", "bahdanau"):
            w = p["lin"].weight
            return k @ w[:, D:].t() + p["lin"].bias
        if score == "general":
            return k @ p["lin"].weight.t()
        return k

    def scores_of(q, keys):
        if score == "concat":
            return q @ p["lin"].weight[:, :D].t() + keys.transpose(1, 2)
        if score in ("additive", "bahdanau"):
            e = torch.tanh((q @ p["lin"].weight[:, :D].t()).unsqueeze(2) + keys.unsqueeze(1))
            return e.sum(-1) if score == "additive" else e @ p["v"].weight.reshape(-1)
        if score == "scaled-dot":
            return q @ keys.transpose(1, 2) / math.sqrt(keys.shape[-1])
        return q @ keys.transpose(1, 2)

    def attend(q, keys, v):
        s = scores_of(q, keys)
        if weighting == "soft":
            w = torch.softmax(s, -1)
        elif weighting == "hard":
            w = torch.zeros_like(s).scatter_(-1, s.argmax(-1, keepdim=True), 1.0)
        else:
            tk = s.shape[-1]
            centres = (tk - 1) * torch.sigmoid(p["v_p"](torch.tanh(p["w_p"](q)))).squeeze(-1)
            offset = torch.arange(tk, dtype=s.dtype) - centres.unsqueeze(-1)
            keep = offset.abs() <= 4
            w = torch.softmax(s.masked_fill(~keep, torch.finfo(s.dtype).min), -1)
            w = w.masked_fill(~keep, 0) * torch.exp(-offset ** 2 / (2 * 2.0 ** 2))
        return w @ v, w

    return project_keys, attend


def regex_escape(text):
    """Escapes for Google Benchmark's std::regex, which rejects Python's escapes such as '\\-'."""
    return "".join("\\" + c if c in ".^$|()[]{}*+?\\" else c for c in text)


def python_case(name):
    """(callable, needs_grad): a zero-argument callable doing what the C++ case `name` does."""
    parts = name.split("/")
    if parts[0] == "Attention":
        score, weighting, mode = parts[1:]
        project_keys, attend = make_attention(score, weighting)
        torch.manual_seed(0)
        q = torch.randn(B, 1 if mode == "step" else T, D)
        k, v = torch.randn(B, T, D), torch.randn(B, T, D)
        keys = project_keys(k)
        if mode == "step":
            return (lambda: attend(q, keys, v)), False
        return (lambda: attend(q, project_keys(k), v)), False
    if parts[0] == "SDPA":
        backward = parts[1] == "fwdbwd"
        q, k, v = (torch.randn(16, 512, 64, requires_grad=backward) for _ in range(3))

        def sdpa():
            w = torch.softmax(q @ k.transpose(-2, -1) / 8.0, -1)
            out = w @ v
            if backward:
                out.sum().backward()
            return out
        return sdpa, backward
    if parts[0] == "Multihead":
        mha = nn.MultiheadAttention(512, 8, batch_first=True)
        x = torch.randn(2, 512, 512)
        return (lambda: mha(x, x, x, need_weights=True, average_attn_weights=False)), False
    raise ValueError(name)


def time_python(case, min_time):
    fn, needs_grad = case
    with torch.set_grad_enabled(needs_grad):
        fn()  # warm-up
        runs = []
        start = time.perf_counter()
        while time.perf_counter() - start < min_time or len(runs) < 3:
            t0 = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--filter", default="^(Attention|SDPA|Multihead)/",
                    help="which C++ cases (Kernel/, Loss/, Decoder/, Encoder/ and Sgemm/ have no Python side)")
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--markdown", help="also write the table to this Markdown file")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    # The same thread policy as attnkit::set_threads: OpenBLAS single-threaded inside ATen's pool.
    ctypes.CDLL("libblas.so.3").openblas_set_num_threads(1)
    binary = os.path.join(args.build_dir, "bench", "attnkit_bench")
    names = subprocess.run([binary, f"--benchmark_filter={args.filter}", "--benchmark_list_tests"],
                           check=True, capture_output=True, text=True).stdout.split()
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    context = {}

    def time_cpp(name):
        out = subprocess.run([binary, f"--threads={args.threads}",
                              f"--benchmark_filter=^{regex_escape(name)}$",
                              f"--benchmark_min_time={args.min_time}", "--benchmark_format=json"],
                             check=True, capture_output=True, text=True).stdout
        report = json.loads(out)
        context.update(report["context"])
        b = report["benchmarks"][0]
        return b["real_time"] * scale[b["time_unit"]]

    # The two sides alternate, case by case and round by round, so that a change in the
    # machine's load falls on both; each side's time is its median over the rounds.
    rows = []
    for name in names:
        case = python_case(name)
        cpp, py = [], []
        for _ in range(args.rounds):
            cpp.append(time_cpp(name))
            py.append(time_python(case, args.min_time))
        c, p = statistics.median(cpp), statistics.median(py)
        rows.append((name, c, p, p / c))
        print(f"{name}: attnkit {c * 1e3:.3f} ms, PyTorch {p * 1e3:.3f} ms", file=sys.stderr)

    header = (f"attnkit vs PyTorch {torch.__version__} (Python), {args.threads} thread(s), "
              f"BLAS: {context.get('blas', '?')}; medians of {args.rounds} alternating rounds, "
              "ratio = PyTorch time / attnkit time")
    lines = [header, "", "| case | attnkit | PyTorch | ratio |", "|---|---:|---:|---:|"]
    for name, c, p, r in rows:
        lines.append(f"| {name} | {c * 1e3:.3f} ms | {p * 1e3:.3f} ms | {r:.2f}x |")
    if rows:
        geo = math.exp(sum(math.log(r[3]) for r in rows) / len(rows))
        lines.append(f"| geometric mean | | | {geo:.2f}x |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# Attention benchmarks\n\nGenerated by `bench/compare_pytorch.py`.\n\n" + text + "\n")


if __name__ == "__main__":
    main()
