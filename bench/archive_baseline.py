#!/usr/bin/python3
"""The translators' own baseline on packages training never saw: gettext's msgmerge with a
compendium of the training catalogs (its exact and fuzzy matches), against `attnkit po translate`
with each model, on the same entries. Coverage, BLEU and chrF side by side.

    bench/archive_baseline.py --corpus DIR --lang zh_CN --model M1 [M2 ...] [--out DIR]
        [--fuzzy 75 80 90] [--reuse-merge]

DIR is a `corpus debian --test GLOB` output: the held-out (test) packages' catalogs are emptied
into a template, training's catalogs (every package but the validation and test ones) make the
compendium, and the entries scored are those of test.tsv (English that training lacks).
With --fuzzy, po translate's fuzzy memory (the model's training pairs) is measured too: alone,
before the model, and against the model on the entries it matches.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

import polib

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("ATTNKIT_BIN", os.path.join(HERE, "..", "build", "attnkit"))


def run(*args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(" ".join(args) + " failed:\n" + p.stderr[-2000:])
    return p.stdout


def squeeze(s):
    return " ".join(s.split())


def text_of(e):
    s = e.msgstr_plural.get(0, "") if e.msgid_plural else e.msgstr
    return squeeze(s.replace("\n", " "))


def package_dirs(corpus, packages):
    out = []
    for p in packages:
        out += glob.glob(os.path.join(corpus, "catalogs", p + "_*"))
    return out


def catalogs_in(dirs):
    return sorted(f for d in dirs for f in glob.glob(os.path.join(d, "**", "*.mo"), recursive=True))


def as_po(mo, out):
    """The catalog as a .po file, or None where msgunfmt refuses it or finds no message in it (as
    `corpus debian` counts unreadable catalogs and goes on)."""
    p = subprocess.run(["msgunfmt", "--no-wrap", "-o", out, mo], capture_output=True, text=True)
    return out if p.returncode == 0 and os.path.exists(out) else None


def bleu(hyps, refs, out_dir, name, tokenize):
    h, r = os.path.join(out_dir, name + ".hyp"), os.path.join(out_dir, name + ".ref")
    with open(h, "w", encoding="utf-8") as fh, open(r, "w", encoding="utf-8") as fr:
        fh.writelines(x + "\n" for x in hyps)
        fr.writelines(x + "\n" for x in refs)
    out = run(BIN, "bleu", "--ref", r, "--hyp", h, "--tokenize", tokenize)
    return (float(re.search(r"BLEU[^=]*= ([0-9.]+)", out).group(1)),
            float(re.search(r"chrF2[^=]*= ([0-9.]+)", out).group(1)))


def read_filled(path, refs):
    """The catalog's suggestions for the scored entries, and how many of them are not fuzzy."""
    filled, exact = {}, 0
    for e in polib.pofile(path):
        key = (e.msgctxt, e.msgid)
        if key in refs and text_of(e):
            filled[key] = text_of(e)
            exact += "fuzzy" not in e.flags
    return filled, exact


def fuzzy_matches(path, refs):
    """The scored entries po translate filled from a fuzzy memory match: key -> (score, text)."""
    out = {}
    for e in polib.pofile(path):
        m = re.search(r"(\d+) % match of", e.tcomment or "")
        key = (e.msgctxt, e.msgid)
        if m and key in refs and text_of(e):
            out[key] = (int(m.group(1)), text_of(e))
    return out


