#!/usr/bin/python3
"""`attnkit po translate` on whole packages' catalogs that training never saw: BLEU and chrF
against the packages' own translations, with and without po::protect, the share of entries whose
placeholders, markup and accelerators survive, and gettext's own verdict (msgfmt --check-format).
docs/po.md has the table.

    bench/po_quality.py --model MODEL --corpus TRAIN.tsv --held apt dpkg ... [--out DIR]

MODEL must have been trained without the held-out packages (corpus gettext --no-system --root
over a copy of /usr/share/locale/zh_CN without them; see docs/po.md). The catalogs are read with
msgunfmt from /usr/share/locale/zh_CN/LC_MESSAGES/PACKAGE.mo; their translated, non-fuzzy entries
are emptied with polib and filled again by attnkit.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import polib

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("ATTNKIT_BIN", os.path.join(HERE, "..", "build", "attnkit"))
LOCALE = "/usr/share/locale/zh_CN/LC_MESSAGES"


def run(*args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(" ".join(args) + " failed:\n" + p.stderr)
    return p.stdout


def text_of(e):
    s = e.msgstr_plural[0] if e.msgid_plural else e.msgstr
    return " ".join(s.split("\n")).strip()


# A .mo file keeps no flags: entries with printf conversions get "c-format" back, as xgettext
# would give them, so that msgfmt --check-format has something to check.
PRINTF = re.compile(r"%(?:\d+\$)?[-+ #0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGaAcsp]|%<PRI\w+>")


def empty_catalog(src, dst):
    """The package's catalog with every translated entry emptied; returns the references."""
    cat = polib.pofile(src)
    refs = {}
    for e in list(cat):
        if e.obsolete:
            continue
        if "fuzzy" in e.flags or not e.translated():
            cat.remove(e)  # no reference to score against
            continue
        if PRINTF.search(e.msgid) and "c-format" not in e.flags:
            e.flags.append("c-format")
        refs[(e.msgctxt, e.msgid)] = text_of(e)
        e.msgstr = ""
        if e.msgid_plural:
            e.msgstr_plural = {0: ""}
    cat.metadata["Language"] = "zh_CN"
    cat.save(dst)
    return refs


def score(pairs, out_dir, name):
    hyp = os.path.join(out_dir, name + ".hyp")
    ref = os.path.join(out_dir, name + ".ref")
    with open(hyp, "w", encoding="utf-8") as h, open(ref, "w", encoding="utf-8") as r:
        for a, b in pairs:
            h.write(a + "\n")
            r.write(b + "\n")
    out = run(BIN, "bleu", "--ref", ref, "--hyp", hyp, "--tokenize", "zh")
    bleu = float(re.search(r"BLEU[^=]*= ([0-9.]+)", out).group(1))
    chrf = float(re.search(r"chrF2[^=]*= ([0-9.]+)", out).group(1))
    return bleu, chrf


def format_errors(path):
    p = subprocess.run(["msgfmt", "--check-format", "--use-fuzzy", "-o", os.devnull, path],
                       capture_output=True, text=True)
    m = re.search(r"found (\d+) fatal error", p.stderr)
    return int(m.group(1)) if m else (0 if p.returncode == 0 else -1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True, help="the TSV the model was trained on")
    ap.add_argument("--held", nargs="+", required=True, help="package names (PACKAGE.mo)")
    ap.add_argument("--out", default="out/po_quality")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    seen = set()
    with open(a.corpus, encoding="utf-8") as f:
        for line in f:
            seen.add(" ".join(line.split("\t")[0].replace("_", "").split()).lower())

    runs = {"memory + model, protected": [],
            "model, protected": ["--no-memory"],
            "model, unprotected": ["--no-memory", "--no-protect"]}
    rows = {name: {"pairs": [], "unseen": [], "checked": 0, "intact": 0, "format": 0,
                   "memory": 0} for name in runs}
    entries = unseen = 0
    for pkg in a.held:
        ref_po = os.path.join(a.out, pkg + ".ref.po")
        run("msgunfmt", os.path.join(LOCALE, pkg + ".mo"), "-o", ref_po)
        empty = os.path.join(a.out, pkg + ".empty.po")
        refs = empty_catalog(ref_po, empty)
        entries += len(refs)
        for name, extra in runs.items():
            out = os.path.join(a.out, pkg + "." + name.replace(", ", "_").replace(" + ", "_") + ".po")
            run(BIN, "--threads", "0", "po", "translate", empty, "--model", a.model, "--out", out,
                "--quiet", *extra)
            row = rows[name]
            for e in polib.pofile(out):
                key = (e.msgctxt, e.msgid)
                if e.obsolete or key not in refs:
                    continue
                pair = (text_of(e), refs[key])
                row["pairs"].append(pair)
                if " ".join(e.msgid.replace("_", "").split()).lower() not in seen:
                    row["unseen"].append(pair)
            st = json.loads(run(BIN, "po", "stats", "--format", "json", out))[0]
            row["checked"] += st["checked"]
            row["intact"] += st["intact"]
            row["memory"] += st["memory"]
            row["format"] += format_errors(out)
        unseen = len(rows["model, protected"]["unseen"])

    print(f"Held out: {', '.join(a.held)}: {entries} translated entries, {unseen} whose English "
          f"is not in the training corpus.\n")
    print("| run | BLEU, all | chrF, all | BLEU, unseen | chrF, unseen | from memory "
          "| spans intact | msgfmt --check-format errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        b, c = score(row["pairs"], a.out, name.replace(" ", "_") + ".all")
        bu, cu = score(row["unseen"], a.out, name.replace(" ", "_") + ".unseen")
        share = 100.0 * row["intact"] / max(row["checked"], 1)
        print(f"| {name} | {b:.1f} | {c:.1f} | {bu:.1f} | {cu:.1f} | {row['memory']} "
              f"| {row['intact']}/{row['checked']} ({share:.1f} %) | {row['format']} |")


if __name__ == "__main__":
    main()
