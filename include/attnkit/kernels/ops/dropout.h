#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

// Inverted dropout on a counter-based random stream: one 64-bit seed per call from LibTorch's
// default generator (so at::manual_seed and checkpointed RNG state govern it), and each
// element's keep decision a hash of (seed, index). Nothing is stored for the backward pass,
// which rehashes. ATen's bernoulli_ draws elements one by one from a Mersenne Twister; in the
// profile of a training step it took 4% of the time. at::dropout stays the reference: the
// masks differ, their distribution does not (tests/test_step_kernels.cpp).
namespace attnkit::kernels {

// x (float or double) -> x * keep / (1 - p), keep ~ Bernoulli(1 - p). Identity when !training
// or p == 0; zeros when p == 1. Differentiable in x.
at::Tensor dropout(const at::Tensor& x, double p, bool training);

// x + dropout(y, p, training), a sublayer's output joining the residual stream, in one pass and
// one autograd node, on the kernels' threads: the same mask as kernels::dropout draws from the
// same seed (so the same sum, bit for bit). ATen's add got no thread under ThreadPolicy::Kernels:
// in a Transformer training step the stream's adds ran on one core while the other waited.
// x and y of one shape and type (float or double on the CPU); anything else takes the composite.
at::Tensor add_dropout(const at::Tensor& x, const at::Tensor& y, double p, bool training);

// dropout(at::relu(x), p, training), the Transformer's feed-forward activation, in one pass and
// one autograd node: the same mask as kernels::dropout draws from the same seed, and a backward
// pass that reads the saved output (above zero exactly where the gradient flows) instead of a
// mask. In the profile of a Transformer training step, ReLU and its backward took 7 % beside
// the dropout after it. Float and double on the CPU; anything else takes the composite.
at::Tensor relu_dropout(const at::Tensor& x, double p, bool training);

// The seed the next dropout on this thread would draw (and draws it).
uint64_t next_dropout_seed();

// While one lives, the dropouts on its thread draw their seeds from a stream of its own that
// starts at `seed`, instead of from LibTorch's default generator. Threads that train parts of one
// batch at once (train/trainer.cpp's lanes) each take one, seeded in order from the default
// generator, so that every part's masks are the same whatever the threads' timing and however
// many threads run the parts. Not nested.
class DropoutSeedStream {
 public:
  explicit DropoutSeedStream(uint64_t seed);
  ~DropoutSeedStream();
  DropoutSeedStream(const DropoutSeedStream&) = delete;
  DropoutSeedStream& operator=(const DropoutSeedStream&) = delete;
};

}  // namespace attnkit::kernels
