#!/usr/bin/python3
"""`attnkit po translate` and `attnkit po stats` end to end, checked with tools that are not
attnkit's: polib reads the catalogs, gettext's msgfmt --check judges them, and a line diff
proves that nothing but the filled parts changed.
Run: ATTNKIT_BIN=build/attnkit /usr/bin/python3 tests/cli/test_po.py
"""
import collections
import difflib
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import polib

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("ATTNKIT_BIN", os.path.join(HERE, "..", "..", "build", "attnkit"))
TINY_MODEL = os.path.join(HERE, "..", "golden", "tiny_model")
POT = os.path.join(HERE, "..", "data", "catalog.pot")

# Independent of attnkit's recognisers: printf conversions, brace and shell variables, tags.
PRINTF = re.compile(r"%(?:\d+\$)?[-+ #0]*\d*(?:\.\d+)?[hlLqjzt]*[diouxXeEfFgGaAcsp]|%\([a-z_]+\)s|%%")
OTHER = re.compile(r"\{[a-z_0-9]+\}|\$\{[A-Za-z_]+\}|</?[a-z]+[^<>]*>|--[a-z]+")


def po(*args, check=True):
    p = subprocess.run([BIN, "--threads", "1", "po", *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(" ".join(args) + " failed:\n" + p.stderr)
    return p


def protected(s):
    return collections.Counter(PRINTF.findall(s) + OTHER.findall(s))


class PoTranslate(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="attnkit_po_")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def path(self, name):
        return os.path.join(self.dir, name)

    def translate(self, src, *extra, out="out.po"):
        po("translate", src, "--model", TINY_MODEL, "--out", self.path(out), "--lang", "zh_CN", *extra)
        return self.path(out)

    def test_fills_untranslated_entries_and_changes_nothing_else(self):
        out = self.translate(POT)
        before, after = polib.pofile(POT), polib.pofile(out)
        self.assertEqual(len(before), len(after))
        self.assertEqual(len(before.obsolete_entries()), len(after.obsolete_entries()))
        self.assertEqual(after.metadata["Language"], "zh_CN")
        self.assertEqual(after.metadata["Plural-Forms"], "nplurals=1; plural=0;")
        self.assertEqual(after.metadata["Project-Id-Version"], before.metadata["Project-Id-Version"])
        for b, a in zip(before, after):
            for field in ("msgctxt", "msgid", "msgid_plural", "occurrences", "comment",
                          "previous_msgid", "obsolete"):
                self.assertEqual(getattr(b, field), getattr(a, field), (b.msgid, field))
            if b.obsolete:
                self.assertEqual(b.msgstr, a.msgstr)
                continue
            self.assertEqual([f for f in a.flags if f != "fuzzy"], [f for f in b.flags if f != "fuzzy"])
            self.assertIn("fuzzy", a.flags)
            self.assertIn("attnkit: machine translation", a.tcomment)
            text = a.msgstr_plural[0] if a.msgid_plural else a.msgstr
            self.assertTrue(text, a.msgid)
            # Placeholders, markup, variables and options: the same multiset as the source.
            self.assertEqual(protected(text), protected(a.msgid), (a.msgid, text))
            self.assertEqual(text.count("\n"), a.msgid.count("\n"), (a.msgid, text))
            if a.msgid_plural:
                self.assertEqual(len(a.msgstr_plural), 1)  # zh_CN has one form
        self.assertIn("(_S)", after.find("_Save As…", msgctxt="menu").msgstr)
        self.assertTrue(after.find("_Save As…", msgctxt="menu").msgstr.endswith("(_S)…"))
        # gettext's own check of the suggestions (fuzzy entries included).
        check = subprocess.run(["msgfmt", "--check", "--use-fuzzy", "-o", os.devnull, out],
                               capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stderr)
        # The line diff: only blank msgstrs, the three template header fields and flag lines
        # went away; everything added is a comment, a flag, or a msgstr.
        with open(POT, encoding="utf-8") as f:
            old = f.read().splitlines()
        with open(out, encoding="utf-8") as f:
            new = f.read().splitlines()
        for line in difflib.ndiff(old, new):
            if line.startswith("- "):
                self.assertRegex(line, r'^- (msgstr(\[\d\])? ""|#, .*|"(Language|Content-Type|Plural-Forms): .*)$')
            elif line.startswith("+ "):
                self.assertRegex(line, r'^\+ (msgstr|"|# attnkit: |#, fuzzy)')

    def test_nothing_to_translate_gives_an_identical_file(self):
        out = self.translate(POT)
        again = self.translate(out, out="again.po")
        with open(out, "rb") as a, open(again, "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_exact_matches_in_a_compendium_are_reused_not_fuzzy(self):
        compendium = self.path("compendium.po")
        with open(compendium, "w", encoding="utf-8") as f:
            f.write('msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                    'msgid "Open the file"\nmsgstr "打开该文件"\n\n'
                    'msgctxt "toolbar"\nmsgid "_Save As…"\nmsgstr "工具栏另存为(_S)…"\n')
        out = polib.pofile(self.translate(POT, "--compendium", compendium))
        e = out.find("Open the file")
        self.assertEqual(e.msgstr, "打开该文件")
        self.assertNotIn("fuzzy", e.flags)
        self.assertIn("attnkit: translation memory (" + compendium + ")", e.tcomment)
        # Another context is another message.
        self.assertNotEqual(out.find("_Save As…", msgctxt="menu").msgstr, "工具栏另存为(_S)…")
        stats = json.loads(po("stats", "--format", "json", self.path("out.po")).stdout)[0]
        self.assertEqual((stats["translated"], stats["fuzzy"], stats["untranslated"]), (1, 7, 0))
        self.assertEqual((stats["memory"], stats["model"], stats["obsolete"]), (1, 7, 1))
        self.assertEqual(stats["intact"], stats["checked"])

    def test_malformed_catalogs_are_errors_naming_the_line_and_nothing_is_written(self):
        bad = self.path("bad.po")
        with open(bad, "w", encoding="utf-8") as f:
            f.write('msgid "a"\nmsgstr ""\n\nmsgid "b\nmsgstr ""\n')
        out = self.path("out.po")
        with open(out, "w") as f:
            f.write("keep me\n")
        p = po("translate", bad, "--model", TINY_MODEL, "--out", out, "--lang", "zh_CN", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("bad.po:4: unterminated string", p.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "keep me\n")

    def test_a_catalog_in_another_language_is_refused(self):
        p = po("translate", POT, "--model", TINY_MODEL, "--out", self.path("o.po"), "--lang", "de",
               check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("a catalog in de, but the model translates into zh", p.stderr)
        model = self.path("model")
        shutil.copytree(TINY_MODEL, model)
        with open(os.path.join(model, "config.json")) as f:
            config = json.load(f)
        config["target_lang"] = "zh_TW"
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump(config, f)
        p = po("translate", POT, "--model", model, "--out", self.path("o.po"), "--lang", "zh_CN",
               check=False)
        self.assertIn("a catalog in zh_CN, but the model translates into zh_TW", p.stderr)
        p = po("translate", POT, "--model", TINY_MODEL, "--out", self.path("o.po"), check=False)
        self.assertIn("the header names no Language; give the target language with --lang", p.stderr)
        self.assertFalse(os.path.exists(self.path("o.po")))

    def test_a_header_without_language_gets_one_as_msginit_gives_it(self):
        src = self.path("old.po")
        with open(src, "w", encoding="utf-8") as f:
            f.write('msgid ""\nmsgstr ""\n"Project-Id-Version: old 1.0\\n"\n'
                    '"Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "Open the file"\nmsgstr ""\n')
        out = polib.pofile(self.translate(src))
        self.assertEqual(out.metadata["Language"], "zh_CN")
        self.assertEqual(out.metadata["Project-Id-Version"], "old 1.0")

    def test_a_gb2312_catalog_is_written_back_in_gb2312(self):
        src = self.path("gb.po")
        text = ('msgid ""\nmsgstr ""\n"Language: zh_CN\\n"\n"Content-Type: text/plain; charset=GB2312\\n"\n\n'
                '#: a.c:1\nmsgid "File"\nmsgstr "文件"\n\nmsgid "Open the file"\nmsgstr ""\n')
        with open(src, "wb") as f:
            f.write(text.encode("gb2312"))
        po("translate", src, "--model", TINY_MODEL, "--out", self.path("out.po"))
        with open(self.path("out.po"), "rb") as f:
            raw = f.read()
        decoded = raw.decode("gb2312")  # raises if any byte is not GB2312
        head = text[: text.index('msgid "Open')]
        self.assertTrue(decoded.startswith(head))
        self.assertEqual(polib.pofile(self.path("out.po")).find("File").msgstr, "文件")


class CorpusProtectedForm(unittest.TestCase):
    """corpus gettext --protected writes the pairs as po translate will ask the model, and
    corpus gettext reports the pairs carrying each kind of span."""

    def test_protected_pairs_and_the_kinds_report(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "zh_CN"))
            with open(os.path.join(d, "zh_CN", "demo.po"), "w", encoding="utf-8") as f:
                f.write('msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                        'msgid "Results:"\nmsgstr "结果："\n\n'
                        'msgid "Run --help for in_arcnet"\nmsgstr "运行 --help 查看 in_arcnet"\n\n'
                        'msgid "_Open %s"\nmsgstr "打开 %s(_O)"\n\n'
                        'msgid "Run --verbose"\nmsgstr "详细运行"\n')
            out = {}
            for flag in ([], ["--protected"]):
                tsv = os.path.join(d, "out.tsv")
                p = subprocess.run([BIN, "corpus", "gettext", "--no-system", "--root", d, "--out", tsv,
                                    *flag], capture_output=True, text=True, check=True)
                with open(tsv, encoding="utf-8") as f:
                    out[bool(flag)] = sorted(line.rstrip("\n").split("\t") for line in f)
                self.assertIn("1 with an accelerator (removed)", p.stdout)
                self.assertIn("carrying: 1 placeholder 2 option 1 identifier", p.stdout)
            self.assertIn(["Results:", "结果："], out[False])
            self.assertEqual(out[True], [["Open %s", "打开 %s"], ["Results", "结果"],
                                         ["Run %s for %s", "运行 %s 查看 %s"],
                                         ["Run --verbose", "详细运行"]])  # no span in the target: as is


# A model that writes German or Russian, small and barely trained: the checks below are on the
# catalog's structure (forms, numbers, accelerators), which holds whatever the model writes.
TINY_PAIRS = {
    "de": [("Open the file", "Datei öffnen"), ("Exit", "Beenden"), ("%d file", "%d Datei"),
           ("%d files", "%d Dateien"), ("Save", "Speichern"), ("Close", "Schließen")],
    "ru": [("Open the file", "Открыть файл"), ("Exit", "Выход"), ("%d file", "%d файл"),
           ("%d files", "%d файлов"), ("Save", "Сохранить"), ("Close", "Закрыть")],
}
HEADERS = {
    "de": "nplurals=2; plural=(n != 1);",
    "ru": "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && "
          "(n%100<10 || n%100>=20) ? 1 : 2);",
}


class PoTranslateOtherLanguages(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="attnkit_po_lang_")
        cls.models = {}
        for lang, pairs in TINY_PAIRS.items():
            tsv = os.path.join(cls.dir, lang + ".tsv")
            with open(tsv, "w", encoding="utf-8") as f:
                f.writelines("%s\t%s\n" % p for p in pairs * 4)
            model = os.path.join(cls.dir, "model-" + lang)
            subprocess.run([BIN, "--threads", "1", "train", "--train", tsv, "--model-dir", model,
                            "--target-lang", lang, "--source-tokenizer", "en-lower",
                            "--target-tokenizer", "en", "--embed", "16", "--hidden", "16",
                            "--max-steps", "200", "--lr", "0.01", "--quiet"], check=True, capture_output=True)
            cls.models[lang] = model

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def translate(self, lang, entries, header=None):
        pot = os.path.join(self.dir, "in-%s.pot" % lang)
        with open(pot, "w", encoding="utf-8") as f:
            f.write('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
                    '"Plural-Forms: %s\\n"\n\n' % (header or HEADERS[lang]) + entries)
        out = os.path.join(self.dir, "out-%s.po" % lang)
        if os.path.exists(out):
            os.remove(out)
        p = po("translate", pot, "--model", self.models[lang], "--out", out, "--lang", lang,
               check=False)
        return p, out

    ENTRIES = ('msgid "_Open"\nmsgstr ""\n\n'
               'msgid "E_xit"\nmsgstr ""\n\n'
               '#, c-format\nmsgid "%d file"\nmsgid_plural "%d files"\nmsgstr[0] ""\nmsgstr[1] ""\n\n'
               '#, c-format\nmsgid "One file"\nmsgid_plural "%d files"\nmsgstr[0] ""\nmsgstr[1] ""\n')

    def check_with_msgfmt(self, out):
        check = subprocess.run(["msgfmt", "--check", "--check-accelerators=_", "--use-fuzzy",
                                "-o", os.devnull, out], capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stderr)

    def test_german_plurals_and_inline_accelerators(self):
        p, out = self.translate("de", self.ENTRIES)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_with_msgfmt(out)
        catalog = polib.pofile(out)
        for e in catalog:
            if e.msgid_plural:
                self.assertEqual(sorted(e.msgstr_plural), [0, 1])
                self.assertIn("%d", e.msgstr_plural[1], e.msgid)
                if "%d" in e.msgid:
                    self.assertIn("%d", e.msgstr_plural[0], e.msgid)
            else:
                # German translators put the marker inside the label, not "(_O)" after it.
                self.assertNotIn("(_", e.msgstr, e.msgid)
                self.assertEqual(e.msgstr.count("_"), 1, e.msgstr)
                self.assertRegex(e.msgstr, r"_\w", e.msgstr)

    def test_russian_forms_all_keep_the_number(self):
        p, out = self.translate("ru", self.ENTRIES.replace('msgstr[1] ""\n', 'msgstr[1] ""\nmsgstr[2] ""\n'))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_with_msgfmt(out)
        for e in polib.pofile(out):
            if e.msgid_plural:
                self.assertEqual(sorted(e.msgstr_plural), [0, 1, 2])
                # Form 0 also serves 21, 31, ...: even "One file"'s keeps the number.
                for form in range(3):
                    self.assertIn("%d", e.msgstr_plural[form], (e.msgid, form))

    def test_refresh_fuzzy_carries_cosmetic_changes_that_msgmerge_marked(self):
        # A German catalog, and the package's new template: one English change of each kind.
        old, pot, merged = (os.path.join(self.dir, n) for n in ("old.po", "new.pot", "merged.po"))
        header = ('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
                  '"Language: de\\n"\n"Plural-Forms: %s\\n"\n\n' % HEADERS["de"])
        with open(old, "w", encoding="utf-8") as f:
            f.write(header + 'msgid "Open"\nmsgstr "Öffnen"\n\n'
                    '#, c-format\nmsgid "%s of %s"\nmsgstr "%s von %s"\n\n'
                    'msgid "Save"\nmsgstr "Speichern"\n\n'
                    'msgid "Close the file"\nmsgstr "Datei schließen"\n\n'
                    '#, c-format\nmsgid "%d file"\nmsgid_plural "%d files"\n'
                    'msgstr[0] "%d Datei"\nmsgstr[1] "%d Dateien"\n')
        with open(pot, "w", encoding="utf-8") as f:
            f.write(header + 'msgid "Open..."\nmsgstr ""\n\n'
                    '#, c-format\nmsgid "%1$s of %2$s"\nmsgstr ""\n\n'
                    'msgid "_Save"\nmsgstr ""\n\n'
                    'msgid "Close the window"\nmsgstr ""\n\n'
                    '#, c-format\nmsgid "%ld file"\nmsgid_plural "%ld files"\n'
                    'msgstr[0] ""\nmsgstr[1] ""\n')
        subprocess.run(["msgmerge", "--previous", "-q", old, pot, "-o", merged], check=True)
        self.assertEqual(sum("fuzzy" in e.flags for e in polib.pofile(merged)), 5)

        # Without --refresh-fuzzy the fuzzy entries are left as they are.
        out = os.path.join(self.dir, "refreshed.po")
        po("translate", merged, "--model", self.models["de"], "--out", out)
        with open(merged, "rb") as a, open(out, "rb") as b:
            self.assertEqual(a.read(), b.read())

        p = po("translate", merged, "--model", self.models["de"], "--out", out, "--refresh-fuzzy")
        self.assertIn("4 carried over, 1 suggested anew", p.stderr)
        self.check_with_msgfmt(out)
        catalog = polib.pofile(out)
        carried = {"Open...": "Öffnen...", "%1$s of %2$s": "%1$s von %2$s", "_Save": "_Speichern"}
        for msgid, msgstr in carried.items():
            e = catalog.find(msgid)
            self.assertEqual(e.msgstr, msgstr)
            self.assertNotIn("fuzzy", e.flags)
            self.assertIsNone(e.previous_msgid)
            self.assertIn("attnkit: carried over from the previous msgid", e.tcomment)
        plural = catalog.find("%ld file")
        self.assertEqual(plural.msgstr_plural, {0: "%ld Datei", 1: "%ld Dateien"})
        self.assertIn("c-format", plural.flags)
        self.assertNotIn("fuzzy", plural.flags)
        # A word changed: a new suggestion, still fuzzy, the old translation in a comment.
        changed = catalog.find("Close the window")
        self.assertIn("fuzzy", changed.flags)
        self.assertEqual(changed.previous_msgid, "Close the file")
        self.assertIn("attnkit: machine translation", changed.tcomment)
        self.assertIn('whose translation was "Datei schließen"', changed.tcomment)

    def test_a_calibrated_confidence_is_written_and_acted_on(self):
        model = os.path.join(self.dir, "model-de-calibrated")
        shutil.copytree(self.models["de"], model)
        pairs = os.path.join(self.dir, "de.tsv")
        p = subprocess.run([BIN, "--threads", "1", "calibrate", "--model", model, "--valid", pairs,
                            "--test", pairs, "--format", "json"],
                           capture_output=True, text=True, check=True)
        report = json.loads(p.stdout)
        with open(os.path.join(model, "confidence.json")) as f:
            self.assertEqual(json.load(f)["pairs"], 24)
        for part in ("fit", "test"):
            quarters = report[part]["quarters"]
            self.assertEqual(sum(q["pairs"] for q in quarters), 24)
            means = [q["mean_confidence"] for q in quarters]
            self.assertEqual(means, sorted(means))  # lowest first
            self.assertTrue(-1 <= report[part]["pearson"] <= 1)

        # translate --format json gives each translation's.
        p = subprocess.run([BIN, "--threads", "1", "translate", "--model", model, "--format", "json"],
                           input="Open the file\nExit\n", capture_output=True, text=True, check=True)
        for line in p.stdout.splitlines():
            self.assertTrue(0 <= json.loads(line)["confidence"] <= 1, line)

        # Each model suggestion's comment carries its confidence.
        pot = os.path.join(self.dir, "confidence.pot")
        with open(pot, "w", encoding="utf-8") as f:
            f.write('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
                    '"Plural-Forms: %s\\n"\n\n' % HEADERS["de"] + self.ENTRIES)
        out = os.path.join(self.dir, "confidence.po")
        po("translate", pot, "--model", model, "--out", out, "--lang", "de", "--no-memory")
        found = [re.search(r"attnkit: machine translation, confidence (\d\.\d\d)", e.tcomment)
                 for e in polib.pofile(out)]
        self.assertTrue(all(found), [e.tcomment for e in polib.pofile(out)])
        self.assertEqual(len(found), 4)
        # Above the highest, every suggestion is left untranslated.
        threshold = min(1.0, max(float(m.group(1)) for m in found) + 0.01)
        p = po("translate", pot, "--model", model, "--out", out, "--lang", "de", "--no-memory",
               "--min-confidence", str(threshold))
        self.assertIn("4 more left untranslated under --min-confidence", p.stderr)
        self.assertTrue(all(not e.translated() for e in polib.pofile(out)))
        # A model never calibrated has no confidence to act on.
        p = po("translate", pot, "--model", self.models["de"], "--out", out, "--lang", "de",
               "--min-confidence", "0.5", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--min-confidence needs the model's confidence.json", p.stderr)

    def test_a_broken_plural_forms_header_is_refused_with_file_and_line(self):
        for header, why in (("nplurals=0; plural=0;", "outside 1..32"),
                            ("nplurals=2; plural=(n%0);", "divides by zero"),
                            ("nplurals=100000000; plural=0;", "outside 1..32")):
            p, out = self.translate("de", self.ENTRIES, header=header)
            self.assertNotEqual(p.returncode, 0, header)
            self.assertIn("in-de.pot:4: Plural-Forms", p.stderr)  # the header's line of it
            self.assertIn(why, p.stderr)
            self.assertFalse(os.path.exists(out))


class PoCheck(unittest.TestCase):
    HEADER = ('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
              '"Language: {lang}\\n"\n"Plural-Forms: {forms}\\n"\n\n')

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="attnkit_po_check_")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def catalog(self, name, forms, body, lang="de"):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.HEADER.format(lang=lang, forms=forms) + body)
        return path

    def test_a_catalog_that_cannot_be_read_is_reported_and_the_rest_are_checked(self):
        # Line 7: a translation identical to its English source.
        findings = self.catalog("a.po", "nplurals=2; plural=(n != 1);",
                                'msgid "Open the file"\nmsgstr "Open the file"\n')
        # msgfmt --check accepts a misspelt nplurals in a catalog without plural entries.
        misspelt = self.catalog("b.po", "nulurals=1; plural=0;",
                                'msgid "Open the file"\nmsgstr "ファイルを開く"\n', lang="ja")
        broken = self.catalog("c.po", "nplurals=2; plural=(n%0);",
                              'msgid "One file"\nmsgid_plural "%d files"\n'
                              'msgstr[0] "Eine Datei"\nmsgstr[1] "%d Dateien"\n')
        for path, rc in ((findings, 1), (misspelt, 0), (broken, 1)):
            gettext = subprocess.run(["msgfmt", "--check", "-o", os.devnull, path],
                                     capture_output=True, text=True)
            self.assertEqual(gettext.returncode != 0, path == broken, gettext.stderr)
        self.assertEqual(po("check", misspelt).returncode, 0)
        p = po("check", findings, broken, misspelt, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(broken + ":5: Plural-Forms", p.stderr)
        self.assertIn("1 catalog not read", p.stderr)
        self.assertEqual([line.split(": ")[:2] for line in p.stdout.splitlines()],
                         [[findings + ":7", "identical"]])


if __name__ == "__main__":
    unittest.main()
