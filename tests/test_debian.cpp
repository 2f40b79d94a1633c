// Debian's archive as a corpus: the Contents index, apt's --print-uris lines, the download
// budget's choice, the script and length-ratio filters, and the corpus built from catalogs
// (held-out packages, counts, the English training has). End to end, with a small archive of
// packages made by dpkg-deb: tests/cli/test_corpus_debian.py.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "attnkit/core/error.h"
#include "attnkit/core/process.h"
#include "attnkit/data/archive_corpus.h"
#include "attnkit/data/debian.h"
#include "attnkit/data/gettext.h"
#include "attnkit/data/pair_filters.h"
#include "testing.h"

namespace attnkit::data {
namespace {

using debian::Package;

TEST(DebianContents, FindsTheLanguagesCatalogsAndEveryPackageThatShipsThem) {
  debian::CatalogIndex index;
  for (const char* line : {
           "usr/share/locale/de/LC_MESSAGES/coreutils.mo               utils/coreutils",
           "usr/share/locale/de_AT/LC_MESSAGES/coreutils.mo            utils/coreutils",
           "usr/share/locale/de/LC_MESSAGES/shared.mo  gnome/a,contrib/kde/b",
           "usr/share/locale/de/LC_MESSAGES/sub/nested.mo              utils/c",
           "usr/share/locale/de/LC_MESSAGES/help.qm                    utils/d",
           "usr/share/my app/locale/de/LC_MESSAGES/spaced.mo           utils/e",
           "usr/lib/libreoffice/program/resource/de/LC_MESSAGES/sw.mo  editors/libreoffice-l10n-de",
           "usr/share/locale/sr@latin/LC_MESSAGES/x.mo                 utils/f",
           "usr/share/doc/de/LC_MESSAGES.txt                           doc/g",
       })
    debian::add_contents_line(line, "de", index);
  ASSERT_EQ(index.size(), 5u);
  EXPECT_EQ(index["coreutils"],
            std::vector<std::string>{"usr/share/locale/de/LC_MESSAGES/coreutils.mo"});
  EXPECT_EQ(index["a"], std::vector<std::string>{"usr/share/locale/de/LC_MESSAGES/shared.mo"});
  EXPECT_EQ(index["b"], index["a"]);  // the area/section prefix is dropped
  EXPECT_EQ(index["e"],
            std::vector<std::string>{"usr/share/my app/locale/de/LC_MESSAGES/spaced.mo"});
  EXPECT_EQ(index.count("libreoffice-l10n-de"), 1u);
  EXPECT_TRUE(debian::is_catalog_of("usr/share/locale/sr@latin/LC_MESSAGES/x.mo", "sr@latin"));
  EXPECT_FALSE(debian::is_catalog_of("usr/share/locale/sr@latin/LC_MESSAGES/x.mo", "sr"));
  EXPECT_FALSE(debian::is_catalog_of("usr/share/locale/pt_BR/LC_MESSAGES/x.mo", "BR"));
}

TEST(DebianContents, ParsesAptsPrintUrisLines) {
  Package p;
  ASSERT_TRUE(debian::parse_print_uris_line(
      "'http://deb.debian.org/debian/pool/main/libr/libreoffice/"
      "libreoffice-l10n-de_7.4.7-1%2bdeb12u14_all.deb' "
      "libreoffice-l10n-de_4%3a7.4.7-1+deb12u14_all.deb 861940 SHA256:aee22c8e3b",
      p));
  EXPECT_EQ(p.name, "libreoffice-l10n-de");
  EXPECT_EQ(p.version, "4:7.4.7-1+deb12u14");  // the epoch's colon, unescaped
  EXPECT_EQ(p.arch, "all");
  EXPECT_EQ(p.filename, "libreoffice-l10n-de_4%3a7.4.7-1+deb12u14_all.deb");
  EXPECT_EQ(p.size, 861940u);
  EXPECT_EQ(p.sha256, "aee22c8e3b");
  EXPECT_FALSE(debian::parse_print_uris_line("Reading package lists...", p));
  EXPECT_FALSE(debian::parse_print_uris_line("'http://x/y.deb' y.deb 12 MD5Sum:00", p));
}

Package package(const std::string& name, uint64_t size, size_t catalogs) {
  Package p;
  p.name = name;
  p.size = size;
  p.catalogs.assign(catalogs, "c.mo");
  return p;
}

TEST(DebianSelection, TranslationPackagesFirstThenCatalogsPerByteWithinTheBudget) {
  const std::vector<Package> all = {package("big-app", 1000, 1), package("dense", 100, 5),
                                    package("thunderbird-l10n-de", 900, 2),
                                    package("sparse", 500, 1), package("tiny", 50, 1)};
  std::vector<Package> left;
  const auto chosen = debian::select_packages(all, 1100, &left);
  std::vector<std::string> names, left_names;
  for (const auto& p : chosen) names.push_back(p.name);
  for (const auto& p : left) left_names.push_back(p.name);
  // l10n (900), then dense (5/100: 1000 in all), tiny (1/50: 1050); sparse and big-app don't fit.
  EXPECT_EQ(names, (std::vector<std::string>{"dense", "thunderbird-l10n-de", "tiny"}));
  EXPECT_EQ(left_names, (std::vector<std::string>{"big-app", "sparse"}));
  EXPECT_EQ(debian::select_packages(all, 0).size(), all.size());  // no budget: everything
  EXPECT_TRUE(debian::matches_any("gimp-data", {"foo", "gimp*"}));
  EXPECT_FALSE(debian::matches_any("libgimp2.0", {"gimp*"}));
}

TEST(PairFilters, ScriptOfTheLanguageFromIcu) {
  const ScriptCheck zh("zh_CN"), ja("ja"), ru("ru"), de("de"), sr_latin("sr@latin");
  EXPECT_TRUE(zh.applies());
  EXPECT_TRUE(zh.accepts("打开 GTK+ 文件"));
  EXPECT_FALSE(zh.accepts("Open the file"));  // English left in a zh_CN catalog
  EXPECT_FALSE(zh.accepts("%s: %d"));
  EXPECT_TRUE(ja.accepts("ファイル"));
  EXPECT_TRUE(ja.accepts("開く"));
  EXPECT_TRUE(ru.accepts("Открыть файл"));
  EXPECT_FALSE(ru.accepts("Open file"));
  EXPECT_FALSE(de.applies());  // Latin letters: nothing to tell English by
  EXPECT_TRUE(de.accepts("Open file"));
  EXPECT_FALSE(sr_latin.applies());  // gettext's @latin is ICU's Latn
}

TEST(PairFilters, LengthRatioAgainstTheMedian) {
  std::vector<Pair> pairs;
  for (int i = 0; i < 9; ++i)
    pairs.push_back(
        {"a sentence of some length " + std::to_string(i), "eine Satz von Länge xxxxx"});
  pairs.push_back({"a sentence of some length x", "x"});  // 27 chars -> 1
  pairs.push_back({"a sentence of some length y", std::string(200, 'y')});
  pairs.push_back({"Short", std::string(40, 'z')});  // short sources are kept
  EXPECT_NEAR(median_length_ratio(pairs), 25.0 / 27, 1e-9);
  EXPECT_EQ(filter_length_ratio(pairs, 3), 2u);
  EXPECT_EQ(pairs.size(), 10u);
  EXPECT_EQ(pairs.back().source, "Short");
}

// A little-endian .mo file of (msgid, msgstr) pairs, as msgfmt writes it (without the hash).
void write_mo(const std::string& path, std::vector<std::pair<std::string, std::string>> messages) {
  std::sort(messages.begin(), messages.end());
  const uint32_t n = static_cast<uint32_t>(messages.size()), originals = 28,
                 translations = originals + 8 * n;
  std::string strings;
  std::vector<uint32_t> table;
  uint32_t offset = translations + 8 * n;
  auto add = [&](const std::string& s) {
    table.push_back(static_cast<uint32_t>(s.size()));
    table.push_back(offset + static_cast<uint32_t>(strings.size()));
    strings += s + '\0';
  };
  for (const auto& m : messages) add(m.first);
  for (const auto& m : messages) add(m.second);
  std::vector<uint32_t> header = {0x950412de, 0, n, originals, translations, 0, 0};
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 28);
  out.write(reinterpret_cast<const char*>(table.data()), static_cast<long>(table.size() * 4));
  out << strings;
}

const std::string kHeader =
    "Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2; plural=(n != 1);\n";

TEST(ArchiveCorpus, CountsSharedMessagesAndHoldsOutWholePackagesTrainingNeverSaw) {
  testing::ScratchDir dir("archive_corpus");
  auto catalog = [&](const std::string& package,
                     std::vector<std::pair<std::string, std::string>> messages) {
    messages.push_back({"", kHeader});
    const auto file = (dir / (package + ".mo")).string();
    write_mo(file, messages);
    return PackageCatalog{package, "1.0", "usr/share/locale/de/LC_MESSAGES/" + package + ".mo",
                          file};
  };
  const std::vector<PackageCatalog> catalogs = {
      catalog("alpha", {{"Open", "Öffnen"}, {"Close", "Schließen"}, {"OK", "OK"}}),
      catalog("beta", {{"Open", "Öffnen"}, {"_Save", "_Speichern"}, {"Print %s", "Drucken"}}),
      catalog("gimp-test", {{"Open", "Öffnen"}, {"Layer", "Ebene"}}),
      catalog("valid-one", {{"Quit", "Beenden"}, {"Close", "Schließen"}}),
  };
  ArchiveCorpusOptions options;
  options.lang = "de";
  options.test_packages = {"gimp*"};
  options.valid_pairs = 1;
  options.seed = 3;
  ArchiveReport report;
  const auto corpus = build_archive_corpus(catalogs, options, report);
  EXPECT_EQ(report.gettext.catalogs, 4u);
  EXPECT_EQ(report.gettext.identical, 1u);             // OK -> OK
  EXPECT_EQ(report.gettext.placeholder_mismatch, 1u);  // Print %s -> Drucken
  EXPECT_EQ(report.catalog_pairs, (std::vector<size_t>{2, 2, 2, 2}));
  ASSERT_EQ(report.test_packages, std::vector<std::string>{"gimp-test"});
  ASSERT_EQ(report.valid_packages.size(), 1u);
  // Whichever package validates, its pairs are absent from training and have English training
  // does not have; the test package keeps only "Layer" ("Open" is trained on).
  ASSERT_EQ(corpus.test.size(), 1u);
  EXPECT_EQ(corpus.test[0].pair.source, "Layer");
  EXPECT_EQ(corpus.test[0].package, "gimp-test");
  std::set<std::string> train_sources;
  for (const auto& c : corpus.train) train_sources.insert(c.pair.source);
  for (const auto& c : corpus.valid) {
    EXPECT_EQ(c.package, report.valid_packages[0]);
    EXPECT_EQ(train_sources.count(c.pair.source), 0u) << c.pair.source;
  }
  ASSERT_FALSE(corpus.valid.empty());
  for (const auto& c : corpus.train) {
    EXPECT_NE(c.package, report.valid_packages[0]);
    EXPECT_NE(c.package, "gimp-test");
    if (c.pair.source == "Open") EXPECT_EQ(c.count, report.valid_packages[0] == "beta" ? 1u : 2u);
    if (c.pair.source == "Save") EXPECT_EQ(c.pair.target, "Speichern");  // accelerators removed
  }
  // Another seed, the same corpus: the choice is a function of the seed.
  ArchiveReport again;
  build_archive_corpus(catalogs, options, again);
  EXPECT_EQ(again.valid_packages, report.valid_packages);
}

TEST(Gettext, MoInALegacyCharsetIsReadAsUtf8) {
  testing::ScratchDir dir("mo_latin1");
  const auto file = (dir / "latin1.mo").string();
  write_mo(file, {{"", "Content-Type: text/plain; charset=ISO-8859-1\n"},
                  {"Close", std::string("Schlie\xdf"
                                        "en")}});
  const auto entries = read_mo(file);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].msgstr[0], "Schließen");
}

