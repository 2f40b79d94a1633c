#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/seed_*): a few small valid
inputs of each kind, from PyTorch (torch.save), gettext's msgfmt and the project's fixtures.
Next to them: the input of every finding (finding_*), and the inputs a fuzzing campaign reached
new coverage with, folded in by libFuzzer's merge (named by their SHA-1):
  build-fuzz/tests/fuzz/fuzz_T -merge=1 tests/fuzz/corpus/T build-fuzz/fuzz-corpus/T
Run from anywhere: /usr/bin/python3 tests/fuzz/make_seeds.py
"""
import io
import json
import os
import shutil
import subprocess
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CORPUS = os.path.join(HERE, "corpus")
SEP = b"\n@@@@\n"  # fuzz_input.h's split() for the targets that take several parts


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed_" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def saved(obj, legacy=False):
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=not legacy)
    return buf.getvalue()


def read(*path):
    with open(os.path.join(ROOT, *path), "rb") as f:
        return f.read()


def pt_file():
    torch.manual_seed(0)
    t = torch.randn(2, 3)
    write("pt_file", "tensor.pt", saved(t))
    write("pt_file", "dict.pt", saved({"a": t, "b": torch.arange(4), "c": torch.ones(2, dtype=torch.float64)}))
    write("pt_file", "view.pt", saved({"row": t[1], "col": t[:, 2], "shared": t}))
    write("pt_file", "nested.pt", saved({"list": [t, (1, 2.5, "x")], "none": None, "flag": True}))
    write("pt_file", "dtypes.pt", saved({n: torch.ones(3, dtype=d) for n, d in
                                         [("i8", torch.int8), ("u8", torch.uint8), ("i32", torch.int32),
                                          ("f16", torch.float16), ("bool", torch.bool)]}))
    write("pt_file", "empty.pt", saved({"e": torch.zeros(0, 4)}))
    write("pt_file", "notes.pt", read("tests", "golden", "notes.pt"))


def state_dict():
    write("state_dict", "multihead.pt", read("tests", "golden", "multihead_state.pt"))
    write("state_dict", "myattn.pt", read("tests", "golden", "notes_myattn_state.pt"))
    mha = torch.nn.MultiheadAttention(8, 2)
    write("state_dict", "multihead_torch.pt", saved(mha.state_dict()))


def model_dir():
    tiny = os.path.join(ROOT, "tests", "golden", "tiny_model")
    parts = [read(tiny, "config.json"), read(tiny, "source.vocab"), read(tiny, "target.vocab")]
    write("model_dir", "tiny_model", SEP.join(parts))
    config = json.loads(parts[0])
    config["model"]["bidirectional"] = False
    write("model_dir", "unidirectional", SEP.join([json.dumps(config).encode()] + parts[1:]))


def weights():
    """A model 4 wide, trained for two steps by attnkit itself (ATTNKIT_BIN, default build/attnkit):
    its config.json and model.pt, and its checkpoint.pt, each joined to the config."""
    binary = os.environ.get("ATTNKIT_BIN", os.path.join(ROOT, "build", "attnkit"))
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "train.tsv"), "w") as f:
            f.write("a b c\ta b c\nb c\tb c\nc a\tc a\n")
        model = os.path.join(tmp, "model")
        subprocess.run([binary, "train", "--train", os.path.join(tmp, "train.tsv"), "--model-dir", model,
                        "--source-tokenizer", "en", "--target-tokenizer", "en", "--embed", "4",
                        "--hidden", "4", "--max-steps", "2", "--quiet"], check=True, capture_output=True)
        config = read(model, "config.json")
        write("weights", "model.pt", config + SEP + read(model, "model.pt"))
        write("weights", "checkpoint.pt", config + SEP + read(model, "checkpoint.pt"))


def gettext():
    po = read("tests", "data", "sample.po")
    write("gettext", "sample.po", b"\x00" + po)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "in.po")
        with open(src, "wb") as f:
            f.write(po.replace(b"#, fuzzy\n", b""))
        for endian in ("little", "big"):
            mo = os.path.join(tmp, endian + ".mo")
            subprocess.run(["msgfmt", "--endianness=" + endian, "-o", mo, src], check=True)
            with open(mo, "rb") as f:
                write("gettext", endian + ".mo", b"\x01" + f.read())
    write("gettext", "plural.po", b"\x00" + '''msgid ""
msgstr ""
"Plural-Forms: nplurals=2; plural=(n != 1);\\n"

#~ msgid "old"
#~ msgstr "旧"

msgid "%d window"
msgid_plural "%d windows"
msgstr[0] "%d 个窗口"
msgstr[1] "%d 个窗口"
'''.encode())


def corpus_files():
    write("corpus_files", "crlf_bom.tsv", read("tests", "data", "sample_crlf_bom.tsv"))
    write("corpus_files", "pairs.tsv", "Open the file\t打开文件\nSave %s\t保存 %s\textra\n\tempty\nno tab\n")
    write("corpus_files", "vocab.txt", read("tests", "golden", "tiny_model", "target.vocab")[:400])


def tokenizers():
    for i, s in enumerate(["Open the file %s in {0} now!", "Don't save _File...", "打开文件 %1$s 失败：ABC123",
                           "Café naïve résumé", "tab\there\u3000wide space\u00a0nbsp", "<b>bold</b> &amp; $HOME"]):
        write("tokenizers", f"{i}.txt", s)


def metrics():
    golden = os.path.join("tests", "golden", "sacrebleu")
    for name in sorted(os.listdir(os.path.join(ROOT, golden))):
        d = os.path.join(ROOT, golden, name)
        if os.path.isdir(d) and os.path.exists(os.path.join(d, "hyp.txt")):
            hyp = read(golden, name, "hyp.txt").splitlines()[:8]
            ref = read(golden, name, sorted(f for f in os.listdir(d) if f.startswith("ref"))[0]).splitlines()[:8]
            write("metrics", name, b"\n".join(hyp) + SEP + b"\n".join(ref))
    write("metrics", "small", "abc\nabx" + SEP.decode() + "abc\nab")


def server_api():
    bodies = [{"mechanism": "soft", "q": [[1, 0, 0]], "k": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]},
              {"mechanism": "hard", "score": "scaled-dot", "q": [[1, 2]], "k": [[1, 2], [3, 4]], "v": [[1], [2]]},
              {"mechanism": "self", "x": [[0.5, -1], [2, 0]]},
              {"text": "Open the file", "beam": 3},
              {"text": "x", "beam": 4294967297}]
    for i, b in enumerate(bodies):
        write("server_api", f"{i}.json", json.dumps(b))


if __name__ == "__main__":
    for target in ["pt_file", "state_dict", "model_dir", "weights", "gettext", "corpus_files",
                   "tokenizers", "metrics", "server_api"]:
        globals()[target]()
    print("wrote", CORPUS)
