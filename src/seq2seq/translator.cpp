#include "attnkit/seq2seq/translator.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/core/info.h"
#include "attnkit/io/pt_file.h"
#include "attnkit/io/state_dict.h"
#include "attnkit/kernels/one_part.h"
#include "attnkit/kernels/quantize.h"
#include "attnkit/transformer/search.h"
#include "attnkit/version.h"

namespace attnkit::seq2seq {
namespace fs = std::filesystem;
using nlohmann::json;

std::string to_string(Arch arch) { return arch == Arch::Transformer ? "transformer" : "rnn"; }

Arch parse_arch(const std::string& name) {
  if (name == "rnn") return Arch::Rnn;
  if (name == "transformer") return Arch::Transformer;
  throw Error("unknown architecture '" + name + "' (rnn | transformer)");
}

int64_t ModelConfig::source_vocab() const {
  return arch == Arch::Transformer ? transformer.source_vocab() : model.source_vocab();
}

int64_t ModelConfig::target_vocab() const {
  return arch == Arch::Transformer ? transformer.target_vocab() : model.target_vocab();
}

kernels::ComputeType ModelConfig::compute_type() const {
  return arch == Arch::Transformer ? transformer.compute_type() : model.compute_type();
}

void ModelConfig::set_compute_type(kernels::ComputeType type) {
  transformer.compute_type(type);
  model.compute_type(type);
}

namespace {

json rnn_json(const Seq2SeqOptions& m) {
  return {{"source_vocab", m.source_vocab()},
          {"target_vocab", m.target_vocab()},
          {"embed_size", m.embed_size()},
          {"hidden_size", m.hidden_size()},
          {"layers", m.layers()},
          {"bidirectional", m.bidirectional()},
          {"dropout", m.dropout()},
          {"attention", m.attention()},
          {"score", to_string(m.score())},
          {"weighting", to_string(m.weighting())},
          {"hard_gradient", to_string(m.hard_gradient())},
          {"temperature", m.temperature()},
          {"window", m.window()},
          {"input_feeding", m.input_feeding()},
          {"self_attention_layers", m.self_attention_layers()},
          {"self_attention_heads", m.self_attention_heads()}};
}

json transformer_json(const transformer::TransformerOptions& t) {
  return {{"source_vocab", t.source_vocab()},
          {"target_vocab", t.target_vocab()},
          {"d_model", t.d_model()},
          {"heads", t.heads()},
          {"encoder_layers", t.encoder_layers()},
          {"decoder_layers", t.decoder_layers()},
          {"ffn", t.ffn()},
          {"dropout", t.dropout()},
          {"attention_dropout", t.attention_dropout()},
          {"ffn_dropout", t.ffn_dropout()},
          {"activation", transformer::to_string(t.activation())},
          {"norm_first", t.norm_first()},
          {"tie_output", t.tie_output()},
          {"share_embeddings", t.share_embeddings()}};
}

}  // namespace

void save_config(const std::string& dir, const ModelConfig& c) {
  json j = {
      {"attnkit_version", kVersion},
      {"arch", to_string(c.arch)},
      {"source_tokenizer", c.source_tokenizer},
      {"target_tokenizer", c.target_tokenizer},
      {"compute_type", kernels::to_string(c.compute_type())},
      {"model", c.arch == Arch::Transformer ? transformer_json(c.transformer) : rnn_json(c.model)}};
  if (!c.source_lang.empty()) j["source_lang"] = c.source_lang;
  if (!c.target_lang.empty()) j["target_lang"] = c.target_lang;
  if (!c.train_corpus.empty()) j["train_corpus"] = c.train_corpus;
  write_file_atomic((fs::path(dir) / "config.json").string(), j.dump(2) + "\n");
}

namespace {

// (major, minor) of "major.minor.patch"; nullopt when it is not a version.
std::optional<std::pair<int, int>> major_minor(const std::string& version) {
  int major = 0, minor = 0;
  char dot = 0;
  std::istringstream in(version);
  if (!(in >> major >> dot >> minor) || dot != '.') return std::nullopt;
  return std::make_pair(major, minor);
}

// A model directory written by a newer attnkit may hold what this one cannot read: refuse it
// plainly rather than fail later on a missing field or a weight's shape.
void check_written_by_older(const std::string& path, const json& config) {
  if (!config.contains("attnkit_version")) return;  // written before the field existed
  const auto& field = config["attnkit_version"];
  const auto theirs = field.is_string() ? major_minor(field.get<std::string>()) : std::nullopt;
  if (!theirs)
    throw Error(path + ": attnkit_version must be a version such as \"" + std::string(kVersion) +
                "\", got " + field.dump());
  if (*theirs > *major_minor(kVersion))
    throw Error(path + ": written by attnkit " + field.get<std::string>() +
                ", newer than this attnkit " + kVersion +
                "; its format may have changed: upgrade attnkit to use this model");
}

// A size check of config.json's model: `key` must follow `rule`.
void require(bool ok, const std::string& path, const std::string& key, const std::string& rule,
             double value) {
  if (!ok)
    throw Error(path + ": model." + key + " must be " + rule + ", got " +
                nlohmann::json(value).dump());
}

// A damaged config must not ask LibTorch for terabytes: `weights`, a rough count in double (so
// that absurd sizes cannot overflow it), is refused above 2^31 (8 GiB of float32).
void check_weight_count(const std::string& path, double weights) {
  constexpr double kMaxWeights = double(1LL << 31);
  if (weights > kMaxWeights)
    throw Error(path + ": the sizes describe a model of about " +
                std::to_string(static_cast<long long>(weights / 1e6)) +
                " million weights; the limit is " + std::to_string((1LL << 31) / 1000000) +
                " million (is the config damaged?)");
}

// Sizes a model can be built with, so that a hand-edited or damaged config is refused naming its
// key instead of crashing while the model is built.
void check_model_options(const std::string& path, const Seq2SeqOptions& m) {
  auto require = [&](bool ok, const std::string& key, const std::string& rule, double value) {
    seq2seq::require(ok, path, key, rule, value);
  };
  require(m.source_vocab() >= 4, "source_vocab", "at least 4 (the special tokens)",
          m.source_vocab());
  require(m.target_vocab() >= 4, "target_vocab", "at least 4 (the special tokens)",
          m.target_vocab());
  require(m.embed_size() >= 1, "embed_size", "at least 1", m.embed_size());
  require(m.hidden_size() >= 1, "hidden_size", "at least 1", m.hidden_size());
  require(m.layers() >= 1, "layers", "at least 1", m.layers());
  require(m.dropout() >= 0 && m.dropout() < 1, "dropout", "in [0, 1)", m.dropout());
  require(m.temperature() > 0 && std::isfinite(m.temperature()), "temperature", "a positive number",
          m.temperature());
  require(m.window() >= 0, "window", "at least 0", m.window());
  require(m.self_attention_layers() >= 0, "self_attention_layers", "at least 0",
          m.self_attention_layers());
  require(m.self_attention_heads() >= 1, "self_attention_heads", "at least 1",
          m.self_attention_heads());
  const int64_t width = m.hidden_size() * (m.bidirectional() ? 2 : 1);
  require(m.self_attention_layers() == 0 || width % m.self_attention_heads() == 0,
          "self_attention_heads", "a divisor of the encoder width " + std::to_string(width),
          m.self_attention_heads());
  // Embeddings, output layer, GRUs in both directions, attention.
  const double vocab = double(m.source_vocab()) + double(m.target_vocab());
  const double e = double(m.embed_size()), h = double(m.hidden_size()), layers = double(m.layers());
  check_weight_count(path, vocab * (e + 2 * h) + layers * 2 * 3 * h * (e + 3 * h) +
                               double(m.self_attention_layers()) * 12 * h * h);
}

// The Transformer's sizes, as check_model_options does for the GRU model's.
void check_transformer_options(const std::string& path, const transformer::TransformerOptions& t) {
  auto require = [&](bool ok, const std::string& key, const std::string& rule, double value) {
    seq2seq::require(ok, path, key, rule, value);
  };
  require(t.source_vocab() >= 4, "source_vocab", "at least 4 (the special tokens)",
          t.source_vocab());
  require(t.target_vocab() >= 4, "target_vocab", "at least 4 (the special tokens)",
          t.target_vocab());
  require(t.d_model() >= 2, "d_model", "at least 2", t.d_model());
  require(t.heads() >= 1 && t.d_model() % t.heads() == 0, "heads",
          "a divisor of d_model " + std::to_string(t.d_model()), t.heads());
  require(t.encoder_layers() >= 1, "encoder_layers", "at least 1", t.encoder_layers());
  require(t.decoder_layers() >= 1, "decoder_layers", "at least 1", t.decoder_layers());
  require(t.ffn() >= 1, "ffn", "at least 1", t.ffn());
  for (auto [key, p] :
       {std::pair{"dropout", t.dropout()}, std::pair{"attention_dropout", t.attention_dropout()},
        std::pair{"ffn_dropout", t.ffn_dropout()}})
    require(p >= 0 && p < 1, key, "in [0, 1)", p);
  require(!t.share_embeddings() || t.source_vocab() == t.target_vocab(), "share_embeddings",
          "false unless source_vocab equals target_vocab", t.share_embeddings());
  // Embeddings, the layers' projections and feed-forward blocks, the cross-attention.
  const double d = double(t.d_model()), layers = double(t.encoder_layers() + t.decoder_layers());
  check_weight_count(path, (double(t.source_vocab()) + double(t.target_vocab())) * d +
                               layers * (4 * d * d + 2 * d * double(t.ffn())) +
                               double(t.decoder_layers()) * 4 * d * d);
}

// m[key] as an integer; a float, a string or an integer beyond int64 is the config's fault.
int64_t integer(const std::string& path, const json& m, const char* key) {
  const auto& v = m.at(key);
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() &&
       v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
    throw Error(path + ": model." + key + " must be an integer, got " + v.dump());
  return v.get<int64_t>();
}

// m[key] as a number (an integer is one too).
double number(const std::string& path, const json& m, const char* key) {
  const auto& v = m.at(key);
  if (!v.is_number()) throw Error(path + ": model." + key + " must be a number, got " + v.dump());
  return v.get<double>();
}

}  // namespace

ModelConfig load_config(const std::string& dir) {
  const auto path = (fs::path(dir) / "config.json").string();
  if (!fs::is_directory(dir)) throw Error(dir + ": no such model directory");
  std::ifstream in(path);
  if (!in) throw Error(path + ": missing; is " + dir + " a model directory made by attnkit train?");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  check_written_by_older(path, j);
  try {
    const auto& m = j.at("model");
    ModelConfig c;
    c.dir = dir;
    c.arch = j.contains("arch") ? parse_arch(j.at("arch").get<std::string>()) : Arch::Rnn;
    c.source_tokenizer = j.at("source_tokenizer").get<std::string>();
    c.target_tokenizer = j.at("target_tokenizer").get<std::string>();
    const auto type = j.contains("compute_type")
                          ? kernels::parse_compute_type(j.at("compute_type").get<std::string>())
                          : kernels::ComputeType::Float32;
    for (auto [key, field] :
         {std::pair{"source_lang", &c.source_lang}, std::pair{"target_lang", &c.target_lang},
          std::pair{"train_corpus", &c.train_corpus}})
      if (j.contains(key)) *field = j.at(key).get<std::string>();
    // Numbers through integer() and number(): nlohmann converts 1e87 to int64 without a check
    // (undefined behaviour; found by tests/fuzz/fuzz_model_dir).
    const auto i = [&](const char* key) { return integer(path, m, key); };
    const auto d = [&](const char* key) { return number(path, m, key); };
    const auto b = [&](const char* key) { return m.at(key).get<bool>(); };
    if (c.arch == Arch::Transformer) {
      c.transformer =
          transformer::TransformerOptions(i("source_vocab"), i("target_vocab"))
              .d_model(i("d_model"))
              .heads(i("heads"))
              .encoder_layers(i("encoder_layers"))
              .decoder_layers(i("decoder_layers"))
              .ffn(i("ffn"))
              .dropout(d("dropout"))
              .attention_dropout(d("attention_dropout"))
              .ffn_dropout(d("ffn_dropout"))
              .activation(transformer::parse_activation(m.at("activation").get<std::string>()))
              .norm_first(b("norm_first"))
              .tie_output(b("tie_output"))
              .share_embeddings(b("share_embeddings"));
      check_transformer_options(path, c.transformer);
      c.set_compute_type(type);
      return c;
    }
    c.model = Seq2SeqOptions(i("source_vocab"), i("target_vocab"))
                  .embed_size(i("embed_size"))
                  .hidden_size(i("hidden_size"))
                  .layers(i("layers"))
                  .bidirectional(b("bidirectional"))
                  .dropout(d("dropout"))
                  .attention(b("attention"))
                  .score(parse_score_kind(m.at("score").get<std::string>()))
                  .weighting(parse_weighting_kind(m.at("weighting").get<std::string>()))
                  .hard_gradient(parse_hard_gradient(m.at("hard_gradient").get<std::string>()))
                  .temperature(d("temperature"))
                  .window(i("window"))
                  .input_feeding(b("input_feeding"))
                  .self_attention_layers(i("self_attention_layers"))
                  .self_attention_heads(i("self_attention_heads"));
    check_model_options(path, c.model);
    c.set_compute_type(type);
    return c;
  } catch (const json::exception& e) {
    throw Error(path + ": malformed config (" + e.what() + ")");
  } catch (const Error& e) {  // an unknown arch or activation: name the file
    const std::string what = e.what();
    if (what.rfind(path, 0) == 0) throw;
    throw Error(path + ": " + what);
  }
}

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

void save_weights(torch::nn::Module& model, const std::string& path) {
  torch::serialize::OutputArchive archive;
  model.save(archive);
  io::save_archive(archive, path);  // a full disk keeps the previous weights
}

namespace {

// Shapes of every parameter, by name.
std::vector<std::pair<std::string, std::vector<int64_t>>> shapes_of(torch::nn::Module& model) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value().sizes().vec());
  return out;
}

