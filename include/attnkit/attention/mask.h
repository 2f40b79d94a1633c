#pragma once

#include <ATen/core/Tensor.h>

// Masks are boolean and *true where a key may be attended to* (the convention of
// F.scaled_dot_product_attention's boolean attn_mask). Every attention entry point takes one
// mask that broadcasts to [B, Tq, Tk]; combine masks with `&`.
namespace attnkit {

// lengths [B] (integer) -> [B, 1, Tk]: key j of row b is valid iff j < lengths[b].
at::Tensor padding_mask(const at::Tensor& lengths, int64_t max_len);

// A PyTorch-style key_padding_mask [B, Tk] (true = padding, ignore) -> [B, 1, Tk] (true = keep).
at::Tensor from_key_padding_mask(const at::Tensor& key_padding_mask);

// [1, Tq, Tk]: query i sees keys j <= i (top-left aligned, as torch.tril(ones(Tq, Tk))).
at::Tensor causal_mask(int64_t tq, int64_t tk, const at::TensorOptions& options = {});

// Validates a mask against [B, Tq, Tk] and returns it as bool, 3-D. An undefined mask stays
// undefined.
at::Tensor check_mask(const at::Tensor& mask, int64_t batch, int64_t tq, int64_t tk,
                      const char* where);

}  // namespace attnkit
