// A translation's confidence (include/attnkit/translate/confidence.h): each feature on
// hand-made translations whose attention is known, the fit recovering a known linear relation,
// and the file it is kept in.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnkit/core/error.h"
#include "attnkit/translate/confidence.h"

using namespace attnkit;
using translate::Confidence;
using translate::ConfidenceFeatures;

namespace {

translate::Translation made_translation(std::vector<std::string> source,
                                        std::vector<std::string> target,
                                        std::vector<std::vector<float>> attention, double score) {
  translate::Translation t;
  t.source_tokens = std::move(source);
  t.target_tokens = std::move(target);
  t.score = score;
  const int64_t rows = static_cast<int64_t>(attention.size());
  const int64_t cols = rows ? static_cast<int64_t>(attention[0].size()) : 0;
  t.attention = torch::zeros({rows, cols});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t.attention[i][j] = attention[i][j];
  return t;
}

// Features that move independently of each other, and the chrF they determine.
std::vector<ConfidenceFeatures> confidence_samples(size_t n) {
  std::vector<ConfidenceFeatures> x;
  for (size_t i = 0; i < n; ++i) {
    ConfidenceFeatures f;
    f.log_prob = -0.05 * static_cast<double>(i % 17);
    f.coverage = -0.1 * static_cast<double>((i * 7) % 11);
    f.uncovered = static_cast<double>((i * 3) % 5) / 5;
    f.repeats = static_cast<double>((i * 5) % 7) / 14;
    f.placeholders = static_cast<double>(i % 3 == 0);
    f.length_ratio = 0.1 * static_cast<double>(static_cast<int>(i % 9) - 4);
    x.push_back(f);
  }
  return x;
}

double confidence_truth(const ConfidenceFeatures& f) {
  return 60 + 40 * f.log_prob + 10 * f.coverage - 30 * f.uncovered - 20 * f.repeats -
         15 * f.placeholders - 5 * f.length_ratio;
}

}  // namespace

TEST(Confidence, FeaturesOfAKnownTranslation) {
  // Three source tokens; the steps that wrote the three target tokens attend to the first and
  // the last, never to the second; the end-of-sentence row is not a target token's.
  const auto t = made_translation(
      {"open", "the", "file"}, {"打开", "文件", "文件"},
      {{0.9f, 0.05f, 0.05f}, {0.05f, 0.05f, 0.9f}, {0.05f, 0.05f, 0.9f}, {0.3f, 0.4f, 0.3f}}, -0.7);
  const auto f = translate::confidence_features(t);
  EXPECT_DOUBLE_EQ(f.log_prob, -0.7);
  // Summed attention 1.0, 0.15, 1.85 -> min(1, .) -> log: 0, log 0.15, 0.
  EXPECT_NEAR(f.coverage, std::log(0.15) / 3, 1e-6);
  EXPECT_NEAR(f.uncovered, 1.0 / 3, 1e-12);  // "the": no step gave it 0.1
  EXPECT_NEAR(f.repeats, 1.0 / 3, 1e-12);    // "文件 文件"
  EXPECT_EQ(f.placeholders, 0);
  EXPECT_NEAR(f.length_ratio, 0, 1e-12);

  // A placeholder dropped, a source twice the target's length.
  const auto g = translate::confidence_features(made_translation(
      {"open", "%s", "now"}, {"打开"}, {{0.5f, 0.2f, 0.3f}, {0.1f, 0.1f, 0.8f}}, -1.5));
  EXPECT_EQ(g.placeholders, 1);
  EXPECT_NEAR(g.length_ratio, std::log(2.0 / 4.0), 1e-12);
  EXPECT_NEAR(g.coverage, (std::log(0.5) + std::log(0.2) + std::log(0.3)) / 3, 1e-6);
  EXPECT_EQ(g.uncovered, 0);

  // Nothing written: nothing covered.
  const auto h = translate::confidence_features(made_translation({"open"}, {}, {}, -9));
  EXPECT_EQ(h.uncovered, 1);
  EXPECT_NEAR(h.coverage, std::log(1e-3), 1e-12);
}

TEST(Confidence, TheFitRecoversALinearRelation) {
  const auto x = confidence_samples(200);
  std::vector<double> y;
  for (const auto& f : x) y.push_back(confidence_truth(f));
  const auto c = Confidence::fit(x, y);
  ASSERT_TRUE(c.fitted());
  EXPECT_EQ(c.pairs(), 200u);
  for (const auto& f : confidence_samples(37)) {
    const double want = std::clamp(confidence_truth(f) / 100, 0.0, 1.0);
    EXPECT_NEAR(c(f), want, 0.005)
        << confidence_truth(f);  // the ridge shrinks the weights a little
  }
  ConfidenceFeatures hopeless;
  hopeless.log_prob = -5;
  hopeless.uncovered = 1;
  EXPECT_EQ(c(hopeless), 0);  // clipped to [0, 1]
  EXPECT_FALSE(Confidence()(hopeless) > 0);

  EXPECT_THROW(Confidence::fit(confidence_samples(6), std::vector<double>(6, 50)),
               Error);  // too few
  EXPECT_THROW(Confidence::fit(confidence_samples(10), std::vector<double>(9, 50)), Error);
  // A constant feature (no placeholders anywhere) and constant scores are fitted, not NaN.
  auto flat = confidence_samples(20);
  for (auto& f : flat) f.placeholders = 0;
  const auto d = Confidence::fit(flat, std::vector<double>(20, 42));
  EXPECT_NEAR(d(flat[3]), 0.42, 1e-9);
}

TEST(Confidence, KeptInTheModelDirectory) {
  const auto dir = std::filesystem::temp_directory_path() / "attnkit_confidence_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(Confidence::load(dir.string()).fitted());  // not calibrated

  const auto x = confidence_samples(50);
  std::vector<double> y;
  for (const auto& f : x) y.push_back(confidence_truth(f));
  const auto c = Confidence::fit(x, y);
  c.save(dir.string());
  const auto back = Confidence::load(dir.string());
  ASSERT_TRUE(back.fitted());
  for (const auto& f : confidence_samples(11)) EXPECT_NEAR(back(f), c(f), 1e-12);

  const auto path = (dir / translate::kConfidenceFile).string();
  auto expect_error = [&](const std::string& text, const std::string& why) {
    std::ofstream(path) << text;
    try {
      Confidence::load(dir.string());
      FAIL() << "read: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  expect_error("{", "not JSON");
  expect_error("{\"features\": [\"log_prob\"]}", "run attnkit calibrate again");
  auto j = nlohmann::json::parse(c.to_json());
  j.erase("bias");
  expect_error(j.dump(), "not a confidence file");
  j = nlohmann::json::parse(c.to_json());
  j["scale"][2] = 0;
  expect_error(j.dump(), "scale is not positive");
  std::filesystem::remove_all(dir);
}

TEST(Confidence, PearsonCorrelation) {
  EXPECT_NEAR(translate::pearson({1, 2, 3, 4}, {2, 4, 6, 8}), 1, 1e-12);
  EXPECT_NEAR(translate::pearson({1, 2, 3, 4}, {4, 3, 2, 1}), -1, 1e-12);
  EXPECT_NEAR(translate::pearson({1, 2, 3}, {1, 3, 2}), 0.5, 1e-12);
  EXPECT_EQ(translate::pearson({1, 1, 1}, {1, 2, 3}), 0);
}
