#!/usr/bin/python3
"""End-to-end tests of the attnkit CLI against real PyTorch (Debian's python3-torch).

Python writes inputs and state_dicts with torch.save, attnkit computes, Python reads the
result with torch.load and compares with the same computation in PyTorch.
Run: ATTNKIT_BIN=build/attnkit /usr/bin/python3 tests/cli/test_cli.py
"""
import os
import subprocess
import sys
import tempfile
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

    def test_seed_examples(self):
        out = attnkit("attend").stdout
        for number in ["0.5761, 0.2119, 0.2119", "1.0000, 0.0000, 0.0000", "0.4711, 0.2645, 0.2645",
                       "[2, 1, 8]", "[2, 1, 5]", "[1.0000, 1.0000]"]:
            self.assertIn(number, out)

    def test_info_names_the_blas(self):
        out = attnkit("info").stdout
        self.assertIn("LibTorch  1.13", out)
        self.assertIn("OpenBLAS", out)

    def test_seed_myattn_state_dict_roundtrip(self):
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

    def test_unbatched_seed_tensors(self):
        q = torch.tensor([[1.0, 0.0, 0.0]])
        eye = torch.eye(3)
        attnkit("attend", "--q", self.save("q.pt", q), "--k", self.save("k.pt", eye),
                "--out", self.path("out.pt"))
        got = torch.load(self.path("out.pt"))
        want_out, want_w = ref.seed_soft_attention(q, eye, eye)
        self.assertClose(got["weights"], want_w)
        self.assertClose(got["output"], want_out)

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


if __name__ == "__main__":
    unittest.main(verbosity=2)