// After a load: every parameter keeps the shape config.json gave it (LibTorch's loader replaces
// a tensor of another shape silently, and the first step then fails on a bare shape error or
// translates wrongly), and holds finite numbers.
void check_loaded(torch::nn::Module& model, const std::string& path,
                  const std::vector<std::pair<std::string, std::vector<int64_t>>>& expected) {
  auto shape = [](const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  };
  const auto loaded = model.named_parameters();
  for (const auto& [name, want] : expected) {
    const auto& got = loaded[name];
    if (got.sizes().vec() != want)
      throw Error(path + ": parameter '" + name + "' is " + shape(got.sizes().vec()) +
                  " but config.json describes " + shape(want) +
                  " (the sizes and vocabularies there): the config does not belong to these "
                  "weights");
    if (!at::isfinite(got).all().item<bool>())
      throw Error(path + ": parameter '" + name + "' holds NaN or infinite values");
  }
}

}  // namespace

void load_checkpoint_model(torch::nn::Module& model, const std::string& path) {
  const auto expected = shapes_of(model);
  try {
    torch::serialize::InputArchive archive, weights;
    std::istringstream bytes(io::read_checked_archive(path));  // CRCs first
    archive.load_from(bytes);
    archive.read("model", weights);  // train/checkpoint.h's layout
    model.load(weights);
  } catch (const std::exception& e) {  // LibTorch's reader throws std::out_of_range too (fuzzing)
    throw Error(path + ": cannot load the checkpoint's weights into the configured model (" +
                first_line(e.what()) + ")");
  }
  check_loaded(model, path, expected);
}

