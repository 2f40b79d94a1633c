#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "attnkit/core/error.h"
#include "attnkit/data/text.h"
#include "attnkit/data/tokenizer.h"
#include "attnkit/data/vocab.h"
#include "testing.h"

namespace attnkit::data {
namespace {

using Tokens = std::vector<std::string>;

TEST(Text, Utf8Validation) {
  EXPECT_TRUE(text::valid_utf8("héllo 你好 🎉"));
  EXPECT_FALSE(text::valid_utf8("\xff"));
  EXPECT_FALSE(text::valid_utf8("\xc0\xaf"));      // overlong '/'
  EXPECT_FALSE(text::valid_utf8("\xed\xa0\x80"));  // a surrogate
  EXPECT_FALSE(text::valid_utf8("\xe4\xbd"));      // truncated
  EXPECT_EQ(text::encode(text::decode("你好 🎉")), "你好 🎉");
}

TEST(Placeholders, AreRecognisedWhole) {
  EXPECT_EQ(placeholders("Copy %1$s to %s, %d%% done, %-5.2f {name} %(user)s %lu"),
            (Tokens{"%1$s", "%s", "%d", "%%", "%-5.2f", "{name}", "%(user)s", "%lu"}));
  EXPECT_TRUE(is_placeholder("%s"));
  EXPECT_FALSE(is_placeholder("%"));
  EXPECT_FALSE(is_placeholder("{}"));
  EXPECT_FALSE(is_placeholder("100%"));
}

TEST(Tokenizer, EnglishWordsPunctuationAndPlaceholders) {
  auto en = make_english_tokenizer(false, false);
  EXPECT_EQ(en->tokenize("Don't open %s, please!"),
            (Tokens{"Don't", "open", "%s", ",", "please", "!"}));
  EXPECT_EQ(en->detokenize({"Don't", "open", "%s", ",", "please", "!"}), "Don't open %s, please!");
  auto lower = make_english_tokenizer(true, false);
  EXPECT_EQ(lower->tokenize("Open FILE"), (Tokens{"open", "file"}));
  auto norm = make_english_tokenizer(false, true);  // the PyTorch tutorial's normalisation
  EXPECT_EQ(norm->tokenize("Hello, World! (really)?"),
            (Tokens{"hello", "world", "!", "really", "?"}));
}

TEST(Tokenizer, ChineseByCharacterWithAsciiWordsWhole) {
  auto zh = make_chinese_tokenizer();
  EXPECT_EQ(zh->tokenize("打开 Git 仓库 %s，共 12 个"),
            (Tokens{"打", "开", "Git", "仓", "库", "%s", "，", "共", "12", "个"}));
  EXPECT_EQ(zh->detokenize({"打", "开", "Git", "仓", "库", "%s"}), "打开Git仓库%s");
  EXPECT_EQ(zh->detokenize({"git", "pull"}), "git pull");
}

TEST(Tokenizer, UnknownSpecIsAnError) { EXPECT_THROW(make_tokenizer("klingon"), Error); }

TEST(Tokenizer, SentencePieceTrainsEncodesAndDecodes) {
  std::vector<std::string> sentences;
  for (int i = 0; i < 300; ++i)
    sentences.push_back("the file number " + std::to_string(i % 37) +
                        " was copied to %s by the user");
  testing::ScratchDir dir("spm");
  const auto prefix = (dir / "attnkit_spm_test").string();
  train_sentencepiece(sentences, prefix, 60);
  auto spm = make_tokenizer("spm:" + prefix + ".model");
  auto pieces = spm->tokenize("the file was copied to %s");
  EXPECT_GT(pieces.size(), 3u);
  EXPECT_NE(std::find(pieces.begin(), pieces.end(), "%s"), pieces.end()) << "placeholder split";
  EXPECT_EQ(spm->detokenize(pieces), "the file was copied to %s");
  // Many texts per round trip to the helper give each text's own pieces, empty ones included.
  std::vector<std::string> texts;
  for (int i = 0; i < 2500; ++i)
    texts.push_back(i % 7 == 0 ? "" : "file " + std::to_string(i) + (i % 3 ? " was copied" : "\n"));
  const auto all = spm->tokenize_all(texts);
  ASSERT_EQ(all.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(all[i], spm->tokenize(texts[i])) << i;
  EXPECT_THROW(make_tokenizer("spm:/no/such.model"), Error);
}

TEST(Vocab, SpecialsMinFrequencyAndOrder) {
  auto v = Vocab::build({{"b", "a", "b"}, {"c", "b", "a"}, {"d"}}, 2);
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v.token(0), "<pad>");
  EXPECT_EQ(v.token(3), "<eos>");
  EXPECT_EQ(v.token(4), "b");  // most frequent first
  EXPECT_EQ(v.token(5), "a");
  EXPECT_EQ(v.id("d"), Vocab::kUnk);
  EXPECT_EQ(v.encode({"a", "zzz"}), (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(Vocab::build({{"x", "y", "z"}}, 1, 6).size(), 6u);  // max_size counts the specials
}

TEST(Vocab, SaveLoadRoundTripAndErrors) {
  testing::ScratchDir dir("vocab");
  auto v = Vocab::build({{"你", "好", "你"}}, 1);
  v.save((dir / "attnkit_vocab.txt").string());
  EXPECT_EQ(Vocab::load((dir / "attnkit_vocab.txt").string()), v);
  std::ofstream((dir / "attnkit_bad_vocab.txt").string()) << "<pad>\n<unk>\nhello\n<eos>\n";
  try {
    Vocab::load((dir / "attnkit_bad_vocab.txt").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attnkit_bad_vocab.txt:3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnkit::data
