#!/usr/bin/python3
"""A load test of `attnkit serve` on the loopback, bounded in time; it stops by itself.

N clients for S seconds, each picking at random: a valid translation (greedy or beam 5), a valid
/api/attend, bad JSON, an oversized body, a chunked body, a slow client (a byte every 0.2 s), or a
client that sends half a request and disconnects. A watcher samples /healthz and the server's RSS
throughout. It prints requests/s, p50/p99/max latency of the valid requests, answers by class,
/healthz latency and RSS, and fails (exit 1) if a valid request failed, /healthz took over a
second, or RSS grew by more than --max-rss-growth-mb after the warm-up.

  /usr/bin/python3 tests/robustness/load_test.py --bin build/attnkit --model tests/golden/tiny_model \
      --clients 64 --seconds 60 [--json out.json]
"""
import argparse
import collections
import json
import random
import re
import socket
import subprocess
import sys
import threading
import time

VALID_SENTENCES = ["Open the file", "Save the document", "Close all windows", "Print the page",
                   "The file could not be opened", "Do you want to quit?"]


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def exchange(address, data, timeout=30, pause=None):
    """Sends `data` (a byte at a time with `pause`), returns the status code of the answer, or the
    name of the failure."""
    try:
        with socket.create_connection(address, timeout=timeout) as s:
            if pause is None:
                s.sendall(data)
            else:
                for byte in data:
                    s.send(bytes([byte]))
                    time.sleep(pause)
            answer = b""
            while b"\r\n" not in answer:
                chunk = s.recv(4096)
                if not chunk:
                    break
                answer += chunk
            match = re.match(rb"HTTP/1\.1 (\d+) ", answer)
            return int(match.group(1)) if match else "no answer"
    except (BrokenPipeError, ConnectionResetError):
        return "reset"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return type(e).__name__


def post(path, body, content_type="application/json"):
    return (b"POST /%s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
            % (path.encode(), content_type.encode(), len(body)) + body)


def valid_translate(rng):
    return post("api/translate", json.dumps({"text": rng.choice(VALID_SENTENCES),
                                              "beam": rng.choice([1, 5])}).encode())


def valid_attend(rng):
    n = rng.randrange(1, 16)
    q = [[rng.uniform(-1, 1) for _ in range(4)] for _ in range(n)]
    return post("api/attend", json.dumps({"mechanism": rng.choice(["soft", "hard", "self"]),
                                           "q": q, "k": q, "x": q}).encode())


# kind -> (make the request, the answers that are right for it)
KINDS = {
    "translate": (valid_translate, {200}),
    "attend": (valid_attend, {200}),
    "bad_json": (lambda rng: post("api/translate", b'{"text": "Open'), {400}),
    "oversized": (lambda rng: post("api/translate", b"x" * 70000), {413, "reset"}),
    "chunked": (lambda rng: b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                            b"Content-Type: application/json\r\n\r\n1000\r\n" + b"x" * 4096 + b"\r\n",
                {411, "reset"}),
    "slow": (lambda rng: post("api/translate", b'{"text": "Open the file"}'), {408, "reset"}),
    "disconnect": (lambda rng: post("api/translate", b'{"text": "Open the file"}')[:40], None),
}
WEIGHTS = {"translate": 40, "attend": 20, "bad_json": 10, "oversized": 8, "chunked": 8, "slow": 4,
           "disconnect": 10}


def client(address, deadline, seed, results, lock):
    rng = random.Random(seed)
    kinds, weights = zip(*WEIGHTS.items())
    while time.monotonic() < deadline:
        kind = rng.choices(kinds, weights)[0]
        make, expected = KINDS[kind]
        data = make(rng)
        start = time.monotonic()
        if kind == "disconnect":
            try:
                with socket.create_connection(address, timeout=30) as s:
                    s.sendall(data)
                outcome = "disconnected"
            except OSError as e:
                outcome = type(e).__name__
        else:
            outcome = exchange(address, data, pause=0.2 if kind == "slow" else None)
        seconds = time.monotonic() - start
        with lock:
            results.append((kind, outcome, seconds, expected is None or outcome in expected))


def watch(address, pid, deadline, samples):
    while time.monotonic() < deadline:
        start = time.monotonic()
        status = exchange(address, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout=10)
        samples.append((start, time.monotonic() - start, status, rss_mb(pid)))
        time.sleep(0.25)


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--read-timeout", default="2")
    parser.add_argument("--max-rss-growth-mb", type=float, default=20)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    server = subprocess.Popen([args.bin, "serve", "--model", args.model, "--port", "0",
                               "--read-timeout", args.read_timeout],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    host, port = re.search(r"http://([\d.]+):(\d+)/", line).groups()
    address = (host, int(port))
    rss_start = rss_mb(server.pid)

    results, samples, lock = [], [], threading.Lock()
    start = time.monotonic()
    deadline = start + args.seconds
    threads = [threading.Thread(target=client, args=(address, deadline, seed, results, lock))
               for seed in range(args.clients)]
    threads.append(threading.Thread(target=watch, args=(address, server.pid, deadline, samples)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    rss_end = rss_mb(server.pid)
    server.terminate()
    exit_code = server.wait(timeout=30)

    warm = [rss for t, _, _, rss in samples if t - start >= min(10, args.seconds / 3)]
    valid = [(kind, outcome, s) for kind, outcome, s, _ in results if kind in ("translate", "attend")]
    failed_valid = [r for r in valid if r[1] != 200]
    wrong = collections.Counter((kind, str(outcome)) for kind, outcome, _, ok in results if not ok)
    health = [s for _, s, status, _ in samples if status == 200]
    figures = {
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "requests": len(results),
        "requests_per_s": round(len(results) / elapsed, 1),
        "valid_requests": len(valid),
        "valid_failed": len(failed_valid),
        "valid_latency_ms": {p: round(1000 * percentile([s for *_, s in valid], q), 1)
                             for p, q in (("p50", 50), ("p99", 99), ("max", 100))},
        "answers": {f"{kind} {outcome}": n for (kind, outcome), n in sorted(
            collections.Counter((kind, str(outcome)) for kind, outcome, *_ in results).items())},
        "unexpected": {f"{kind} {outcome}": n for (kind, outcome), n in wrong.items()},
        "healthz": {"samples": len(samples), "failed": len(samples) - len(health),
                    "p50_ms": round(1000 * percentile(health, 50), 1),
                    "max_ms": round(1000 * max(health, default=float("nan")), 1)},
        "rss_mb": {"start": round(rss_start, 1),
                   "after_warmup": round(warm[0], 1) if warm else None,
                   "end": round(rss_end, 1)},
        "server_exit_code": exit_code,
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)

    problems = []
    if failed_valid:
        problems.append(f"{len(failed_valid)} valid requests failed: {failed_valid[:5]}")
    if wrong:
        problems.append(f"unexpected answers: {dict(wrong)}")
    if figures["healthz"]["failed"] or figures["healthz"]["max_ms"] > 1000:
        problems.append(f"/healthz: {figures['healthz']}")
    if warm and rss_end - warm[0] > args.max_rss_growth_mb:
        problems.append(f"RSS grew from {warm[0]:.1f} to {rss_end:.1f} MB after the warm-up")
    if exit_code != 0:
        problems.append(f"the server exited with {exit_code}")
    for p in problems:
        print("FAIL:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
