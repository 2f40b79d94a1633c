#!/usr/bin/python3
"""`attnkit corpus debian` end to end on an archive of its own: packages made with dpkg-deb,
catalogs compiled by msgfmt, a Contents index and a Release file, served to apt from a file:
repository through APT_CONFIG (nothing is downloaded from the network). apt-get, apt-helper,
dpkg-deb and tar are the real ones.
Run: ATTNKIT_BIN=build/attnkit /usr/bin/python3 tests/cli/test_corpus_debian.py
"""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("ATTNKIT_BIN", os.path.join(HERE, "..", "..", "build", "attnkit"))

HEADER = ('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset={charset}\\n"\n'
          '"Plural-Forms: nplurals={n}; plural={rule};\\n"\n\n')


def po_text(messages, charset="UTF-8", nplurals=2, rule="(n != 1)"):
    out = HEADER.format(charset=charset, n=nplurals, rule=rule)
    for m in messages:
        if len(m) == 3:  # msgid, msgid_plural, [forms]
            out += 'msgid "%s"\nmsgid_plural "%s"\n' % (m[0], m[1])
            out += "".join('msgstr[%d] "%s"\n' % (i, f) for i, f in enumerate(m[2])) + "\n"
        else:
            out += 'msgid "%s"\nmsgstr "%s"\n\n' % m
    return out


# name -> (arch, {lang: [messages]}, extra files); every catalog is the domain <name>.mo.
PACKAGES = {
    "app-one": ("amd64", {"de": [("Open", "Öffnen"), ("Close", "Schließen"), ("OK", "OK"),
                                 ("%d file", "%d files", ["%d Datei", "%d Dateien"])],
                          "zh_CN": [("Open", "打开"), ("Close", "Close")]}, {}),
    "app-two": ("amd64", {"de": [("Open", "Öffnen"), ("_Save", "_Speichern"),
                                 ("Print %s", "Drucken")],
                          "zh_CN": [("Open", "打开"), ("_Save", "保存(_S)")]}, {}),
    "legacy": ("all", {"de": [("Quit", "Beenden"), ("Size", "Größe")]}, {"charset": "ISO-8859-1"}),
    "suite-l10n-de": ("all", {"de": [("Help", "Hilfe"), ("Edit", "Bearbeiten")]}, {}),
    "gimp-test": ("amd64", {"de": [("Open", "Öffnen"), ("Layer", "Ebene")]}, {"link": True}),
    "big-app": ("amd64", {"de": [("Zoom", "Vergrößern")]}, {"padding": 200000}),
}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def build_archive(root):
    """A flat repository with Packages, Contents-amd64 and a Release listing their hashes."""
    repo = os.path.join(root, "repo")
    os.makedirs(repo)
    stanzas, contents = [], []
    for name, (arch, langs, extra) in sorted(PACKAGES.items()):
        tree = os.path.join(root, "build", name)
        os.makedirs(os.path.join(tree, "DEBIAN"))
        for lang, messages in langs.items():
            folder = os.path.join(tree, "usr/share/locale", lang, "LC_MESSAGES")
            os.makedirs(folder)
            po = os.path.join(root, name + "." + lang + ".po")
            charset = extra.get("charset", "UTF-8")
            with open(po, "w", encoding="latin-1" if charset != "UTF-8" else "utf-8") as f:
                f.write(po_text(messages, charset=charset))
            subprocess.run(["msgfmt", "-o", os.path.join(folder, name + ".mo"), po], check=True)
            contents.append(("usr/share/locale/%s/LC_MESSAGES/%s.mo" % (lang, name), name))
            if extra.get("link"):  # the same catalog again under another name, as a symlink
                os.symlink(name + ".mo", os.path.join(folder, "alias.mo"))
                contents.append(("usr/share/locale/%s/LC_MESSAGES/alias.mo" % lang, name))
        if extra.get("padding"):
            with open(os.path.join(tree, "usr/share/locale/padding.bin"), "wb") as f:
                f.write(os.urandom(extra["padding"]))
        with open(os.path.join(tree, "DEBIAN/control"), "w") as f:
            f.write(textwrap.dedent("""\
                Package: %s
                Version: 1:1.0-1
                Architecture: %s
                Maintainer: attnkit tests <tests@example.org>
                Description: a package for attnkit's tests
                """ % (name, arch)))
        deb = os.path.join(repo, "%s_1.0-1_%s.deb" % (name, arch))
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", tree, deb],
                       check=True, capture_output=True)
        control = subprocess.run(["dpkg-deb", "-f", deb], check=True, capture_output=True,
                                 text=True).stdout
        stanzas.append(control.rstrip("\n") + "\nFilename: ./%s\nSize: %d\nSHA256: %s\n" % (
            os.path.basename(deb), os.path.getsize(deb), sha256(deb)))
    indexes = {
        "Packages": "\n".join(stanzas),
        "Contents-amd64": "".join("%-60s misc/%s\n" % c for c in sorted(contents)),
    }
    release = "Origin: attnkit-tests\nLabel: attnkit-tests\nArchitectures: amd64 all\nSHA256:\n"
    for name, text in indexes.items():
        with open(os.path.join(repo, name), "w") as f:
            f.write(text)
        release += " %s %d %s\n" % (sha256(os.path.join(repo, name)), len(text.encode()), name)
    with open(os.path.join(repo, "Release"), "w") as f:
        f.write(release)
    return repo


