// The architectures: the one place that names each model and branches on config.json's "arch".

#include "attnkit/translate/registry.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "architectures.h"
#include "attnkit/core/error.h"
#include "attnkit/rnn/trainable.h"
#include "attnkit/rnn/translation_model.h"
#include "attnkit/transformer/trainable.h"
#include "attnkit/transformer/translation_model.h"

namespace attnkit::translate {
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

json rnn_json(const rnn::RnnOptions& m) {
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
void check_model_options(const std::string& path, const rnn::RnnOptions& m) {
  auto require = [&](bool ok, const std::string& key, const std::string& rule, double value) {
    translate::require(ok, path, key, rule, value);
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
    translate::require(ok, path, key, rule, value);
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

json options_json(const ModelConfig& c) {
  return c.arch == Arch::Transformer ? transformer_json(c.transformer) : rnn_json(c.model);
}

void read_options(const std::string& path, const json& m, ModelConfig& c) {
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
    return;
  }
  c.model = rnn::RnnOptions(i("source_vocab"), i("target_vocab"))
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
}

std::unique_ptr<decoding::TranslationModel> build_model(const ModelConfig& c) {
  if (c.arch == Arch::Transformer)
    return std::make_unique<transformer::TransformerTranslationModel>(
        transformer::TransformerModel(c.transformer));
  return std::make_unique<rnn::RnnTranslationModel>(rnn::RnnModel(c.model));
}

std::unique_ptr<train::Trainable> make_trainable(decoding::TranslationModel& model,
                                                 const ModelConfig& c) {
  if (c.arch == Arch::Transformer)
    return std::make_unique<transformer::TransformerTrainable>(
        dynamic_cast<transformer::TransformerTranslationModel&>(model).model());
  return std::make_unique<rnn::RnnTrainable>(
      dynamic_cast<rnn::RnnTranslationModel&>(model).model());
}

std::string describe(const ModelConfig& c) {
  if (c.arch == Arch::Transformer) {
    const auto& t = c.transformer;
    return "Transformer " + std::to_string(t.encoder_layers()) + "+" +
           std::to_string(t.decoder_layers()) + " layers, d_model " + std::to_string(t.d_model()) +
           ", " + std::to_string(t.heads()) + " heads, FFN " + std::to_string(t.ffn()) +
           (t.norm_first() ? ", pre-norm" : ", post-norm");
  }
  const auto& m = c.model;
  return "attention " + (m.attention() ? to_string(m.score()) + "/" + to_string(m.weighting())
                                       : std::string("off (fixed context)"));
}

int64_t default_warmup_steps(Arch arch) { return arch == Arch::Transformer ? 1000 : 0; }

}  // namespace attnkit::translate
