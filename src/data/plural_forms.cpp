#include "attnkit/data/plural_forms.h"

#include <cctype>

#include "attnkit/core/error.h"

namespace attnkit::data {

// An expression tree: a number, n, or an operator on one to three operands.
struct PluralForms::Node {
  enum Kind { Number, N, Not, Binary, Conditional } kind = Number;
  std::string op;  // for Binary: "||" "&&" "==" "!=" "<" "<=" ">" ">=" "+" "-" "*" "/" "%"
  uint64_t value = 0;
  std::unique_ptr<Node> a, b, c;
};

namespace {

using Node = PluralForms::Node;

struct DivisionByZero {};

uint64_t eval(const Node& e, uint64_t n) {
  switch (e.kind) {
    case Node::Number:
      return e.value;
    case Node::N:
      return n;
    case Node::Not:
      return !eval(*e.a, n);
    case Node::Conditional:
      return eval(*e.a, n) ? eval(*e.b, n) : eval(*e.c, n);
    case Node::Binary:
      break;
  }
  const uint64_t x = eval(*e.a, n);
  if (e.op == "||") return x || eval(*e.b, n);
  if (e.op == "&&") return x && eval(*e.b, n);
  const uint64_t y = eval(*e.b, n);
  if (e.op == "==") return x == y;
  if (e.op == "!=") return x != y;
  if (e.op == "<") return x < y;
  if (e.op == "<=") return x <= y;
  if (e.op == ">") return x > y;
  if (e.op == ">=") return x >= y;
  if (e.op == "+") return x + y;
  if (e.op == "-") return x - y;
  if (e.op == "*") return x * y;
  if (y == 0) throw DivisionByZero{};
  return e.op == "/" ? x / y : x % y;
}

// Recursive descent over gettext's grammar (its plural.y), C's precedence.
class ExpressionParser {
 public:
  explicit ExpressionParser(const std::string& s) : s_(s) {}

  std::unique_ptr<Node> whole() {
    auto e = conditional();
    skip();
    if (i_ != s_.size()) fail("unexpected '" + s_.substr(i_, 1) + "'");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("plural expression: " + what + " at character " + std::to_string(i_ + 1));
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool take(const std::string& op) {
    skip();
    if (s_.compare(i_, op.size(), op) != 0) return false;
    // "<" must not take the "<" of "<=", nor "!" the "!" of "!=", nor "=" stand alone.
    if ((op == "<" || op == ">" || op == "!") && i_ + 1 < s_.size() && s_[i_ + 1] == '=')
      return false;
    i_ += op.size();
    return true;
  }
  struct Depth {
    ExpressionParser& p;
    explicit Depth(ExpressionParser& parser) : p(parser) {
      if (++p.depth_ > kMaxPluralDepth)
        p.fail("nested more than " + std::to_string(kMaxPluralDepth) + " deep");
    }
    ~Depth() { --p.depth_; }
  };

  static std::unique_ptr<Node> binary(std::string op, std::unique_ptr<Node> a,
                                      std::unique_ptr<Node> b) {
    auto e = std::make_unique<Node>();
    e->kind = Node::Binary;
    e->op = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  std::unique_ptr<Node> conditional() {
    Depth d(*this);
    auto test = level(0);
    if (!take("?")) return test;
    auto e = std::make_unique<Node>();
    e->kind = Node::Conditional;
    e->a = std::move(test);
    e->b = conditional();
    if (!take(":")) fail("'?' without ':'");
    e->c = conditional();
    return e;
  }

  // Binary levels, loosest first.
  std::unique_ptr<Node> level(size_t l) {
    static const std::vector<std::vector<std::string>> kLevels = {
        {"||"}, {"&&"}, {"==", "!="}, {"<=", ">=", "<", ">"}, {"+", "-"}, {"*", "/", "%"}};
    if (l == kLevels.size()) return unary();
    auto e = level(l + 1);
    for (bool more = true; more;) {
      more = false;
      for (const auto& op : kLevels[l])
        if (take(op)) {
          e = binary(op, std::move(e), level(l + 1));
          more = true;
          break;
        }
    }
    return e;
  }

  std::unique_ptr<Node> unary() {
    skip();
    if (take("!")) {
      Depth d(*this);
      auto e = std::make_unique<Node>();
      e->kind = Node::Not;
      e->a = unary();
      return e;
    }
    if (take("(")) {
      auto e = conditional();
      if (!take(")")) fail("')' expected");
      return e;
    }
    auto e = std::make_unique<Node>();
    if (i_ < s_.size() && s_[i_] == 'n') {
      ++i_;
      e->kind = Node::N;
      return e;
    }
    if (i_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[i_])))
      fail(i_ >= s_.size() ? "unexpected end" : "unexpected '" + s_.substr(i_, 1) + "'");
    for (; i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])); ++i_) {
      if (e->value > 100000000) fail("number too large");
      e->value = e->value * 10 + static_cast<uint64_t>(s_[i_] - '0');
    }
    return e;
  }

  const std::string& s_;
  size_t i_ = 0;
  int depth_ = 0;
};

