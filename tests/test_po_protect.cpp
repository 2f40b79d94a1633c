// What must survive a model's translation of a software string (include/attnkit/po/protect.h):
// protect() takes it out, restore() puts it back where the attention says, whatever the model
// emitted.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "attnkit/data/tokenizer.h"
#include "attnkit/po/protect.h"

using namespace attnkit;
using po::Protected;

namespace {

std::string join(const std::vector<std::string>& tokens) {
  return data::make_chinese_tokenizer()->detokenize(tokens);
}

// The model's output for p.text given as tokens, with an attention map in which target token
// t looked at source token looks[t].
std::string restore(const Protected& p, const std::vector<std::string>& target,
                    const std::vector<int64_t>& looks) {
  const auto source =
      data::make_english_tokenizer(/*lower=*/true, /*normalize=*/false)->tokenize(p.text);
  auto attention = at::full(
      {static_cast<int64_t>(target.size()) + 1, static_cast<int64_t>(source.size())}, 0.01f);
  for (size_t t = 0; t < looks.size(); ++t) attention[t][looks[t]] = 0.9f;
  return po::restore(p, target, attention, source, join);
}

}  // namespace

TEST(PoProtect, FindsEveryKindOfSpan) {
  std::vector<po::SpanKind> kinds;
  const auto s = po::spans(
      "Copy %1$s to {dest} in ${HOME} or $TMPDIR: <b>see</b> &amp; https://example.org/x, "
      "mail bugs@example.org, edit ~/.config/a.conf or /etc/fstab, run --help or -v\tnow "
      "(100%% e-mail file-based)",
      &kinds);
  EXPECT_EQ(
      s, (std::vector<std::string>{"%1$s", "{dest}", "${HOME}", "$TMPDIR", "<b>", "</b>", "&amp;",
                                   "https://example.org/x", "bugs@example.org", "~/.config/a.conf",
                                   "/etc/fstab", "--help", "-v", "\t", "%%"}));
  EXPECT_EQ(kinds[7], po::SpanKind::Url);
  EXPECT_EQ(kinds[8], po::SpanKind::Email);
  EXPECT_EQ(kinds[11], po::SpanKind::Option);
}

// Found by the held-out catalogs (docs/po.md): dpkg's "<name>" and net-tools' "<AF>" are words
// that translators translate, not markup; "in_arcnet" and "IP_ADDRESS" are identifiers that the
// model split and translated.
TEST(PoProtect, AngleBracketWordsAreNotMarkupAndIdentifiersAreKept) {
  std::vector<po::SpanKind> kinds;
  EXPECT_EQ(po::spans("--%s needs <link> <name> <path>, see <standard input> or <unknown>"),
            (std::vector<std::string>{"%s"}));
  EXPECT_EQ(
      po::spans("<span weight=\"bold\">x</span><br/><A HREF='y'>"),
      (std::vector<std::string>{"<span weight=\"bold\">", "</span>", "<br/>", "<A HREF='y'>"}));
  EXPECT_EQ(
      po::spans("in_arcnet(%s): bad IP_ADDRESS in FIN_WAIT1, Los_Angeles or debug_addr_", &kinds),
      (std::vector<std::string>{"in_arcnet", "%s", "IP_ADDRESS", "FIN_WAIT1", "Los_Angeles",
                                "debug_addr"}));
  EXPECT_EQ(kinds[0], po::SpanKind::Identifier);
  // Accelerators, variables and paths are not identifiers.
  EXPECT_TRUE(po::spans("E_xit Pre_ferences _Open").empty());
  EXPECT_EQ(po::spans("$pretty_name /usr/lib/x_y"),
            (std::vector<std::string>{"$pretty_name", "/usr/lib/x_y"}));
}

