#!/usr/bin/python3
"""End-to-end tests of the attnkit CLI against real PyTorch (Debian's python3-torch).

Python writes inputs and state_dicts with torch.save, attnkit computes, Python reads the
result with torch.load and compares with the same computation in PyTorch.
Run: ATTNKIT_BIN=build/attnkit /usr/bin/python3 tests/cli/test_cli.py
"""
import json
import random
import os
import re
import shutil
import signal
import socket
import subprocess
import zipfile
import sys
import tempfile
import time
import unittest

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import attnkit_reference as ref  # noqa: E402

BIN = os.environ.get("ATTNKIT_BIN", os.path.join(HERE, "..", "..", "build", "attnkit"))


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def attnkit(*args, expect_ok=True):
    p = subprocess.run([BIN, "--threads", "1", *args], capture_output=True, text=True, timeout=120)
    if expect_ok and p.returncode != 0:
        raise AssertionError(f"attnkit {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


class Cli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def save(self, name, obj):
        torch.save(obj, self.path(name))
        return self.path(name)

    def assertClose(self, a, b, tol=1e-5):
        self.assertEqual(tuple(a.shape), tuple(b.shape))
        self.assertLessEqual((a - b).abs().max().item(), tol)

    def test_notes_examples(self):
        out = attnkit("attend").stdout
        for number in ["0.5761, 0.2119, 0.2119", "1.0000, 0.0000, 0.0000", "0.4711, 0.2645, 0.2645",
                       "[2, 1, 8]", "[2, 1, 5]", "[1.0000, 1.0000]"]:
            self.assertIn(number, out)
        self.assertEqual(attnkit("attend", "--mode", "notes").stdout, out)
        self.assertEqual(attnkit("attend", "--mode", "seed").stdout, out)  # the old name

    def test_numeric_options_are_checked_where_they_are_parsed(self):
        # Each of these crashed, hung or was quietly used before: now refused, naming the option.
        cases = [("train", "--train", "x", "--model-dir", "m", "--layers", "0"),
                 ("train", "--train", "x", "--model-dir", "m", "--lr", "inf"),
                 ("train", "--train", "x", "--model-dir", "m", "--batch-size", "0"),
                 ("train", "--train", "x", "--model-dir", "m", "--epochs", "0"),
                 ("train", "--train", "x", "--model-dir", "m", "--dropout", "1"),
                 ("translate", "--model", "m", "--beam", "0"),
                 ("translate", "--model", "m", "--beam", "-2"),
                 ("translate", "--model", "m", "--max-length-ratio", "nan"),
                 ("eval", "--model", "m", "--test", "t", "--bucket", "0"),
                 ("serve", "--port", "70000"),
                 ("serve", "--timeout", "nan"),
                 ("serve", "--timeout", "-1"),
                 ("serve", "--max-batch", "0"),
                 ("corpus", "prepare", "in.tsv", "--out-dir", "d", "--valid", "nan")]
        for args in cases:
            option = next(a for a in reversed(args) if a.startswith("--"))
            p = attnkit(*args, expect_ok=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(option, p.stderr, args)

    def test_a_config_the_weights_cannot_be_built_from_is_refused_by_key(self):
        model = os.path.join(self.dir, "broken_model")
        shutil.copytree(TINY_MODEL, model)
        config_path = os.path.join(model, "config.json")
        with open(config_path) as f:
            config = json.load(f)
        # 1.33e87 as an integer field was undefined behaviour in the JSON library (found by
        # tests/fuzz/fuzz_model_dir); "2" and 2.5 were read as numbers or truncated.
        for key, value in [("layers", 0), ("hidden_size", -4), ("embed_size", 0), ("dropout", 1.5),
                           ("hidden_size", 1.33e87), ("layers", 2.5), ("embed_size", "32"),
                           ("temperature", "hot")]:
            broken = json.loads(json.dumps(config))
            broken["model"][key] = value
            with open(config_path, "w") as f:
                json.dump(broken, f)
            p = subprocess.run([BIN, "translate", "--model", model], input="Open the file\n",
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1, (key, p.stderr))
            self.assertIn(f"config.json: model.{key} must be", p.stderr)
        # Sizes each allowed alone but absurd together would ask LibTorch for terabytes.
        broken = json.loads(json.dumps(config))
        broken["model"].update(source_vocab=10**9, embed_size=4096)
        with open(config_path, "w") as f:
            json.dump(broken, f)
        p = subprocess.run([BIN, "translate", "--model", model], input="x\n", capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("million weights; the limit is 2147 million", p.stderr)

    def test_info_names_the_blas(self):
        out = attnkit("info").stdout
        self.assertIn("LibTorch  1.13", out)
        self.assertIn("OpenBLAS", out)

    def test_info_says_when_openblas_runs_kernels_below_the_cpu(self):
        # Prescott's SSE3 kernels are below every x86-64 CPU with AVX: the case OpenBLAS 0.3.21
        # falls into on Intel family 6 model 207.
        r = subprocess.run([BIN, "info", "--json"], capture_output=True, text=True)
        best = json.loads(r.stdout)["blas"]["best_core"]
        if best == "Prescott":
            self.skipTest("this CPU has no AVX: Prescott is its best core")
        env = dict(os.environ, OPENBLAS_CORETYPE="Prescott")
        r = subprocess.run([BIN, "info", "--json"], env=env, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        blas = json.loads(r.stdout)["blas"]
        self.assertEqual(blas["core"], "Prescott")
        # Measured, not assumed: the wider kernels are faster by a real margin.
        self.assertGreater(blas["best_core_sgemm_gflops"], 1.3 * blas["sgemm_gflops"], blas)
        out = subprocess.run([BIN, "info"], env=env, capture_output=True, text=True).stdout
        self.assertIn("OpenBLAS runs its Prescott kernels, below what this CPU runs (%s)" % best,
                      out)
        self.assertIn("export OPENBLAS_CORETYPE=%s" % best, out)
        env["OPENBLAS_CORETYPE"] = best
        r = subprocess.run([BIN, "info", "--json"], env=env, capture_output=True, text=True)
        blas = json.loads(r.stdout)["blas"]
        self.assertEqual(blas["core"], best)
        self.assertNotIn("sgemm_gflops", blas)

    def test_isa_override_is_shown_and_a_bad_one_refused(self):
        env = dict(os.environ, ATTNKIT_ISA="scalar")
        r = subprocess.run([BIN, "info", "--json"], env=env, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        cpu = json.loads(r.stdout)["cpu"]
        self.assertEqual((cpu["kernel_isa"], cpu["kernel_isa_forced"]), ("scalar", True))
        env["ATTNKIT_ISA"] = "sse3"
        r = subprocess.run([BIN, "info"], env=env, capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("ATTNKIT_ISA", r.stderr)

    def test_notes_myattn_state_dict_roundtrip(self):
        torch.manual_seed(3)
        model = ref.MyAttn(8, 8, 8, 8)
        q, k, v = torch.randn(2, 1, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
        with torch.no_grad():
            want_out, want_w = model(q, k, v)
        attnkit("attend", "--mode", "combine", "--q", self.save("q.pt", q), "--k", self.save("k.pt", k),
                "--v", self.save("v.pt", v), "--state-dict", self.save("sd.pt", model.state_dict()),
                "--out", self.path("out.pt"))
        got = torch.load(self.path("out.pt"))
        self.assertClose(got["output"], want_out)
        self.assertClose(got["weights"], want_w)

    def test_multihead_with_torch_nn_state_dict_and_padding(self):
        torch.manual_seed(4)
        mha = nn.MultiheadAttention(8, 2, batch_first=True)
        q, kv = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
        kpm = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
        with torch.no_grad():
            want_out, want_w = mha(q, kv, kv, key_padding_mask=kpm, average_attn_weights=False)
        attnkit("attend", "--mode", "multihead", "--heads", "2", "--q", self.save("q.pt", q),
                "--k", self.save("kv.pt", kv), "--key-padding-mask", self.save("kpm.pt", kpm),
                "--state-dict", self.save("sd.pt", mha.state_dict()), "--out", self.path("out.pt"))
        got = torch.load(self.path("out.pt"))
        self.assertClose(got["output"], want_out)
        self.assertClose(got["weights"], want_w)

    def test_bahdanau_local_attention_with_lengths(self):
        torch.manual_seed(5)
        model = ref.RefAttention("bahdanau", "local", 4, 6, hidden=5, window=2)
        q, k, v = torch.randn(2, 3, 4), torch.randn(2, 7, 6), torch.randn(2, 7, 3)
        lengths = torch.tensor([7, 4])
        with torch.no_grad():
            want_out, want_w = model(q, k, v, ref.padding_mask(lengths, 7))
        attnkit("attend", "--score", "bahdanau", "--weighting", "local", "--hidden-size", "5",
                "--window", "2", "--q", self.save("q.pt", q), "--k", self.save("k.pt", k),
                "--v", self.save("v.pt", v), "--lengths", self.save("len.pt", lengths),
                "--state-dict", self.save("sd.pt", model.state_dict()), "--out", self.path("out.pt"))
        got = torch.load(self.path("out.pt"))
        self.assertClose(got["output"], want_out)
        self.assertClose(got["weights"], want_w)

    def test_unbatched_notes_tensors(self):
        q = torch.tensor([[1.0, 0.0, 0.0]])
        eye = torch.eye(3)
        attnkit("attend", "--q", self.save("q.pt", q), "--k", self.save("k.pt", eye),
                "--out", self.path("out.pt"))
        got = torch.load(self.path("out.pt"))
        want_out, want_w = ref.notes_soft_attention(q, eye, eye)
        self.assertClose(got["weights"], want_w)
        self.assertClose(got["output"], want_out)

    def test_files_that_would_blow_up_in_memory_are_refused(self):
        # A stride-0 view: 16 bytes of storage that would become 4.8 GB once contiguous.
        t = torch.zeros(4).as_strided([1, 300_000_000, 4], [0, 0, 1])
        p = attnkit("attend", "--q", self.save("wide.pt", t), expect_ok=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("wide.pt", p.stderr)
        self.assertIn("MiB; the limit is 1024 MiB", p.stderr)
        # A zip bomb: a torch.save file whose 200 MB storage is deflated to a few hundred KB.
        plain = self.save("zeros.pt", torch.zeros(50_000_000))
        bomb = self.path("bomb.pt")
        with zipfile.ZipFile(plain) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
            for info in src.infolist():
                dst.writestr(info.filename, src.read(info.filename))
        self.assertLess(os.path.getsize(bomb), 2_000_000)
        p = attnkit("attend", "--q", bomb, expect_ok=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("would inflate from", p.stderr)
        self.assertIn("bomb.pt", p.stderr)

    def test_mixed_dtypes_are_named_with_their_files(self):
        q = self.save("q64.pt", torch.randn(1, 2, 3, dtype=torch.float64))
        k = self.save("k32.pt", torch.randn(1, 4, 3))
        p = attnkit("attend", "--q", q, "--k", k, expect_ok=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(f"{k} is Float but {q} is Double", p.stderr)

    def test_truncated_file_is_a_clear_error(self):
        data = read_bytes(self.save("q.pt", torch.randn(2, 1, 8)))
        with open(self.path("cut.pt"), "wb") as f:
            f.write(data[: len(data) // 2])
        p = attnkit("attend", "--q", self.path("cut.pt"), expect_ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn(self.path("cut.pt"), p.stderr)
        self.assertNotIn("Exception raised from", p.stderr)

    def test_shape_mismatch_names_both_shapes(self):
        p = attnkit("attend", "--q", self.save("q.pt", torch.randn(2, 1, 8)),
                    "--k", self.save("k.pt", torch.randn(3, 5, 8)), expect_ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("[2, 1, 8]", p.stderr)
        self.assertIn("[3, 5, 8]", p.stderr)

    def test_wrong_state_dict_names_key_and_shapes(self):
        model = ref.MyAttn(8, 8, 8, 8)
        p = attnkit("attend", "--mode", "combine", "--q", self.save("q.pt", torch.randn(2, 1, 6)),
                    "--k", self.save("k.pt", torch.randn(2, 5, 8)),
                    "--state-dict", self.save("sd.pt", model.state_dict()), expect_ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("qk_linear.weight", p.stderr)
        self.assertIn("[1, 16]", p.stderr)
        self.assertIn("[1, 14]", p.stderr)

    def test_unknown_score_lists_the_valid_ones(self):
        p = attnkit("attend", "--q", self.save("q.pt", torch.randn(1, 2, 3)), "--score", "cosine",
                    expect_ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("scaled-dot", p.stderr)

    def test_failed_run_keeps_an_existing_output(self):
        out = self.save("out.pt", {"keep": torch.ones(1)})
        before = read_bytes(out)
        attnkit("attend", "--q", self.save("q.pt", torch.randn(2, 1, 8)),
                "--k", self.save("k.pt", torch.randn(3, 5, 8)), "--out", out, expect_ok=False)
        self.assertEqual(read_bytes(out), before)


class TranslationCli(unittest.TestCase):
    """corpus -> train -> translate -> eval on a synthetic task, and the errors around them."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.dir = cls.tmp.name
        attnkit("corpus", "synthetic", "--task", "reverse", "--count", "1500", "--symbols", "6",
                "--out", os.path.join(d, "train.tsv"))
        attnkit("corpus", "synthetic", "--task", "reverse", "--count", "60", "--symbols", "6",
                "--seed", "9", "--out", os.path.join(d, "test.tsv"))
        cls.model = os.path.join(d, "model")
        cls.train = attnkit("train", "--train", os.path.join(d, "train.tsv"), "--valid",
                            os.path.join(d, "test.tsv"), "--model-dir", cls.model,
                            "--source-tokenizer", "en", "--target-tokenizer", "en", "--embed", "16",
                            "--hidden", "48", "--epochs", "6", "--dropout", "0", "--label-smoothing", "0",
                            "--batch-size", "32", "--lr", "0.003", "--quiet")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_model_directory_is_complete(self):
        for name in ["config.json", "source.vocab", "target.vocab", "model.pt", "checkpoint.pt", "metrics.jsonl"]:
            self.assertTrue(os.path.exists(os.path.join(self.model, name)), name)
        with open(os.path.join(self.model, "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual(len(lines), 6)
        self.assertLess(lines[-1]["valid_loss"], lines[0]["valid_loss"])

    def test_translate_text_keeps_line_count(self):
        p = subprocess.run([BIN, "translate", "--model", self.model, "--beam", "3"],
                           input="a b c d\n\nf e\n", capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split("\n")[:3], ["d c b a", "", "e f"])

    def test_parallel_batches_give_the_same_output_and_timing_reports_the_work(self):
        with open(os.path.join(self.dir, "test.tsv"), encoding="utf-8") as f:
            sources = "".join(line.split("\t")[0] + "\n" for line in f)
        outputs = []
        for parallel in ("1", "2"):
            p = subprocess.run([BIN, "--threads", "2", "translate", "--model", self.model, "--beam", "3",
                                "--batch-size", "4", "--parallel-batches", parallel, "--timing"],
                               input=sources, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            outputs.append(p.stdout)
            # bench/compare_seq2seq.py parses this line.
            m = re.search(r"translated (\d+) sentences in [\d.]+ s: [\d.]+ sentences/s "
                          r"\((\d+) source tokens encoded, (\d+) decoder rows\)", p.stderr)
            self.assertIsNotNone(m, p.stderr)
            self.assertEqual(int(m.group(1)), 60)
            self.assertEqual(int(m.group(2)), sum(len(s.split()) for s in sources.splitlines()))
            self.assertGreater(int(m.group(3)), 0)
        self.assertEqual(outputs[0], outputs[1])
        # Batches by tokens: other batches, the same translations.
        p = subprocess.run([BIN, "--threads", "2", "translate", "--model", self.model, "--beam", "3",
                            "--max-batch-tokens", "9"], input=sources, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, outputs[0])

    def test_translate_json_has_tokens_scores_and_attention(self):
        p = subprocess.run([BIN, "translate", "--model", self.model, "--format", "json", "--nbest", "2",
                            "--beam", "4"], input="a b c\n", capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout)
        self.assertEqual(r["translation"], "c b a")
        self.assertEqual(r["source_tokens"], ["a", "b", "c"])
        self.assertEqual(len(r["nbest"]), 2)
        self.assertEqual(r["attention_rows"], r["target_tokens"] + ["</s>"])
        self.assertEqual(len(r["attention"]), len(r["attention_rows"]))
        self.assertEqual(len(r["attention"][0]), 3)
        # Reversal: the first target token attends to the last source token.
        self.assertEqual(max(range(3), key=lambda i: r["attention"][0][i]), 2)

    def test_alignments_prefix_and_sampling(self):
        def translate(*args, text="a b c\n"):
            p = subprocess.run([BIN, "--threads", "1", "translate", "--model", self.model, *args],
                               input=text, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            return p.stdout
        # Reversal: target token j comes from source token 2 - j.
        self.assertEqual(translate("--alignment"), "c b a ||| 2-0 1-1 0-2\n")
        self.assertEqual(json.loads(translate("--format", "json"))["alignment"], "2-0 1-1 0-2")
        prefix = os.path.join(self.dir, "prefix.txt")
        with open(prefix, "w") as f:
            f.write("f\n\n")
        out = translate("--target-prefix", prefix, text="a b c\nd e\n").split("\n")
        self.assertTrue(out[0].startswith("f"), out)
        self.assertEqual(out[1], "e d")  # an empty prefix line: none
        with open(prefix, "w") as f:
            f.write("f\n")
        p = subprocess.run([BIN, "translate", "--model", self.model, "--target-prefix", prefix],
                           input="a\nb\n", capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("1 prefixes for 2 input lines", p.stderr)
        # Sampling: the same seed gives the same output, and it needs greedy search.
        lines = "".join("a b c d e f\n" for _ in range(20))
        args = ("--beam", "1", "--sampling-topk", "0", "--temperature", "3")
        one = translate(*args, "--seed", "1", text=lines)
        self.assertEqual(translate(*args, "--seed", "1", text=lines), one)
        self.assertNotEqual(translate(*args, "--seed", "2", text=lines), one)
        self.assertGreater(len(set(one.splitlines())), 1)  # sentences draw apart
        p = subprocess.run([BIN, "translate", "--model", self.model, "--sampling-topk", "5"],
                           input="a\n", capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("give --beam 1", p.stderr)

    def test_return_alternatives(self):
        p = subprocess.run([BIN, "--threads", "1", "translate", "--model", self.model,
                            "--return-alternatives", "3", "--beam", "1"],
                           input="a b c\n", capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = [line.split("\t") for line in p.stdout.split("\n\n")[0].splitlines()]
        self.assertEqual(len(rows), 3)
        self.assertEqual(rows[0][0], "c b a")  # the best token, continued: the translation
        self.assertEqual(len({r[0].split(" ")[0] for r in rows if r[0]}), len([r for r in rows if r[0]]))
        scores = [float(r[1]) for r in rows]
        self.assertEqual(scores, sorted(scores, reverse=True))
        p = subprocess.run([BIN, "--threads", "1", "translate", "--model", self.model,
                            "--return-alternatives", "2", "--format", "json"],
                           input="a b c\n", capture_output=True, text=True, timeout=60)
        j = json.loads(p.stdout)
        self.assertEqual(len(j["alternatives"]), 2)
        self.assertEqual(j["alternatives"][0]["translation"], "c b a")
        self.assertEqual(j["alternatives"][0]["token"], "c")

    def test_score_gives_the_search_its_own_score(self):
        p = subprocess.run([BIN, "--threads", "1", "translate", "--model", self.model, "--format",
                            "json", "--beam", "1"], input="a b c\n", capture_output=True, text=True,
                           timeout=60)
        own = json.loads(p.stdout)
        pairs = os.path.join(self.dir, "score.tsv")
        with open(pairs, "w") as f:
            f.write("a b c\t%s\na b c\ta b c\n" % own["translation"])
        lines = attnkit("score", "--model", self.model, "--input", pairs).stdout.splitlines()
        self.assertEqual(len(lines), 2)
        self.assertAlmostEqual(float(lines[0]), own["score"], places=4)
        self.assertLess(float(lines[1]), float(lines[0]))  # a wrong translation scores lower
        j = [json.loads(line) for line in
             attnkit("score", "--model", self.model, "--input", pairs, "--format", "json").stdout.splitlines()]
        self.assertEqual(j[0]["target_tokens"], own["target_tokens"])
        self.assertEqual(len(j[0]["token_log_probs"]), len(own["target_tokens"]) + 1)
        self.assertAlmostEqual(sum(j[0]["token_log_probs"]), j[0]["log_prob"], places=6)
        self.assertEqual(j[0]["alignment"], own["alignment"])

    def test_eval_reports_bleu_chrf_buckets_and_aer(self):
        out = attnkit("eval", "--model", self.model, "--test", os.path.join(self.dir, "test.tsv"),
                      "--beam", "1").stdout
        self.assertIn("BLEU = ", out)
        self.assertIn("chrF2 = ", out)
        self.assertIn("alignment error rate", out)
        aer = float(re.search(r"alignment error rate .*: ([0-9.]+)", out).group(1))
        self.assertLess(aer, 0.2)

    def test_resume_continues_from_the_checkpoint(self):
        d = os.path.join(self.dir, "resume")
        args = ["train", "--train", os.path.join(self.dir, "train.tsv"), "--model-dir", d,
                "--source-tokenizer", "en", "--target-tokenizer", "en", "--embed", "8", "--hidden", "16",
                "--quiet"]
        first = attnkit(*args, "--max-steps", "5").stdout
        self.assertIn("max steps after 5 steps", first)
        second = attnkit(*args, "--max-steps", "3", "--resume").stdout
        self.assertIn("after 3 steps", second)
        # Without --resume, another model's directory is refused before anything is written.
        with open(os.path.join(d, "config.json"), "rb") as f:
            config = f.read()
        again = attnkit(*args, "--max-steps", "1", expect_ok=False)
        self.assertEqual(again.returncode, 1)
        self.assertIn("already holds a model", again.stderr)
        with open(os.path.join(d, "config.json"), "rb") as f:
            self.assertEqual(f.read(), config)
        # A run stopped before its first model.pt translates with the checkpoint's weights.
        os.remove(os.path.join(d, "model.pt"))
        p = subprocess.run([BIN, "translate", "--model", d], input="a b c\n", capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.strip())
        self.assertEqual(attnkit("export", "--model", d, "--out", os.path.join(self.dir, "e.pt"))
                         .returncode, 0)

    def test_presets_set_their_options_and_the_command_line_wins(self):
        words = "open save close the file new window image layer text copy paste".split()
        rng = random.Random(1)
        corpus = os.path.join(self.dir, "words.tsv")
        with open(corpus, "w") as f:
            for _ in range(300):
                s = [rng.choice(words) for _ in range(rng.randint(2, 6))]
                f.write(" ".join(s) + "\t" + " ".join(reversed(s)) + "\n")
        for preset, arch in (("archive-rnn", "rnn"), ("archive-transformer", "transformer")):
            d = os.path.join(self.dir, preset)
            out = attnkit("train", "--preset", preset, "--train", corpus, "--model-dir", d,
                          "--spm-vocab", "40", "--embed", "8", "--hidden", "16", "--d-model", "16",
                          "--heads", "2", "--ffn", "32", "--max-steps", "3", "--quiet").stdout
            # No epoch bound of the preset's stops the run before --max-steps does.
            self.assertIn("max steps after 3 steps", out)
            with open(os.path.join(d, "config.json")) as f:
                config = json.load(f)
            self.assertEqual(config["arch"], arch)
            self.assertEqual(config["source_tokenizer"], "spm:source.spm.model")
            self.assertEqual(config["target_tokenizer"], "spm:target.spm.model")
            # 40 pieces (the command line's, not the preset's 8,000) and the model's specials.
            self.assertLessEqual(config["model"]["source_vocab"], 44)
            if arch == "rnn":
                self.assertEqual(config["model"]["embed_size"], 8)
                self.assertEqual(config["model"]["hidden_size"], 16)

    def test_overlong_lines_and_directories_as_input_are_errors(self):
        long_line = os.path.join(self.dir, "long.txt")
        with open(long_line, "w") as f:
            f.write("a b\n" + "x " * 40000 + "\n")
        p = attnkit("translate", "--model", self.model, "--input", long_line, expect_ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn(long_line + ":2: a line of more than 65536 bytes (the limit)", p.stderr)
        p = attnkit("translate", "--model", self.model, "--input", self.dir, expect_ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("is a directory", p.stderr)
        p = attnkit("bleu", "--ref", self.dir, "--hyp", long_line, expect_ok=False)
        self.assertNotEqual(p.returncode, 0)

    def test_malformed_lines_are_reported_and_skipped_or_fatal_with_strict(self):
        bad = os.path.join(self.dir, "bad.tsv")
        with open(bad, "w") as f:
            f.write("a b\tb a\nno tab here\nc d\td c\n\tempty\n")
        args = ["train", "--train", bad, "--model-dir", os.path.join(self.dir, "bad_model"),
                "--source-tokenizer", "en", "--target-tokenizer", "en", "--epochs", "1", "--quiet"]
        p = attnkit(*args)
        self.assertIn(bad + ":2: no tab between source and target", p.stderr)
        self.assertIn(bad + ":4: empty source", p.stderr)
        args[args.index("--model-dir") + 1] = os.path.join(self.dir, "bad_model_strict")
        strict = attnkit(*args, "--strict", expect_ok=False)
        self.assertEqual(strict.returncode, 1)
        self.assertIn(bad + ":2:", strict.stderr)

    def test_missing_model_and_vocabulary_mismatch_are_clear_errors(self):
        p = attnkit("translate", "--model", os.path.join(self.dir, "nope"), expect_ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("nope: no such model directory", p.stderr)
        broken = os.path.join(self.dir, "broken")
        shutil.copytree(self.model, broken)
        with open(os.path.join(broken, "target.vocab"), "a") as f:
            f.write("extra\n")
        p = subprocess.run([BIN, "translate", "--model", broken], input="a b\n", capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("target.vocab has", p.stderr)

    def test_bleu_command_matches_sacrebleu(self):
        refs = os.path.join(self.dir, "refs.txt")
        with open(refs, "w") as f:
            f.write("The dog bit the man.\nIt was not unexpected.\nThe man bit him first.\n")
        p = subprocess.run([BIN, "bleu", "--ref", refs], capture_output=True, text=True, timeout=60,
                           input="The dog bit the man.\nIt wasn't surprising.\nThe man had just bitten him.\n")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.startswith("BLEU = "), p.stdout)

    def test_bleu_command_prints_sacrebleus_figures(self):
        # sacreBLEU 2.6.0's own scores (tests/golden/sacrebleu), through the command line: two
        # references, every tokenizer, chrF++ and sentence-level scores.
        golden = os.path.join(HERE, "..", "golden", "sacrebleu")
        scores = [json.loads(l) for l in open(os.path.join(golden, "scores.jsonl"))]
        case = os.path.join(golden, "two-refs")
        refs = ["--ref", os.path.join(case, "ref.txt"), "--ref", os.path.join(case, "ref2.txt")]
        hyp = ["--hyp", os.path.join(case, "hyp.txt")]
        for tok in ["13a", "zh", "intl", "char", "none"]:
            want = next(s["score"] for s in scores
                        if s["case"] == "two-refs" and s["args"] == f"-m bleu --tokenize {tok}")
            out = attnkit("bleu", *refs, *hyp, "--tokenize", tok).stdout
            self.assertEqual(re.search(r"BLEU = ([0-9.]+)", out).group(1), f"{want:.2f}", tok)
        want = next(s["score"] for s in scores
                    if s["case"] == "two-refs" and s["args"] == "-m chrf --chrf-word-order 2")
        out = attnkit("bleu", *refs, *hyp, "--chrf-word-order", "2").stdout
        self.assertIn(f"chrF2++ = {want:.2f}", out)
        want = next(s["score"] for s in scores if s["case"] == "two-refs" and s["args"] == "-m ter")
        self.assertIn(f"TER = {want:.2f}", out)
        with open(os.path.join(case, "sentence-m-chrf.json")) as f:
            sentence_chrf = json.load(f)["scores"]
        lines = attnkit("bleu", *refs, *hyp, "--sentence-level").stdout.splitlines()
        self.assertEqual(len(lines), len(sentence_chrf))
        for line, want in zip(lines, sentence_chrf):
            self.assertTrue(line.endswith(f"chrF2 = {want:.2f}"), (line, want))
        r = attnkit("bleu", "--ref", os.path.join(case, "ref.txt"), "--hyp",
                    os.path.join(golden, "en", "hyp.txt"), expect_ok=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("200 references for 300 hypotheses", r.stderr)


TINY_MODEL = os.path.join(HERE, "..", "golden", "tiny_model")


class PicturesCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def assertPng(self, path, min_width=100):
        with open(path, "rb") as f:
            head = f.read(24)
        self.assertEqual(head[:8], b"\x89PNG\r\n\x1a\n", path)
        width = int.from_bytes(head[16:20], "big")
        self.assertGreaterEqual(width, min_width)

    def test_attend_plot_draws_the_notes_examples(self):
        prefix = os.path.join(self.dir, "seeds")
        attnkit("attend", "--plot", prefix)
        self.assertPng(prefix + ".png", 300)
        with open(prefix + ".svg") as f:
            self.assertIn("<svg", f.read())
        with open(prefix + ".json") as f:
            panels = json.load(f)
        self.assertEqual([p["weights"] for p in panels[:2]], [[[0.5761, 0.2119, 0.2119]], [[1.0, 0.0, 0.0]]])
        self.assertEqual(panels[2]["weights"][0][0], 0.4711)

    def test_translate_attention_out_writes_three_files_per_sentence(self):
        out = os.path.join(self.dir, "att")
        p = subprocess.run([BIN, "translate", "--model", TINY_MODEL, "--attention-out", out],
                           input="Open the file\nSave as\n", capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(os.listdir(out)), ["0001.json", "0001.png", "0001.svg", "0002.json", "0002.png", "0002.svg"])
        self.assertPng(os.path.join(out, "0001.png"))
        with open(os.path.join(out, "0001.json")) as f:
            h = json.load(f)
        self.assertEqual(h["cols"], ["open", "the", "file"])
        self.assertEqual(len(h["rows"]), len(h["weights"]))
        self.assertEqual(h["rows"][-1], "</s>")
        for row in h["weights"]:
            self.assertAlmostEqual(sum(row), 1.0, places=3)

    def test_plot_draws_training_curves(self):
        prefix = os.path.join(self.dir, "curves")
        attnkit("plot", os.path.join(TINY_MODEL, "metrics.jsonl"), "--out", prefix)
        self.assertPng(prefix + ".png", 400)
        bad = os.path.join(self.dir, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"epoch": 1, "train_loss": 2}\nnot json\n')
        p = attnkit("plot", bad, "--out", prefix, expect_ok=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn(bad + ":2", p.stderr)


TINY_TRANSFORMER = os.path.join(HERE, "..", "golden", "tiny_transformer")


class QuantizeCli(unittest.TestCase):
    """attnkit quantize and --compute-type: int8 model directories."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def translate(self, model, *extra):
        p = subprocess.run([BIN, "--threads", "1", "translate", "--model", model, "--beam", "3", *extra],
                           input="Open the file\nSave as\nDelete the selected files\n", capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.splitlines()

    def test_an_int8_directory_is_smaller_says_so_and_translates(self):
        for model in (TINY_MODEL, TINY_TRANSFORMER):
            out = os.path.join(self.dir, os.path.basename(model) + "-int8")
            p = attnkit("quantize", "--model", model, "--out", out)
            self.assertIn("int8 weights", p.stdout)
            self.assertEqual(sorted(os.listdir(out)), ["config.json", "model.pt", "source.vocab", "target.vocab"])
            # A quarter of the tensor bytes, and a float scale per row: 1/8 more on the tiny
            # Transformer's 32-wide rows (3.3x with its float vectors), 1/64 on a 256-wide model's.
            # Each tensor is a zip record with a header of its own, which weighs on a tiny file.
            def payload(path):
                return sum(t.numel() * t.element_size() for t in torch.load(path).values())
            source, quantized = os.path.join(model, "model.pt"), os.path.join(out, "model.pt")
            self.assertGreaterEqual(payload(source) / payload(quantized), 3.2, model)
            self.assertGreaterEqual(os.path.getsize(source) / os.path.getsize(quantized), 2.5, model)
            with open(os.path.join(out, "config.json")) as f:
                self.assertEqual(json.load(f)["compute_type"], "int8")
            # PyTorch reads the weights: int8 matrices with a float scale per row.
            weights = torch.load(os.path.join(out, "model.pt"))
            matrices = [k for k, t in weights.items() if t.dtype == torch.int8]
            self.assertGreater(len(matrices), 5)
            for k in matrices:
                self.assertEqual(weights[k + "_scale"].shape, (weights[k].shape[0],), k)
                self.assertEqual(weights[k].abs().max().item(), 127, k)
            info = json.loads(attnkit("info", "--model", out, "--json").stdout)["model"]
            self.assertEqual(info["compute_type"], "int8")
            self.assertEqual(info["weights_bytes"], os.path.getsize(os.path.join(out, "model.pt")))
            self.assertEqual(len(self.translate(out)), 3)
            self.assertEqual(len(self.translate(out, "--compute-type", "float32")), 3)
            self.assertEqual(len(self.translate(model, "--compute-type", "int8")), 3)

    def test_nothing_is_replaced_and_bad_compute_types_are_refused(self):
        out = os.path.join(self.dir, "int8")
        attnkit("quantize", "--model", TINY_MODEL, "--out", out)
        before = read_bytes(os.path.join(out, "model.pt"))
        p = attnkit("quantize", "--model", TINY_MODEL, "--out", out, expect_ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("new directory", p.stderr)
        p = attnkit("quantize", "--model", out, "--out", os.path.join(self.dir, "again"), expect_ok=False)
        self.assertIn("int8 already", p.stderr)
        self.assertEqual(read_bytes(os.path.join(out, "model.pt")), before)
        p = subprocess.run([BIN, "translate", "--model", out, "--compute-type", "int4"], input="Open\n",
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--compute-type", p.stderr)
        config = os.path.join(out, "config.json")
        with open(config) as f:
            c = json.load(f)
        c["compute_type"] = "int4"
        with open(config, "w") as f:
            json.dump(c, f)
        p = subprocess.run([BIN, "translate", "--model", out], input="Open\n", capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn(config, p.stderr)
        self.assertIn("unknown compute type 'int4'", p.stderr)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AveragingCli(unittest.TestCase):
    """train --keep-checkpoints and attnkit average."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        cls.train = os.path.join(cls.dir, "train.tsv")
        attnkit("corpus", "synthetic", "--task", "reverse", "--count", "600", "--symbols", "6", "--out", cls.train)
        cls.model = os.path.join(cls.dir, "model")
        # Checkpoints every 5 steps and at the end of the epoch (38 batches of 16): the last three
        # are steps 35, 38 and 40.
        attnkit("train", "--train", cls.train, "--model-dir", cls.model, "--source-tokenizer", "en",
                "--target-tokenizer", "en", "--arch", "transformer", "--layers", "1", "--d-model", "32",
                "--heads", "2", "--ffn", "64", "--warmup-steps", "0", "--batch-size", "16", "--max-steps", "40",
                "--checkpoint-every", "5", "--keep-checkpoints", "3", "--quiet")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def exported(self, model, *extra):
        out = os.path.join(self.dir, f"export-{len(os.listdir(self.dir))}.pt")
        attnkit("export", "--model", model, "--out", out, *extra)
        return torch.load(out)

    def gru_model(self, name):
        d = os.path.join(self.dir, name)
        attnkit("train", "--train", self.train, "--model-dir", d, "--source-tokenizer", "en",
                "--target-tokenizer", "en", "--embed", "8", "--hidden", "8", "--max-steps", "1", "--quiet")
        return d

    def test_the_last_checkpoints_are_kept(self):
        self.assertEqual(sorted(os.listdir(os.path.join(self.model, "checkpoints"))),
                         ["step-00000035.pt", "step-00000038.pt", "step-00000040.pt"])

    def test_the_average_is_the_mean_of_the_kept_weights(self):
        out = os.path.join(self.dir, "averaged")
        p = attnkit("average", "--model", self.model, "--out", out)
        self.assertIn("averaged 3 weight files (step-00000035.pt ... step-00000040.pt)", p.stdout)
        kept = [self.exported(self.model, "--weights", os.path.join(self.model, "checkpoints", f))
                for f in sorted(os.listdir(os.path.join(self.model, "checkpoints")))]
        mean = self.exported(out)
        self.assertEqual(mean.keys(), kept[0].keys())
        for k in mean:  # summed in double, divided, rounded once: bit for bit
            self.assertTrue(torch.equal(mean[k], (sum(w[k].double() for w in kept) / 3).float()), k)
        # Not one of them: the weights moved between checkpoints.
        self.assertGreater(max((mean[k] - kept[-1][k]).abs().max().item() for k in mean), 1e-5)
        self.assertEqual(sorted(os.listdir(out)), ["config.json", "model.pt", "source.vocab", "target.vocab"])
        p = subprocess.run([BIN, "translate", "--model", out], input="1 2 3\n", capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.strip())

    def test_weights_of_another_model_are_refused_and_nothing_is_written(self):
        other = self.gru_model("gru")
        out = os.path.join(self.dir, "refused")
        p = attnkit("average", "--model", self.model, "--out", out, "--weights",
                    os.path.join(self.model, "model.pt"), os.path.join(other, "model.pt"), expect_ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(os.path.join(other, "model.pt"), p.stderr)
        self.assertFalse(os.path.exists(out))

    def test_an_existing_model_is_never_replaced(self):
        before = open(os.path.join(self.model, "model.pt"), "rb").read()
        other = self.gru_model("existing")
        for out in (self.model, other):
            p = attnkit("average", "--model", self.model, "--out", out, expect_ok=False)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("new directory", p.stderr)
        self.assertEqual(open(os.path.join(self.model, "model.pt"), "rb").read(), before)

    def test_a_model_without_kept_weights_says_how_to_get_them(self):
        p = attnkit("average", "--model", self.gru_model("bare"), "--out", os.path.join(self.dir, "none"),
                    expect_ok=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--keep-checkpoints", p.stderr)


class DistributedCli(unittest.TestCase):
    """Data-parallel training over Gloo on 127.0.0.1."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        attnkit("corpus", "synthetic", "--task", "reverse", "--count", "600", "--symbols", "6",
                "--out", os.path.join(cls.dir, "train.tsv"))
        attnkit("corpus", "synthetic", "--task", "reverse", "--count", "40", "--symbols", "6", "--seed", "3",
                "--out", os.path.join(cls.dir, "valid.tsv"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train_args(self, model_dir, *extra):
        batch = [] if "--batch-size" in extra else ["--batch-size", "16"]
        return ["train", "--train", os.path.join(self.dir, "train.tsv"), "--model-dir", model_dir,
                "--source-tokenizer", "en", "--target-tokenizer", "en", "--embed", "16", "--hidden", "32",
                "--dropout", "0", *batch, "--quiet", *extra]

    # 45 steps cross an epoch boundary (38 batches of 16), so rank 0's validation and its
    # broadcast decisions are part of the runs.
    STEPS = ["--max-steps", "45", "--epochs", "3"]
    TRANSFORMER = ["--arch", "transformer", "--layers", "1", "--d-model", "32", "--heads", "2",
                   "--ffn", "64", "--ffn-dropout", "0", "--warmup-steps", "0"]

    def run_to_weights(self, name, *extra):
        """Trains into a directory of its own and returns the final weights (the checkpoint's,
        rather than the best epoch's)."""
        d = os.path.join(self.dir, name)
        p = attnkit(*self.train_args(d, "--valid", os.path.join(self.dir, "valid.tsv"), *self.STEPS, *extra))
        self.assertIn("max steps after 45 steps", p.stdout)
        attnkit("export", "--model", d, "--from-checkpoint", "--out", os.path.join(d, "weights.pt"))
        return torch.load(os.path.join(d, "weights.pt"))

    def largest_difference(self, a, b):
        self.assertEqual(a.keys(), b.keys())
        worst = 0
        for k in a:
            d = (a[k] - b[k]).abs()
            if k.endswith("in_proj_bias"):
                # The key bias adds q.b to every score of a row, which softmax ignores: its gradient
                # is zero but for rounding, and Adam turns rounding into steps of +-lr.
                d = d.view(3, -1)[[0, 2]]
            worst = max(worst, d.max().item())
        return worst

    def test_two_processes_equal_one_process_on_the_combined_batch(self):
        one = self.run_to_weights("one")
        self.assertLess(self.largest_difference(one, self.run_to_weights("two", "--nproc", "2")), 1e-5)

    def test_accumulated_pieces_equal_one_batch_of_their_size(self):
        one = self.run_to_weights("batch16")
        pieces = self.run_to_weights("accumulate", "--batch-size", "8", "--accumulate", "2")
        self.assertLess(self.largest_difference(one, pieces), 1e-5)
        # The comparison can fail: steps on batches of 8 alone go elsewhere.
        self.assertGreater(self.largest_difference(one, self.run_to_weights("batch8", "--batch-size", "8")), 1e-3)

    def test_transformer_ranks_and_accumulation_equal_one_process(self):
        one = self.run_to_weights("t-one", *self.TRANSFORMER)
        two = self.run_to_weights("t-two", *self.TRANSFORMER, "--nproc", "2")
        self.assertLess(self.largest_difference(one, two), 1e-5)
        # Two ranks, each summing two pieces of its shard before the all-reduce.
        both = self.run_to_weights("t-both", *self.TRANSFORMER, "--nproc", "2", "--batch-size", "8",
                                   "--accumulate", "2")
        self.assertLess(self.largest_difference(one, both), 1e-5)

    def launch_pair(self, model_dir, timeout=5):
        port = str(free_port())
        procs = []
        for rank in (0, 1):
            env = dict(os.environ, WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            procs.append(subprocess.Popen([BIN, "--threads", "1", *self.train_args(
                model_dir, "--epochs", "1000", "--time-limit", "120", "--dist-timeout", str(timeout))],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        # Wait until training is under way (rank 0 prints its data summary first).
        deadline = time.time() + 30
        while time.time() < deadline and not os.path.exists(os.path.join(model_dir, "config.json")):
            time.sleep(0.1)
        time.sleep(1.0)
        return procs

    def test_a_dead_worker_makes_the_other_fail_within_the_timeout(self):
        r0, r1 = self.launch_pair(os.path.join(self.dir, "dead"))
        r1.kill()
        r1.communicate()
        start = time.time()
        _, err = r0.communicate(timeout=60)
        self.assertNotEqual(r0.returncode, 0)
        self.assertLess(time.time() - start, 20)
        self.assertIn("rank 0", err)
        self.assertIn("failed", err)

    def test_a_hung_worker_makes_the_other_fail_within_the_timeout(self):
        r0, r1 = self.launch_pair(os.path.join(self.dir, "hung"), timeout=4)
        os.kill(r1.pid, signal.SIGSTOP)
        try:
            start = time.time()
            _, err = r0.communicate(timeout=60)
            self.assertNotEqual(r0.returncode, 0)
            self.assertLess(time.time() - start, 30)
            self.assertIn("rank 0", err)
        finally:
            r1.kill()
            r1.communicate()


if __name__ == "__main__":
    unittest.main(verbosity=2)