void load_weights(torch::nn::Module& model, const std::string& path) {
  if (!fs::exists(path)) throw Error(path + ": missing model weights");
  const auto expected = shapes_of(model);
  try {
    torch::serialize::InputArchive archive;
    std::istringstream bytes(io::read_checked_archive(path));  // CRCs first
    archive.load_from(bytes);
    model.load(archive);
  } catch (const std::exception& e) {  // LibTorch's reader throws std::out_of_range too (fuzzing)
    throw Error(path + ": cannot load the weights into the configured model (" +
                first_line(e.what()) + ")");
  }
  check_loaded(model, path, expected);
}

namespace {

constexpr const char* kScaleSuffix = "_scale";

// What an int8 directory stores as int8 rows: the float matrices (weights of the linear layers,
// the GRUs, the attention projections, the embeddings); vectors (biases, norms) stay float.
bool quantized(const at::Tensor& t) { return t.dim() == 2 && t.scalar_type() == at::kFloat; }

}  // namespace

void save_quantized_weights(torch::nn::Module& model, const std::string& path) {
  io::TensorDict out;
  for (auto& [name, t] : io::state_dict(model)) {
    if (!quantized(t)) {
      out.emplace_back(name, t);
      continue;
    }
    auto q = kernels::quantize_rows(t.detach());
    out.emplace_back(name, q.values);
    out.emplace_back(name + kScaleSuffix, q.scales);
  }
  io::save_tensor_dict(path, out);
}

