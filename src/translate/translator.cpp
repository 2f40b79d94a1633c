#include "attnkit/translate/translator.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>
#include <numeric>
#include <thread>

#include "attnkit/core/error.h"
#include "attnkit/core/info.h"
#include "attnkit/decoding/force.h"
#include "attnkit/io/weights.h"
#include "attnkit/kernels/cpu/one_part.h"
#include "attnkit/train/checkpoint.h"
#include "attnkit/translate/registry.h"

namespace attnkit::translate {
namespace fs = std::filesystem;
using decoding::Hypothesis;
using decoding::SearchOptions;
using decoding::SearchStats;

std::vector<std::string> greedy_texts(Translator& translator,
                                      const std::vector<std::string>& sources) {
  SearchOptions greedy;
  greedy.beam_size = 1;
  std::vector<std::string> out;
  for (auto& t : translator.translate(sources, greedy, /*batch_size=*/64, /*parallel_batches=*/0))
    out.push_back(std::move(t.text));
  return out;
}

std::vector<std::string> decoder_inputs(const Translation& t) {
  std::vector<std::string> inputs = {"<s>"};
  const auto rows = attention_rows(t);
  inputs.insert(inputs.end(), t.target_tokens.begin(),
                t.target_tokens.begin() +
                    std::min(t.target_tokens.size(), rows.empty() ? 0 : rows.size() - 1));
  return inputs;
}

std::vector<std::string> attention_rows(const Translation& t) {
  auto rows = t.target_tokens;
  if (t.attention.defined() && t.attention.size(0) > static_cast<int64_t>(rows.size()))
    rows.push_back(kEosLabel);
  return rows;
}

Translator::Translator(const std::string& dir, std::optional<kernels::ComputeType> compute_type)
    : dir_(dir) {
  config_ = load_config(dir);
  const bool int8_file = config_.compute_type() == kernels::ComputeType::Int8;
  if (compute_type) config_.set_compute_type(*compute_type);
  source_vocab_ = data::Vocab::load((fs::path(dir) / "source.vocab").string());
  target_vocab_ = data::Vocab::load((fs::path(dir) / "target.vocab").string());
  auto check = [&](size_t have, int64_t want, const char* which) {
    if (static_cast<int64_t>(have) != want)
      throw Error(dir + ": " + which + ".vocab has " + std::to_string(have) +
                  " tokens but config.json says " + std::to_string(want) +
                  " (the vocabulary does not belong to these weights)");
  };
  check(source_vocab_.size(), config_.source_vocab(), "source");
  check(target_vocab_.size(), config_.target_vocab(), "target");
  source_tok_ = data::make_tokenizer(config_.source_tokenizer, dir);
  target_tok_ = data::make_tokenizer(config_.target_tokenizer, dir);
  model_ = build_model(config_);
  const auto best = fs::path(dir) / "model.pt", latest = fs::path(dir) / "checkpoint.pt";
  // A run stopped before its first model.pt (killed in its first epoch) still has its weights.
  if (int8_file)
    io::load_quantized_weights(module(), best.string());
  else if (!fs::exists(best) && fs::exists(latest))
    train::load_checkpoint_weights(module(), latest.string());
  else
    io::load_weights(module(), best.string());
  module().eval();
}

Translator::Translator(ModelConfig config, std::shared_ptr<decoding::TranslationModel> model,
                       data::Vocab source_vocab, data::Vocab target_vocab)
    : config_(std::move(config)),
      model_(std::move(model)),
      source_vocab_(std::move(source_vocab)),
      target_vocab_(std::move(target_vocab)) {
  config_.set_compute_type(model_->compute_type());  // the model's, whatever config said
  source_tok_ = data::make_tokenizer(config_.source_tokenizer, config_.dir);
  target_tok_ = data::make_tokenizer(config_.target_tokenizer, config_.dir);
}

torch::nn::Module& Translator::module() { return model_->module(); }

void Translator::translate_batch(const std::vector<size_t>& members,
                                 const std::vector<std::vector<int64_t>>& ids,
                                 const std::vector<std::vector<int64_t>>& prefixes,
                                 const SearchOptions& options, std::vector<Translation>& results,
                                 SearchStats* stats) {
  std::vector<std::vector<int64_t>> batch;
  for (size_t m : members) batch.push_back(ids[m]);
  auto [source, lengths] = data::pad_batch(batch);
  // Per sentence: its prefix, and (sampling) its place in the input as its random stream.
  SearchOptions mine;
  const bool any_prefix = std::any_of(members.begin(), members.end(), [&](size_t m) {
    return m < prefixes.size() && !prefixes[m].empty();
  });
  const bool sampling = options.sampling_topk != 1;
  if (any_prefix || sampling) {
    mine = options;
    for (size_t m : members) {
      if (any_prefix)
        mine.target_prefix.push_back(m < prefixes.size() ? prefixes[m] : std::vector<int64_t>{});
      if (sampling) mine.streams.push_back(m);
    }
  }
  auto hyps =
      decoding::search(*model_, source, lengths, any_prefix || sampling ? mine : options, stats);
  for (size_t m = 0; m < members.size(); ++m) {
    auto& r = results[members[m]];
    const auto& src_tokens = r.source_tokens;
    const int64_t src_len = static_cast<int64_t>(src_tokens.size());
    for (size_t h = 0; h < hyps[m].size(); ++h) {
      const auto& hyp = hyps[m][h];
      std::vector<std::string> tokens;
      for (size_t t = 0; t < hyp.tokens.size(); ++t) {
        std::string token = target_vocab_.token(hyp.tokens[t]);
        const bool unk = hyp.tokens[t] == data::Vocab::kUnk;
        const bool placeholder = data::is_placeholder(token);
        if ((unk || placeholder) && hyp.attention.defined() && src_len > 0) {
          // Hard attention at inference: copy the source token the step looked at most.
          auto row = hyp.attention[static_cast<int64_t>(t)].narrow(0, 0, src_len).clone();
          if (placeholder) {
            bool any = false;
            for (int64_t s = 0; s < src_len; ++s) {
              if (data::is_placeholder(src_tokens[s]))
                any = true;
              else
                row[s] = -1;
            }
            if (!any) row = at::Tensor();
          }
          if (row.defined()) token = src_tokens[row.argmax().item<int64_t>()];
        }
        tokens.push_back(token);
      }
      const std::string text = target_tok_->detokenize(tokens);
      if (h == 0) {
        r.target_ids = hyp.tokens;
        r.text = text;
        r.target_tokens = tokens;
        r.score = hyp.score;
        r.attention = hyp.attention.narrow(1, 0, src_len).contiguous();
      }
      r.nbest.emplace_back(text, hyp.score);
    }
  }
}

std::vector<Scoring> Translator::score(const std::vector<std::string>& sources,
                                       const std::vector<std::string>& targets, size_t batch_size,
                                       double length_penalty) {
  if (sources.size() != targets.size())
    throw Error(std::to_string(sources.size()) + " sources for " + std::to_string(targets.size()) +
                " targets");
  std::vector<Scoring> results(sources.size());
  std::vector<std::vector<int64_t>> source_ids(sources.size()), target_ids(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    results[i].source_tokens = source_tok_->tokenize(sources[i]);
    results[i].target_tokens = target_tok_->tokenize(targets[i]);
    source_ids[i] = source_vocab_.encode(results[i].source_tokens);
    target_ids[i] = target_vocab_.encode(results[i].target_tokens);
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < sources.size(); ++i)
    if (!source_ids[i].empty()) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return source_ids[a].size() < source_ids[b].size(); });
  c10::InferenceMode inference;
  if (module().is_training()) module().eval();
  batch_size = std::max<size_t>(1, batch_size);
  for (size_t start = 0; start < order.size(); start += batch_size) {
    const std::vector<size_t> members(order.begin() + start,
                                      order.begin() + std::min(order.size(), start + batch_size));
    std::vector<std::vector<int64_t>> batch, wanted;
    for (size_t m : members) {
      batch.push_back(source_ids[m]);
      wanted.push_back(target_ids[m]);
    }
    auto [source, lengths] = data::pad_batch(batch);
    auto decoder = model_->start(source, lengths, SearchOptions{});
    auto forced = decoding::force(*decoder, wanted);
    for (size_t k = 0; k < members.size(); ++k) {
      Scoring& r = results[members[k]];
      r.token_log_probs = std::move(forced[k].token_log_probs);
      r.log_prob = forced[k].log_prob;
      const double steps = static_cast<double>(r.target_tokens.size() + 1);
      r.score = length_penalty == 0 ? r.log_prob : r.log_prob / std::pow(steps, length_penalty);
      r.attention = forced[k]
                        .attention.narrow(1, 0, static_cast<int64_t>(r.source_tokens.size()))
                        .contiguous();
      r.next_log_probs = std::move(forced[k].next_log_probs);
    }
  }
  return results;
}

