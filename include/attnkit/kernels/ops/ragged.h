#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

// A padded batch's sequences as their real rows only, one sequence after another. In training
// batches sorted by source length, about 30 % of the target positions are padding; a Transformer
// decoder computes them in every position-wise product (projections, feed-forward), norm and
// dropout, and the loss then drops them. On the ragged rows only the attention itself sees the
// padded layout (MultiheadAttentionImpl::forward_ragged pads its projections around the kernel).
// This is exact for the real rows whenever padding cannot reach them: after the real positions of
// a causally masked sequence, or behind a key padding mask.
namespace attnkit::kernels {

// Which rows of a padded [B, T, ...] batch are real: each sequence's first lengths[b] positions.
struct Ragged {
  std::vector<int64_t> lengths;  // [B], each in [0, length]
  int64_t length = 0;            // T
  int64_t rows() const;          // the sum of lengths
  // mask [B, T] bool whose true entries make a prefix of each row (target_out != <pad>);
  // throws if one does not.
  static Ragged from_mask(const at::Tensor& mask);
};

// x [B, T, ...] (contiguous or not) -> [R, ...], the real rows in order, sequence-major: the rows
// of mask.nonzero(). Differentiable; the gradient is pad()'s.
at::Tensor unpad(const at::Tensor& x, const Ragged& ragged);

// x [R, ...] -> [B, T, ...] with zeros on the padding. Differentiable; the gradient is unpad()'s.
at::Tensor pad(const at::Tensor& x, const Ragged& ragged);

}  // namespace attnkit::kernels