void load_quantized_weights(torch::nn::Module& model, const std::string& path) {
  if (!fs::exists(path)) throw Error(path + ": missing model weights");
  const auto stored = io::load_tensor_dict(path);
  io::TensorDict weights;
  for (const auto& [name, t] : stored) {
    if (t.scalar_type() != at::kChar) {
      const bool scale = name.size() > 6 && name.compare(name.size() - 6, 6, kScaleSuffix) == 0;
      if (!scale) weights.emplace_back(name, t);
      continue;
    }
    const auto& scales =
        io::find(stored, name + kScaleSuffix, path + " (int8 weight '" + name + "')");
    if (t.dim() != 2 || scales.dim() != 1 || scales.size(0) != t.size(0) ||
        scales.scalar_type() != at::kFloat)
      throw Error(path + ": '" + name +
                  "' must be int8 [rows, cols] with float32 [rows] scales in '" + name +
                  kScaleSuffix + "'");
    weights.emplace_back(name, kernels::dequantize_rows({t, scales}));
  }
  const auto expected = shapes_of(model);
  io::LoadStateDictOptions options;
  options.source = path;
  io::load_state_dict(model, weights, options);
  check_loaded(model, path, expected);
}

std::pair<at::Tensor, at::Tensor> pad_batch(const std::vector<std::vector<int64_t>>& seqs) {
  size_t width = 1;
  for (const auto& s : seqs) width = std::max(width, s.size());
  auto ids = at::zeros({static_cast<int64_t>(seqs.size()), static_cast<int64_t>(width)}, at::kLong);
  auto lengths = at::zeros({static_cast<int64_t>(seqs.size())}, at::kLong);
  auto ids_a = ids.accessor<int64_t, 2>();
  auto len_a = lengths.accessor<int64_t, 1>();
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (size_t j = 0; j < seqs[i].size(); ++j) ids_a[i][j] = seqs[i][j];
    len_a[i] = static_cast<int64_t>(seqs[i].size());
  }
  return {ids, lengths};
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
  if (config_.arch == Arch::Transformer)
    transformer_ = transformer::TransformerModel(config_.transformer);
  else
    model_ = Seq2Seq(config_.model);
  const auto best = fs::path(dir) / "model.pt", latest = fs::path(dir) / "checkpoint.pt";
  // A run stopped before its first model.pt (killed in its first epoch) still has its weights.
  if (int8_file)
    load_quantized_weights(module(), best.string());
  else if (!fs::exists(best) && fs::exists(latest))
    load_checkpoint_model(module(), latest.string());
  else
    load_weights(module(), best.string());
  module().eval();
}

