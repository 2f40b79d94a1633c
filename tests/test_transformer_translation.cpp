// The Transformer as a translation model: it learns the synthetic tasks, its searches keep the
// GRU model's guarantees (beam 1 = greedy, a batch = its sentences alone, n-best order, threads),
// a resumed run is bit-identical, and its model directory round-trips and refuses bad configs.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.h"
#include "attnkit/core/info.h"
#include "attnkit/data/tokenizer.h"
#include "attnkit/io/weights.h"
#include "attnkit/train/batching.h"
#include "attnkit/train/trainer.h"
#include "attnkit/transformer/search.h"
#include "attnkit/translate/translator.h"
#include "testing.h"

namespace attnkit {
namespace {

namespace fs = std::filesystem;
using transformer::TransformerModel;

struct Task {
  testing::SyntheticData synthetic;
  translate::ModelConfig config;
};

Task make_task(const std::string& name, size_t train_count) {
  Task t{testing::synthetic_data(name, train_count), {}};
  t.config = testing::tiny_transformer_config(t.synthetic.vocab.size());
  return t;
}

train::TrainOptions quick_options(const std::string& dir, int64_t epochs) {
  return testing::tiny_transformer_training(dir, epochs);
}

train::TrainResult train_for(const Task& t, TransformerModel& model, const train::TrainOptions& o) {
  return testing::train(t.config, model, t.synthetic.vocab, t.synthetic.vocab, t.synthetic.data, o);
}

std::vector<std::string> test_sources(const Task& t) {
  std::vector<std::string> sources;
  for (const auto& e : t.synthetic.test) sources.push_back(e.pair.source);
  return sources;
}

class TransformerTask : public ::testing::TestWithParam<std::string> {};

TEST_P(TransformerTask, LearnsItToNinetyFivePercentExact) {
  set_threads(1);  // the same run whatever ran before in this process
  at::manual_seed(1);
  auto t = make_task(GetParam(), 2500);
  TransformerModel model(t.config.transformer);
  testing::ScratchDir dir("transformer_" + GetParam());
  // 16 epochs: at 12, reverse sat at the edge, and a change that only moved rounding (the cross-
  // attention's keys and values as one product) took seeds 1, 2, 3 to 90, 78 and 95+ exact; at
  // 16 they give 97, 98, 97 (copy 100).
  train_for(t, model, quick_options(dir.str(), /*epochs=*/16));
  auto translator = testing::translator_for(t.config, model, t.synthetic.vocab, t.synthetic.vocab);
  decoding::SearchOptions greedy;
  greedy.beam_size = 1;
  const auto out = translator.translate(test_sources(t), greedy);
  size_t exact = 0;
  for (size_t i = 0; i < out.size(); ++i) exact += out[i].text == t.synthetic.test[i].pair.target;
  // Seed 1 gives 100 (copy) and 97 (reverse) of 100; chance is 0.
  EXPECT_GE(exact, 95u) << "exact matches out of 100";

  // Decoding the same model in int8 keeps what it learned: seeds 1, 2, 3 give 100 (copy) and 97,
  // 99, 97 (reverse) exact; the margin is the tiny model's (d_model 32) sensitivity to rounding.
  model->options.compute_type(kernels::ComputeType::Int8);
  const auto int8 = translator.translate(test_sources(t), greedy);
  size_t int8_exact = 0;
  for (size_t i = 0; i < out.size(); ++i)
    int8_exact += int8[i].text == t.synthetic.test[i].pair.target;
  EXPECT_GE(int8_exact, 93u) << "int8: exact matches out of 100";
}

INSTANTIATE_TEST_SUITE_P(Tasks, TransformerTask, ::testing::Values("copy", "reverse"));

TEST(TransformerSearch, KeepsEverySearchGuarantee) {
  at::manual_seed(2);
  auto t = make_task("reverse", 400);
  TransformerModel model(t.config.transformer);
  testing::ScratchDir dir("transformer_search");
  train_for(t, model, quick_options(dir.str(), /*epochs=*/2));  // partly trained: ties unlikely
  auto tok = data::make_tokenizer("en");
  std::vector<std::vector<int64_t>> ids;
  for (const auto& e : t.synthetic.test)
    ids.push_back(t.synthetic.vocab.encode(tok->tokenize(e.pair.source)));
  auto [source, lengths] = data::pad_batch(ids);
  decoding::SearchOptions one, three, wide;
  one.beam_size = 1;
  three.beam_size = 3;
  wide.beam_size = 4;
  wide.nbest = 3;
  auto greedy = transformer::search(model, source, lengths, one);
  model->eval();
  transformer::TransformerStepDecoder decoder(model, source, lengths);
  auto beam_of_one = decoding::beam_search(decoder, lengths, one);
  auto together = transformer::search(model, source, lengths, three);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(greedy[i][0].tokens, beam_of_one[i][0].tokens) << "sentence " << i;
    EXPECT_NEAR(greedy[i][0].score, beam_of_one[i][0].score, 1e-5);
    if (i % 7) continue;
    // Sentences leave the batch as they finish: a batch gives what each gives alone.
    auto [alone, alone_length] = data::pad_batch({ids[i]});
    EXPECT_EQ(transformer::search(model, alone, alone_length, three)[0][0].tokens,
              together[i][0].tokens);
    EXPECT_EQ(transformer::search(model, alone, alone_length, one)[0][0].tokens,
              greedy[i][0].tokens);
  }
  for (const auto& list : transformer::search(model, source, lengths, wide)) {
    ASSERT_EQ(list.size(), 3u);
    EXPECT_GE(list[0].score, list[1].score);
    EXPECT_GE(list[1].score, list[2].score);
    EXPECT_NE(list[0].tokens, list[1].tokens);
  }
  // Parallel batches on threads equal the sequential run.
  auto translator = testing::translator_for(t.config, model, t.synthetic.vocab, t.synthetic.vocab);
  const auto sources = test_sources(t);
  const auto sequential = translator.translate(sources, three, 5, 1);
  const auto parallel = translator.translate(sources, three, 5, 2);
  for (size_t i = 0; i < sources.size(); ++i) {
    EXPECT_EQ(parallel[i].text, sequential[i].text) << i;
    EXPECT_TRUE(parallel[i].attention.equal(sequential[i].attention)) << i;
  }
}

TEST(TransformerTraining, ResumeIsBitIdentical) {
  auto t = make_task("copy", 150);  // 5 batches an epoch: 12 steps cross epoch boundaries
  t.config.transformer.dropout(0.2).attention_dropout(0.1);  // so the RNG state matters
  auto run = [&](const fs::path& dir, std::vector<int64_t> legs) {
    TransformerModel model(nullptr);
    for (size_t leg = 0; leg < legs.size(); ++leg) {
      at::manual_seed(5);
      model = TransformerModel(t.config.transformer);
      auto o = quick_options(dir.string(), /*epochs=*/10);
      o.warmup_steps = 4;  // the schedule crosses its peak inside the first leg
      o.max_steps = legs[leg];
      o.resume = leg > 0;
      train_for(t, model, o);
    }
    return model;
  };
  testing::ScratchDir straight_dir("straight"), resumed_dir("resumed");
  auto straight = run(straight_dir.path(), {12});
  auto resumed = run(resumed_dir.path(), {7, 5});
  auto a = straight->named_parameters(), b = resumed->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& p : a) EXPECT_TRUE(p.value().equal(b[p.key()])) << p.key();
  at::manual_seed(5);
  TransformerModel untrained(t.config.transformer);
  EXPECT_FALSE(untrained->named_parameters()["output_bias"].equal(a["output_bias"]));
}

