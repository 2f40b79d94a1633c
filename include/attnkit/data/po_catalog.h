#pragma once

#include <cstddef>
#include <string>
#include <vector>

// A gettext catalog (.po / .pot) as a translator's tools see it, kept so that writing it back
// changes only what was filled in.
//
// Why not just a list of messages (data::read_po)? A pre-translated catalog goes back to people
// and to their tools (Poedit, Lokalize, Weblate, msgmerge) and into version control: every
// comment, reference, flag, previous msgid (#|), obsolete entry (#~), line wrap and byte of an
// entry that was not filled must survive, so that the diff shows only the suggestions. The
// catalog therefore keeps the file's text and, per entry, where its parts sit in it; write()
// copies the text and renders only the parts of the entries that were changed
// (tests/test_po.cpp: a catalog with nothing changed writes back byte for byte, in UTF-8, GB2312
// and ISO-8859-1).
namespace attnkit::data {

struct PoEntry {
  // Parsed, in UTF-8 whatever the file's charset.
  bool obsolete = false;     // "#~" entries: kept, never filled
  bool has_context = false;  // msgctxt present (possibly empty)
  std::string context;
  std::string msgid, msgid_plural;    // msgid_plural empty unless a plural entry
  std::vector<std::string> msgstr;    // msgstr, or msgstr[0..n)
  std::vector<std::string> flags;     // from the "#," lines, in order ("fuzzy", "c-format", ...)
  std::vector<std::string> comments;  // translator comments ("# ..." lines), without "# "
  size_t line = 0;                    // 1-based line of the msgid keyword
  // The message the translation was made for, as msgmerge --previous keeps it ("#| msgid").
  bool has_previous = false, previous_has_context = false;
  std::string previous_context, previous_msgid, previous_msgid_plural;

  bool is_header() const { return !obsolete && !has_context && msgid.empty(); }
  bool plural() const { return !msgid_plural.empty(); }
  bool has_flag(const std::string& flag) const;
  bool fuzzy() const { return has_flag("fuzzy"); }
  // Every msgstr non-empty (fuzzy or not).
  bool translated() const;

  // Where the entry's parts sit in PoCatalog::text (byte offsets, UTF-8): [begin, end) is the
  // whole entry, its line breaks included; the "#," line is [flags_begin, flags_end) (npos when
  // none); a new flags line goes at flags_insert (before "#|" lines and keywords); the msgstr
  // lines are [msgstr_begin, msgstr_end).
  size_t begin = 0, end = 0, flags_begin = 0, flags_end = 0, flags_insert = 0, msgstr_begin = 0,
         msgstr_end = 0;
  // The "#|" lines, [previous_begin, previous_end) when they follow each other (else npos).
  size_t previous_begin = 0, previous_end = 0;
  bool changed = false;        // set by PoCatalog::fill(); write() renders the entry's new parts
  bool drop_previous = false;  // set by PoCatalog::clear_fuzzy(): write() leaves out the "#|" lines
  std::vector<std::string> added_comments;  // translator comments fill() adds
};

// The largest catalog read (the largest of Debian's archive is under 4 MiB), and the longest line
// of a message the model is given (a help text's lines are short; a 1 MiB one would take
// gigabytes through the model).
constexpr size_t kMaxCatalogBytes = size_t(64) << 20;
constexpr size_t kMaxMessageLineBytes = size_t(64) << 10;

class PoCatalog {
 public:
  // Reads a catalog through its declared charset (the header's Content-Type; "CHARSET", as
  // in a fresh .pot, and none read as UTF-8). A syntax error (an unterminated string, a bad
  // escape, msgstr without msgid, msgid without msgstr, a duplicate message, an unknown keyword)
  // is an attnkit::Error naming path:line.
  static PoCatalog read(const std::string& path);
  static PoCatalog parse(std::string bytes, const std::string& path);

  const std::string& path() const { return path_; }
  // The charset the file is written back in, as declared ("UTF-8" when none).
  const std::string& charset() const { return charset_; }
  std::vector<PoEntry>& entries() { return entries_; }
  const std::vector<PoEntry>& entries() const { return entries_; }

  // The header entry's field ("Language", "Plural-Forms", ...), empty when absent.
  std::string header_field(const std::string& name) const;
  bool header_has_field(const std::string& name) const;
  // Sets a header field (appended when absent); the header is re-rendered on write.
  void set_header_field(const std::string& name, const std::string& value);
  // The number of plural forms the header's Plural-Forms declares (1..32: read() refuses any
  // other), or 0 when absent or a template's "nplurals=INTEGER".
  int nplurals() const;

  // Gives entry `i` its msgstr (one per plural form for a plural entry), optionally marking it
  // fuzzy and adding translator comments. Only filled entries are rendered anew.
  void fill(size_t i, std::vector<std::string> msgstr, bool fuzzy,
            std::vector<std::string> comments = {});

  // Takes entry `i`'s fuzzy mark away, and its previous msgid with it, as a translator's tool
  // does when the translator accepts the entry.
  void clear_fuzzy(size_t i);

  // The file's text with every change applied, in the file's charset. Throws attnkit::Error if
  // a filled string cannot be written in that charset (it names the entry's line).
  std::string write() const;
  // Writes to `path` through a temporary file and a rename: an error leaves no partial file.
  void save(const std::string& path) const;

  // The text as parsed (UTF-8) and its line break ("\n" or "\r\n").
  const std::string& text() const { return text_; }

 private:
  void check_header() const;
  std::string path_, text_, charset_ = "UTF-8", eol_ = "\n";
  std::vector<PoEntry> entries_;
};

// The PO string syntax: `s` escaped (\\ \" \n \t \r \a \b \f \v) and split into the quoted lines
// gettext writes for `keyword` ("msgstr", "msgstr[1]"): one line when it fits in 79 columns and
// has no inner newline, else `keyword ""` followed by lines broken after each \n and, within
// 79 columns, after spaces or between CJK characters. Each line ends with `eol`.
std::string render_po_keyword(const std::string& keyword, const std::string& s,
                              const std::string& eol = "\n");

}  // namespace attnkit::data
