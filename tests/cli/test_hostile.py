#!/usr/bin/python3
"""What hostile or careless input does to the CLI and the server: each case here was found by
trying it, and each must end in a clear error (or a refusal), never in code run from a model
file, gigabytes of memory, a hang, a lost write or a half-written directory.
Run: ATTNKIT_BIN=build/attnkit /usr/bin/python3 tests/cli/test_hostile.py
"""
import io
import os
import pickle
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import zipfile
from typing import Tuple

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("ATTNKIT_BIN", os.path.join(HERE, "..", "..", "build", "attnkit"))
TINY_MODEL = os.path.join(HERE, "..", "golden", "tiny_model")
sys.path.insert(0, HERE)
from test_serve import start_server, stop_server  # noqa: E402


def run(*args, timeout=60, **kw):
    """attnkit with a memory ceiling (a runaway read fails fast instead of taking the machine)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    return subprocess.run([BIN, "--threads", "1", *args], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit, **kw)


class Workspace(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="attnkit_hostile_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def model_copy(self, name="model"):
        d = self.path(name)
        shutil.copytree(TINY_MODEL, d)
        return d


class ModelFiles(Workspace):
    """1 and 11: a model.pt is data, and all of it must fit the config."""

    def test_a_torchscript_model_pt_runs_no_code_and_is_refused_by_name(self):
        d = self.model_copy()

        class Loud(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.zeros(1))

            @torch.jit.export
            def __getstate__(self):
                return (self.w, self.training)

            @torch.jit.export
            def __setstate__(self, state: Tuple[torch.Tensor, bool]):
                print("CODE FROM THE MODEL FILE RAN")
                self.w = state[0]
                self.training = state[1]

        torch.jit.save(torch.jit.script(Loud()), os.path.join(d, "model.pt"))
        p = run("translate", "--model", d, input="Open the file\n")
        self.assertNotEqual(p.returncode, 0)
        self.assertNotIn("CODE FROM THE MODEL FILE RAN", p.stdout + p.stderr)
        self.assertIn("a LibTorch archive", p.stderr)
        self.assertIn("attnkit upgrade", p.stderr)

    def test_model_pt_is_a_torch_save_dict_python_reads(self):
        weights = torch.load(os.path.join(TINY_MODEL, "model.pt"))
        self.assertIsInstance(weights, dict)
        self.assertTrue(all(isinstance(t, torch.Tensor) for t in weights.values()))
        self.assertIn("decoder.output.weight", weights)

    def test_weights_with_more_tensors_than_the_config_are_refused(self):
        d = self.model_copy()
        weights = torch.load(os.path.join(d, "model.pt"))
        weights["decoder.extra_layer.weight"] = torch.zeros(2, 2)
        torch.save(weights, os.path.join(d, "model.pt"))
        p = run("translate", "--model", d, input="Open\n")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("decoder.extra_layer.weight", p.stderr)
        self.assertIn("does not have", p.stderr)

    def test_a_storage_of_2_63_elements_is_named_not_overflowed(self):
        torch.save({"q": torch.zeros(2, 3)}, self.path("q.pt"))
        with zipfile.ZipFile(self.path("q.pt")) as z:
            members = {n: z.read(n) for n in z.namelist()}
        name = next(n for n in members if n.endswith("data.pkl"))
        # The storage's element count is the last item of its persistent id: 6 -> 2^63 - 1.
        members[name] = members[name].replace(b"K\x06t", b"\x8a\x08" + (2**63 - 1).to_bytes(8, "little") + b"t", 1)
        with zipfile.ZipFile(self.path("big.pt"), "w", zipfile.ZIP_STORED) as z:
            for n, data in members.items():
                z.writestr(n, data)
        p = run("attend", "--q", self.path("big.pt"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("declared to hold 9223372036854775807", p.stderr)
        self.assertNotIn("-9223", p.stderr)  # no byte count overflowed into a negative


class BoundedReads(Workspace):
    """5: a line limit checked before the line is read whole, and no device read to its end."""

    def test_dev_zero_and_a_sparse_giant_line_fail_fast(self):
        sparse = self.path("sparse.txt")
        with open(sparse, "wb") as f:
            f.truncate(2 << 30)  # 2 GB of NULs, no newline, no disk
        for args in (["translate", "--model", TINY_MODEL, "--input", "/dev/zero"],
                     ["translate", "--model", TINY_MODEL, "--input", sparse],
                     ["bleu", "--ref", "/dev/zero", "--hyp", "/dev/zero"],
                     ["corpus", "stats", "/dev/zero"],
                     ["corpus", "stats", sparse]):
            start = time.monotonic()
            p = run(*args)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertLess(time.monotonic() - start, 20, args)
            self.assertRegex(p.stderr, r"not a regular file|a line of more than|over \d+ bytes", args)

    def test_weights_or_vocabulary_linked_to_dev_zero_are_refused(self):
        for name in ("model.pt", "source.vocab", "config.json"):
            d = self.model_copy(name)
            os.remove(os.path.join(d, name))
            os.symlink("/dev/zero", os.path.join(d, name))
            p = run("translate", "--model", d, input="Open\n")
            self.assertNotEqual(p.returncode, 0, name)
            self.assertIn("not a regular file", p.stderr, name)


class Attend(Workspace):
    """7, 14, 16: the work bounded, the numbers finite, the dtypes named."""

    def test_a_query_too_long_for_its_weights_is_refused_before_the_work(self):
        torch.save(torch.zeros(50000, 4), self.path("x.pt"))
        p = run("attend", "--mode", "self", "--x", self.path("x.pt"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("the attention weights would be", p.stderr)

    def test_nan_inputs_and_half_precision_are_named(self):
        torch.save(torch.tensor([[1.0, float("nan")]]), self.path("nan.pt"))
        p = run("attend", "--q", self.path("nan.pt"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("NaN or infinite", p.stderr)
        torch.save(torch.zeros(2, 3, dtype=torch.float16), self.path("half.pt"))
        p = run("attend", "--q", self.path("half.pt"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("Half", p.stderr)
        self.assertIn("float32 or float64", p.stderr)

    def test_threads_are_bounded(self):
        for n in ("-1", "99999999"):
            p = subprocess.run([BIN, "--threads", n, "info"], capture_output=True, text=True,
                               timeout=30)
            self.assertNotEqual(p.returncode, 0, n)
            self.assertLess(len(p.stderr), 300, n)
            self.assertIn("--threads", p.stderr)


class Output(Workspace):
    """8: a failed write of the output is an error, not exit 0."""

    def test_writing_to_dev_full_fails(self):
        refs = self.path("refs.txt")
        with open(refs, "w") as f:
            f.write("a b c\n")
        for args in (["translate", "--model", TINY_MODEL],
                     ["translate", "--model", TINY_MODEL, "--format", "json"],
                     ["bleu", "--ref", refs, "--hyp", refs]):
            with open("/dev/full", "w") as full:
                p = subprocess.run([BIN, "--threads", "1", *args], input="Open the file\n",
                                   stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn("writing the output failed", p.stderr, args)


class Directories(Workspace):
    """9, 10: one training run per directory; a new model directory appears whole."""

    def corpus(self):
        path = self.path("pairs.tsv")
        with open(path, "w") as f:
            f.write("".join("open the file %d\t打开文件 %d\n" % (i, i) for i in range(200)))
        return path

    def test_two_trainings_on_one_directory(self):
        corpus, d = self.corpus(), self.path("run")
        args = [BIN, "--threads", "1", "train", "--train", corpus, "--model-dir", d,
                "--embed", "8", "--hidden", "8", "--epochs", "100000", "--quiet"]
        first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(d, ".lock")) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            second = subprocess.run(args, capture_output=True, text=True, timeout=60)
            self.assertNotEqual(second.returncode, 0)
            self.assertIn("in use by another attnkit", second.stderr)
            self.assertIn("pid %d" % first.pid, second.stderr)
        finally:
            first.kill()
            first.communicate()

    def test_quantize_killed_leaves_no_half_directory(self):
        out = self.path("int8")
        for delay in (0.3, 0.6, 0.9, 1.2, 1.5):
            proc = subprocess.Popen([BIN, "--threads", "1", "quantize", "--model", TINY_MODEL,
                                     "--out", out], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            if os.path.isdir(out):
                names = set(os.listdir(out))
                self.assertTrue({"config.json", "model.pt"} <= names or not names, names)
                if names:
                    break
        shutil.rmtree(out, ignore_errors=True)
        p = run("quantize", "--model", TINY_MODEL, "--out", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(os.path.exists(out + ".partial"))
        self.assertEqual(run("translate", "--model", out, input="Open\n").returncode, 0)


def raw(url, request, timeout=10):
    """Sends bytes, returns the status line's code (0: the connection closed without one)."""
    host, port = re.match(r"http://([^:/]+):(\d+)/", url).groups()
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(request)
        data = b""
        try:
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except socket.timeout:
            return -1
    m = re.match(rb"HTTP/1\.[01] (\d+)", data)
    return int(m.group(1)) if m else 0


