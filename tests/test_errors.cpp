// Bad shapes give errors that name both shapes; bad state_dicts name the key and both shapes.

#include <gtest/gtest.h>

#include "attnkit/attention/attention.h"
#include "attnkit/attention/combine.h"
#include "attnkit/attention/functional.h"
#include "attnkit/attention/notes.h"
#include "attnkit/attention/self_attention.h"
#include "attnkit/core/error.h"
#include "attnkit/io/state_dict.h"
#include "testing.h"

namespace attnkit {
namespace {

// Runs `f`, expecting an error whose message contains every one of `needles`.
template <typename F>
::testing::AssertionResult throws_with(F&& f, const std::vector<std::string>& needles) {
  std::string message;
  try {
    f();
    return ::testing::AssertionFailure() << "no exception";
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  } catch (const Error& e) {
    message = e.what();
  }
  for (const auto& n : needles)
    if (message.find(n) == std::string::npos)
      return ::testing::AssertionFailure() << "'" << n << "' not in: " << message;
  return ::testing::AssertionSuccess();
}

TEST(ShapeErrors, WrongRankNamesTheShape) {
  Attention attn(AttentionOptions(8, 8).score(ScoreKind::ScaledDot));
  EXPECT_TRUE(throws_with(
      [&] {
        attn->forward(at::randn({2, 8}), at::randn({2, 5, 8}), at::randn({2, 5, 8}));
      },
      {"Q", "[2, 8]"}));
}

TEST(ShapeErrors, BatchMismatchNamesBothShapes) {
  Attention attn(AttentionOptions(8, 8));
  EXPECT_TRUE(throws_with(
      [&] {
        attn->forward(at::randn({2, 1, 8}), at::randn({3, 5, 8}), at::randn({3, 5, 8}));
      },
      {"[2, 1, 8]", "[3, 5, 8]"}));
}

TEST(ShapeErrors, KeyValueLengthMismatchNamesBothShapes) {
  EXPECT_TRUE(throws_with(
      [&] {
        functional::check_qkv(at::randn({2, 1, 8}), at::randn({2, 5, 8}), at::randn({2, 4, 8}),
                              "test");
      },
      {"[2, 5, 8]", "[2, 4, 8]"}));
}

TEST(ShapeErrors, FeatureSizeMismatchNamesBothShapes) {
  Attention attn(AttentionOptions(8, 8).score(ScoreKind::Concat));
  EXPECT_TRUE(throws_with(
      [&] {
        attn->forward(at::randn({2, 1, 6}), at::randn({2, 5, 8}), at::randn({2, 5, 8}));
      },
      {"[2, 1, 6]", "[2, 5, 8]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        soft_attention(at::randn({1, 3}), at::randn({3, 4}), at::randn({3, 4}));
      },
      {"[1, 3]", "[3, 4]"}));
}

TEST(ShapeErrors, DotScoreNeedsEqualSizes) {
  EXPECT_TRUE(throws_with([&] { Attention(AttentionOptions(4, 6).score(ScoreKind::Dot)); },
                          {"query_size == key_size", "4", "6"}));
}

TEST(ShapeErrors, BadMaskNamesItsShape) {
  Attention attn(AttentionOptions(8, 8));
  auto mask = at::ones({2, 1, 4}, at::kBool);
  EXPECT_TRUE(throws_with(
      [&] {
        attn->forward(at::randn({2, 1, 8}), at::randn({2, 5, 8}), at::randn({2, 5, 8}), mask);
      },
      {"[2, 1, 4]", "[2, 1, 5]"}));
}

TEST(ShapeErrors, MultiheadEmbedMustDivide) {
  EXPECT_TRUE(
      throws_with([&] { MultiheadAttention(MultiheadAttentionOptions(10, 3)); }, {"10", "3"}));
}

TEST(StateDictErrors, WrongShapeNamesKeyAndBothShapes) {
  AttentionCombine wrong(AttentionCombineOptions(8, 8, 8, 5));  // the notes' file has 8 outputs
  io::LoadStateDictOptions options;
  options.renames = notes_attn_renames();
  options.source = "notes_myattn_state.pt";
  auto state = io::load_tensor_dict(testing::golden_path("notes_myattn_state.pt"));
  EXPECT_TRUE(throws_with([&] { io::load_state_dict(*wrong, state, options); },
                          {"notes_myattn_state.pt", "qc_linear.weight", "[8, 16]", "[5, 16]"}));
}

TEST(StateDictErrors, MissingAndUnexpectedKeysAreNamed) {
  AttentionCombine attn(AttentionCombineOptions(8, 8, 8, 8));
  auto state = io::load_tensor_dict(testing::golden_path("notes_myattn_state.pt"));
  // Without the notes' renames, qk_linear.* is unexpected and the module's score is missing.
  EXPECT_TRUE(throws_with([&] { io::load_state_dict(*attn, state); },
                          {"unexpected key 'qk_linear.weight'",
                           "missing key 'attention.score.linear.weight'", "[1, 16]"}));
}

TEST(StateDictErrors, NothingIsCopiedWhenLoadingFails) {
  AttentionCombine attn(AttentionCombineOptions(8, 8, 8, 5));
  auto before = attn->qc_linear->bias.clone();
  auto state = io::load_tensor_dict(testing::golden_path("notes_myattn_state.pt"));
  io::LoadStateDictOptions options;
  options.renames = notes_attn_renames();
  EXPECT_THROW(io::load_state_dict(*attn, state, options), Error);
  EXPECT_TRUE(attn->qc_linear->bias.equal(before));
}

}  // namespace
}  // namespace attnkit
