// The training loop (include/attnkit/train/): validation rounds within an epoch, which a resumed
// run keeps exactly, and the lock that keeps two runs out of one directory. The loop's other
// guarantees are held on both models in test_rnn.cpp and test_transformer_translation.cpp.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/rnn/model.h"
#include "attnkit/train/trainer.h"
#include "testing.h"

namespace attnkit {
namespace {

struct LoopTask {
  translate::ModelConfig config;
  testing::SyntheticData synthetic;
};

LoopTask copy_task() {
  LoopTask t{{}, testing::synthetic_data("copy", 200)};
  t.config.source_tokenizer = t.config.target_tokenizer = "en";
  const int64_t vocab = t.synthetic.vocab.size();
  t.config.model = rnn::RnnOptions(vocab, vocab).embed_size(16).hidden_size(32).dropout(0.2);
  auto& d = t.synthetic.data;
  d.valid = {d.train.begin(), d.train.begin() + 10};
  for (int i = 0; i < 10; ++i) {
    d.valid_sources.push_back(t.synthetic.test[i].pair.source);
    d.valid_references.push_back(t.synthetic.test[i].pair.target);
  }
  return t;
}

train::TrainOptions options(const std::string& dir) {
  train::TrainOptions o;
  o.model_dir = dir;
  o.batch_size = 32;  // 7 batches an epoch
  o.learning_rate = 3e-3;
  o.epochs = 3;
  o.early_stop = 0;
  o.checkpoint_every = 0;
  o.valid_every = 4;
  o.valid_bleu_sentences = 10;
  return o;
}

std::vector<nlohmann::json> log_of(const testing::ScratchDir& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Rounds every valid_every steps, not after each epoch: an epoch of a million pairs outlasts a
// run. Each is logged with its step and fractional epoch, and the plateau's decay counts rounds.
TEST(TrainValidation, RoundsComeEveryNStepsWithinEpochs) {
  auto t = copy_task();
  testing::ScratchDir dir("valid_every");
  at::manual_seed(3);
  rnn::RnnModel model(t.config.model);
  const auto r = testing::train(t.config, model, t.synthetic.vocab, t.synthetic.vocab,
                                t.synthetic.data, options(dir.str()));
  const auto log = log_of(dir);
  ASSERT_EQ(r.steps, 21);
  ASSERT_EQ(log.size(), 5u);  // steps 4, 8, 12, 16, 20
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i]["step"].get<int64_t>(), static_cast<int64_t>(4 * (i + 1)));
    EXPECT_NEAR(log[i]["epoch"].get<double>(), 4.0 * (i + 1) / 7.0, 1e-9);
    EXPECT_GE(log[i]["valid_bleu"].get<double>(), 0);
  }
  // With lr_patience 0, every round without a better BLEU halved the rate.
  double lr = options("").learning_rate;
  for (const auto& round : log) {
    if (!round["best"].get<bool>()) lr *= 0.5;
    EXPECT_DOUBLE_EQ(round["lr"].get<double>(), lr);
  }
}

// A run stopped between rounds and resumed makes the same rounds and ends with the same bits.
TEST(TrainValidation, AResumedRunKeepsItsRoundsBitForBit) {
  auto t = copy_task();
  auto run = [&](const testing::ScratchDir& dir, std::vector<int64_t> legs) {
    rnn::RnnModel model(nullptr);
    for (size_t leg = 0; leg < legs.size(); ++leg) {
      at::manual_seed(5);
      model = rnn::RnnModel(t.config.model);
      auto o = options(dir.str());
      o.max_steps = legs[leg];
      o.resume = leg > 0;
      testing::train(t.config, model, t.synthetic.vocab, t.synthetic.vocab, t.synthetic.data, o);
    }
    return model;
  };
  testing::ScratchDir straight_dir("rounds_straight"), resumed_dir("rounds_resumed");
  auto straight = run(straight_dir, {14});
  auto resumed = run(resumed_dir, {6, 8});
  auto a = straight->named_parameters(), b = resumed->named_parameters();
  for (const auto& p : a) EXPECT_TRUE(p.value().equal(b[p.key()])) << p.key();
  std::vector<int64_t> steps_a, steps_b;
  for (const auto& round : log_of(straight_dir))
    if (!round.contains("final")) steps_a.push_back(round["step"].get<int64_t>());
  for (const auto& round : log_of(resumed_dir))
    if (!round.contains("final")) steps_b.push_back(round["step"].get<int64_t>());
  EXPECT_EQ(steps_a, (std::vector<int64_t>{4, 8, 12}));
  EXPECT_EQ(steps_b, steps_a);
}

// One process per directory: a second lock on it is refused at once, naming the holder.
TEST(TrainDirectory, ASecondLockIsRefusedNamingTheHolder) {
  testing::ScratchDir dir("lock");
  {
    DirectoryLock first(dir.str(), "training");
    try {
      DirectoryLock second(dir.str(), "training");
      ADD_FAILURE() << "two locks on one directory";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("in use by another attnkit (pid " +
                                           std::to_string(::getpid()) + ", training)"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(DirectoryLock again(dir.str(), "training"));  // released with its holder
}

}  // namespace
}  // namespace attnkit
