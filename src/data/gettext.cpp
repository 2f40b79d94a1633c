#include "attnkit/data/gettext.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attnkit/core/error.h"
#include "attnkit/core/files.h"
#include "attnkit/data/po_catalog.h"
#include "attnkit/data/text.h"
#include "attnkit/data/tokenizer.h"
#include "charset.h"

namespace attnkit::data {
namespace fs = std::filesystem;
namespace {

std::string slurp(const std::string& path) {
  return read_small_file(path, size_t(256) << 20, "a catalog");
}

std::vector<std::string> split_nul(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    auto end = s.find('\0', start);
    parts.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

// Removes a GTK/Qt mnemonic: "_Open" / "&Open" on the English side, and "打开(_O)" on the other.
// A marker at `pos` before a letter or digit and not inside a word ("in_arcnet" is an
// identifier, not a mnemonic).
bool bare_mnemonic(const std::string& s, size_t pos) {
  return pos != std::string::npos && pos + 1 < s.size() &&
         std::isalnum(static_cast<unsigned char>(s[pos + 1])) &&
         (pos == 0 || !std::isalnum(static_cast<unsigned char>(s[pos - 1])));
}

void strip_mnemonics(std::string& source, std::string& target) {
  for (char marker : {'_', '&'}) {
    const size_t in_source = source.find(marker);
    const bool source_has = bare_mnemonic(source, in_source);
    auto open = target.find(std::string("(") + marker);
    if (open != std::string::npos && open + 3 < target.size() && target[open + 3] == ')') {
      target.erase(open, 4);
    } else if (source_has) {  // "_Open" / "_打开"
      auto pos = target.find(marker);
      if (bare_mnemonic(target, pos)) target.erase(pos, 1);
    }
    if (source_has) source.erase(in_source, 1);
  }
}

std::vector<std::string> sorted_placeholders(const std::string& s) {
  auto p = placeholders(s);
  // A translation may reorder arguments with positional forms (%1$s); compare the types only.
  for (auto& x : p) {
    auto dollar = x.find('$');
    if (dollar != std::string::npos) x = "%" + x.substr(dollar + 1);
  }
  std::sort(p.begin(), p.end());
  return p;
}

}  // namespace

std::vector<CatalogEntry> read_mo(const std::string& path) {
  const std::string data = slurp(path);
  auto fail = [&](const std::string& what) -> void {
    throw Error(path + ": not a valid .mo file (" + what + ")");
  };
  if (data.size() < 28) fail("too short");
  uint32_t magic;
  std::memcpy(&magic, data.data(), 4);
  const bool swap = magic == 0xde120495u;
  if (!swap && magic != 0x950412deu) fail("bad magic number");
  auto u32 = [&](size_t off) -> uint32_t {
    if (off + 4 > data.size()) fail("offset past the end");
    uint32_t v;
    std::memcpy(&v, data.data() + off, 4);
    return swap ? __builtin_bswap32(v) : v;
  };
  const uint64_t n = u32(8), originals = u32(12), translations = u32(16);
  if (originals + 8 * n > data.size() || translations + 8 * n > data.size())
    fail("the string tables run past the end");
  auto string_at = [&](uint64_t table, uint64_t i) {
    const uint32_t len = u32(table + 8 * i), off = u32(table + 8 * i + 4);
    if (static_cast<uint64_t>(off) + len > data.size()) fail("string past the end");
    return data.substr(off, len);
  };
  std::vector<CatalogEntry> entries;
  entries.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    CatalogEntry e;
    std::string id = string_at(originals, i);
    auto eot = id.find('\x04');  // msgctxt EOT msgid
    if (eot != std::string::npos) {
      e.context = id.substr(0, eot);
      id = id.substr(eot + 1);
    }
    auto ids = split_nul(id);
    e.msgid = ids[0];
    if (ids.size() > 1) e.msgid_plural = ids[1];
    e.msgstr = split_nul(string_at(translations, i));
    entries.push_back(std::move(e));
  }
  // The header's charset: msgfmt keeps a catalog's bytes as its .po had them (ISO-8859-1, GBK).
  std::string charset;
  for (const auto& e : entries)
    if (e.msgid.empty() && e.context.empty() && !e.msgstr.empty()) {
      const auto at = e.msgstr[0].find("charset=");
      if (at != std::string::npos)
        charset = e.msgstr[0].substr(at + 8, e.msgstr[0].find_first_of(" ;\n", at + 8) - at - 8);
    }
  if (!charset.empty() && charset != "CHARSET" && !data::is_utf8(charset))
    for (auto& e : entries) {
      e.context = data::to_utf8(e.context, charset, path);
      e.msgid = data::to_utf8(e.msgid, charset, path);
      e.msgid_plural = data::to_utf8(e.msgid_plural, charset, path);
      for (auto& m : e.msgstr) m = data::to_utf8(m, charset, path);
    }
  return entries;
}

std::vector<CatalogEntry> read_po(const std::string& path) {
  std::vector<CatalogEntry> entries;
  auto catalog = data::PoCatalog::read(path);
  for (auto& e : catalog.entries()) {
    if (e.obsolete) continue;
    CatalogEntry c;
    c.context = std::move(e.context);
    c.msgid = std::move(e.msgid);
    c.msgid_plural = std::move(e.msgid_plural);
    c.msgstr = std::move(e.msgstr);
    c.fuzzy = e.fuzzy();
    entries.push_back(std::move(c));
  }
  return entries;
}

int header_nplurals(const std::vector<CatalogEntry>& entries) {
  for (const auto& e : entries) {
    if (!e.msgid.empty() || !e.context.empty() || e.msgstr.empty()) continue;
    const auto& header = e.msgstr[0];
    const auto at = header.find("nplurals=");
    if (at == std::string::npos) return 0;
    int n = 0;
    for (size_t i = at + 9;
         i < header.size() && std::isdigit(static_cast<unsigned char>(header[i])); ++i)
      n = std::min(n * 10 + (header[i] - '0'), 1000);
    return n;
  }
  return 0;
}

std::vector<Pair> pairs_from_catalog(const std::vector<CatalogEntry>& entries, GettextReport& r) {
  const int nplurals = header_nplurals(entries);
  std::vector<Pair> pairs;
  // One English message and its translation, through the filters.
  auto consider = [&](const std::string& msgid, const std::string& msgstr) {
    std::string source = text::squeeze_spaces(msgid), target = text::squeeze_spaces(msgstr);
    if (!text::valid_utf8(source) || !text::valid_utf8(target)) {
      ++r.unreadable;
      return;
    }
    const size_t before = source.size();
    strip_mnemonics(source, target);
    if (sorted_placeholders(source) != sorted_placeholders(target)) {
      ++r.placeholder_mismatch;
      return;
    }
    if (source.empty() || target.empty()) {
      ++r.untranslated;
      return;
    }
    if (source == target) {
      ++r.identical;
      return;
    }
    r.mnemonics += source.size() != before;
    pairs.push_back({std::move(source), std::move(target)});
  };
  for (const auto& e : entries) {
    if (e.msgid.empty()) continue;  // the header
    ++r.entries;
    if (e.fuzzy) {
      ++r.fuzzy;
      continue;
    }
    if (e.msgstr.empty() || e.msgstr[0].empty()) {
      ++r.untranslated;
      continue;
    }
    if (!e.context.empty()) ++r.context;
    if (e.msgid_plural.empty()) {
      consider(e.msgid, e.msgstr[0]);
      continue;
    }
    ++r.plural;
    if (nplurals == 1) {  // one form for every number: it translates the plural
      consider(e.msgid_plural, e.msgstr[0]);
      continue;
    }
    consider(e.msgid, e.msgstr[0]);
    if (e.msgstr.size() > 1 && !e.msgstr[1].empty()) consider(e.msgid_plural, e.msgstr[1]);
  }
  r.pairs += pairs.size();
  return pairs;
}

std::vector<std::string> find_catalogs(const std::string& lang,
                                       const std::vector<std::string>& roots) {
  std::vector<std::string> found;
  for (const auto& root : roots) {
    std::error_code ec;
    const fs::path messages = fs::path(root) / lang / "LC_MESSAGES";
    if (fs::is_directory(messages, ec))
      for (const auto& f : fs::directory_iterator(messages, ec))
        if (f.path().extension() == ".mo") found.push_back(f.path().string());
    if (!fs::is_directory(root, ec)) continue;
    for (auto it = fs::recursive_directory_iterator(
             root, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const auto& p = it->path();
      if (p.extension() != ".po") continue;
      const std::string stem = p.stem().string(), parent = p.parent_path().filename().string();
      const bool ends_with_lang = stem.size() > lang.size() &&
                                  stem.compare(stem.size() - lang.size(), lang.size(), lang) == 0;
      if (stem == lang || parent == lang || ends_with_lang) found.push_back(p.string());
    }
  }
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  return found;
}

}  // namespace attnkit::data
