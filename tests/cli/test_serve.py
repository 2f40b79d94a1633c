#!/usr/bin/python3
"""End-to-end tests of `attnkit serve` on 127.0.0.1: the API and its contract, the limits on what
one request may ask, and the connection handling that keeps one client from taking the server
down (slow and idle clients, pipelining, SIGTERM while requests are in flight).
Run: ATTNKIT_BIN=build/attnkit /usr/bin/python3 tests/cli/test_serve.py
"""
import concurrent.futures
import json
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("ATTNKIT_BIN", os.path.join(HERE, "..", "..", "build", "attnkit"))
TINY_MODEL = os.path.join(HERE, "..", "golden", "tiny_model")
TINY_TRANSFORMER = os.path.join(HERE, "..", "golden", "tiny_transformer")
POT = os.path.join(HERE, "..", "data", "catalog.pot")


def start_server(*args, model=TINY_MODEL):
    """`attnkit serve` on a free port with a tiny model; returns the process and its URL."""
    proc = subprocess.Popen([BIN, "--threads", "1", "serve", "--model", model, "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
    if not match:
        proc.kill()
        raise AssertionError("the server did not start: " + line + proc.stderr.read())
    return proc, match.group(1)


def stop_server(proc):
    proc.terminate()
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()


def post(url, path, body, timeout=60):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def healthz(url):
    start = time.monotonic()
    with urllib.request.urlopen(url + "healthz", timeout=30) as r:
        return json.loads(r.read()), time.monotonic() - start


def address(url):
    host, port = re.search(r"http://([\d.]+):(\d+)/", url).groups()
    return host, int(port)


def openapi(url):
    with urllib.request.urlopen(url + "openapi.json", timeout=30) as f:
        return json.loads(f.read())


def check_contract(doc, path, method, status, body):
    """Validates an answer against the documented schema of that path, method and status."""
    import jsonschema
    pointer = "/".join(["#/paths", path.replace("/", "~1"), method, "responses", str(status)])
    response = jsonschema.RefResolver.from_schema(doc).resolve(pointer)[1]
    if "$ref" in response:
        response = jsonschema.RefResolver.from_schema(doc).resolve(response["$ref"])[1]
    schema = dict(doc, **response["content"]["application/json"]["schema"])
    jsonschema.Draft202012Validator(schema).validate(body)


class TransformerServe(unittest.TestCase):
    """A Transformer model directory served as a GRU one is, with every attention map."""

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.url = start_server(model=TINY_TRANSFORMER)

    @classmethod
    def tearDownClass(cls):
        stop_server(cls.proc)

    def test_translation_carries_every_layer_and_head(self):
        status, r = post(self.url, "api/translate", {"text": "Open the file", "beam": 5})
        self.assertEqual(status, 200, r)
        check_contract(openapi(self.url), "/api/translate", "post", 200, r)
        maps = r["attention_layers"]
        rows, sources = len(r["attention_rows"]), len(r["source_tokens"])
        self.assertEqual(maps["decoder_inputs"], ["<s>"] + r["target_tokens"][:rows - 1])
        for layer in maps["cross"]:
            for head in layer:
                self.assertEqual((len(head), len(head[0])), (rows, sources))
                for row in head:
                    self.assertAlmostEqual(sum(row), 1, delta=2e-3)
        for layer in maps["decoder_self"]:
            for head in layer:  # causal: row i sees inputs 0..i only
                for i, row in enumerate(head):
                    self.assertEqual(len(row), rows)
                    self.assertTrue(all(w == 0 for w in row[i + 1:]), (i, row))
        for layer in maps["encoder_self"]:
            self.assertEqual([len(head) for head in layer], [sources] * len(layer))
        # `attention`, what the search kept, is the penultimate layer's cross-attention (the only
        # layer's with one), mean of heads: transformer::alignment_layer.
        layers = maps["cross"]
        self.assertGreaterEqual(len(layers), 2)  # so that the penultimate is not the last
        aligned = layers[len(layers) - 2]
        for i in range(rows):
            for j in range(sources):
                mean = sum(head[i][j] for head in aligned) / len(aligned)
                self.assertAlmostEqual(r["attention"][i][j], mean, delta=2e-4)

    def test_a_gru_model_has_no_layer_maps(self):
        proc, url = start_server()
        try:
            self.assertNotIn("attention_layers", post(url, "api/translate", {"text": "Open"})[1])
        finally:
            stop_server(proc)

    def test_int8_serves_and_says_so(self):
        proc, url = start_server("--compute-type", "int8", model=TINY_TRANSFORMER)
        try:
            health = healthz(url)[0]
            self.assertEqual((health["arch"], health["compute_type"]), ("transformer", "int8"))
            status, r = post(url, "api/translate", {"text": "Open the file", "beam": 2})
            self.assertEqual(status, 200, r)
            self.assertTrue(r["translation"])
        finally:
            stop_server(proc)


class ServeCli(unittest.TestCase):
    """attnkit serve on 127.0.0.1: the API, limits, batching, and staying up under bad input."""

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.url = start_server("--max-text", "500")

    @classmethod
    def tearDownClass(cls):
        stop_server(cls.proc)

    def request(self, path, body=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method="POST" if data is not None else "GET",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def test_healthz_and_page(self):
        health = self.request("healthz")[1]
        self.assertEqual(health["status"], "ok")
        self.assertEqual((health["arch"], health["compute_type"]), ("rnn", "float32"))
        with urllib.request.urlopen(self.url, timeout=30) as r:
            self.assertIn("attnkit", r.read().decode())

    def test_translate_returns_tokens_attention_and_score(self):
        status, r = self.request("api/translate", {"text": "Open the file", "beam": 3})
        self.assertEqual(status, 200, r)
        self.assertEqual(r["source_tokens"], ["open", "the", "file"])
        self.assertEqual(len(r["attention"][0]), 3)
        self.assertLess(r["score"], 0)
        # Every attention row is labelled: the target tokens, then the end-of-sentence step.
        self.assertEqual(len(r["attention_rows"]), len(r["attention"]))
        self.assertEqual(r["attention_rows"][:len(r["target_tokens"])], r["target_tokens"])
        self.assertEqual(r["attention_rows"][len(r["target_tokens"]):], ["</s>"])

    def test_a_target_prefix_starts_the_translation(self):
        status, free = self.request("api/translate", {"text": "Open the file", "beam": 3})
        self.assertEqual(status, 200, free)
        self.assertEqual(len(free["alignment"].split()), len(free["target_tokens"]))
        forced = free["target_tokens"][-1]  # a token the model knows, put first
        status, r = self.request("api/translate",
                                 {"text": "Open the file", "beam": 3, "target_prefix": forced})
        self.assertEqual(status, 200, r)
        self.assertEqual(r["target_tokens"][0], forced)
        status, r = self.request("api/translate", {"text": "Open", "target_prefix": 3})
        self.assertEqual(status, 400, r)

    def test_alternatives_and_seeded_sampling(self):
        doc = openapi(self.url)
        status, r = self.request("api/translate", {"text": "Open the file", "beam": 1, "alternatives": 3})
        self.assertEqual(status, 200, r)
        check_contract(doc, "/api/translate", "post", 200, r)
        self.assertEqual(len(r["alternatives"]), 3)
        self.assertEqual(r["alternatives"][0]["translation"], r["translation"])
        probs = [a["token_log_prob"] for a in r["alternatives"]]
        self.assertEqual(probs, sorted(probs, reverse=True))
        body = {"text": "Open the file", "beam": 1, "sampling_topk": 0, "temperature": 2, "seed": 5}
        first = self.request("api/translate", body)[1]
        self.assertEqual(self.request("api/translate", body)[1]["translation"], first["translation"])
        for bad in ({"text": "Open", "sampling_topk": 0, "beam": 3},
                    {"text": "Open", "temperature": 0}, {"text": "Open", "alternatives": 11}):
            status, r = self.request("api/translate", bad)
            self.assertEqual(status, 400, (bad, r))

    def test_responses_follow_the_openapi_contract(self):
        doc = openapi(self.url)
        self.assertEqual(doc["info"]["version"], self.request("healthz")[1]["version"])
        check = lambda path, method, status, body: check_contract(doc, path, method, status, body)

        eye = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
        cases = [("/api/translate", {"text": "Open the file"}, 200),
                 ("/api/translate", {"text": "Save the document", "beam": 1}, 200),
                 ("/api/translate", {"text": 5}, 400),
                 ("/api/translate", {"text": "x" * 600}, 413),
                 ("/api/attend", {"mechanism": "soft", "q": [[1, 0, 0]], "k": eye}, 200),
                 ("/api/attend", {"mechanism": "self", "x": eye}, 200),
                 ("/api/attend", {"mechanism": "psychic"}, 400)]
        for path, body, want in cases:
            status, r = self.request(path[1:], body)
            self.assertEqual(status, want, (path, body, r))
            check(path, "post", status, r)
        check("/healthz", "get", 200, self.request("healthz")[1])
        for path, methods in doc["paths"].items():  # every documented GET answers
            if "get" in methods:
                with urllib.request.urlopen(self.url + path[1:], timeout=30) as f:
                    self.assertEqual(f.status, 200, path)

    def test_attend_reproduces_the_notes(self):
        status, r = self.request("api/attend", {"mechanism": "soft", "q": [[1, 0, 0]], "k": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]})
        self.assertEqual((status, r["weights"]), (200, [[0.5761, 0.2119, 0.2119]]))
        status, r = self.request("api/attend", {"mechanism": "hard", "q": [[1, 0, 0]], "k": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]})
        self.assertEqual(r["weights"], [[1.0, 0.0, 0.0]])

    def test_bad_input_gets_4xx_with_a_message(self):
        cases = [("api/translate", b"{not json", 400), ("api/translate", b"[1, 2]", 400),
                 ("api/translate", json.dumps({"text": 5}).encode(), 400),
                 ("api/translate", json.dumps({"text": "x" * 600}).encode(), 413),
                 ("api/translate", json.dumps({"text": "hi", "beam": 99}).encode(), 400),
                 ("api/attend", json.dumps({"q": [[1, 2]], "k": [[1, 2, 3]]}).encode(), 400),
                 ("api/attend", json.dumps({"q": [[1, "a"]], "k": [[1, 2]]}).encode(), 400),
                 ("api/attend", b'{"q": [[1e300]], "k": [[1]]}', 400),
                 ("api/translate", b'{"text": "hi", "beam": 1e400}', 400),  # was 500 (fuzzing)
                 ("api/attend", json.dumps({"mechanism": "psychic", "q": [[1]], "k": [[1]]}).encode(), 400),
                 ("api/translate", b"x" * 70000, 413)]
        for path, raw, want in cases:
            status, body = self.request(path, raw=raw)
            self.assertEqual(status, want, (path, raw[:40], body))
            if status != 413 or body:
                self.assertIn("error", body)

    def test_wrong_json_types_and_methods_are_the_clients_fault(self):
        cases = [({"text": "hi", "beam": "5"}, "'beam' must be an integer"),
                 ({"text": "hi", "beam": None}, "'beam' must be an integer"),
                 ({"text": "hi", "beam": 2.5}, "'beam' must be an integer"),
                 ({"text": "hi", "beam": 4294967297}, "'beam' must be in 1..10"),
                 ({"text": "hi", "beam": -1}, "'beam' must be in 1..10")]
        for body, message in cases:
            status, r = self.request("api/translate", body)
            self.assertEqual((status, message in r.get("error", "")), (400, True), (body, r))
        status, r = self.request("api/attend", {"mechanism": 5, "q": [[1]], "k": [[1]]})
        self.assertEqual(status, 400, r)
        self.assertIn("'mechanism' must be a string", r["error"])
        for path in ["api/translate", "api/attend"]:
            try:
                urllib.request.urlopen(self.url + path, timeout=30)
                self.fail(f"GET {path} was answered")
            except urllib.error.HTTPError as e:
                self.assertEqual((e.code, e.headers["Allow"]), (405, "POST"), path)

    def test_requests_cannot_ask_for_unbounded_work(self):
        # 4096 x 1 queries and keys asked for a 4096 x 4096 answer (184 MB): now 413.
        column = [[1]] * 4096
        body = json.dumps({"q": column, "k": column}, separators=(",", ":")).encode()
        self.assertLess(len(body), 40000)
        status, r = self.request("api/attend", raw=body)
        self.assertEqual(status, 413, r)
        self.assertIn("the limit is 65536", r["error"])
        # A chunked body of 100 KB (past the 64 KB limit): refused without reading it.
        host, port = re.search(r"http://([\d.]+):(\d+)/", self.url).groups()
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                      b"Content-Type: application/json\r\n\r\n")
            try:
                for _ in range(25):
                    s.sendall(b"1000\r\n" + b"x" * 4096 + b"\r\n")
                s.sendall(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered and closed without reading it all
            answer = s.recv(4096).decode(errors="replace")
        self.assertIn(" 411 ", answer.splitlines()[0])
        self.assertEqual(self.request("healthz")[0], 200)

    def test_a_second_server_on_the_same_port_is_refused(self):
        port = re.search(r":(\d+)/", self.url).group(1)
        p = subprocess.run([BIN, "serve", "--port", port], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn(f"cannot listen on 127.0.0.1:{port}", p.stderr)

    def test_concurrent_requests_are_batched_and_all_answered(self):
        sentences = [f"Open file number {i}" for i in range(24)]
        before = self.request("healthz")[1]
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda s: self.request("api/translate", {"text": s, "beam": 1}), sentences))
        self.assertTrue(all(status == 200 for status, _ in results))
        # Each answer belongs to its own request.
        for s, (_, r) in zip(sentences, results):
            self.assertEqual(r["source_tokens"][:2], ["open", "file"])
            self.assertEqual(r["source_tokens"][-1], s.split()[-1])
        after = self.request("healthz")[1]
        calls = after["decoder_calls"] - before["decoder_calls"]
        self.assertEqual(after["sentences"] - before["sentences"], 24)
        self.assertLess(calls, 24, "concurrent requests should share decoder calls")

    def test_garbage_never_brings_it_down(self):
        rng = random.Random(7)
        for _ in range(60):
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
            status, _ = self.request(rng.choice(["api/translate", "api/attend"]), raw=raw)
            self.assertIn(status, (400, 413))
        self.assertEqual(self.request("healthz")[0], 200)