torch::nn::Module& Translator::module() {
  return config_.arch == Arch::Transformer ? static_cast<torch::nn::Module&>(*transformer_)
                                           : static_cast<torch::nn::Module&>(*model_);
}

Translator::Translator(ModelConfig config, Seq2Seq model, data::Vocab source_vocab,
                       data::Vocab target_vocab)
    : config_(std::move(config)),
      model_(std::move(model)),
      source_vocab_(std::move(source_vocab)),
      target_vocab_(std::move(target_vocab)) {
  config_.arch = Arch::Rnn;
  config_.set_compute_type(model_->options.compute_type());  // the model's, whatever config said
  source_tok_ = data::make_tokenizer(config_.source_tokenizer, config_.dir);
  target_tok_ = data::make_tokenizer(config_.target_tokenizer, config_.dir);
}

Translator::Translator(ModelConfig config, transformer::TransformerModel model,
                       data::Vocab source_vocab, data::Vocab target_vocab)
    : config_(std::move(config)),
      transformer_(std::move(model)),
      source_vocab_(std::move(source_vocab)),
      target_vocab_(std::move(target_vocab)) {
  config_.arch = Arch::Transformer;
  config_.set_compute_type(transformer_->options.compute_type());
  source_tok_ = data::make_tokenizer(config_.source_tokenizer, config_.dir);
  target_tok_ = data::make_tokenizer(config_.target_tokenizer, config_.dir);
}