def apt_config(root, repo, contents=True):
    """An apt configuration of its own: this repository only, state and cache under root."""
    for d in ("etc/parts", "etc/sources.d", "lists/partial", "cache/archives/partial"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, "etc/sources.list"), "w") as f:
        f.write("deb [trusted=yes] file:%s ./\n" % repo)
    open(os.path.join(root, "status"), "w").close()
    target = textwrap.dedent("""\
        Acquire::IndexTargets::deb::Contents-deb {
          MetaKey "$(COMPONENT)/Contents-$(ARCHITECTURE)";
          flatMetaKey "Contents-$(ARCHITECTURE)";
          ShortDescription "Contents-$(ARCHITECTURE)";
          Description "$(RELEASE)/$(COMPONENT) $(ARCHITECTURE) Contents (deb)";
          flatDescription "$(RELEASE) Contents (deb)";
        };
        """) if contents else ""
    config = os.path.join(root, "apt.conf")
    with open(config, "w") as f:
        f.write(textwrap.dedent("""\
            Dir::Etc::SourceList "{r}/etc/sources.list";
            Dir::Etc::SourceParts "{r}/etc/sources.d";
            Dir::Etc::Parts "{r}/etc/parts";
            Dir::State::Lists "{r}/lists";
            Dir::State::status "{r}/status";
            Dir::Cache "{r}/cache";
            APT::Architecture "amd64";
            APT::Sandbox::User "root";
            Debug::NoLocking "true";
            """).format(r=root) + target)
    env = dict(os.environ, APT_CONFIG=config)
    subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, capture_output=True)
    return env


