#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "attnkit/decoding/search.h"

// Teacher-forced scoring: the log-probability a model gives each token of given translations
// (Marian's scorer, CTranslate2's score_batch), for filtering a corpus and for seeing where a
// model disagrees with a reference. It drives the same StepDecoder a search does, feeding the
// given tokens instead of choosing them, so that a search's own hypothesis scores exactly what
// the search said it scored (tests/test_score.cpp holds the two together).
namespace attnkit::decoding {

struct ForcedScore {
  std::vector<double> token_log_probs;  // one per target token, then the end of sentence's
  double log_prob = 0;                  // their sum
  at::Tensor attention;                 // [target tokens + 1, S]
  at::Tensor next_log_probs;            // [V]: after the last target token (where <eos> scored)
};

// Scores targets[b] (token ids, without <sos>/<eos>) against the decoder's sentence b.
std::vector<ForcedScore> force(StepDecoder& decoder,
                               const std::vector<std::vector<int64_t>>& targets);

}  // namespace attnkit::decoding
