#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// What a sentence model must not garble in a software string, taken out before the model sees
// the line and put back after.
//
// A model trained on sentences cannot be trusted to copy "%1$s", "<a href=...>", "--help" or the
// "_" of a GTK accelerator: a garbled placeholder crashes the program that prints the string,
// and `msgfmt --check` rejects the catalog. So every such span is replaced by a placeholder the
// model has seen thousands of times (the span itself when it is a printf or brace placeholder
// the model's tokenizer keeps whole, else "%d" for an integer and "%s" for anything else), and
// restore() puts each span
// back where the model's attention says it belongs: the span's multiset in the output equals the
// source's by construction (tests/test_po_protect.cpp), whatever the model emitted.
namespace attnkit::po {

class Glossary;

// One line of a message (no '\n'), taken apart.
struct Protected {
  std::string text;                // what the model translates
  std::vector<std::string> spans;  // the masked spans, in source order (one mask token each)
  std::string lead, trail;         // leading and trailing whitespace, restored as they were
  std::string open, close;         // markup wrapping the whole line ("<b>" ... "</b>")
  std::string suffix;              // a trailing ":", "..." or "…"
  char accelerator = 0;            // '_' (GTK), '&' (Qt/KDE), '~' (LibreOffice), or 0
  char key = 0;                    // the accelerator's letter, as written
  size_t terms = 0;                // spans that are a glossary's terms (their targets in spans)
};

// The kinds of span protect() masks, in the order it tries them at each position.
enum class SpanKind {
  Placeholder,
  Variable,
  Tag,
  Entity,
  Url,
  Email,
  Path,
  Option,
  Identifier,
  Tab
};
const char* to_string(SpanKind kind);

// The length of the protected span starting at s[i] and its kind, or 0.
size_t span_length(std::string_view s, size_t i, SpanKind* kind = nullptr);
// Every protected span of `s`, in order.
std::vector<std::string> spans(std::string_view s, std::vector<SpanKind>* kinds = nullptr);

// The accelerator marker of a short label ("_Open", "E_xit", "&File", "~Save"), and its
// position, or 0: exactly one marker, before a letter or digit, in a label of at most six words.
char find_accelerator(std::string_view s, size_t* at = nullptr);

// Whether the model's tokenizer reads a placeholder as one token. A SentencePiece model trained
// on the catalogs knows "%s", "%d" and "%1$s" as pieces but cuts a rarer "%3$d" into "%3$" "d",
// and a placeholder in pieces is neither a mask restore() can align nor one the model copies.
using KeepsWhole = std::function<bool(const std::string& placeholder)>;

// `accelerators`: look for one (a one-line message; the lines of help texts have none).
// `whole`: the tokenizer's test; without one every printf and brace placeholder is its own mask.
// `glossary`: its terms are masked too, as "%s", and their spans are the glossary's targets, so
// that restore() puts the agreed translation where the attention says the term went.
Protected protect(std::string_view line, bool accelerators = true, const KeepsWhole& whole = {},
                  const Glossary* glossary = nullptr);

// Where a language's translators put a label's accelerator, as measured on Debian's catalogs:
// after the label as "(_F)" in Chinese, Japanese and Korean (92 % of the zh_CN catalogs'
// accelerated labels), and as the marker before one of the label's letters elsewhere (97 % of
// de's, 59 % of them before its first letter: "_Speichern").
enum class AcceleratorStyle { Appended, Inline };
AcceleratorStyle accelerator_style(const std::string& lang);

// Puts `marker` into a translation in `style`: "(_K)" appended (K the source's key, upper-case),
// or before the first letter or digit (a translation without one gets the appended form).
void place_accelerator(std::string& translation, char marker, char key, AcceleratorStyle style);

// The translation of p.text, with each span back in place. `target_tokens` are the model's
// output tokens; `attention` its [rows >= tokens, source tokens] map; `source_tokens` the
// tokenized p.text, where the masks are the placeholder tokens (data::is_placeholder) in order.
// A span the model dropped goes before the target token that attended to its mask most; a
// placeholder the model added is removed. `detokenize` joins tokens.
// An accelerator goes back in `style`: "(_S)" appended, or the marker before the first letter
// of the translation.
std::string restore(const Protected& p, const std::vector<std::string>& target_tokens,
                    const at::Tensor& attention, const std::vector<std::string>& source_tokens,
                    const std::function<std::string(const std::vector<std::string>&)>& detokenize,
                    AcceleratorStyle style = AcceleratorStyle::Appended);

// A training pair in the form protect() gives the model: the source as protect(source).text,
// and the target with the same spans masked and the same wrapping markup and trailing colon or
// ellipsis set aside, so that the model learns to translate what it will be asked
// (`corpus gettext --protected`). nullopt when the target does not carry every span or the
// wrapping markup (a pair better kept as it is). Both sides are one line, accelerators removed.
std::optional<std::pair<std::string, std::string>> protect_pair(std::string_view source,
                                                                std::string_view target);

// Whether everything protect() guards in `source` survives in `translation`: the same multiset
// of spans, the accelerator ("(_F)", or the marker before a letter: the translation's key need
// not be the English one), leading and trailing whitespace, and per line. What `po stats` checks
// and the tests hold restore() to.
bool survives(std::string_view source, std::string_view translation);

}  // namespace attnkit::po