class CorpusDebian(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="attnkit_debian_")
        cls.repo = build_archive(cls.root)
        cls.env = apt_config(os.path.join(cls.root, "apt"), cls.repo)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="run_", dir=self.root)
        self.cache = os.path.join(self.dir, "cache")

    def corpus(self, *args, lang="de", env=None, check=True):
        p = subprocess.run([BIN, "corpus", "debian", "--lang", lang, "--out",
                            os.path.join(self.dir, "out"), "--cache", self.cache, "--quiet",
                            *args], capture_output=True, text=True, env=env or self.env)
        if check and p.returncode != 0:
            raise AssertionError("corpus debian failed:\n" + p.stdout + p.stderr)
        return p

    def read(self, name):
        with open(os.path.join(self.dir, "out", name), encoding="utf-8") as f:
            return [line.rstrip("\n").split("\t") for line in f]

    def manifest(self):
        with open(os.path.join(self.dir, "out", "manifest.json")) as f:
            return json.load(f)

    def test_builds_the_corpus_with_a_manifest_and_held_out_packages(self):
        self.corpus("--test", "gimp*", "--valid-pairs", "0")
        train = {(r[0], r[1]): (int(r[2]), r[3]) for r in self.read("train.tsv")}
        self.assertEqual(train[("Open", "Öffnen")], (2, "app-one"))  # two catalogs, once
        self.assertIn(("Save", "Speichern"), train)              # accelerators removed
        self.assertIn(("Size", "Größe"), train)                  # ISO-8859-1 read right
        self.assertIn(("%d files", "%d Dateien"), train)         # the plural's second form
        self.assertNotIn(("OK", "OK"), train)                    # identical
        self.assertFalse(any(s == "Print %s" for s, _ in train))  # placeholders differ
        self.assertFalse(any(v[1] == "gimp-test" for v in train.values()))
        test = self.read("test.tsv")
        self.assertEqual(test, [["Layer", "Ebene", "1", "gimp-test"]])  # "Open" is trained on
        m = self.manifest()
        self.assertEqual(m["lang"], "de")
        by_name = {p["package"]: p for p in m["packages"]}
        self.assertEqual(sorted(by_name), sorted(n for n in PACKAGES if "de" in PACKAGES[n][1]))
        gimp = by_name["gimp-test"]
        self.assertEqual(gimp["version"], "1:1.0-1")
        self.assertEqual(len(gimp["sha256"]), 64)
        # The symlinked alias is not read a second time.
        self.assertEqual([c["path"] for c in gimp["catalogs"]],
                         ["usr/share/locale/de/LC_MESSAGES/gimp-test.mo"])
        self.assertEqual(by_name["app-one"]["catalogs"][0]["pairs"], 4)
        s = m["summary"]["skipped"]
        self.assertEqual((s["identical"], s["placeholder_mismatch"], s["seen_in_train"]), (1, 1, 1))
        self.assertEqual(m["test_packages"], ["gimp-test"])
        self.assertEqual(m["summary"]["pairs"]["train"], len(train))

    def test_budget_takes_translation_packages_first_and_exclude_leaves_packages_out(self):
        self.corpus("--max-download", "12kB", "--exclude", "legacy", "--valid-pairs", "0")
        m = self.manifest()
        chosen = [p["package"] for p in m["packages"]]
        self.assertIn("suite-l10n-de", chosen)
        self.assertNotIn("big-app", chosen)  # 200 kB of padding for one catalog
        self.assertIn("big-app", m["over_budget"])
        self.assertEqual(m["excluded"], ["legacy"])
        self.assertLessEqual(sum(p["size"] for p in m["packages"]), 12000)

    def test_a_second_run_downloads_nothing_and_a_half_written_file_is_not_taken(self):
        self.corpus("--valid-pairs", "0")
        debs = sorted(f for f in os.listdir(self.cache) if f.endswith(".deb"))
        self.assertEqual(len(debs), 6)
        stamps = {f: os.stat(os.path.join(self.cache, f)).st_mtime_ns for f in debs}
        # An interrupted download: half a file in partial/, and one whole package gone.
        victim = os.path.join(self.cache, debs[0])
        with open(victim, "rb") as f:
            half = f.read()[: os.path.getsize(victim) // 2]
        os.remove(victim)
        with open(os.path.join(self.cache, "partial", debs[0]), "wb") as f:
            f.write(half)
        before = self.read("train.tsv")
        self.corpus("--valid-pairs", "0")
        self.assertEqual(self.read("train.tsv"), before)
        for f in debs[1:]:
            self.assertEqual(os.stat(os.path.join(self.cache, f)).st_mtime_ns, stamps[f], f)
        # apt names the cached file with the epoch ("1%3a1.0-1"), the pool without it.
        self.assertEqual(sha256(victim), sha256(os.path.join(self.repo, debs[0].replace("1%3a", ""))))
        self.assertEqual(os.listdir(os.path.join(self.cache, "partial")), [])

    def test_script_filter_drops_english_left_in_a_zh_CN_catalog(self):
        self.corpus("--valid-pairs", "0", lang="zh_CN")
        train = {(r[0], r[1]) for r in self.read("train.tsv")}
        self.assertEqual(train, {("Open", "打开"), ("Save", "保存")})
        m = self.manifest()
        self.assertEqual(m["summary"]["skipped"]["identical"], 1)  # Close -> Close
        self.assertEqual(sorted(p["package"] for p in m["packages"]), ["app-one", "app-two"])

    def test_validation_set_is_whole_packages_whose_english_training_lacks(self):
        self.corpus("--valid-pairs", "1", "--test", "gimp*")
        m = self.manifest()
        self.assertTrue(m["valid_packages"])
        train = self.read("train.tsv")
        valid = self.read("valid.tsv")
        self.assertTrue(valid)
        trained = {r[0] for r in train}
        for r in valid:
            self.assertIn(r[3], m["valid_packages"])
            self.assertNotIn(r[0], trained)
        self.assertFalse(any(r[3] in m["valid_packages"] for r in train))

    def test_clear_errors_for_an_unknown_language_no_index_and_a_failed_download(self):
        p = self.corpus(lang="xx_YY", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("no package in apt's Contents index carries gettext catalogs for 'xx_YY'",
                      p.stderr)
        no_index = apt_config(os.path.join(self.dir, "apt-no-contents"), self.repo, contents=False)
        p = self.corpus(env=no_index, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("apt has no Contents index", p.stderr)
        self.assertIn("apt-file", p.stderr)
        # The archive goes away mid-way: apt's reason, what is kept, how to go on.
        gone = os.path.join(self.repo, "legacy_1.0-1_all.deb")
        os.rename(gone, gone + ".away")
        try:
            p = self.corpus(check=False)
        finally:
            os.rename(gone + ".away", gone)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("apt-get download failed", p.stderr)
        self.assertIn("run the command again", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "out", "train.tsv")))
        self.corpus("--valid-pairs", "0")  # and the rerun completes


if __name__ == "__main__":
    unittest.main(verbosity=2)