// A model of t's, seeded alike, trained `steps` steps in `lanes` lanes on `threads` threads.
TransformerModel trained_in_lanes(const Task& t, int threads, int64_t lanes, int64_t steps,
                                  size_t batch_size, const fs::path& dir) {
  set_threads(threads, ThreadPolicy::Kernels);
  at::manual_seed(6);
  TransformerModel model(t.config.transformer);
  auto o = quick_options(dir.string(), /*epochs=*/2);
  o.lanes = lanes;
  o.max_steps = steps;
  o.batch_size = batch_size;
  train_for(t, model, o);
  set_threads(1);
  return model;
}

// Lanes (TrainOptions::lanes): a batch's parts trained at once, a thread each. The result is the
// lanes', never the threads': two lanes run in turn on one thread and at once on two give the
// same weights bit for bit, dropout on (each lane's masks come from its own seed stream).
TEST(TransformerTraining, LanesGiveTheSameBitsOnOneThreadAndTwo) {
  auto t = make_task("copy", 150);
  t.config.transformer.dropout(0.2).attention_dropout(0.1).ffn_dropout(0.1);
  testing::ScratchDir one_dir("lanes_one"), two_dir("lanes_two");
  auto one = trained_in_lanes(t, /*threads=*/1, /*lanes=*/2, /*steps=*/8, /*batch_size=*/32,
                              one_dir.path());
  auto two = trained_in_lanes(t, /*threads=*/2, /*lanes=*/2, /*steps=*/8, /*batch_size=*/32,
                              two_dir.path());
  auto a = one->named_parameters(), b = two->named_parameters();
  for (const auto& p : a) EXPECT_TRUE(p.value().equal(b[p.key()])) << p.key();
}

