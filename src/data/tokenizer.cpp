#include "attnkit/data/tokenizer.h"

#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "attnkit/core/error.h"
#include "attnkit/data/text.h"

namespace attnkit::data {
namespace {

bool ascii_alnum(char32_t c) { return c < 0x80 && std::isalnum(static_cast<int>(c)); }
bool is_space(char32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0x3000; }
bool ascii_punct(char32_t c) { return c < 0x80 && std::ispunct(static_cast<int>(c)); }

// Scans `s`, handing each placeholder whole to on_placeholder and each code point to on_char.
template <typename P, typename C>
void scan(std::string_view s, P&& on_placeholder, C&& on_char) {
  size_t i = 0;
  while (i < s.size()) {
    if (size_t n = placeholder_length(s, i)) {
      on_placeholder(std::string(s.substr(i, n)));
      i += n;
      continue;
    }
    size_t n = 1;
    const auto b = static_cast<unsigned char>(s[i]);
    if (b >= 0xF0) n = 4;
    else if (b >= 0xE0) n = 3;
    else if (b >= 0xC0) n = 2;
    n = std::min(n, s.size() - i);
    const auto decoded = text::decode(s.substr(i, n));
    on_char(decoded.empty() ? char32_t{0xFFFD} : decoded[0], s.substr(i, n));
    i += n;
  }
}

class EnglishTokenizer : public Tokenizer {
 public:
  EnglishTokenizer(bool lower, bool normalize) : lower_(lower || normalize), normalize_(normalize) {}

  std::vector<std::string> tokenize(std::string_view s) const override {
    std::vector<std::string> tokens;
    std::string word;
    auto flush = [&] {
      if (!word.empty()) tokens.push_back(lower_ ? text::ascii_lower(word) : word);
      word.clear();
    };
    scan(
        s, [&](std::string p) { flush(); tokens.push_back(std::move(p)); },
        [&](char32_t c, std::string_view bytes) {
          // Apostrophes inside a word stay (don't, it's); other punctuation splits.
          if (ascii_alnum(c) || (c >= 0x80 && !text::is_cjk(c) && !is_space(c)) ||
              (c == '\'' && !word.empty())) {
            word.append(bytes);
          } else if (is_space(c)) {
            flush();
          } else {
            flush();
            if (!normalize_ || c == '.' || c == '!' || c == '?' || text::is_cjk(c))
              tokens.emplace_back(bytes);
          }
        });
    flush();
    return tokens;
  }

  std::string detokenize(const std::vector<std::string>& tokens) const override {
    std::string out;
    bool glue_next = false;
    for (const auto& t : tokens) {
      const bool closing = t.size() == 1 && std::string_view(".,!?:;)]}%").find(t[0]) != std::string_view::npos;
      if (!out.empty() && !closing && !glue_next) out.push_back(' ');
      out += t;
      glue_next = t.size() == 1 && std::string_view("([{").find(t[0]) != std::string_view::npos;
    }
    return out;
  }

  std::string spec() const override { return normalize_ ? "en-norm" : lower_ ? "en-lower" : "en"; }

 private:
  bool lower_, normalize_;
};

class ChineseTokenizer : public Tokenizer {
 public:
  std::vector<std::string> tokenize(std::string_view s) const override {
    std::vector<std::string> tokens;
    std::string word;
    auto flush = [&] {
      if (!word.empty()) tokens.push_back(word);
      word.clear();
    };
    scan(
        s, [&](std::string p) { flush(); tokens.push_back(std::move(p)); },
        [&](char32_t c, std::string_view bytes) {
          if (ascii_alnum(c) || (c == '\'' && !word.empty())) {
            word.append(bytes);
          } else if (is_space(c)) {
            flush();
          } else {
            flush();
            tokens.emplace_back(bytes);
          }
        });
    flush();
    return tokens;
  }

  std::string detokenize(const std::vector<std::string>& tokens) const override {
    std::string out;
    bool prev_ascii_word = false;
    for (const auto& t : tokens) {
      const bool ascii_word = !t.empty() && (std::isalnum(static_cast<unsigned char>(t[0])) || is_placeholder(t));
      if (prev_ascii_word && ascii_word) out.push_back(' ');
      out += t;
      prev_ascii_word = ascii_word;
    }
    return out;
  }

