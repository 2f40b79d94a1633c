// The course notes' examples with attnkit: soft and hard attention of Q = [1, 0, 0] over
// K = V = I3, and the notes' Attn module (MyAttn) with its output size honoured.

#include <ATen/ATen.h>
#include <attnkit/attention/combine.h>
#include <attnkit/attention/notes.h>
#include <attnkit/version.h>

#include <cstdio>

namespace {

void print_row(const char* name, const at::Tensor& row) {
  std::printf("%s [", name);
  for (int64_t i = 0; i < row.numel(); ++i)
    std::printf("%s%.4f", i ? ", " : "", row[i].item<double>());
  std::printf("]\n");
}

}  // namespace

int main() {
  std::printf("attnkit %s\n", attnkit::kVersion);
  const auto q = at::tensor({1.f, 0.f, 0.f}).reshape({1, 3});
  const auto kv = at::eye(3);
  auto [soft_out, soft_weights] = attnkit::soft_attention(q, kv, kv);
  auto [hard_out, hard_weights] = attnkit::hard_attention(q, kv, kv);
  print_row("soft weights", soft_weights[0]);
  print_row("hard weights", hard_weights[0]);

  // The notes' Attn: query 8, key 8, value 8, output 5 (the notes' code would give 8).
  at::manual_seed(0);
  attnkit::AttentionCombine attn(attnkit::AttentionCombineOptions(8, 8, 8, 5));
  auto out = attn->forward(at::randn({2, 1, 8}), at::randn({2, 5, 8}), at::randn({2, 5, 8}));
  std::printf(
      "Attn output [%lld, %lld, %lld], weights [%lld, %lld, %lld]\n",
      static_cast<long long>(out.output.size(0)), static_cast<long long>(out.output.size(1)),
      static_cast<long long>(out.output.size(2)), static_cast<long long>(out.weights.size(0)),
      static_cast<long long>(out.weights.size(1)), static_cast<long long>(out.weights.size(2)));
  return 0;
}
