#include "attnkit/data/tokenizer.h"

#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/data/text.h"

namespace attnkit::data {
namespace {

bool ascii_alnum(char32_t c) { return c < 0x80 && std::isalnum(static_cast<int>(c)); }
bool is_space(char32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0x3000; }

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
    if (b >= 0xF0)
      n = 4;
    else if (b >= 0xE0)
      n = 3;
    else if (b >= 0xC0)
      n = 2;
    n = std::min(n, s.size() - i);
    const auto decoded = text::decode(s.substr(i, n));
    on_char(decoded.empty() ? char32_t{0xFFFD} : decoded[0], s.substr(i, n));
    i += n;
  }
}

// The PyTorch tutorial's unicodeToAscii (NFD, drop combining marks) for the Latin letters
// U+00C0..U+017F: the base letter, or '.' where there is none.
constexpr char kLatinBase[] =
    "AAAAAA.CEEEEIIII.NOOOOO..UUUUY..aaaaaa.ceeeeiiii.nooooo..uuuuy.yAaAaAaCcCcCcCcDd.."
    "EeEeEeEeEeGgGgGgGgHh..IiIiIiIiI...JjKk.LlLlLl....NnNnNn...OoOoOo..RrRrRrSsSsSsSsTtTt.."
    "UuUuUuUuUuUuWwYyYZzZzZz.";

char32_t strip_accent(char32_t c) {
  if (c < 0xC0 || c > 0x17F) return c;
  const char base = kLatinBase[c - 0xC0];
  return base == '.' ? c : static_cast<char32_t>(base);
}

// The splitting both word tokenizers share: placeholders whole; runs of characters `in_word`
// accepts (after `map`) as words; whitespace separating; any other character a token of its
// own when `keep` accepts it. Mapped ASCII characters replace their originals (é -> e).
template <typename Map, typename InWord, typename Keep>
std::vector<std::string> split_words(std::string_view s, Map map, InWord in_word, Keep keep) {
  std::vector<std::string> tokens;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) tokens.push_back(std::move(word));
    word.clear();
  };
  scan(
      s,
      [&](std::string p) {
        flush();
        tokens.push_back(std::move(p));
      },
      [&](char32_t original, std::string_view bytes) {
        const char32_t c = map(original);
        if (in_word(c, !word.empty())) {
          if (c < 0x80)
            word.push_back(static_cast<char>(c));
          else
            word.append(bytes);
        } else {
          flush();
          if (!is_space(c) && keep(c)) tokens.emplace_back(bytes);
        }
      });
  flush();
  return tokens;
}

class EnglishTokenizer : public Tokenizer {
 public:
  EnglishTokenizer(bool lower, bool normalize)
      : lower_(lower || normalize), normalize_(normalize) {}

  std::vector<std::string> tokenize(std::string_view s) const override {
    auto tokens = split_words(
        s, [&](char32_t c) { return normalize_ ? strip_accent(c) : c; },
        // Apostrophes inside a word stay (don't, it's); other punctuation splits.
        [](char32_t c, bool in_word) {
          return ascii_alnum(c) || (c >= 0x80 && !text::is_cjk(c) && !is_space(c)) ||
                 (c == '\'' && in_word);
        },
        [&](char32_t c) {
          return !normalize_ || c == '.' || c == '!' || c == '?' || text::is_cjk(c);
        });
    if (lower_)
      for (auto& t : tokens)
        if (!is_placeholder(t)) t = text::ascii_lower(t);
    return tokens;
  }