// Without dropout, two lanes' gradients are one lane's, up to the order of the float sums: each
// lane's loss is weighted by its share of the batch's tokens. (Weighting each lane by a half
// instead, lanes of 21 and 14 tokens here, moves them by up to 0.06.) The trainer leaves a step's
// gradients on the parameters; Adam reads them, scaled by clipping, without changing them.
TEST(TransformerTraining, TwoLanesGiveOneLanesGradients) {
  auto t = make_task("reverse", 150);
  testing::ScratchDir one_dir("one_lane"), two_dir("two_lanes");
  // Batches of 5: lanes of 3 and 2 sentences.
  auto one = trained_in_lanes(t, /*threads=*/2, /*lanes=*/1, /*steps=*/1, /*batch_size=*/5,
                              one_dir.path());
  auto two = trained_in_lanes(t, /*threads=*/2, /*lanes=*/2, /*steps=*/1, /*batch_size=*/5,
                              two_dir.path());
  auto a = one->named_parameters(), b = two->named_parameters();
  for (const auto& p : a) {
    const auto& g1 = p.value().grad();
    const auto& g2 = b[p.key()].grad();
    ASSERT_TRUE(g1.defined() && g2.defined()) << p.key();
    EXPECT_GT(g1.abs().max().item<float>(), 0) << p.key();
    EXPECT_TRUE(at::allclose(g1, g2, /*rtol=*/1e-4, /*atol=*/1e-7))
        << p.key() << ": largest difference " << (g1 - g2).abs().max().item<float>();
  }
}

TEST(TransformerModelDir, RoundTripsAndRefusesBadConfigs) {
  auto t = make_task("copy", 100);
  at::manual_seed(3);
  TransformerModel model(t.config.transformer.norm_first(false).share_embeddings(true));
  testing::ScratchDir dir("transformer_dir");
  translate::save_config(dir.str(), t.config);
  t.synthetic.vocab.save((dir / "source.vocab").string());
  t.synthetic.vocab.save((dir / "target.vocab").string());
  io::save_weights(*model, (dir / "model.pt").string());
  translate::Translator loaded(dir.str());
  EXPECT_EQ(loaded.config().arch, translate::Arch::Transformer);
  EXPECT_FALSE(loaded.config().transformer.norm_first());
  EXPECT_TRUE(loaded.config().transformer.share_embeddings());
  for (const auto& p : model->named_parameters())
    EXPECT_TRUE(p.value().equal(loaded.module().named_parameters()[p.key()])) << p.key();

  const auto config_path = (dir / "config.json").string();
  nlohmann::json good;
  std::ifstream(config_path) >> good;
  auto refuses = [&](const std::function<void(nlohmann::json&)>& damage, const std::string& says) {
    auto j = good;
    damage(j);
    std::ofstream(config_path) << j.dump();
    try {
      translate::Translator broken(dir.str());
      ADD_FAILURE() << "accepted a config that " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(config_path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refuses([](auto& j) { j["arch"] = "lstm"; }, "unknown architecture 'lstm'");
  refuses([](auto& j) { j["model"]["heads"] = 5; }, "model.heads must be a divisor of d_model");
  refuses([](auto& j) { j["model"]["activation"] = "tanh"; }, "unknown activation 'tanh'");
  refuses([](auto& j) { j["model"]["target_vocab"] = 99; }, "share_embeddings");
  refuses([](auto& j) { j["model"].erase("ffn"); }, "malformed config");
}

TEST(TokenBatches, StayWithinTheBudgetAndCoverEveryExampleOnce) {
  auto t = testing::synthetic_data("copy", 500);
  for (size_t budget : {1ul, 40ul, 200ul}) {
    const auto batches = train::make_batches(t.data.train, 64, /*seed=*/3, /*epoch=*/1, budget);
    std::vector<int> seen(t.data.train.size(), 0);
    for (const auto& batch : batches) {
      size_t longest = 0;
      for (size_t i : batch) {
        ++seen[i];
        const auto& e = t.data.train[i];
        longest = std::max({longest, e.source.size(), e.target.size() + 1});
      }
      EXPECT_TRUE(batch.size() == 1 || longest * batch.size() <= budget)
          << batch.size() << " x " << longest << " over " << budget;
    }
    for (int count : seen) EXPECT_EQ(count, 1);
    EXPECT_EQ(batches, train::make_batches(t.data.train, 64, 3, 1, budget));  // reproducible
  }
}

}  // namespace
}  // namespace attnkit
