#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "attnkit/decoding/search.h"
#include "attnkit/kernels/gemm/compute_type.h"

// Validators for numeric options: every number a command takes is checked where it is parsed,
// so that 0 layers, a NaN learning rate or port 70000 is refused with the option's name instead
// of crashing (or being quietly used) later. CLI11's own range checks let NaN through.
namespace attnkit::cli::checks {

// A finite number in [lo, hi] (either bound may be infinite); `open_lo` and `open_hi` exclude
// the bound.
inline CLI::Validator range(double lo, double hi, bool open_lo = false, bool open_hi = false) {
  std::string what = std::string(open_lo ? "(" : "[") +
                     (std::isinf(lo) ? "-inf" : CLI::detail::to_string(lo)) + ", " +
                     (std::isinf(hi) ? "inf" : CLI::detail::to_string(hi)) + (open_hi ? ")" : "]");
  return CLI::Validator(
      [=](std::string& value) -> std::string {
        double x;
        try {
          size_t used = 0;
          x = std::stod(value, &used);
          if (used != value.size()) return "'" + value + "' is not a number";
        } catch (const std::exception&) {
          return "'" + value + "' is not a number";
        }
        if (!std::isfinite(x)) return value + " is not a finite number";
        if (x < lo || x > hi || (open_lo && x == lo) || (open_hi && x == hi))
          return value + " is outside " + what;
        return "";
      },
      "in " + what);
}

inline CLI::Validator positive() { return range(0, std::numeric_limits<double>::infinity(), true); }
inline CLI::Validator at_least(double lo) {
  return range(lo, std::numeric_limits<double>::infinity());
}
inline CLI::Validator non_negative() { return at_least(0); }
// Probabilities of dropping or smoothing: 1 would leave nothing.
inline CLI::Validator fraction() { return range(0, 1, false, true); }
inline CLI::Validator probability() { return range(0, 1); }
inline CLI::Validator port() { return range(0, 65535); }

// --compute-type float32|int8 for a command that loads a model: unset keeps the model
// directory's (config.json's compute_type).
inline CLI::Option* add_compute_type(CLI::App* app,
                                     std::optional<kernels::ComputeType>& compute_type) {
  return app
      ->add_option_function<std::string>(
          "--compute-type",
          [&compute_type](const std::string& name) {
            compute_type = kernels::parse_compute_type(name);
          },
          "What decoding computes in: float32 | int8 (default: the model directory's; int8 "
          "quantizes a float32 model's weights as it loads them)")
      ->check(CLI::IsMember({"float32", "int8"}));
}

// The search's penalties (decoding::SearchOptions), the same options in every command that
// decodes.
inline void add_search_penalties(CLI::App* app, decoding::SearchOptions& search) {
  app->add_option("--repetition-penalty", search.repetition_penalty,
                  "Divide the logit of a token already written by this (1: none)")
      ->check(range(1, 100))
      ->capture_default_str();
  app->add_option("--no-repeat-ngram", search.no_repeat_ngram,
                  "Never write an n-gram of this many tokens twice (0: allowed)")
      ->check(range(0, 100))
      ->capture_default_str();
  app->add_option("--coverage-penalty", search.coverage_penalty,
                  "Beam search: add beta x the sum over source tokens of log(min(1, attention "
                  "received)) to a finished hypothesis's score (0: none)")
      ->check(range(0, 100))
      ->capture_default_str();
}

// Random sampling (decoding::SearchOptions), greedy search only.
inline void add_sampling(CLI::App* app, decoding::SearchOptions& search) {
  app->add_option("--sampling-topk", search.sampling_topk,
                  "Sample from the k most likely tokens (1: no sampling; 0: all); needs --beam 1")
      ->check(range(0, 1e9))
      ->capture_default_str();
  app->add_option("--sampling-topp", search.sampling_topp,
                  "Sample within the smallest set of tokens whose probability reaches this")
      ->check(range(0, 1, /*open_lo=*/true))
      ->capture_default_str();
  app->add_option("--temperature", search.temperature, "Sampling temperature")
      ->check(range(0, 100, /*open_lo=*/true))
      ->capture_default_str();
  app->add_option("--seed", search.seed, "The sampling's seed: the same seed, the same output")
      ->capture_default_str();
}

}  // namespace attnkit::cli::checks
