#include "attnkit/kernels/ops/ragged.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "../cpu/row_parts.h"

namespace attnkit::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Each sequence's real rows are one run of bytes in the padded layout and one in the ragged one:
// a memcpy each way per sequence. `to_ragged` says which way; padding rows are zeroed.
void move_rows(const at::Tensor& padded, const at::Tensor& ragged, const Ragged& r,
               bool to_ragged) {
  const int64_t row_bytes = (padded.numel() / std::max<int64_t>(1, padded.size(0) * r.length)) *
                            static_cast<int64_t>(padded.element_size());
  auto* p = static_cast<char*>(padded.data_ptr());
  auto* q = static_cast<char*>(ragged.data_ptr());
  const int64_t B = static_cast<int64_t>(r.lengths.size());
  std::vector<int64_t> first(B + 1, 0);  // each sequence's first ragged row
  for (int64_t b = 0; b < B; ++b) first[b + 1] = first[b] + r.lengths[b];
  // Sequences in contiguous blocks, one per thread part, each part at least 256 KiB: a
  // Transformer training step moves rows around every decoder layer's attention, and on one
  // thread the copies were 1.5 % of the main thread's samples with the other thread waiting.
  const int64_t bytes = B * r.length * row_bytes;
  const int64_t parts = std::max<int64_t>(1, std::min(row_parts(B), bytes / (1 << 18)));
  for_each_row_part(parts, [&](RowPart part) {
    for (int64_t b = B * part.first / parts; b < B * (part.first + 1) / parts; ++b) {
      const int64_t real = r.lengths[b] * row_bytes, rest = (r.length - r.lengths[b]) * row_bytes;
      char *pb = p + b * r.length * row_bytes, *qb = q + first[b] * row_bytes;
      if (to_ragged) {
        std::memcpy(qb, pb, real);
      } else {
        std::memcpy(pb, qb, real);
        std::memset(pb + real, 0, rest);
      }
    }
  });
}

void check_lengths(const Ragged& r) {
  for (int64_t len : r.lengths)
    TORCH_CHECK(len >= 0 && len <= r.length, "Ragged: a length of ", len, " in sequences of ",
                r.length);
}

void check_padded(const at::Tensor& x, const Ragged& r) {
  check_lengths(r);
  TORCH_CHECK(
      x.dim() >= 2 && x.size(0) == static_cast<int64_t>(r.lengths.size()) && x.size(1) == r.length,
      "unpad: x must be [", r.lengths.size(), ", ", r.length, ", ...] but has shape ", x.sizes());
}

at::Tensor unpad_forward(const at::Tensor& x, const Ragged& r) {
  check_padded(x, r);
  auto sizes = x.sizes().vec();
  sizes.erase(sizes.begin());
  sizes[0] = r.rows();
  auto y = at::empty(sizes, x.options());
  move_rows(x.contiguous(), y, r, /*to_ragged=*/true);
  return y;
}

at::Tensor pad_forward(const at::Tensor& x, const Ragged& r) {
  check_lengths(r);
  TORCH_CHECK(x.dim() >= 1 && x.size(0) == r.rows(), "pad: x must have ", r.rows(),
              " rows but has shape ", x.sizes());
  auto sizes = x.sizes().vec();
  sizes[0] = r.length;
  sizes.insert(sizes.begin(), static_cast<int64_t>(r.lengths.size()));
  auto y = at::empty(sizes, x.options());
  move_rows(y, x.contiguous(), r, /*to_ragged=*/false);
  return y;
}

// One node for both directions: unpad's gradient is pad and pad's is unpad.
struct MoveRows : torch::autograd::Function<MoveRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Ragged& r,
                            bool to_ragged) {
    ctx->saved_data["lengths"] = r.lengths;
    ctx->saved_data["length"] = r.length;
    ctx->saved_data["to_ragged"] = to_ragged;
    return to_ragged ? unpad_forward(x, r) : pad_forward(x, r);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Ragged r{ctx->saved_data["lengths"].toIntVector(), ctx->saved_data["length"].toInt()};
    const bool to_ragged = ctx->saved_data["to_ragged"].toBool();
    return {to_ragged ? pad_forward(grads[0], r) : unpad_forward(grads[0], r), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

int64_t Ragged::rows() const { return std::accumulate(lengths.begin(), lengths.end(), int64_t{0}); }

Ragged Ragged::from_mask(const at::Tensor& mask) {
  TORCH_CHECK(mask.dim() == 2 && mask.scalar_type() == at::kBool,
              "Ragged: the mask must be [B, T] bool but is ", mask.scalar_type(), " ",
              mask.sizes());
  const auto m = mask.to(at::kCPU).contiguous();
  Ragged r;
  r.length = m.size(1);
  const bool* p = m.data_ptr<bool>();
  for (int64_t b = 0; b < m.size(0); ++b, p += r.length) {
    const int64_t len = std::find(p, p + r.length, false) - p;
    TORCH_CHECK(std::find(p + len, p + r.length, true) == p + r.length, "Ragged: row ", b,
                " of the mask is not a prefix (a real position after padding)");
    r.lengths.push_back(len);
  }
  return r;
}

at::Tensor unpad(const at::Tensor& x, const Ragged& ragged) {
  return MoveRows::apply(x, ragged, /*to_ragged=*/true);
}

at::Tensor pad(const at::Tensor& x, const Ragged& ragged) {
  return MoveRows::apply(x, ragged, /*to_ragged=*/false);
}

}  // namespace attnkit::kernels