TEST(Gettext, PluralEntriesGiveBothFormsInATwoFormLanguage) {
  std::vector<CatalogEntry> entries(2);
  entries[0].msgstr = {kHeader};
  entries[1].msgid = "%d file";
  entries[1].msgid_plural = "%d files";
  entries[1].msgstr = {"%d Datei", "%d Dateien"};
  GettextReport report;
  const auto pairs = pairs_from_catalog(entries, report);
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].source, "%d file");
  EXPECT_EQ(pairs[0].target, "%d Datei");
  EXPECT_EQ(pairs[1].source, "%d files");
  EXPECT_EQ(pairs[1].target, "%d Dateien");
  EXPECT_EQ(header_nplurals(entries), 2);
}

TEST(Process, CapturesBothStreamsLinesAndExitCodes) {
  const auto r = run_process({"sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  std::vector<std::string> lines;
  ProcessOptions o;
  o.on_line = [&](std::string_view l) { lines.emplace_back(l); };
  // More than a pipe holds on both streams at once: neither may block the other.
  const auto big = run_process({"sh", "-c", "seq 1 100000; seq 1 100000 >&2; printf last"}, o);
  EXPECT_TRUE(big.ok());
  ASSERT_EQ(lines.size(), 100001u);
  EXPECT_EQ(lines[99999], "100000");
  EXPECT_EQ(lines.back(), "last");
  EXPECT_GT(big.err.size(), 500000u);
  const auto piped = run_pipeline({"printf", "a\\nb\\nc\\n"}, {"wc", "-l"});
  EXPECT_EQ(piped.out, "3\n");
  EXPECT_THROW(run_process({"/no/such/program"}), Error);
}

}  // namespace
}  // namespace attnkit::data