// corpus gettext --protected: a training pair as po translate will ask for it.
TEST(PoProtect, TrainingPairsTakeTheProtectedForm) {
  using Pair = std::pair<std::string, std::string>;
  EXPECT_EQ(po::protect_pair("Results:", "结果："), (Pair{"Results", "结果"}));
  EXPECT_EQ(po::protect_pair("Installing updates...", "正在安装更新……"),
            (Pair{"Installing updates", "正在安装更新"}));
  EXPECT_EQ(po::protect_pair("Run --help for /etc/x.conf", "运行--help 查看 /etc/x.conf"),
            (Pair{"Run %s for %s", "运行%s 查看 %s"}));
  EXPECT_EQ(po::protect_pair("<b>Open %s</b>", "<b>打开 %s</b>"), (Pair{"Open %s", "打开 %s"}));
  // Placeholders stay themselves on both sides; the target keeps its own order.
  EXPECT_EQ(po::protect_pair("Copy %1$s to %2$s", "把 %2$s 复制到 %1$s"),
            (Pair{"Copy %1$s to %2$s", "把 %2$s 复制到 %1$s"}));
  // A target without the span or the wrapping markup is kept as it is.
  EXPECT_EQ(po::protect_pair("Run --help", "运行帮助"), std::nullopt);
  EXPECT_EQ(po::protect_pair("<b>Bold</b>", "粗体"), std::nullopt);
}

TEST(PoProtect, FindsAcceleratorsOnlyInLabels) {
  size_t at = 0;
  EXPECT_EQ(po::find_accelerator("_Open", &at), '_');
  EXPECT_EQ(at, 0u);
  EXPECT_EQ(po::find_accelerator("E_xit", &at), '_');
  EXPECT_EQ(at, 1u);
  EXPECT_EQ(po::find_accelerator("Save &As"), '&');
  EXPECT_EQ(po::find_accelerator("~Save"), '~');
  EXPECT_EQ(po::find_accelerator("Fish &amp; Chips"), 0);
  EXPECT_EQ(po::find_accelerator("Set GTK_THEME"), 0);
  EXPECT_EQ(po::find_accelerator("Pre_ferences"), '_');
  EXPECT_EQ(po::find_accelerator("Open file_name"), 0);
  EXPECT_EQ(po::find_accelerator("TZ='America/Los_Angeles' date"), 0);
  EXPECT_EQ(po::find_accelerator("Up to date with $pretty_name"), 0);
  EXPECT_EQ(po::find_accelerator("<no .debug_addr section>"), 0);
  EXPECT_EQ(po::find_accelerator("_One _Two"), 0);
  EXPECT_EQ(po::find_accelerator("Edit ~/.bashrc"), 0);
  EXPECT_EQ(po::find_accelerator("This sentence has far too many words for a _menu label"), 0);
}

TEST(PoProtect, TakesApartWhatTheModelMustNotSee) {
  const auto p = po::protect("  <b>_Save %s to <i>%s</i> now...</b>\n");
  EXPECT_EQ(p.lead, "  ");
  EXPECT_EQ(p.trail, "\n");
  EXPECT_EQ(p.open, "<b>");
  EXPECT_EQ(p.close, "</b>");
  EXPECT_EQ(p.suffix, "...");
  EXPECT_EQ(p.accelerator, '_');
  EXPECT_EQ(p.key, 'S');
  EXPECT_EQ(p.text, "Save %s to %s %s %s now");
  EXPECT_EQ(p.spans, (std::vector<std::string>{"%s", "<i>", "%s", "</i>"}));
  const auto q = po::protect("Open ~/.config/app.conf");
  EXPECT_EQ(q.text, "Open %s");
}

