#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

// A weight's two column blocks as two views with one gradient node, for a weight whose blocks
// feed different products: the GRU decoder's W_ih [3H, E + Hf], whose embedding columns feed the
// teacher-forced gates of every step at once and whose input-feed columns feed the attention
// decoder. Two narrows give two SliceBackward nodes, each zero-filling a whole [3H, E + Hf]
// gradient and copying its block in, then an add of the two, all on one thread while the other
// core waits (about 1 % of a GRU training step). Here one node writes both blocks into one
// gradient, rows split between the kernels' threads. The reference is the two narrows
// (tests/test_step_kernels.cpp, ColumnSplit.*).
namespace attnkit::kernels {

// w [R, C] -> (w[:, :at], w[:, at:]), views of w; 0 < at < C. Anything but a float or double CPU
// matrix takes the reference.
std::pair<at::Tensor, at::Tensor> split_columns(const at::Tensor& w, int64_t at);

}  // namespace attnkit::kernels
