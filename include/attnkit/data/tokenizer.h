#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::data {

// Length of the printf/brace placeholder starting at s[i] (%s, %d, %1$s, %-5.2f, %(name)s,
// {name}, {0}), or 0. Tokenizers keep placeholders as single tokens.
size_t placeholder_length(std::string_view s, size_t i);
bool is_placeholder(std::string_view token);
// The placeholders of a message, in order.
std::vector<std::string> placeholders(std::string_view s);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<std::string> tokenize(std::string_view text) const = 0;
  // Every text's tokens, as tokenize() gives them; a tokenizer in a helper process takes many
  // texts per round trip (a corpus of a million lines).
  virtual std::vector<std::vector<std::string>> tokenize_all(
      const std::vector<std::string>& texts) const;
  virtual std::string detokenize(const std::vector<std::string>& tokens) const = 0;
  // The spec that recreates this tokenizer with make_tokenizer().
  virtual std::string spec() const = 0;
};

// Words and punctuation. With `lower`, ASCII letters are lowercased; with `normalize`, the
// PyTorch tutorial's normalisation: accents stripped from Latin letters (é -> e), lowercase,
// and only letters, digits, placeholders and . ! ? kept (other punctuation is dropped).
std::unique_ptr<Tokenizer> make_english_tokenizer(bool lower, bool normalize);
// Chinese by character; runs of ASCII letters and digits stay whole words.
std::unique_ptr<Tokenizer> make_chinese_tokenizer();
// SentencePiece subwords from a trained model file.
std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_path);

// "en", "en-lower", "en-norm", "zh", or "spm:<model file>" (a relative file is looked up in
// base_dir). Throws attnkit::Error on an unknown spec.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec,
                                          const std::string& base_dir = "");

// Trains a SentencePiece (unigram) model on `sentences`, single-threaded so the same input gives
// the same model; writes <prefix>.model and .vocab. Common placeholders stay single pieces.
void train_sentencepiece(const std::vector<std::string>& sentences, const std::string& prefix,
                         int vocab_size);

}  // namespace attnkit::data