TEST(PoProtect, RestorePutsSpansWhereTheAttentionSays) {
  // "Copy %1$s to %2$s" -> 将 %2$s 复制到 %1$s: the model swapped the arguments; each output
  // placeholder takes the span it looked at.
  const auto p = po::protect("Copy %1$s to %2$s");
  ASSERT_EQ(p.text, "Copy %1$s to %2$s");  // source tokens: copy %1$s to %2$s
  EXPECT_EQ(restore(p, {"将", "%1$s", "复", "制", "到", "%1$s"}, {0, 3, 0, 0, 2, 1}),
            "将%2$s复制到%1$s");
  // Sequential conversions keep the source's order whatever the model did ("%s" must stay the
  // first argument), as do the system-dependent and star forms.
  const auto q = po::protect("Wrote %s in %d ms");
  EXPECT_EQ(restore(q, {"%d", "毫", "秒", "写", "入", "%s"}, {4, 3, 3, 0, 0, 2}), "%s毫秒写入%d");
  const auto r = po::protect("%s:%<PRIuMAX>: is not sorted: %.*s");
  EXPECT_EQ(r.spans, (std::vector<std::string>{"%s", "%<PRIuMAX>", "%.*s"}));
  EXPECT_EQ(r.close, "");
  // The model dropped a placeholder: it goes before the token that looked at its mask.
  EXPECT_EQ(restore(p, {"复", "制", "到", "%1$s"}, {0, 0, 3, 1}), "复制%2$s到%1$s");
  // Stray "%" tokens are dropped: no new (or broken) conversion reaches the catalog.
  EXPECT_EQ(restore(p, {"复", "制", "%", "\"", "%1$s", "到", "%2$s"}, {0, 0, 0, 0, 1, 2, 3}),
            "复制\"%1$s到%2$s");
  // The model made one up: it is removed.
  EXPECT_EQ(restore(p, {"%1$s", "复", "制", "%s", "到", "%2$s"}, {1, 0, 0, 0, 2, 3}),
            "%1$s复制到%2$s");
}

TEST(PoProtect, PlaceholdersTheTokenizerCutsReadAsTheirKind) {
  // A SentencePiece model knows "%1$s" as a piece and cuts "%3$d" into "%3$" "d": the model
  // reads "%d" there, and each span still goes back where its mask's attention says.
  const po::KeepsWhole whole = [](const std::string& s) {
    return s == "%s" || s == "%d" || s == "%1$s";
  };
  const auto p = po::protect("Page %2$d of %3$d in %1$s, %4$s", true, whole);
  EXPECT_EQ(p.text, "Page %d of %d in %1$s , %s");
  EXPECT_EQ(p.spans, (std::vector<std::string>{"%2$d", "%3$d", "%1$s", "%4$s"}));
  // source tokens: page %d of %d in %1$s , %s
  EXPECT_EQ(restore(p, {"第", "%d", "页", "共", "%d", "%1$s", "%s"}, {0, 1, 0, 2, 3, 5, 7}),
            "第%2$d页共%3$d %1$s %4$s");  // the Chinese detokenizer spaces ASCII words
  EXPECT_EQ(restore(p, {"共", "%d", "页", "第", "%d", "%1$s", "%s"}, {2, 3, 0, 0, 1, 5, 7}),
            "共%3$d页第%2$d %1$s %4$s");
  // Without the tokenizer's test every printf placeholder is its own mask.
  EXPECT_EQ(po::protect("Page %2$d of %3$d").text, "Page %2$d of %3$d");
}

TEST(PoProtect, RestoreRebuildsAcceleratorsSuffixesMarkupAndWhitespace) {
  const auto p = po::protect("  <b>_Save as:</b>");
  EXPECT_EQ(restore(p, {"另", "存", "为", "："}, {0, 0, 1, 1}), "  <b>另存为(_S)：</b>");
  const auto q = po::protect("&Open...");
  EXPECT_EQ(restore(q, {"打", "开"}, {0, 0}), "打开(&O)...");
  const auto r = po::protect("See <a href=\"https://example.org\">the manual</a> for --help");
  EXPECT_EQ(r.text, "See %s the manual %s for %s");
  EXPECT_EQ(restore(r, {"参", "见", "%s", "手", "册", "%s", "的", "%s"}, {0, 0, 1, 3, 3, 4, 5, 6}),
            "参见<a href=\"https://example.org\">手册</a>的--help");
}

