#pragma once

#include <array>
#include <string>
#include <vector>

#include "attnkit/translate/translator.h"

// A confidence for each translation, from what the model knows of it, calibrated on held-out
// pairs so that it reads as the sentence chrF2 to expect: 0.82 means "about 82".
//
// Why these features: on packages it never saw, a model's failures show as a low log-probability
// per token (it was unsure), as source tokens that no step attended to (a word dropped), as
// repeated words and n-grams ("内核IP IP"), as placeholders it dropped or invented (which
// po::restore then repairs), and as a length far from the source's. Each alone separates good
// from bad suggestions poorly; a least-squares fit of sentence chrF2 on all of them, on whole
// held-out packages, weights them for the model at hand (`attnkit calibrate`, which writes the
// model directory's confidence.json and reports how well the figure separates). The features
// are the same for either architecture: the GRU model's attention, or the Transformer's
// alignment layer (Translation::attention). tests/test_confidence.cpp holds each feature on
// hand-made translations and the fit to a known linear relation.
namespace attnkit::translate {

struct ConfidenceFeatures {
  static constexpr size_t kCount = 6;
  double log_prob = 0;      // Translation::score: the length-normalised log-probability
  double coverage = 0;      // mean over source tokens of log(min(1, attention summed over steps))
  double uncovered = 0;     // the share of source tokens no step gave 0.1 of its attention
  double repeats = 0;       // words doubled and bigrams repeated, per target token
  double placeholders = 0;  // placeholders the output dropped or added
  double length_ratio = 0;  // log((target tokens + 1) / (source tokens + 1))

  std::array<double, kCount> values() const;
  static const std::array<const char*, kCount>& names();
};

ConfidenceFeatures confidence_features(const Translation& t);

class Confidence {
 public:
  // Ridge least squares of `chrf` (sentence chrF2, 0..100) on the standardised features.
  // Needs at least kCount + 1 pairs (else attnkit::Error).
  static Confidence fit(const std::vector<ConfidenceFeatures>& x, const std::vector<double>& chrf);

  bool fitted() const { return fitted_; }
  // The expected sentence chrF2 over 100, clipped to [0, 1].
  double operator()(const ConfidenceFeatures& f) const;
  double operator()(const Translation& t) const { return (*this)(confidence_features(t)); }

  // As JSON text (what confidence.json holds), and back: a malformed text is an attnkit::Error
  // naming `where`.
  std::string to_json() const;
  static Confidence from_json(const std::string& text, const std::string& where);
  // <model_dir>/confidence.json, or an unfitted Confidence when the model has none.
  static Confidence load(const std::string& model_dir);
  void save(const std::string& model_dir) const;  // atomically

  size_t pairs() const { return pairs_; }  // the pairs it was fitted on

 private:
  std::array<double, ConfidenceFeatures::kCount> mean_{}, scale_{}, weight_{};
  double bias_ = 0;
  size_t pairs_ = 0;
  bool fitted_ = false;
};

inline constexpr const char* kConfidenceFile = "confidence.json";

// Pearson's correlation of two equally long series (0 when either is constant).
double pearson(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace attnkit::translate