  std::string detokenize(const std::vector<std::string>& tokens) const override {
    std::string out;
    bool glue_next = false;
    for (const auto& t : tokens) {
      const bool closing =
          t.size() == 1 && std::string_view(".,!?:;)]}%").find(t[0]) != std::string_view::npos;
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
    return split_words(
        s, [](char32_t c) { return c; },
        [](char32_t c, bool in_word) { return ascii_alnum(c) || (c == '\'' && in_word); },
        [](char32_t) { return true; });
  }

  std::string detokenize(const std::vector<std::string>& tokens) const override {
    std::string out;
    bool prev_ascii_word = false;
    for (const auto& t : tokens) {
      const bool ascii_word =
          !t.empty() && (std::isalnum(static_cast<unsigned char>(t[0])) || is_placeholder(t));
      if (prev_ascii_word && ascii_word) out.push_back(' ');
      out += t;
      prev_ascii_word = ascii_word;
    }
    return out;
  }

  std::string spec() const override { return "zh"; }
};

// The SentencePiece helper: ATTNKIT_SPM_HELPER, else beside the running program (an installed
// attnkit), else where this build put it, else where `cmake --install` puts it.
std::string spm_helper() {
  if (const char* path = std::getenv("ATTNKIT_SPM_HELPER")) return path;
  std::error_code ec;
  auto beside = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "attnkit-spm";
  if (!ec && std::filesystem::exists(beside)) return beside.string();
  for (const char* path : {ATTNKIT_SPM_HELPER, ATTNKIT_SPM_INSTALLED})
    if (std::filesystem::exists(path)) return path;
  throw Error(std::string("cannot find the SentencePiece helper attnkit-spm (looked beside this "
                          "program, at ") +
              ATTNKIT_SPM_HELPER + " and " + ATTNKIT_SPM_INSTALLED + "; set ATTNKIT_SPM_HELPER)");
}

// Runs `argv` with stdin and stdout on one end of a socket pair; returns (pid, our end).
std::pair<pid_t, int> spawn_with_socket(const std::vector<std::string>& args) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    throw Error(std::string("socketpair failed: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw Error("cannot run " + args[0] + ": " + std::strerror(rc));
  }
  return {pid, fds[0]};
}

constexpr char kSep = '\x1f', kFail = '\x15', kRecord = '\x1e';

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    if (!std::filesystem::exists(path)) throw Error(path + ": no such SentencePiece model");
    std::tie(pid_, fd_) = spawn_with_socket({spm_helper(), "serve", path});
    const auto ready = read_line();
    if (ready != "ready") {
      close_helper();
      throw Error(path + ": cannot load the SentencePiece model (" +
                  (ready.empty() ? std::string("the helper exited") : ready.substr(1)) + ")");
    }
  }
  ~SentencePieceTokenizer() override { close_helper(); }
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::vector<std::string> tokenize(std::string_view s) const override {
    std::string text(s);
    for (auto& c : text)
      if (c == '\n' || c == '\r' || c == kSep) c = ' ';
    return split_pieces(request("E" + text));
  }

  static std::vector<std::string> split_pieces(const std::string& reply) {
    std::vector<std::string> pieces;
    if (reply.empty()) return pieces;
    size_t start = 0;
    while (true) {
      const auto end = reply.find(kSep, start);
      pieces.push_back(
          reply.substr(start, end == std::string::npos ? std::string::npos : end - start));
      if (end == std::string::npos) return pieces;
      start = end + 1;
    }
  }

  // Texts in requests of up to kBatch: one round trip each instead of one a text.
  std::vector<std::vector<std::string>> tokenize_all(
      const std::vector<std::string>& texts) const override {
    constexpr size_t kBatch = 1024;
    std::vector<std::vector<std::string>> out;
    out.reserve(texts.size());
    for (size_t start = 0; start < texts.size(); start += kBatch) {
      std::string line = "B";
      const size_t end = std::min(texts.size(), start + kBatch);
      for (size_t i = start; i < end; ++i) {
        if (i > start) line += kRecord;
        for (char c : texts[i])
          line += c == '\n' || c == '\r' || c == kSep || c == kRecord ? ' ' : c;
      }
      const auto reply = request(line);
      size_t from = 0;
      for (size_t i = start; i < end; ++i) {
        const size_t to = std::min(reply.find(kRecord, from), reply.size());
        out.push_back(split_pieces(reply.substr(from, to - from)));
        from = to + 1;
      }
    }
    return out;
  }

  std::string detokenize(const std::vector<std::string>& tokens) const override {
    std::string line = "D";
    for (size_t i = 0; i < tokens.size(); ++i) line += (i ? std::string(1, kSep) : "") + tokens[i];
    return request(line);
  }

  std::string spec() const override {
    return "spm:" + std::filesystem::path(path_).filename().string();
  }

 private:
  std::string request(const std::string& line) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string out = line + "\n";
    for (size_t sent = 0; sent < out.size();) {
      const ssize_t n = send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error(path_ + ": the SentencePiece helper went away");
      sent += static_cast<size_t>(n);
    }
    auto reply = read_line();
    if (!reply.empty() && reply[0] == kFail)
      throw Error(path_ + ": SentencePiece: " + reply.substr(1));
    return reply;
  }

  std::string read_line() const {
    while (true) {
      const auto nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      char chunk[4096];
      const ssize_t n = read(fd_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error(path_ + ": the SentencePiece helper went away");
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  void close_helper() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }

  std::string path_;
  pid_t pid_ = 0;
  int fd_ = -1;
  mutable std::mutex mutex_;
  mutable std::string buffer_;
};

}  // namespace

std::vector<std::vector<std::string>> Tokenizer::tokenize_all(
    const std::vector<std::string>& texts) const {
  std::vector<std::vector<std::string>> out;
  out.reserve(texts.size());
  for (const auto& t : texts) out.push_back(tokenize(t));
  return out;
}

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
                         int vocab_size) {
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
                           // One thread keeps training deterministic.
                           " --hard_vocab_limit=false --num_threads=1 --minloglevel=2"
                           " --user_defined_symbols=%s,%d,%u,%ld,%lu,%%,%1$s,%2$s";
  std::vector<std::string> argv = {spm_helper(), "train"};
  for (std::istringstream words(args); !words.eof();) {
    std::string w;
    words >> w;
    if (!w.empty()) argv.push_back(w);
  }
  auto [pid, fd] = spawn_with_socket(argv);
  close(fd);
  int status = 0;
  waitpid(pid, &status, 0);
  std::remove(input.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error(prefix + ": SentencePiece training failed (see the messages above)");
}

}  // namespace attnkit::data