def merge(args, manifest, pot, merged):
    """gettext's msgmerge fills `pot` from a compendium of every training catalog into `merged`."""
    # The compendium: every training catalog.
    held = set(manifest["test_packages"]) | set(manifest["valid_packages"])
    train_dirs = [d for d in glob.glob(os.path.join(args.corpus, "catalogs", "*"))
                  if os.path.basename(d).split("_")[0] not in held]
    pos = []
    unreadable = 0
    for i, mo in enumerate(catalogs_in(train_dirs)):
        po = as_po(mo, os.path.join(args.out, f"c{i}.po"))
        pos += [po] if po else []
        unreadable += not po
    print(f"compendium: {len(pos)} training catalogs ({unreadable} that msgunfmt refuses or finds empty left out)",
          flush=True)
    # Each catalog its own compendium: msgcat refuses to join catalogs that use one msgid with
    # and without a plural, which thousands of packages do; msgmerge reads each apart.
    empty = os.path.join(args.out, "empty.po")
    with open(empty, "w") as f:
        f.write('msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n')
    compendia = [x for p in pos for x in ("--compendium", p)]
    run("msgmerge", "--quiet", "--no-wrap", *compendia, "-o", merged, empty, pot)
    for p in pos:
        os.remove(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--lang", required=True)
    ap.add_argument("--model", nargs="*", default=[])
    ap.add_argument("--out", default="out/archive-baseline")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--fuzzy", type=int, nargs="*", default=[],
                    help="similarity thresholds for po translate's fuzzy memory: one run at the "
                         "lowest, each threshold's catalog taken from it (a match of at least T "
                         "instead of the model's suggestion)")
    ap.add_argument("--reuse-merge", action="store_true",
                    help="score the msgmerge.po an earlier run left in --out (msgmerge over "
                         "thousands of compendia takes about half an hour)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.corpus, "manifest.json")) as f:
        manifest = json.load(f)
    tokenize = "zh" if args.lang.startswith("zh") else "char" if args.lang[:2] in ("ja", "ko") else "13a"

    # The held-out catalogs, emptied: the template, and the references.
    unseen = set()
    with open(os.path.join(args.corpus, "test.tsv"), encoding="utf-8") as f:
        for line in f:
            unseen.add(line.split("\t")[0])
    refs = {}
    template = polib.POFile()
    template.metadata = {"Content-Type": "text/plain; charset=UTF-8", "Language": args.lang}
    seen_ids = set()
    for mo in catalogs_in(package_dirs(args.corpus, manifest["test_packages"])):
        po = as_po(mo, os.path.join(args.out, "held.po"))
        for e in polib.pofile(po) if po else []:
            if not e.msgid or e.obsolete or "fuzzy" in e.flags or not e.translated():
                continue
            key = (e.msgctxt, e.msgid)
            if squeeze(e.msgid.replace("_", "")) not in unseen or key in seen_ids:
                continue
            seen_ids.add(key)
            refs[key] = text_of(e)
            template.append(polib.POEntry(msgctxt=e.msgctxt, msgid=e.msgid,
                                          msgid_plural=e.msgid_plural, msgstr="",
                                          msgstr_plural={0: ""} if e.msgid_plural else {},
                                          flags=[x for x in e.flags if x != "fuzzy"]))
    pot = os.path.join(args.out, "held.pot")
    template.save(pot)
    print(f"{len(refs)} held-out entries whose English training lacks", flush=True)

    merged = os.path.join(args.out, "msgmerge.po")
    if not (args.reuse_merge and os.path.exists(merged)):
        merge(args, manifest, pot, merged)

    systems = {"msgmerge + compendium": read_filled(merged, refs)}
    fuzzy_runs = {}
    for m in args.model:
        name = os.path.basename(m.rstrip("/"))
        out = os.path.join(args.out, name + ".po")
        run(BIN, "po", "translate", pot, "--model", m, "--lang", args.lang, "--out", out,
            "--beam", str(args.beam))
        systems["attnkit " + name] = read_filled(out, refs)
        if args.fuzzy:
            fuzzy_out = os.path.join(args.out, name + "-fuzzy.po")
            run(BIN, "po", "translate", pot, "--model", m, "--lang", args.lang, "--out", fuzzy_out,
                "--beam", str(args.beam), "--fuzzy-threshold", str(min(args.fuzzy)))
            fuzzy_runs[name] = fuzzy_matches(fuzzy_out, refs)
            for t in sorted(args.fuzzy):
                filled, _ = systems["attnkit " + name]
                both = dict(filled)
                both.update({k: v for k, (score, v) in fuzzy_runs[name].items() if score >= t})
                systems[f"attnkit {name} + fuzzy memory >= {t}"] = (both, 0)
                alone = {k: v for k, (score, v) in fuzzy_runs[name].items() if score >= t}
                systems[f"{name}'s fuzzy memory >= {t} alone"] = (alone, 0)

    rows = []
    for name, (filled, exact) in systems.items():
        keys = sorted(refs, key=str)
        b_all, c_all = bleu([filled.get(k, "") for k in keys], [refs[k] for k in keys], args.out,
                            re.sub(r"\W+", "_", name) + "_all", tokenize)
        got = [k for k in keys if k in filled]
        b_f, c_f = bleu([filled[k] for k in got], [refs[k] for k in got], args.out,
                        re.sub(r"\W+", "_", name) + "_filled", tokenize) if got else (0, 0)
        rows.append((name, len(filled), exact, b_all, c_all, b_f, c_f))
    print(f"\n| {args.lang}, {len(refs)} entries | filled | of them not fuzzy | BLEU | chrF2 | "
          "BLEU of the filled | chrF2 of the filled |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, n, exact, b, c, bf, cf in rows:
        print(f"| {name} | {n} ({100 * n / max(len(refs), 1):.0f} %) | {exact} | {b:.1f} | {c:.1f} "
              f"| {bf:.1f} | {cf:.1f} |")

    # Where the memory's fuzzy match and the model disagree: the same entries, scored both ways,
    # by the match's similarity.
    for name, matches in fuzzy_runs.items():
        model, _ = systems["attnkit " + name]
        print(f"\n| {name}: fuzzy matches, similarity | entries | memory BLEU | memory chrF2 "
              "| model BLEU | model chrF2 |")
        print("|---|---:|---:|---:|---:|---:|")
        bands = sorted(set([min(args.fuzzy), 80, 90, 95, 101]))
        for lo, hi in zip(bands, bands[1:]):
            keys = sorted((k for k, (score, _) in matches.items() if lo <= score < hi), key=str)
            if not keys:
                continue
            tag = re.sub(r"\W+", "_", f"{name}_{lo}")
            mb, mc = bleu([matches[k][1] for k in keys], [refs[k] for k in keys], args.out,
                          tag + "_memory", tokenize)
            ob, oc = bleu([model.get(k, "") for k in keys], [refs[k] for k in keys], args.out,
                          tag + "_model", tokenize)
            print(f"| {lo}-{hi - 1} | {len(keys)} | {mb:.1f} | {mc:.1f} "
                  f"| {ob:.1f} | {oc:.1f} |")


if __name__ == "__main__":
    main()