std::vector<std::vector<Alternative>> Translator::alternatives(
    const std::vector<std::string>& sentences, const std::vector<std::string>& prefixes, size_t n,
    const SearchOptions& options, size_t batch_size) {
  if (!prefixes.empty() && prefixes.size() != sentences.size())
    throw Error(std::to_string(prefixes.size()) + " target prefixes for " +
                std::to_string(sentences.size()) + " sentences");
  // What the model gives the position after each prefix.
  const auto scored =
      score(sentences, prefixes.empty() ? std::vector<std::string>(sentences.size()) : prefixes,
            batch_size);
  // One search per alternative: the prefix and the alternative's token forced.
  std::vector<Translation> results;
  std::vector<std::vector<int64_t>> ids, prefix_ids;
  std::vector<std::pair<size_t, Alternative>> owned;  // (sentence, alternative)
  for (size_t i = 0; i < scored.size(); ++i) {
    if (!scored[i].next_log_probs.defined()) continue;  // an empty source: nothing to continue
    at::Tensor next = scored[i].next_log_probs.clone();
    for (int64_t never : {data::Vocab::kPad, data::Vocab::kSos, data::Vocab::kUnk})
      if (never < next.size(0)) next[never] = -std::numeric_limits<float>::infinity();
    const auto [values, tokens] =
        next.topk(std::min<int64_t>(static_cast<int64_t>(n), next.size(0)));
    const auto prefix = target_vocab_.encode(scored[i].target_tokens);
    for (int64_t k = 0; k < tokens.size(0); ++k) {
      const double lp = values[k].item<double>();
      if (lp == -std::numeric_limits<double>::infinity()) break;
      const int64_t token = tokens[k].item<int64_t>();
      Alternative a;
      a.token = token == data::Vocab::kEos ? kEosLabel : target_vocab_.token(token);
      a.token_log_prob = lp;
      owned.emplace_back(i, std::move(a));
      Translation r;
      r.source_tokens = scored[i].source_tokens;
      results.push_back(std::move(r));
      ids.push_back(source_vocab_.encode(scored[i].source_tokens));
      prefix_ids.push_back(prefix);
      prefix_ids.back().push_back(token);
    }
  }
  translate_encoded(results, ids, prefix_ids, options, batch_size, /*parallel_batches=*/1,
                    /*stats=*/nullptr);
  std::vector<std::vector<Alternative>> out(sentences.size());
  for (size_t k = 0; k < owned.size(); ++k) {
    owned[k].second.translation = std::move(results[k]);
    out[owned[k].first].push_back(std::move(owned[k].second));
  }
  return out;
}

