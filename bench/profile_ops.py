#!/usr/bin/python3
"""Sums a LibTorch trace (chrome://tracing JSON from attnkit_profile_training) by op: self time
(time not spent in nested ops), calls and share of the traced wall time.

    bench/profile_ops.py trace.json [--top 25]
"""
import argparse
import collections
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    with open(args.trace) as f:
        events = [e for e in json.load(f) if e.get("ph") == "X"]
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[e["tid"]].append(e)
    self_time, calls = collections.Counter(), collections.Counter()
    wall = 0.0
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        wall = max(wall, max(e["ts"] + e["dur"] for e in evs) - min(e["ts"] for e in evs))
        stack = []  # (end, name)
        for e in evs:
            start, end = e["ts"], e["ts"] + e["dur"]
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack:  # nested: the parent loses this span from its self time
                self_time[stack[-1][0]] -= e["dur"]
            self_time[e["name"]] += e["dur"]
            calls[e["name"]] += 1
            stack.append((e["name"], end))
    total = sum(self_time.values())
    print(f"traced wall time {wall / 1e3:.1f} ms, op self time {total / 1e3:.1f} ms")
    print(f"{'op':44} {'self ms':>9} {'share':>7} {'calls':>8}")
    for name, t in self_time.most_common(args.top):
        print(f"{name:44} {t / 1e3:9.2f} {t / wall:7.1%} {calls[name]:8}")


if __name__ == "__main__":
    main()
