#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "attnkit/decoding/search.h"
#include "attnkit/kernels/gemm/compute_type.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

// A translation model as the translator (translate/translator.h) sees it, whatever its
// architecture: something that starts a StepDecoder on a batch of source sentences. Each model
// implements it in its own folder (rnn/translation_model.h, transformer/translation_model.h);
// translate/registry.h builds them from a model directory's config.
namespace attnkit::decoding {

// Every attention map of one hypothesis, per layer, each [heads, rows, cols]: cross-attention
// [H, rows, S], decoder self-attention [H, rows, rows], encoder self-attention [H, S, S].
struct AttentionLayers {
  std::vector<at::Tensor> cross, decoder_self, encoder_self;
};

class TranslationModel {
 public:
  virtual ~TranslationModel() = default;
  // A decoder over source [B, S] (token ids, 0 = padding) with lengths [B]. The model is in
  // eval mode (search() sees to it), and may be shared by several threads' decoders.
  virtual std::unique_ptr<StepDecoder> start(const at::Tensor& source, const at::Tensor& lengths,
                                             const SearchOptions& options) = 0;
  // The maps of a model with several attentions, from one teacher-forced pass: the source's ids
  // and the decoder's inputs (<sos>, then the hypothesis's tokens but the last). Empty for a
  // model whose one attention is the search's.
  virtual AttentionLayers attention_layers(const std::vector<int64_t>& source,
                                           const std::vector<int64_t>& decoder_inputs) {
    return {};
  }
  // The weights, for loading, saving and counting.
  virtual torch::nn::Module& module() = 0;
  virtual kernels::ComputeType compute_type() const = 0;
};

// Puts the model in eval mode when it is training (the flag is written only then: threads
// searching one model read it), starts a decoder and searches by options.beam_size.
std::vector<std::vector<Hypothesis>> search(TranslationModel& model, const at::Tensor& source,
                                            const at::Tensor& lengths, const SearchOptions& options,
                                            SearchStats* stats = nullptr);

}  // namespace attnkit::decoding