// The value after "key=" up to ';' (or the end), trimmed; nullopt when the key is absent.
std::optional<std::string> field(const std::string& s, const std::string& key) {
  for (size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + 1)) {
    if (at > 0 && std::isalnum(static_cast<unsigned char>(s[at - 1]))) continue;
    size_t i = at + key.size();
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i >= s.size() || s[i] != '=') continue;
    const size_t end = s.find(';', i + 1);
    std::string v = s.substr(i + 1, end == std::string::npos ? std::string::npos : end - i - 1);
    const auto first = v.find_first_not_of(" \t"), last = v.find_last_not_of(" \t");
    return first == std::string::npos ? "" : v.substr(first, last - first + 1);
  }
  return std::nullopt;
}

}  // namespace

PluralForms::~PluralForms() = default;
PluralForms::PluralForms(PluralForms&&) noexcept = default;
PluralForms& PluralForms::operator=(PluralForms&&) noexcept = default;

PluralForms PluralForms::parse(const std::string& header_value) {
  const auto count = field(header_value, "nplurals");
  if (!count) throw Error("Plural-Forms has no nplurals");
  long n = 0;
  size_t used = 0;
  try {
    n = std::stol(*count, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != count->size())
    throw Error("Plural-Forms: nplurals=" + *count + " is not a number");
  if (n < 1 || n > kMaxPlurals)
    throw Error("Plural-Forms: nplurals=" + *count + " is outside 1.." +
                std::to_string(kMaxPlurals));
  const auto expression = field(header_value, "plural");
  if (!expression || expression->empty()) throw Error("Plural-Forms has no plural expression");
  PluralForms p;
  p.nplurals_ = static_cast<int>(n);
  p.expression_ = ExpressionParser(*expression).whole();
  p.forms_.resize(1000);
  for (uint64_t k = 0; k < p.forms_.size(); ++k) {
    uint64_t f = 0;
    try {
      f = eval(*p.expression_, k);
    } catch (const DivisionByZero&) {
      throw Error("Plural-Forms: the plural expression divides by zero for n = " +
                  std::to_string(k));
    }
    if (f >= static_cast<uint64_t>(n))
      throw Error("Plural-Forms: the plural expression gives form " + std::to_string(f) +
                  " for n = " + std::to_string(k) + ", past nplurals=" + std::to_string(n));
    p.forms_[k] = static_cast<int>(f);
  }
  return p;
}

int PluralForms::form(uint64_t n) const {
  if (n < forms_.size()) return forms_[n];
  try {
    return static_cast<int>(
        std::min<uint64_t>(eval(*expression_, n), static_cast<uint64_t>(nplurals_ - 1)));
  } catch (const DivisionByZero&) {
    return 0;
  }
}

bool PluralForms::only_one_number(int f) const { return numbers_of(f, 2).size() == 1; }

std::vector<uint64_t> PluralForms::numbers_of(int f, size_t limit) const {
  std::vector<uint64_t> out;
  for (uint64_t k = 0; k < forms_.size() && out.size() < limit; ++k)
    if (forms_[k] == f) out.push_back(k);
  return out;
}

}  // namespace attnkit::data
