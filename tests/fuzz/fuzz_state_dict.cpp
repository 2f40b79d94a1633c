// state_dicts from torch.save (what `attend --state-dict` reads): the tensors through the
// unpickler, then copied into the notes' MyAttn (AttentionCombine 8/8/8 -> 8) and into a
// MultiheadAttention (E = 8, 2 heads), names and shapes checked; what loads runs forward.
// Seeds: the golden state_dicts of both modules.

#include <torch/torch.h>

#include "attnkit/attention/combine.h"
#include "attnkit/attention/self_attention.h"
#include "attnkit/core/error.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/io/state_dict.h"
#include "fuzz_input.h"

ATTNKIT_FUZZ_TARGET(state_dict) {
  using namespace attnkit;
  static AttentionCombine notes(AttentionCombineOptions(8, 8, 8, 8));
  static MultiheadAttention multihead(MultiheadAttentionOptions(8, 2));
  static const auto x = torch::ones({1, 3, 8});
  const std::string path =
      fuzz::write_file("state.pt", std::string(reinterpret_cast<const char*>(data), size));
  io::TensorDict state;
  try {
    state = io::load_tensor_dict(path);
  } catch (const Error&) {
    return 0;
  }
  torch::NoGradGuard no_grad;
  try {
    io::load_state_dict(*notes, state);
    notes->forward(x, x, x);
  } catch (const Error&) {
  }
  try {
    io::load_state_dict(*multihead, state);
    multihead->forward(x, x, x);
  } catch (const Error&) {
  }
  return 0;
}