std::vector<std::vector<Hypothesis>> Translator::search_batch(const at::Tensor& source,
                                                              const at::Tensor& lengths,
                                                              const SearchOptions& options,
                                                              SearchStats* stats) {
  return config_.arch == Arch::Transformer
             ? transformer::search(transformer_, source, lengths, options, stats)
             : search(model_, source, lengths, options, stats);
}

void Translator::translate_batch(const std::vector<size_t>& members,
                                 const std::vector<std::vector<int64_t>>& ids,
                                 const SearchOptions& options, std::vector<Translation>& results,
                                 SearchStats* stats) {
  std::vector<std::vector<int64_t>> batch;
  for (size_t m : members) batch.push_back(ids[m]);
  auto [source, lengths] = pad_batch(batch);
  auto hyps = search_batch(source, lengths, options, stats);
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

void Translator::add_attention_maps(std::vector<Translation>& results) {
  if (config_.arch != Arch::Transformer) return;
  c10::InferenceMode inference;
  if (transformer_->is_training()) transformer_->eval();
  for (auto& r : results) {
    if (!r.attention.defined() || r.attention.size(0) == 0) continue;
    const int64_t rows = r.attention.size(0);  // target tokens (+ the end-of-sentence step)
    std::vector<int64_t> inputs = {data::Vocab::kSos};
    inputs.insert(inputs.end(), r.target_ids.begin(), r.target_ids.begin() + (rows - 1));
    const auto [source, lengths] = pad_batch({source_vocab_.encode(r.source_tokens)});
    transformer::AttentionMaps maps;
    const auto encoded = transformer_->encode(source, lengths, &maps);
    transformer_->decode(at::tensor(inputs, at::kLong).unsqueeze(0), encoded, &maps);
    auto first = [](const std::vector<at::Tensor>& layers) {  // [1, H, ., .] -> [H, ., .]
      std::vector<at::Tensor> out;
      for (const auto& l : layers) out.push_back(l[0].contiguous());
      return out;
    };
    r.cross_layers = first(maps.cross);
    r.decoder_self_layers = first(maps.decoder_self);
    r.encoder_self_layers = first(maps.encoder_self);
  }
}

std::vector<Translation> Translator::translate(const std::vector<std::string>& sentences,
                                               const SearchOptions& options, size_t batch_size,
                                               int parallel_batches, SearchStats* stats) {
  std::vector<Translation> results(sentences.size());
  std::vector<std::vector<int64_t>> ids(sentences.size());
  for (size_t i = 0; i < sentences.size(); ++i) {
    results[i].source_tokens = source_tok_->tokenize(sentences[i]);
    ids[i] = source_vocab_.encode(results[i].source_tokens);
  }
  // Similar lengths share a batch: less padding, fewer wasted steps.
  std::vector<size_t> order(sentences.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ids[a].size() < ids[b].size(); });
  batch_size = std::max<size_t>(1, batch_size);
  std::vector<std::vector<size_t>> batches;
  for (size_t start = 0; start < order.size(); start += batch_size) {
    std::vector<size_t> members;
    for (size_t i = start; i < std::min(order.size(), start + batch_size); ++i)
      if (!ids[order[i]].empty())  // an empty line translates to an empty line
        members.push_back(order[i]);
    if (!members.empty()) batches.push_back(std::move(members));
  }

  const size_t streams = std::min<size_t>(
      batches.size(), parallel_batches > 0 ? parallel_batches : configured_threads());
  if (streams <= 1) {
    for (const auto& members : batches) translate_batch(members, ids, options, results, stats);
    return results;
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
        translate_batch(batches[b], ids, options, results, &mine);
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
  for (size_t i = 1; i < streams; ++i) workers.emplace_back(work);
  work();
  for (auto& w : workers) w.join();
  if (error) std::rethrow_exception(error);
  return results;
}

}  // namespace attnkit::seq2seq
