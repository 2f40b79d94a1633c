#include "attnkit/attention/mask.h"

#include <ATen/ATen.h>

namespace attnkit {

at::Tensor padding_mask(const at::Tensor& lengths, int64_t max_len) {
  TORCH_CHECK(lengths.dim() == 1, "padding_mask: lengths must be 1-D [B], got shape ",
              lengths.sizes());
  TORCH_CHECK(!at::isFloatingType(lengths.scalar_type()),
              "padding_mask: lengths must be integers, got ", lengths.scalar_type());
  TORCH_CHECK(max_len >= 0, "padding_mask: max_len must be >= 0, got ", max_len);
  auto positions = at::arange(max_len, lengths.options().dtype(at::kLong));           // [Tk]
  return (positions.unsqueeze(0) < lengths.to(at::kLong).unsqueeze(1)).unsqueeze(1);  // [B, 1, Tk]
}

at::Tensor from_key_padding_mask(const at::Tensor& key_padding_mask) {
  TORCH_CHECK(key_padding_mask.dim() == 2, "from_key_padding_mask: expected [B, Tk], got shape ",
              key_padding_mask.sizes());
  return key_padding_mask.to(at::kBool).logical_not().unsqueeze(1);  // [B, 1, Tk]
}

at::Tensor causal_mask(int64_t tq, int64_t tk, const at::TensorOptions& options) {
  return at::ones({tq, tk}, options.dtype(at::kBool)).tril().unsqueeze(0);  // [1, Tq, Tk]
}

at::Tensor check_mask(const at::Tensor& mask, int64_t batch, int64_t tq, int64_t tk,
                      const char* where) {
  if (!mask.defined()) return mask;
  TORCH_CHECK(mask.dim() == 3, where, ": the mask must be 3-D and broadcast to [B, Tq, Tk] = [",
              batch, ", ", tq, ", ", tk, "], got shape ", mask.sizes(),
              " (use padding_mask(lengths) for [B, 1, Tk] or causal_mask for [1, Tq, Tk])");
  const int64_t want[3] = {batch, tq, tk};
  for (int d = 0; d < 3; ++d) {
    TORCH_CHECK(mask.size(d) == want[d] || mask.size(d) == 1, where, ": mask of shape ",
                mask.sizes(), " does not broadcast to [B, Tq, Tk] = [", batch, ", ", tq, ", ", tk,
                "] (dim ", d, ")");
  }
  return mask.scalar_type() == at::kBool ? mask : mask.to(at::kBool);
}

}  // namespace attnkit