  std::string spec() const override { return "zh"; }
};

// SentencePiece lives in a plugin (see spm_plugin.cpp for why); this loads it once.
class SpmPlugin {
 public:
  using Emit = void (*)(void*, const char*, size_t);
  void* (*load)(const char*, char*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
  int (*encode)(void*, const char*, size_t, Emit, void*) = nullptr;
  int (*decode)(void*, const char* const*, const size_t*, size_t, Emit, void*) = nullptr;
  int (*train)(const char*, char*, size_t) = nullptr;

  static const SpmPlugin& get() {
    static const SpmPlugin plugin;
    return plugin;
  }

 private:
  SpmPlugin() {
    const char* override_path = std::getenv("ATTNKIT_SPM_PLUGIN");
    const std::string path = override_path ? override_path : ATTNKIT_SPM_PLUGIN_PATH;
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!lib) throw Error("cannot load the SentencePiece plugin " + path + " (" + dlerror() + ")");
    auto sym = [&](const char* name) {
      void* f = dlsym(lib, name);
      if (!f) throw Error(path + ": missing " + name);
      return f;
    };
    load = reinterpret_cast<decltype(load)>(sym("attnkit_spm_load"));
    free = reinterpret_cast<decltype(free)>(sym("attnkit_spm_free"));
    encode = reinterpret_cast<decltype(encode)>(sym("attnkit_spm_encode"));
    decode = reinterpret_cast<decltype(decode)>(sym("attnkit_spm_decode"));
    train = reinterpret_cast<decltype(train)>(sym("attnkit_spm_train"));
  }
};

void append_piece(void* context, const char* text, size_t size) {
  static_cast<std::vector<std::string>*>(context)->emplace_back(text, size);
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path), plugin_(SpmPlugin::get()) {
    char error[512] = "";
    handle_ = plugin_.load(path.c_str(), error, sizeof error);
    if (!handle_) throw Error(path + ": cannot load the SentencePiece model (" + error + ")");
  }
  ~SentencePieceTokenizer() override { plugin_.free(handle_); }
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::vector<std::string> tokenize(std::string_view s) const override {
    std::vector<std::string> pieces;
    if (plugin_.encode(handle_, s.data(), s.size(), append_piece, &pieces) != 0)
      throw Error(path_ + ": SentencePiece could not encode a sentence");
    return pieces;
  }
  std::string detokenize(const std::vector<std::string>& tokens) const override {
    std::vector<const char*> data;
    std::vector<size_t> sizes;
    for (const auto& t : tokens) {
      data.push_back(t.data());
      sizes.push_back(t.size());
    }
    std::vector<std::string> out;
    if (plugin_.decode(handle_, data.data(), sizes.data(), tokens.size(), append_piece, &out) != 0 || out.empty())
      throw Error(path_ + ": SentencePiece could not decode");
    return out[0];
  }
  std::string spec() const override {
    return "spm:" + std::filesystem::path(path_).filename().string();
  }

 private:
  std::string path_;
  const SpmPlugin& plugin_;
  void* handle_ = nullptr;
};

}  // namespace

size_t placeholder_length(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  if (s[i] == '{') {  // {name} or {0}
    size_t j = i + 1;
    while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
    return (j > i + 1 && j < s.size() && s[j] == '}') ? j - i + 1 : 0;
  }
  if (s[i] != '%' || i + 1 >= s.size()) return 0;
  size_t j = i + 1;
  if (s[j] == '%') return 2;
  if (s[j] == '(') {  // %(name)s
    size_t k = j + 1;
    while (k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '_')) ++k;
    if (k >= s.size() || s[k] != ')' || k == j + 1) return 0;
    j = k + 1;
  } else {
    size_t k = j;  // positional %1$s
    while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
    if (k > j && k < s.size() && s[k] == '$') j = k + 1;
  }
  while (j < s.size() && std::string_view("-+ #0'").find(s[j]) != std::string_view::npos) ++j;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
  if (j < s.size() && s[j] == '.') {
    ++j;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
  }
  while (j < s.size() && std::string_view("hlLqjzt").find(s[j]) != std::string_view::npos) ++j;
  if (j < s.size() && std::string_view("diouxXeEfFgGaAcsp").find(s[j]) != std::string_view::npos)
    return j - i + 1;
  return 0;
}

bool is_placeholder(std::string_view token) {
  return !token.empty() && placeholder_length(token, 0) == token.size();
}

std::vector<std::string> placeholders(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    if (size_t n = placeholder_length(s, i)) {
      out.emplace_back(s.substr(i, n));
      i += n;
    } else {
      ++i;
    }
  }
  return out;
}

std::unique_ptr<Tokenizer> make_english_tokenizer(bool lower, bool normalize) {
  return std::make_unique<EnglishTokenizer>(lower, normalize);
}
std::unique_ptr<Tokenizer> make_chinese_tokenizer() { return std::make_unique<ChineseTokenizer>(); }
std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec, const std::string& base_dir) {
  if (spec == "en") return make_english_tokenizer(false, false);
  if (spec == "en-lower") return make_english_tokenizer(true, false);
  if (spec == "en-norm") return make_english_tokenizer(true, true);
  if (spec == "zh") return make_chinese_tokenizer();
  if (spec.rfind("spm:", 0) == 0) {
    std::filesystem::path path = spec.substr(4);
    if (path.is_relative() && !base_dir.empty()) path = std::filesystem::path(base_dir) / path;
    return make_sentencepiece_tokenizer(path.string());
  }
  throw Error("unknown tokenizer '" + spec + "' (valid: en, en-lower, en-norm, zh, spm:<model>)");
}

void train_sentencepiece(const std::vector<std::string>& sentences, const std::string& prefix,
                         int vocab_size, uint64_t seed) {
  const std::string input = prefix + ".train.txt";
  {
    std::ofstream out(input, std::ios::binary);
    for (const auto& s : sentences) out << s << '\n';
    if (!out) throw Error(input + ": cannot write");
  }
  // Placeholders must survive as single pieces.
  const std::string args = "--input=" + input + " --model_prefix=" + prefix +
                           " --vocab_size=" + std::to_string(vocab_size) +
                           " --model_type=unigram --character_coverage=0.9995"
                           " --hard_vocab_limit=false --num_threads=1 --minloglevel=2"
                           " --random_seed=" + std::to_string(seed % 4294967295u) +
                           " --user_defined_symbols=%s,%d,%u,%ld,%lu,%%,%1$s,%2$s";
  char error[512] = "";
  const int failed = SpmPlugin::get().train(args.c_str(), error, sizeof error);
  std::remove(input.c_str());
  if (failed) throw Error(prefix + ": SentencePiece training failed (" + error + ")");
}

}  // namespace attnkit::data
