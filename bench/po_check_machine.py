#!/usr/bin/python3
"""`attnkit po check` over every catalog this machine carries (/usr/share/locale/*/LC_MESSAGES),
as translators wrote them: each .mo back to a .po by msgunfmt, checked with its language, the
findings counted by kind for all languages and for the ones named.

    /usr/bin/python3 bench/po_check_machine.py [--bin build/attnkit] [--lang zh_CN de ja ru]
"""
import argparse
import collections
import glob
import json
import os
import re
import subprocess
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/attnkit")
    ap.add_argument("--lang", nargs="*", default=["zh_CN", "de", "ja", "ru"])
    ap.add_argument("--root", default="/usr/share/locale")
    args = ap.parse_args()
    totals = collections.Counter()
    by_lang = collections.defaultdict(collections.Counter)
    catalogs = entries = failed = 0
    langs = collections.defaultdict(list)
    for mo in sorted(glob.glob(os.path.join(args.root, "*", "LC_MESSAGES", "*.mo"))):
        langs[mo.split(os.sep)[-3]].append(mo)
    with tempfile.TemporaryDirectory() as tmp:
        for lang, mos in sorted(langs.items()):
            pos = []
            for i, mo in enumerate(mos):
                po = os.path.join(tmp, f"{lang}-{i}.po")
                if (subprocess.run(["msgunfmt", "-o", po, mo], capture_output=True).returncode
                        or not os.path.exists(po)):
                    failed += 1
                else:
                    pos.append(po)
            if not pos:
                continue
            # One call per language: its catalogs all at once.
            p = subprocess.run([args.bin, "po", "check", *pos, "--lang", lang, "--format", "json"],
                               capture_output=True, text=True)
            if p.returncode not in (0, 1, 2):
                failed += len(pos)
                print(f"{lang}: {p.stderr.strip()[-300:]}")
                continue
            # Exit 2: some catalogs could not be read, each named on stderr; the rest were checked.
            refused = re.search(r"(\d+) catalogs? not read", p.stderr)
            refused = int(refused.group(1)) if refused else 0
            failed += refused
            catalogs += len(pos) - refused
            for f in json.loads(p.stdout or "[]"):
                totals[f["kind"]] += 1
                if lang in args.lang:
                    by_lang[lang][f["kind"]] += 1
            summary = [l for l in p.stderr.splitlines() if l.startswith("po check:")]
            if summary:
                entries += int(summary[-1].rsplit("(", 1)[1].split()[0])
            for po in pos:
                os.remove(po)
    kinds = sorted(totals, key=lambda k: -totals[k])
    print(f"{catalogs} catalogs, {entries} entries checked ({failed} not read)")
    print("| kind | all | " + " | ".join(args.lang) + " |")
    print("|---|---:|" + "---:|" * len(args.lang))
    for k in kinds:
        print(f"| {k} | {totals[k]:,} | " + " | ".join(f"{by_lang[l][k]:,}" for l in args.lang) + " |")
    print(f"| all | {sum(totals.values()):,} | " +
          " | ".join(f"{sum(by_lang[l].values()):,}" for l in args.lang) + " |")


if __name__ == "__main__":
    main()