void Translator::add_attention_maps(std::vector<Translation>& results) {
  for (auto& r : results) {
    if (!r.attention.defined() || r.attention.size(0) == 0) continue;
    const int64_t rows = r.attention.size(0);  // target tokens (+ the end-of-sentence step)
    std::vector<int64_t> inputs = {data::Vocab::kSos};
    inputs.insert(inputs.end(), r.target_ids.begin(), r.target_ids.begin() + (rows - 1));
    auto layers = model_->attention_layers(source_vocab_.encode(r.source_tokens), inputs);
    r.cross_layers = std::move(layers.cross);
    r.decoder_self_layers = std::move(layers.decoder_self);
    r.encoder_self_layers = std::move(layers.encoder_self);
  }
}

std::vector<Translation> Translator::translate(const std::vector<std::string>& sentences,
                                               const SearchOptions& options, size_t batch_size,
                                               int parallel_batches, SearchStats* stats,
                                               const std::vector<std::string>& prefixes) {
  if (!prefixes.empty() && prefixes.size() != sentences.size())
    throw Error(std::to_string(prefixes.size()) + " target prefixes for " +
                std::to_string(sentences.size()) + " sentences");
  std::vector<Translation> results(sentences.size());
  std::vector<std::vector<int64_t>> ids(sentences.size());
  for (size_t i = 0; i < sentences.size(); ++i) {
    results[i].source_tokens = source_tok_->tokenize(sentences[i]);
    ids[i] = source_vocab_.encode(results[i].source_tokens);
  }
  std::vector<std::vector<int64_t>> prefix_ids(prefixes.empty() ? 0 : sentences.size());
  for (size_t i = 0; i < prefixes.size(); ++i)
    prefix_ids[i] = target_vocab_.encode(target_tok_->tokenize(prefixes[i]));
  translate_encoded(results, ids, prefix_ids, options, batch_size, parallel_batches, stats);
  return results;
}

