// The fused GRU kernels (kernels/gru.h) against torch::nn::GRU and at::gru_cell, which stay the
// reference, and against finite differences.

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/modules/rnn.h>
#include <torch/nn/utils/rnn.h>

#include <optional>

#include "attnkit/kernels/blocks/gru.h"
#include "attnkit/kernels/cpu/one_part.h"
#include "attnkit/rnn/model.h"
#include "testing.h"

namespace attnkit {
namespace {

using testing::close;
using testing::gradcheck;

const at::Tensor none = at::zeros({1}, at::kDouble);  // projection_loss's unused second input

struct Weights {
  at::Tensor w_ih, w_hh, b_ih, b_hh;
};

Weights random_weights(int64_t in, int64_t hidden, at::ScalarType type) {
  auto make = [&](std::initializer_list<int64_t> shape) {
    return (at::rand(shape, at::kDouble) - 0.5).to(type).requires_grad_();
  };
  return {make({3 * hidden, in}), make({3 * hidden, hidden}), make({3 * hidden}),
          make({3 * hidden})};
}

TEST(GRUKernels, CellMatchesATenGruCellInValuesAndGradients) {
  at::manual_seed(3);
  const int64_t N = 5, I = 7, H = 12;  // H not a multiple of 8: the vector loop's tail runs
  auto w = random_weights(I, H, at::kFloat);
  auto x = at::randn({N, I}).requires_grad_(), h = at::randn({N, H}).requires_grad_();
  auto g = at::randn({N, H});

  auto expected = at::gru_cell(x, h, w.w_ih, w.w_hh, w.b_ih, w.b_hh);
  auto expected_grads =
      torch::autograd::grad({expected}, {x, h, w.w_ih, w.w_hh, w.b_ih, w.b_hh}, {g});
  auto actual = kernels::gru_cell(at::addmm(w.b_ih, x, w.w_ih.t()), h, w.w_hh, w.b_hh);
  auto actual_grads = torch::autograd::grad({actual}, {x, h, w.w_ih, w.w_hh, w.b_ih, w.b_hh}, {g});
  EXPECT_TRUE(close(actual, expected));
  for (size_t i = 0; i < expected_grads.size(); ++i)
    EXPECT_TRUE(close(actual_grads[i], expected_grads[i])) << "gradient " << i;
}

TEST(GRUKernels, GatesOnRawRowsMatchTheCell) {
  at::manual_seed(4);
  const int64_t N = 3, H = 20;
  auto gi = at::randn({N, 3 * H}), h = at::randn({N, H}), w = at::randn({3 * H, H}) * 0.3,
       b = at::randn({3 * H});
  auto expected = kernels::gru_cell(gi, h, w, b);
  auto gh = at::addmm(b, h, w.t()).contiguous();
  auto out = at::empty({N, H});
  kernels::gru_gates(gi.data_ptr<float>(), gh.data_ptr<float>(), h.data_ptr<float>(),
                     out.data_ptr<float>(), N, H);
  EXPECT_TRUE(close(out, expected, 1e-6, 1e-6));
}

// A bidirectional torch::nn::GRU over a packed batch (unsorted lengths) against gru_sequence run
// forwards and backwards over the same padded batch: 4 rows take one GEMV per row and step, 11
// the packed weight with rows split between threads.
void check_against_nn_gru(const at::Tensor& lengths) {
  at::manual_seed(5);
  const int64_t B = lengths.size(0), T = 6, I = 5, H = 9;
  SCOPED_TRACE(::testing::Message() << "batch " << B);
  torch::nn::GRU reference(torch::nn::GRUOptions(I, H).bidirectional(true).batch_first(true));
  auto x = at::randn({B, T, I}).requires_grad_();
  auto h0 = at::randn({2, B, H}).requires_grad_();

  auto packed = torch::nn::utils::rnn::pack_padded_sequence(x, lengths, true, false);
  auto [packed_out, h_n] = reference->forward_with_packed_input(packed, h0);
  auto expected = std::get<0>(torch::nn::utils::rnn::pad_packed_sequence(packed_out, true, 0.0, T));

  std::vector<at::Tensor> outs, finals;
  for (int dir = 0; dir < 2; ++dir) {
    const std::string suffix = dir ? "_l0_reverse" : "_l0";
    auto p = reference->named_parameters();
    auto gi = at::matmul(x, p["weight_ih" + suffix].t()) + p["bias_ih" + suffix];  // [B, T, 3H]
    auto [out, final] = kernels::gru_sequence(gi, h0[dir], p["weight_hh" + suffix],
                                              p["bias_hh" + suffix], lengths, dir == 1);
    outs.push_back(out);
    finals.push_back(final);
  }
  auto actual = at::cat(outs, -1);
  auto actual_final = at::stack(finals);
  EXPECT_TRUE(close(actual, expected));
  EXPECT_TRUE(close(actual_final, h_n));
  // Padding positions are exactly zero, as pad_packed_sequence leaves them.
  EXPECT_EQ(actual[2].narrow(0, 1, T - 1).abs().max().item<float>(), 0.f);

  auto go = at::randn_like(expected), gh = at::randn_like(h_n);
  std::vector<at::Tensor> inputs = {x, h0};
  for (auto& p : reference->parameters()) inputs.push_back(p);
  auto expected_grads = torch::autograd::grad({expected, h_n}, inputs, {go, gh});
  auto actual_grads = torch::autograd::grad({actual, actual_final}, inputs, {go, gh});
  for (size_t i = 0; i < inputs.size(); ++i)
    EXPECT_TRUE(close(actual_grads[i], expected_grads[i], 1e-5, 1e-4)) << "gradient " << i;
}

TEST(GRUKernels, SequenceMatchesPackedBidirectionalNnGru) {
  check_against_nn_gru(at::tensor({4, 6, 1, 3}, at::kLong));
  check_against_nn_gru(at::tensor({4, 6, 1, 3, 6, 2, 5, 6, 1, 3, 4}, at::kLong));
}

TEST(GRUKernels, SequenceGradientsMatchFiniteDifferences) {
  at::manual_seed(6);
  const int64_t B = 9, T = 4, H = 3;  // 9 rows: the packed weight, rows split between threads
  auto w = random_weights(1, H, at::kDouble);
  auto gi = at::randn({B, T, 3 * H}, at::kDouble).requires_grad_();
  auto h0 = at::randn({B, H}, at::kDouble).requires_grad_();
  auto lengths = at::tensor({2, 4, 0, 1, 3, 4, 2, 2, 1}, at::kLong);  // row 2 keeps h0
  for (bool reverse : {false, true}) {
    auto loss = [&] {
      auto [out, final] = kernels::gru_sequence(gi, h0, w.w_hh, w.b_hh, lengths, reverse);
      return testing::projection_loss(out, none, 1) + testing::projection_loss(final, none, 2);
    };
    EXPECT_TRUE(gradcheck(loss, {gi, h0, w.w_hh, w.b_hh})) << (reverse ? "reverse" : "forward");
  }
  auto [out, final] = kernels::gru_sequence(gi, h0, w.w_hh, w.b_hh, lengths, false);
  EXPECT_TRUE(close(final[2], h0[2], 0, 0));
}

TEST(GRUKernels, CellGradientsMatchFiniteDifferences) {
  at::manual_seed(7);
  const int64_t N = 2, H = 4;
  auto w = random_weights(1, H, at::kDouble);
  auto gi = at::randn({N, 3 * H}, at::kDouble).requires_grad_();
  auto h = at::randn({N, H}, at::kDouble).requires_grad_();
  auto loss = [&] {
    return testing::projection_loss(kernels::gru_cell(gi, h, w.w_hh, w.b_hh), none, 3);
  };
  EXPECT_TRUE(gradcheck(loss, {gi, h, w.w_hh, w.b_hh}));
}

TEST(GRUKernels, RejectsMismatchedShapesWithTheExpectedShape) {
  auto h = at::zeros({2, 4});
  try {
    kernels::gru_cell(at::zeros({2, 12}), h, at::zeros({12, 5}), at::zeros({12}));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("w_hh must be [3H, H] = [12, 4]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(kernels::gru_sequence(at::zeros({2, 3, 12}), h, at::zeros({12, 4}), at::zeros({12}),
                                     at::tensor({1, 5}, at::kLong), false),
               c10::Error);
}

// The whole translation model with its GRUs fused against the same model on torch::nn::GRU:
// logits and every parameter's gradient, for deep and shallow, bi- and unidirectional encoders.
TEST(GRUKernels, Seq2SeqWithFusedGrusMatchesTheNnGruReference) {
  for (auto [layers, bidirectional] :
       {std::pair{1, true}, std::pair{2, true}, std::pair{2, false}}) {
    auto options = rnn::RnnOptions(11, 13)
                       .embed_size(6)
                       .hidden_size(8)
                       .layers(layers)
                       .bidirectional(bidirectional)
                       // Without dropout: the fused path draws its masks in another order
                       // (all steps' embeddings at once, padded rather than packed outputs).
                       .dropout(0.0);
    at::manual_seed(8);
    rnn::RnnModel reference(options.fused_kernels(false));
    rnn::RnnModel fused(options.fused_kernels(true));
    {
      at::NoGradGuard no_grad;
      auto from = reference->named_parameters();
      for (auto& p : fused->named_parameters()) p.value().copy_(from[p.key()]);
    }
    auto source = at::randint(1, 11, {3, 5}, at::kLong),
         target = at::randint(1, 13, {3, 4}, at::kLong);
    auto lengths = at::tensor({3, 5, 1}, at::kLong);
    source.index_put_({0, at::indexing::Slice(3)}, 0);
    source.index_put_({2, at::indexing::Slice(1)}, 0);
    at::manual_seed(9);
    auto expected = reference->forward(source, lengths, target).logits;
    at::manual_seed(9);
    auto actual = fused->forward(source, lengths, target).logits;
    EXPECT_TRUE(close(actual, expected)) << layers << " layers";
    auto g = at::randn_like(expected);
    expected.backward(g);
    actual.backward(g);
    auto ref_params = reference->named_parameters();
    for (auto& p : fused->named_parameters())
      EXPECT_TRUE(close(p.value().grad(), ref_params[p.key()].grad(), 1e-5, 1e-4))
          << p.key() << ", " << layers << " layers";
  }
}

// The searches' encoder (the GRU and the bridge on weights packed once per model, the directions
// side by side on two threads) against the training path (kernels::gru_sequence) and against
// torch::nn::GRU: memory, mask, initial state and summary, for deep and shallow, bi- and
// unidirectional encoders, rows of three lengths (one of them 1) in unsorted order.
TEST(GRUKernels, PackedInferenceEncoderMatchesTheTrainingPathAndNnGru) {
  for (auto [layers, bidirectional] :
       {std::pair{1, true}, std::pair{2, true}, std::pair{2, false}}) {
    SCOPED_TRACE(std::to_string(layers) + " layers, " +
                 (bidirectional ? "bidirectional" : "one direction"));
    auto options = rnn::RnnOptions(11, 13)
                       .embed_size(6)
                       .hidden_size(20)  // 3H = 60: the last panel is partly padding
                       .layers(layers)
                       .bidirectional(bidirectional);
    at::manual_seed(8);
    rnn::Encoder fused(options);
    rnn::Encoder reference(options.fused_kernels(false));
    {
      at::NoGradGuard no_grad;
      auto from = fused->named_parameters();
      for (auto& p : reference->named_parameters()) p.value().copy_(from[p.key()]);
    }
    fused->eval();
    reference->eval();
    c10::InferenceMode inference;
    auto source = at::randint(1, 11, {4, 5}, at::kLong);
    auto lengths = at::tensor({3, 5, 1, 5}, at::kLong);
    source.index_put_({0, at::indexing::Slice(3)}, 0);
    source.index_put_({2, at::indexing::Slice(1)}, 0);
    const auto training_path = fused->forward(source, lengths);
    const auto nn_gru = reference->forward(source, lengths);
    for (bool one_thread : {false, true}) {
      std::optional<kernels::OnePartPerThread> single;
      if (one_thread) single.emplace();
      const auto packed = fused->forward(source, lengths, /*packed=*/true);
      for (const auto* expected : {&training_path, &nn_gru}) {
        EXPECT_TRUE(close(packed.memory, expected->memory));
        EXPECT_TRUE(close(packed.state, expected->state));
        EXPECT_TRUE(close(packed.summary, expected->summary));
        EXPECT_TRUE(at::equal(packed.mask, expected->mask));
      }
      // Past each length the memory is exactly zero, as the packed sequence's padding.
      EXPECT_EQ(packed.memory.index({0, at::indexing::Slice(3)}).abs().sum().item<float>(), 0.f);
      EXPECT_EQ(packed.memory.index({2, at::indexing::Slice(1)}).abs().sum().item<float>(), 0.f);
    }
  }
}

}  // namespace
}  // namespace attnkit