def dribble(sock, text, pause):
    """A slow client: sends `text` one byte at a time; returns when the server cuts it off."""
    try:
        for byte in text:
            sock.send(bytes([byte]))
            time.sleep(pause)
    except OSError:
        pass


def server_sockets(pid):
    """How many sockets the process `pid` has open (the listening one and those it accepted), each
    once: the server holds a second descriptor of each connection it may have to cut."""
    fds = os.path.join("/proc", str(pid), "fd")
    sockets = set()
    for fd in os.listdir(fds):
        try:
            target = os.readlink(os.path.join(fds, fd))
        except FileNotFoundError:  # closed while we looked
            continue
        if target.startswith("socket:"):
            sockets.add(target)
    return len(sockets)


def read_all(sock, timeout=15):
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return data


class PoServe(unittest.TestCase):
    """POST /api/po, the web page's catalog: the same catalog `po translate` writes, each
    suggestion with the model's input and attention, errors naming the upload's line."""

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.url = start_server("--max-catalog", "20000")

    @classmethod
    def tearDownClass(cls):
        stop_server(cls.proc)

    def upload(self, data, query="lang=zh_CN&name=catalog.pot&beam=5"):
        req = urllib.request.Request(self.url + "api/po?" + query, data=data, method="POST",
                                     headers={"Content-Type": "text/x-gettext-translation"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def test_the_answer_is_what_po_translate_writes_and_follows_the_contract(self):
        import base64
        import tempfile
        with open(POT, "rb") as f:
            pot = f.read()
        status, r = self.upload(pot)
        self.assertEqual(status, 200, r)
        check_contract(openapi(self.url), "/api/po", "post", 200, r)
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([BIN, "--threads", "1", "po", "translate", POT, "--model", TINY_MODEL,
                            "--out", d + "/cli.po", "--lang", "zh_CN", "--quiet"], check=True)
            with open(d + "/cli.po", "rb") as f:
                self.assertEqual(base64.b64decode(r["catalog_base64"]), f.read())
        self.assertEqual(r["charset"], "UTF-8")
        self.assertEqual(r["report"]["model"] + r["report"]["memory"] + r["report"]["copied"],
                         len(r["entries"]))
        self.assertEqual(r["report"]["intact"], len(r["entries"]))
        self.assertEqual(len(r["segments"]), r["report"]["segments"])
        with open(POT, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for e in r["entries"]:
            self.assertTrue(lines[e["line"] - 1].startswith("msgid "), e)
            if e["origin"] != "model":
                continue
            # At most one segment a line of each form; each one's attention is |rows| x |source|.
            forms = [e["msgid"]] + ([e["msgid_plural"]] if "msgid_plural" in e else [])
            self.assertTrue(1 <= len(e["segments"]) <= sum(f.count("\n") + 1 for f in forms), e)
            for s in e["segments"]:
                out = r["segments"][s]["output"]
                self.assertEqual(len(out["attention"]), len(out["attention_rows"]))
                self.assertTrue(all(len(row) == len(out["source_tokens"]) for row in out["attention"]))
        # The model read the protected form: "_Save As…" without its accelerator and ellipsis.
        inputs = [s["input"] for s in r["segments"]]
        self.assertIn("Save As", inputs)
        self.assertNotIn("_Save As…", inputs)

    def test_bad_catalogs_and_queries_are_the_clients_fault(self):
        cases = [(b'msgid "a"\nmsgstr ""\n\nmsgid "b\nmsgstr ""\n', "lang=zh_CN&name=bad.po", 400,
                  "bad.po:4: unterminated string"),
                 (b'msgid "a"\nmsgstr ""\n', "lang=de", 400, "a catalog in de"),
                 (b'msgid "a"\nmsgstr ""\n', "lang=zh_CN&beam=0", 400, "'beam' must be an integer in 1..10"),
                 (b'msgid "a"\nmsgstr ""\n' * 2000, "lang=zh_CN", 413, "")]
        for data, query, want, message in cases:
            status, r = self.upload(data, query)
            self.assertEqual(status, want, (query, r))
            if want == 400:
                self.assertIn(message, r["error"])
                check_contract(openapi(self.url), "/api/po", "post", status, r)
        # A catalog-sized body is still too big for the JSON endpoints.
        req = urllib.request.Request(self.url + "api/translate", data=b"x" * 70000, method="POST",
                                     headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        self.assertEqual(e.exception.code, 413)
        self.assertIn("error", json.loads(e.exception.read()))
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(self.url + "api/po", timeout=30)
        self.assertEqual(e.exception.code, 405)


class Connections(unittest.TestCase):
    """Clients that are slow, idle, pipelining or cut short by a shutdown cannot hold the server."""

    def test_slow_and_idle_clients_get_408_and_do_not_hold_others_up(self):
        proc, url = start_server("--read-timeout", "1.5")
        try:
            # 40 connections, more than the old server's 4 workers ten times over: 8 clients
            # sending their request a byte every 0.2 s and 32 that connect and say nothing.
            slow = [socket.create_connection(address(url)) for _ in range(8)]
            idle = [socket.create_connection(address(url)) for _ in range(32)]
            request = b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 20\r\n\r\n"
            threads = [threading.Thread(target=dribble, args=(s, request, 0.2)) for s in slow]
            for t in threads:
                t.start()
            time.sleep(0.5)
            health, seconds = healthz(url)
            self.assertLess(seconds, 0.5, "/healthz waited for the slow clients")
            self.assertGreaterEqual(health["connections"], 41, health)
            self.assertEqual(post(url, "api/translate", {"text": "Open the file", "beam": 1})[0], 200)
            # Each gets a 408 once its 1.5 s are up, and the connection closes.
            start = time.monotonic()
            answers = [read_all(s) for s in slow + idle]
            self.assertLess(time.monotonic() - start, 3)
            for answer in answers:
                self.assertTrue(answer.startswith(b"HTTP/1.1 408 "), answer[:80])
            for t in threads:
                t.join()
            for s in slow + idle:
                s.close()
            health, _ = healthz(url)
            self.assertEqual((health["connections"], health["timed_out"]), (1, 40), health)
        finally:
            stop_server(proc)

    def test_pipelined_requests_get_an_answer_and_a_close_that_says_resend(self):
        proc, url = start_server()
        try:
            body = json.dumps({"text": "Open the file", "beam": 1}).encode()
            request = (b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            with socket.create_connection(address(url)) as s:
                s.sendall(request * 3)
                answer = read_all(s)
            # One answer, "Connection: close", then the end of the connection: the client knows
            # at once that the other two were not processed and sends them again (RFC 9112 9.3.2).
            self.assertEqual(answer.count(b"HTTP/1.1 "), 1, answer[:200])
            self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer[:80])
            self.assertIn(b"Connection: close", answer)
            self.assertEqual(json.loads(answer.split(b"\r\n\r\n", 1)[1])["source_tokens"],
                             ["open", "the", "file"])
        finally:
            stop_server(proc)

    def test_sigterm_answers_the_requests_in_flight_and_exits_within_the_bound(self):
        # The batcher waits 1.5 s for company, so the requests are still in flight at SIGTERM.
        proc, url = start_server("--batch-window", "1500", "--drain", "4", "--read-timeout", "60")
        slow = socket.create_connection(address(url))
        dribbler = threading.Thread(target=dribble, args=(slow, b"POST /api/translate HTTP/1.1\r\n", 0.2))
        dribbler.start()
        with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
            futures = [pool.submit(post, url, "api/translate", {"text": f"Open file {i}", "beam": 1})
                       for i in range(12)]
            # Every request connected (12, the slow client and this /healthz) before the signal.
            deadline = time.monotonic() + 10
            while healthz(url)[0]["connections"] < 14 and time.monotonic() < deadline:
                time.sleep(0.02)
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=30), 0)
            seconds = time.monotonic() - start
            stop_server(proc)
            results = [f.result() for f in futures]
        # Every request in flight was answered; the slow client, who never finished asking, did
        # not keep the server past its 4 s drain bound.
        self.assertEqual([status for status, _ in results], [200] * 12)
        self.assertEqual([r["source_tokens"][-1] for _, r in results], [str(i) for i in range(12)])
        self.assertLess(seconds, 4 + 1)
        self.assertEqual(read_all(slow), b"")
        dribbler.join()
        slow.close()

    def test_sigterm_answers_the_connections_still_waiting_for_a_thread(self):
        # Two connections take both threads (their requests wait 1.5 s in the batcher); three more
        # are accepted and wait their turn. All five sent their whole request before the signal,
        # so all five are answered: the three start after it, on a server that no longer accepts.
        proc, url = start_server("--max-connections", "2", "--batch-window", "1500", "--drain", "8")
        clients = []
        try:
            baseline = server_sockets(proc.pid)
            body = json.dumps({"text": "Open the file", "beam": 1}).encode()
            request = (b"POST /api/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            clients += [socket.create_connection(address(url)) for _ in range(5)]
            for c in clients:
                c.sendall(request)
            deadline = time.monotonic() + 10
            while server_sockets(proc.pid) < baseline + 5 and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(server_sockets(proc.pid), baseline + 5)  # all five accepted
            proc.send_signal(signal.SIGTERM)
            answers = [read_all(c) for c in clients]
            self.assertEqual(proc.wait(timeout=30), 0)
            for answer in answers:
                self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer[:80])
            with self.assertRaises(OSError):  # and nothing new is accepted
                socket.create_connection(address(url), timeout=5)
        finally:
            for c in clients:
                c.close()
            stop_server(proc)


if __name__ == "__main__":
    unittest.main()
