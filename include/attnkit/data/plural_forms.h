#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

// A catalog's Plural-Forms header ("nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : ...);"):
// the C expression gettext evaluates to pick msgstr[i] for a number n, parsed and checked as
// msgfmt checks it, so that a catalog attnkit writes is one msgfmt --check accepts.
namespace attnkit::data {

// gettext's own limit is what fits its tables; no language has more than six forms.
constexpr int kMaxPlurals = 32;
// Nesting deeper than this (conditionals, parentheses and '!' inside one another) is refused:
// the parser recurses, and the deepest of the languages' own (Arabic's) nests six conditionals.
constexpr int kMaxPluralDepth = 64;

class PluralForms {
 public:
  // Parses "nplurals=N; plural=EXPR;". Throws attnkit::Error saying what is wrong (nplurals
  // missing, 0, negative or over kMaxPlurals; a syntax error in EXPR; nesting too deep; EXPR
  // dividing by zero or giving a form outside [0, N) for some n).
  static PluralForms parse(const std::string& header_value);

  int nplurals() const { return nplurals_; }
  // The form for n (in [0, nplurals)).
  int form(uint64_t n) const;
  // Whether form `f` is used for exactly one n (form 0 of "n != 1" for n = 1): its translation
  // may then leave the number out (msgfmt allows it), and its English is the singular.
  bool only_one_number(int f) const;
  // The numbers n in [0, 1000) whose form is f, up to `limit` of them.
  std::vector<uint64_t> numbers_of(int f, size_t limit = 8) const;

  struct Node;
  ~PluralForms();
  PluralForms(PluralForms&&) noexcept;
  PluralForms& operator=(PluralForms&&) noexcept;

 private:
  PluralForms() = default;
  int nplurals_ = 1;
  std::unique_ptr<Node> expression_;
  std::vector<int> forms_;  // form of n for n in [0, 1000): the checks and numbers_of read it
};

}  // namespace attnkit::data