void Translator::translate_encoded(std::vector<Translation>& results,
                                   const std::vector<std::vector<int64_t>>& ids,
                                   const std::vector<std::vector<int64_t>>& prefixes_ids,
                                   const SearchOptions& options, size_t batch_size,
                                   int parallel_batches, SearchStats* stats) {
  // Similar lengths share a batch: less padding, fewer wasted steps.
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ids[a].size() < ids[b].size(); });
  batch_size = std::max<size_t>(1, batch_size);
  std::vector<std::vector<size_t>> batches;
  // In length order, each sentence joins the batch unless that makes it too many sentences or,
  // padding counted, too many tokens: it is the longest so far.
  std::vector<size_t> members;
  for (size_t i : order) {
    if (ids[i].empty()) continue;  // an empty line translates to an empty line
    const size_t tokens = (members.size() + 1) * ids[i].size();
    if (!members.empty() &&
        (members.size() >= batch_size || (max_batch_tokens_ && tokens > max_batch_tokens_))) {
      batches.push_back(std::move(members));
      members.clear();
    }
    members.push_back(i);
  }
  if (!members.empty()) batches.push_back(std::move(members));

  const size_t batch_threads = std::min<size_t>(
      batches.size(), parallel_batches > 0 ? parallel_batches : configured_threads());
  if (batch_threads <= 1) {
    for (const auto& members : batches)
      translate_batch(members, ids, prefixes_ids, options, results, stats);
    return;
  }
  // Workers take the next batch in length order; each writes only its own sentences' results.
  module().eval();  // once, before the threads read the flag
  ScopedBlasThreads single_threaded_blas(1);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex mutex;  // guards `error` and `stats`
  auto work = [&] {
    at::init_num_threads();              // a new thread takes LibTorch's thread settings from here
    kernels::OnePartPerThread one_part;  // the kernels' products stay on this worker's thread
    SearchStats mine;
    try {
      for (size_t b; !failed && (b = next++) < batches.size();)
        translate_batch(batches[b], ids, prefixes_ids, options, results, &mine);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      failed = true;
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (stats) {
      stats->source_tokens += mine.source_tokens;
      stats->decoder_rows += mine.decoder_rows;
    }
  };
  std::vector<std::thread> workers;
  for (size_t i = 1; i < batch_threads; ++i) workers.emplace_back(work);
  work();
  for (auto& w : workers) w.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace attnkit::translate