class Server(unittest.TestCase):
    """2, 6, 13, 15: what reaches the server and what a page of another site may ask."""

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.url = start_server("--max-connections", "8", "--read-timeout", "5")

    @classmethod
    def tearDownClass(cls):
        stop_server(cls.proc)

    def post(self, headers, body=b'{"text": "Open"}', path="/api/translate"):
        head = "POST %s HTTP/1.1\r\n" % path + "".join("%s: %s\r\n" % h for h in headers)
        return raw(self.url, head.encode() + b"\r\n" + body)

    def test_foreign_hosts_origins_and_content_types_are_refused(self):
        ok = [("Host", "127.0.0.1"), ("Content-Type", "application/json"), ("Content-Length", "16")]
        self.assertEqual(self.post(ok), 200)
        self.assertEqual(self.post([("Host", "evil.example")] + ok[1:]), 421)
        self.assertEqual(self.post(ok + [("Origin", "http://evil.example")]), 403)
        self.assertEqual(self.post(ok + [("Origin", "null")]), 403)
        self.assertEqual(self.post(ok + [("Origin", "http://127.0.0.1:1234")]), 200)
        self.assertEqual(self.post([ok[0], ("Content-Type", "text/plain"), ok[2]]), 415)
        self.assertEqual(self.post([ok[0], ok[2]]), 415)

    def test_framing_and_methods(self):
        host = ("Host", "127.0.0.1")
        json_type = ("Content-Type", "application/json")
        self.assertEqual(self.post([host, json_type, ("Content-Length", "16"),
                                    ("Content-Length", "3")]), 400)
        self.assertEqual(self.post([host, json_type, ("Content-Length", "16"),
                                    ("Transfer-Encoding", "gzip")]), 400)
        start = time.monotonic()
        self.assertEqual(self.post([host, json_type, ("Content-Length", "-1")], body=b""), 400)
        self.assertLess(time.monotonic() - start, 3)
        for method in ("OPTIONS", "TRACE"):
            status = raw(self.url, ("%s /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" %
                                    method).encode())
            self.assertEqual(status, 405, method)

    def test_slow_clients_beyond_the_limit_do_not_delay_healthz(self):
        stop = threading.Event()
        host, port = re.match(r"http://([^:/]+):(\d+)/", self.url).groups()

        def slow_client():
            while not stop.is_set():
                try:
                    with socket.create_connection((host, int(port)), timeout=10) as s:
                        s.sendall(b"POST /api/translate HTTP/1.1\r\n")
                        while not stop.is_set():
                            s.sendall(b"X-Slow: 1\r\n")
                            time.sleep(0.5)
                except OSError:
                    time.sleep(0.05)

        threads = [threading.Thread(target=slow_client, daemon=True) for _ in range(40)]
        for t in threads:
            t.start()
        try:
            time.sleep(2)
            for _ in range(3):
                start = time.monotonic()
                status = raw(self.url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                             timeout=15)
                self.assertEqual(status, 200)
                self.assertLess(time.monotonic() - start, 3)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=15)

    def test_sigterm_during_a_long_catalog_answers_503_within_the_drain(self):
        proc, url = start_server("--drain", "2")
        try:
            entries = "".join('msgid "Message number %d to translate"\nmsgstr ""\n\n' % i
                              for i in range(15000))
            body = ('msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n' +
                    entries).encode()
            host, port = re.match(r"http://([^:/]+):(\d+)/", url).groups()
            s = socket.create_connection((host, int(port)), timeout=30)
            s.sendall(("POST /api/po?lang=zh_CN&beam=10 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                       "text/x-gettext-translation\r\nContent-Length: %d\r\n\r\n" %
                       len(body)).encode() + body)
            time.sleep(1.5)
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            data = s.recv(4096)
            s.close()
            self.assertTrue(data.startswith(b"HTTP/1.1 503"), data[:60])
            proc.wait(timeout=30)
            self.assertLess(time.monotonic() - signalled, 2 + 3)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
