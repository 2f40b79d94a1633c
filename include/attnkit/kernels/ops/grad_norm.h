#pragma once

#include <cstdint>
#include <vector>

// Gradient clipping's two passes over every float32 gradient of a step, each one job split
// between the kernels' threads. Tensor by tensor through ATen (norm, then mul_), they were 46
// single-threaded ops of a GRU training step with a .item() after each norm, while the other
// thread waited. train::clip_grad_norm drives them; torch::nn::utils::clip_grad_norm_ is the
// reference (tests/test_step_kernels.cpp, ClipGradNorm.*).
namespace attnkit::kernels {

struct FloatSpan {
  float* data;
  int64_t size;
};

// sum of x^2 over every span, in double. Each span is summed in fixed blocks of kNormBlock
// elements and the blocks' sums are added in order, so the result does not depend on the number
// of threads.
constexpr int64_t kNormBlock = 8192;
double sum_of_squares(const std::vector<FloatSpan>& spans);

// x *= factor over every span.
void scale(const std::vector<FloatSpan>& spans, float factor);

// dst[t] += src[t] over every span t (src[t] holds dst[t].size floats): the gradients of a
// batch's parts trained at once (train/trainer.cpp's lanes) summed in one job. Element-wise, so
// the threads change nothing.
void add(const std::vector<FloatSpan>& dst, const std::vector<const float*>& src);

}  // namespace attnkit::kernels
