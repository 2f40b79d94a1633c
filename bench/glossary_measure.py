#!/usr/bin/python3
"""`po translate --glossary` measured on packages training never saw: how often a glossary
term's agreed translation appears in the model's suggestion, with and without the glossary, and
the BLEU and chrF2 of the entries that contain a term.

    bench/glossary_measure.py --test DIR/test.tsv --catalogs 'DIR/catalogs/gimp*/**/*.mo' \
        --lang de --model M [--out DIR] [--tokenize 13a]

The glossary is the held-out project's own, as its translators would write it: the one-word
messages of its catalogs (--catalogs) whose translation is one word (GIMP's "Layer" -> "Ebene"),
the most frequent translation of each, kept when the project's other messages (those not in the
test set) that contain the term carry that translation at least --min-consistency of the time,
and the term occurs in at least --min-uses of the test set's messages of three words or more.
Only those messages are translated and scored: none is a glossary line.
"""
import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys

import polib

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("ATTNKIT_BIN", os.path.join(HERE, "..", "build", "attnkit"))
WORD = re.compile(r"^[A-Za-z]+$")


def run(*args):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(" ".join(args) + " failed:\n" + p.stderr[-2000:])
    return p


WORDS = re.compile(r"[A-Za-z0-9]+")


def words_of(text):
    return set(w.lower() for w in WORDS.findall(text.replace("_", "")))


def term_in(term, words):
    """The one-word term or its plural among a message's words (as po::Glossary finds it)."""
    forms = [term + "es", term + "s", term] + ([term[:-1] + "ies"] if term.endswith("y") else [])
    return any(f in words for f in forms)


def bleu(hyps, refs, out_dir, name, tokenize):
    h, r = os.path.join(out_dir, name + ".hyp"), os.path.join(out_dir, name + ".ref")
    with open(h, "w", encoding="utf-8") as fh, open(r, "w", encoding="utf-8") as fr:
        fh.writelines(x.replace("\n", " ") + "\n" for x in hyps)
        fr.writelines(x.replace("\n", " ") + "\n" for x in refs)
    out = run(BIN, "bleu", "--ref", r, "--hyp", h, "--tokenize", tokenize).stdout
    return (float(re.search(r"BLEU[^=]*= ([0-9.]+)", out).group(1)),
            float(re.search(r"chrF2[^=]*= ([0-9.]+)", out).group(1)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--test", required=True)
    ap.add_argument("--catalogs", required=True, help="the held-out project's .mo or .po files")
    ap.add_argument("--lang", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default="glossary-measure")
    ap.add_argument("--tokenize", default="13a")
    ap.add_argument("--min-uses", type=int, default=3)
    ap.add_argument("--min-consistency", type=float, default=0.8)
    ap.add_argument("--beam", default="5")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    pairs = []
    with open(args.test, encoding="utf-8") as f:
        for line in f:
            cells = line.rstrip("\n").split("\t")
            if len(cells) >= 2:
                pairs.append((cells[0], cells[1]))
    # The glossary: the project's one-word messages and their most frequent one-word translation.
    choices = collections.defaultdict(collections.Counter)
    test_sources = set(s for s, _ in pairs)
    others = []  # the project's messages outside the test set, with their translations
    for path in sorted(glob.glob(args.catalogs, recursive=True)):
        po_path = path
        if path.endswith(".mo"):
            po_path = os.path.join(args.out, os.path.basename(path) + ".po")
            run("msgunfmt", "--no-wrap", "-o", po_path, path)
        for e in polib.pofile(po_path):
            src, tgt = e.msgid.replace("_", ""), e.msgstr.replace("_", "")
            if e.msgstr and not e.msgid_plural and WORD.match(src) and WORD.match(tgt):
                choices[src.lower()][tgt] += 1
            elif e.msgstr and not e.msgid_plural and e.msgid not in test_sources:
                others.append((words_of(e.msgid), tgt.lower()))
    longer = [(s, t) for s, t in pairs if len(s.split()) >= 3]
    longer_words = [words_of(s) for s, _ in longer]
    glossary = {}
    for term, counter in choices.items():
        target = counter.most_common(1)[0][0]
        uses = sum(term_in(term, w) for w in longer_words)
        elsewhere = [t for w, t in others if term_in(term, w)]
        consistent = sum(target.lower() in t for t in elsewhere) / max(1, len(elsewhere))
        if len(term) >= 3 and uses >= args.min_uses and len(elsewhere) >= 3 and \
                consistent >= args.min_consistency:
            glossary[term] = target
    gpath = os.path.join(args.out, "glossary.tsv")
    with open(gpath, "w", encoding="utf-8") as f:
        f.write("source\ttarget\n")
        f.writelines("%s\t%s\n" % kv for kv in sorted(glossary.items()))

    # The longer messages that contain a term, as a template.
    scored = [(s, t) for (s, t), w in zip(longer, longer_words)
              if any(term_in(g, w) for g in glossary)]
    pot = polib.POFile()
    pot.metadata = {"Content-Type": "text/plain; charset=UTF-8",
                    "Language": args.lang, "Plural-Forms": "nplurals=2; plural=(n != 1);"}
    for i, (s, _) in enumerate(scored):
        pot.append(polib.POEntry(msgctxt=str(i), msgid=s, msgstr=""))
    pot_path = os.path.join(args.out, "scored.pot")
    pot.save(pot_path)

    result = {"glossary_terms": len(glossary), "entries": len(scored)}
    for name, extra in (("without", []), ("with", ["--glossary", gpath])):
        out = os.path.join(args.out, name + ".po")
        run(BIN, "po", "translate", pot_path, "--model", args.model, "--out", out, "--lang",
            args.lang, "--no-memory", "--beam", args.beam, *extra)
        by_ctx = {e.msgctxt: e.msgstr for e in polib.pofile(out)}
        hyps = [by_ctx[str(i)] for i in range(len(scored))]
        uses = carried = 0
        for (s, _), h in zip(scored, hyps):
            w = words_of(s)
            for term, target in glossary.items():
                if term_in(term, w):
                    uses += 1
                    carried += target.lower() in h.lower().replace("_", "")
        b, c = bleu(hyps, [t for _, t in scored], args.out, name, args.tokenize)
        result[name] = {"term_uses": uses, "carried": carried,
                        "carried_share": carried / max(1, uses), "bleu": b, "chrf2": c}
    # How often the references themselves use the glossary's translation.
    ref_uses = ref_carried = 0
    for s, t in scored:
        w = words_of(s)
        for term, target in glossary.items():
            if term_in(term, w):
                ref_uses += 1
                ref_carried += target.lower() in t.lower().replace("_", "")
    result["references_carry"] = ref_carried / max(1, ref_uses)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
