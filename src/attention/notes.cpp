#include "attnkit/attention/notes.h"

#include <ATen/ATen.h>

#include <cmath>

#include "attnkit/attention/functional.h"

namespace attnkit {
namespace {

void check_notes_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const char* where) {
  TORCH_CHECK((q.dim() == 2 || q.dim() == 3) && q.dim() == k.dim() && k.dim() == v.dim(), where,
              ": Q ", q.sizes(), ", K ", k.sizes(), " and V ", v.sizes(),
              " must all be 2-D [T, D] or all 3-D [B, T, D]");
  TORCH_CHECK(q.size(-1) == k.size(-1), where, ": Q ", q.sizes(), " and K ", k.sizes(),
              " must have the same last dimension");
  TORCH_CHECK(k.size(-2) == v.size(-2), where, ": K ", k.sizes(), " and V ", v.sizes(),
              " must have the same number of rows");
}

}  // namespace

std::pair<at::Tensor, at::Tensor> soft_attention(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v) {
  check_notes_inputs(q, k, v, "soft_attention");
  auto weights = functional::soft_weights(at::matmul(q, k.transpose(-2, -1)));  // [Tq, Tk]
  return {at::matmul(weights, v), weights};
}

std::pair<at::Tensor, at::Tensor> hard_attention(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v) {
  check_notes_inputs(q, k, v, "hard_attention");
  auto weights = functional::hard_weights(at::matmul(q, k.transpose(-2, -1)));  // [Tq, Tk]
  return {at::matmul(weights, v), weights};
}

std::pair<at::Tensor, at::Tensor> self_attention(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 || x.dim() == 3, "self_attention: X must be [T, D] or [B, T, D], got ",
              x.sizes());
  return functional::scaled_dot_product_attention(x, x, x);
}

}  // namespace attnkit