TEST(PoProtect, SurvivesChecksSpansAcceleratorsAndWhitespace) {
  EXPECT_TRUE(po::survives("Copy %1$s to %2$s", "将 %2$s 复制到 %1$s"));
  EXPECT_FALSE(po::survives("Copy %1$s to %2$s", "将 %2$s 复制到 %1$"));
  EXPECT_TRUE(po::survives("_Save", "保存(_S)"));
  EXPECT_FALSE(po::survives("_Save", "保存"));
  EXPECT_FALSE(po::survives("<b>Bold</b>", "<b>粗体"));
  EXPECT_FALSE(po::survives("Name:\n", "名称："));
  EXPECT_TRUE(po::survives("  --help\n", "  --help\n"));
  EXPECT_FALSE(po::survives("Copy %s", "复制 %s %d"));      // an extra argument
  EXPECT_TRUE(po::survives("Copy %s", "复制 %s -system"));  // an extra "option" is only text
  EXPECT_TRUE(po::survives("%<PRIdMAX> bytes", "%<PRIdMAX> 字节"));
  EXPECT_FALSE(po::survives("%<PRIdMAX> bytes", "<PRIdMAX> 字节"));
  // Spans end where the translation's CJK text begins.
  EXPECT_TRUE(po::survives("Run --help or see https://example.org/x now",
                           "运行--help或参见https://example.org/x。"));
}

TEST(PoProtect, AcceleratorsGoWhereTheLanguagesTranslatorsPutThem) {
  EXPECT_EQ(po::accelerator_style("zh_CN"), po::AcceleratorStyle::Appended);
  EXPECT_EQ(po::accelerator_style("ja"), po::AcceleratorStyle::Appended);
  EXPECT_EQ(po::accelerator_style("ko_KR.UTF-8"), po::AcceleratorStyle::Appended);
  EXPECT_EQ(po::accelerator_style("de"), po::AcceleratorStyle::Inline);
  EXPECT_EQ(po::accelerator_style("sr@latin"), po::AcceleratorStyle::Inline);
  const auto words = [](const std::vector<std::string>& t) {
    return data::make_english_tokenizer(false, false)->detokenize(t);
  };
  auto restore_as = [&](const std::string& source, const std::vector<std::string>& target,
                        po::AcceleratorStyle style) {
    const Protected p = po::protect(source);
    const auto tokens =
        data::make_english_tokenizer(/*lower=*/true, /*normalize=*/false)->tokenize(p.text);
    return po::restore(p, target, at::Tensor(), tokens, words, style);
  };
  // German: the marker before the first letter, whichever the English one was.
  EXPECT_EQ(restore_as("_Open", {"Öffnen"}, po::AcceleratorStyle::Inline), "_Öffnen");
  EXPECT_EQ(restore_as("E_xit", {"Beenden"}, po::AcceleratorStyle::Inline), "_Beenden");
  EXPECT_EQ(restore_as("_Save As…", {"Speichern", "unter"}, po::AcceleratorStyle::Inline),
            "_Speichern unter…");
  // A placeholder first: the marker goes before the first letter after it, not into "%s".
  EXPECT_EQ(restore_as("%s _files", {"%s", "Dateien"}, po::AcceleratorStyle::Inline),
            "%s _Dateien");
  // Nothing to mark: the appended form, so that the accelerator survives.
  EXPECT_EQ(restore_as("_1", {"1"}, po::AcceleratorStyle::Inline), "_1");
  EXPECT_EQ(restore_as("_Open", {"打开"}, po::AcceleratorStyle::Appended), "打开(_O)");
  // po stats takes either form, and any letter after the marker.
  EXPECT_TRUE(po::survives("_Open", "_Öffnen"));
  EXPECT_TRUE(po::survives("_Open", "Ö_ffnen"));
  EXPECT_TRUE(po::survives("_Open", "打开(_O)"));
  EXPECT_FALSE(po::survives("_Open", "Öffnen"));
  EXPECT_FALSE(po::survives("_Open", "Öffnen_"));
}
