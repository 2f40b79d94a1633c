// Scoring given translations (decoding/force.h, Translator::score): a search's own hypothesis
// scores what the search said, token by token, with the search's attention; and the Pharaoh
// alignments read from an attention map.
#include <gtest/gtest.h>

#include "attnkit/core/error.h"
#include "attnkit/data/tokenizer.h"
#include "attnkit/transformer/search.h"
#include "attnkit/translate/translation_json.h"
#include "attnkit/translate/translator.h"
#include "testing.h"

namespace attnkit {

TEST(Score, ASearchsHypothesisScoresWhatTheSearchSaid) {
  at::manual_seed(3);
  auto synthetic = testing::synthetic_data("reverse", 400);
  const auto config = testing::tiny_transformer_config(synthetic.vocab.size());
  transformer::TransformerModel model(config.transformer);
  testing::ScratchDir dir("score");
  // Two epochs: partly trained, its probabilities neither uniform nor one-hot.
  testing::train(config, model, synthetic.vocab, synthetic.vocab, synthetic.data,
                 testing::tiny_transformer_training(dir.str(), /*epochs=*/2));
  auto translator = testing::translator_for(config, model, synthetic.vocab, synthetic.vocab);
  std::vector<std::string> sources;
  for (const auto& e : synthetic.test) sources.push_back(e.pair.source);

  for (int64_t beam : {1, 3}) {
    decoding::SearchOptions search;
    search.beam_size = beam;
    const auto found = translator.translate(sources, search);
    std::vector<std::string> texts;
    for (const auto& t : found) texts.push_back(t.text);
    const auto scored = translator.score(sources, texts);
    size_t compared = 0;
    for (size_t i = 0; i < found.size(); ++i) {
      const auto& t = found[i];
      const auto& s = scored[i];
      // Hypotheses cut at the length limit scored no end of sentence: the forced one does.
      if (t.attention.size(0) != static_cast<int64_t>(t.target_tokens.size()) + 1) continue;
      ASSERT_EQ(s.target_tokens, t.target_tokens) << i;
      ASSERT_EQ(s.token_log_probs.size(), t.target_tokens.size() + 1);
      double sum = 0;
      for (double p : s.token_log_probs) {
        EXPECT_LE(p, 0);
        sum += p;
      }
      EXPECT_NEAR(s.log_prob, sum, 1e-9);
      EXPECT_NEAR(s.score, t.score, 1e-4) << "beam " << beam << ", sentence " << i;
      EXPECT_TRUE(testing::close(s.attention, t.attention, 1e-5, 1e-4)) << i;
      ++compared;
    }
    EXPECT_GE(compared, found.size() / 2) << "beam " << beam;
  }

  // Words the vocabulary lacks are scored as <unk>, each a token.
  const auto unknown = translator.score({sources[0]}, {"zzz zzz zzz"})[0];
  EXPECT_EQ(unknown.target_tokens.size(), 3u);
  EXPECT_EQ(unknown.token_log_probs.size(), 4u);
  EXPECT_THROW(translator.score({"a"}, {}), Error);

  // Alternatives at the first position: most likely first, each translation starting with its
  // token, the best one the greedy search's.
  decoding::SearchOptions greedy;
  greedy.beam_size = 1;
  const std::vector<std::string> few(sources.begin(), sources.begin() + 4);
  const auto plain = translator.translate(few, greedy);
  const auto alternatives = translator.alternatives(few, {}, 3, greedy);
  ASSERT_EQ(alternatives.size(), few.size());
  for (size_t i = 0; i < few.size(); ++i) {
    ASSERT_EQ(alternatives[i].size(), 3u);
    EXPECT_EQ(alternatives[i][0].translation.text, plain[i].text);
    for (size_t k = 0; k < 3; ++k) {
      const auto& alt = alternatives[i][k];
      if (k) EXPECT_LE(alt.token_log_prob, alternatives[i][k - 1].token_log_prob);
      if (alt.token == translate::kEosLabel)
        EXPECT_TRUE(alt.translation.target_tokens.empty());
      else
        EXPECT_EQ(alt.translation.target_tokens.at(0), alt.token) << i << " " << k;
    }
  }
  // After a prefix: the prefix, then each alternative.
  const std::string first = plain[0].target_tokens.at(0);
  const auto after = translator.alternatives({few[0]}, {first}, 2, greedy)[0];
  ASSERT_EQ(after.size(), 2u);
  for (const auto& alt : after) {
    EXPECT_EQ(alt.translation.target_tokens.at(0), first);
    if (alt.token != translate::kEosLabel)
      EXPECT_EQ(alt.translation.target_tokens.at(1), alt.token);
  }
}

TEST(Score, PharaohAlignmentsFromTheAttention) {
  const auto attention =
      at::tensor({0.1f, 0.7f, 0.2f, 0.8f, 0.1f, 0.1f, 0.3f, 0.3f, 0.4f}).view({3, 3});
  EXPECT_EQ(translate::pharaoh_alignment(attention, 3), "1-0 0-1 2-2");
  EXPECT_EQ(translate::pharaoh_alignment(attention, 2), "1-0 0-1");  // the last row is </s>
  EXPECT_EQ(translate::pharaoh_alignment(at::Tensor(), 2), "");
  translate::Translation t;
  t.target_tokens = {"a", "b"};
  t.source_tokens = {"x", "y", "z"};
  t.attention = attention;
  EXPECT_EQ(translate::translation_json(t)["alignment"], "1-0 0-1");
}

}  // namespace attnkit
