#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

// The course notes' three functions, with their exact semantics: 2-D inputs
// (Q [Tq, D], K [Tk, D], V [Tk, Dv]) as in the notes, or batched 3-D inputs. Each returns
// (output, weights).
namespace attnkit {

// softmax(Q K^T) V: unscaled dot-product scores, soft weights.
std::pair<at::Tensor, at::Tensor> soft_attention(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v);
// one_hot(argmax(Q K^T)) V: weights are 0 or 1 and carry no gradient.
std::pair<at::Tensor, at::Tensor> hard_attention(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v);
// Q = K = V = X: softmax(X X^T / sqrt(d)) X.
std::pair<at::Tensor, at::Tensor> self_attention(const at::Tensor& x);

}  // namespace attnkit
