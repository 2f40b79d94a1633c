#include "attnkit/po/pretranslate.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <optional>
#include <unordered_map>

#include "attnkit/core/error.h"
#include "attnkit/data/corpus.h"
#include "attnkit/data/plural_forms.h"
#include "attnkit/data/text.h"
#include "attnkit/data/tokenizer.h"
#include "attnkit/po/protect.h"
#include "attnkit/po/refresh.h"
#include "attnkit/translate/translator.h"

namespace attnkit::po {
namespace {

// The message as corpus pairs store it: whitespace squeezed, the accelerator marker removed.
std::string loose_key(const std::string& message, char* key = nullptr) {
  std::string s = message;
  size_t at = 0;
  if (find_accelerator(s, &at)) {
    if (key) *key = s[at + 1];
    s.erase(at, 1);
  }
  return text::squeeze_spaces(s);
}

bool has_letters(std::string_view s) {
  for (char32_t c : text::decode(s))
    if ((c < 128 && std::isalpha(static_cast<int>(c))) || (c >= 128 && c != 0x2026)) return true;
  return false;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(s.substr(start, nl - start));
  lines.push_back(s.substr(start));
  return lines;
}

// The model's target language: config.json's target_lang, else what the target tokenizer
// implies ("zh"), else "" (unknown).
std::string model_language(const translate::ModelConfig& c) {
  if (!c.target_lang.empty()) return c.target_lang;
  if (c.target_tokenizer == "zh") return "zh";
  return "";
}

// One line of a message that goes to the model, and how its translation is put back.
struct Segment {
  Protected parts;
  std::string text;  // what the model reads
};

// A message taken apart into lines: the indexes of its segments among the work list, or -1 for
// a line kept as it is.
struct Message {
  size_t entry = 0, form = 0;  // catalog entry, and which msgstr it fills
  std::vector<std::string> lines;
  std::vector<long> segment;
};

// The header's Plural-Forms, checked as msgfmt checks it; nullopt when there is none (or a
// template's "nplurals=INTEGER", which pretranslate fills in). A broken one is an error naming
// the header's line: a catalog written with it would be refused by msgfmt.
std::optional<data::PluralForms> plural_rule(const data::PoCatalog& catalog) {
  const std::string forms = catalog.header_field("Plural-Forms");
  if (forms.empty() || forms.find("INTEGER") != std::string::npos) return std::nullopt;
  // Without a plural entry msgfmt reads no rule, and a misspelt "nulurals=1" (binutils' ja
  // catalog) passes; so it does here.
  const auto& entries = catalog.entries();
  if (std::none_of(entries.begin(), entries.end(),
                   [](const data::PoEntry& e) { return e.plural(); }))
    return std::nullopt;
  try {
    return data::PluralForms::parse(forms);
  } catch (const Error& e) {
    // The line of the header that holds the field.
    const auto& all = catalog.entries();
    size_t line = !all.empty() && all[0].is_header() ? all[0].line : 1;
    if (!all.empty() && all[0].is_header()) {
      const std::string& text = catalog.text();
      const size_t at = text.find("Plural-Forms:", all[0].begin);
      if (at != std::string::npos && at < all[0].end)
        line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + at, '\n'));
    }
    throw Error(catalog.path() + ":" + std::to_string(line) + ": " + e.what());
  }
}

// The English that msgstr[f] of a plural entry translates. The form of n = 1 translates the
// singular when it keeps the plural's placeholders or is used for 1 alone (German's form 0);
// Russian's form 0 also serves 21, 31, ..., and its number must stay, so it translates the
// plural when the singular has no number ("One file"). The other forms, and the one form of a
// language without plurals (zh, ja), translate the plural.
const std::string& plural_source(const data::PoEntry& e, int f, int nplurals,
                                 const data::PluralForms* rule) {
  if (!e.plural()) return e.msgid;
  if (nplurals <= 1) return e.msgid_plural;
  const int singular_form = rule ? rule->form(1) : 0;
  if (f != singular_form) return e.msgid_plural;
  const bool alone = rule ? rule->only_one_number(f) : true;
  return alone || data::placeholders(e.msgid) == data::placeholders(e.msgid_plural)
             ? e.msgid
             : e.msgid_plural;
}

}  // namespace

void Memory::add_catalog(const data::PoCatalog& catalog) {
  for (const auto& e : catalog.entries()) {
    if (e.obsolete || e.is_header() || e.fuzzy() || !e.translated()) continue;
    exact_.emplace(std::make_tuple(e.has_context, e.context, e.msgid),
                   Match{e.msgstr, catalog.path(), true, 100, {}});
    if (!e.plural() && !find_accelerator(e.msgid))
      fuzzy_.add(text::squeeze_spaces(e.msgid), e.msgstr[0], catalog.path());
  }
}

size_t Memory::add_corpus(const std::string& tsv_path) {
  const auto pairs = data::read_tsv(tsv_path);
  for (const auto& p : pairs) {
    loose_.emplace(loose_key(p.source), std::make_pair(p.target, tsv_path));
    fuzzy_.add(p.source, p.target, tsv_path);
  }
  return pairs.size();
}

bool Memory::find(const data::PoEntry& e, int nplurals, Match& match, AcceleratorStyle style,
                  int fuzzy_threshold) const {
  const int forms = e.plural() ? std::max(nplurals, 1) : 1;
  if (auto it = exact_.find(std::make_tuple(e.has_context, e.context, e.msgid));
      it != exact_.end()) {
    match = it->second;
    match.msgstr.resize(forms, match.msgstr.back());
    return true;
  }
  if (e.plural()) return false;  // a corpus pair is one sentence: no plural forms
  char key = 0;
  const std::string message = loose_key(e.msgid, &key);
  // The corpus squeezed whitespace and dropped accelerators: use a match only if what must
  // survive does (the accelerator marker must also be GTK's, the one the corpus reader strips).
  auto usable = [&](std::string target) {
    // A pair the corpus reader left a marker in ("Weitersuche_n") keeps its own.
    if (key && !find_accelerator(target)) place_accelerator(target, '_', key, style);
    return survives(e.msgid, target) ? std::optional<std::string>(std::move(target)) : std::nullopt;
  };
  if (auto it = loose_.find(message); it != loose_.end())
    if (auto target = usable(it->second.first)) {
      match = Match{{*target}, it->second.second, false, 100, {}};
      return true;
    }
  if (fuzzy_threshold <= 0) return false;
  const auto hit = fuzzy_.best(message, fuzzy_threshold);
  if (!hit || hit->score == 100) return false;  // a 100 is the loose match refused above
  const auto target = usable(hit->target);
  if (!target) return false;
  match = Match{{*target}, hit->origin, false, hit->score, hit->source};
  return true;
}

std::pair<std::string, std::string> split_language(const std::string& code) {
  const auto at = code.find('@');
  const std::string base = code.substr(0, at);
  const auto sep = base.find_first_of("_-");
  if (sep == std::string::npos) return {base, ""};
  std::string region = base.substr(sep + 1);
  region = region.substr(0, region.find('.'));  // zh_CN.UTF-8
  return {base.substr(0, sep), region};
}

bool language_matches(const std::string& model_lang, const std::string& catalog_lang) {
  auto [ml, mr] = split_language(model_lang);
  auto [cl, cr] = split_language(catalog_lang);
  auto lower = [](std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  if (lower(ml) != lower(cl)) return false;
  return mr.empty() || cr.empty() || lower(mr) == lower(cr);
}

std::string plural_forms(const std::string& lang) {
  const std::string l = split_language(lang).first;
  if (l == "pt" && split_language(lang).second == "BR") return "nplurals=2; plural=(n > 1);";
  for (const char* one : {"zh", "ja", "ko", "vi", "th", "id", "ms"})
    if (l == one) return "nplurals=1; plural=0;";
  for (const char* two : {"en", "de", "nl", "sv", "da", "no", "nb", "nn", "it", "es", "pt", "fi",
                          "el", "hu", "et", "eo", "bg", "ca"})
    if (l == two) return "nplurals=2; plural=(n != 1);";
  if (l == "fr") return "nplurals=2; plural=(n > 1);";
  for (const char* slavic : {"ru", "uk", "be", "sr", "hr", "bs"})
    if (l == slavic)
      return "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || "
             "n%100>=20) ? 1 : 2);";
  if (l == "pl")
    return "nplurals=3; plural=(n==1 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2);";
  if (l == "cs" || l == "sk") return "nplurals=3; plural=(n==1) ? 0 : (n>=2 && n<=4) ? 1 : 2;";
  return "";
}

namespace {

// The catalog's language, checked against the model's.
std::string catalog_language(const data::PoCatalog& catalog, translate::Translator& translator,
                             const PretranslateOptions& options) {
  const std::string lang = options.lang.empty() ? catalog.header_field("Language") : options.lang;
  if (lang.empty())
    throw Error(catalog.path() +
                ": the header names no Language; give the target language with --lang");
  const std::string model_lang = model_language(translator.config());
  if (!model_lang.empty() && !language_matches(model_lang, lang))
    throw Error(catalog.path() + ": a catalog in " + lang + ", but the model translates into " +
                model_lang + " (config.json target_lang)");
  return lang;
}

// The header fields msginit fills for a new translation, only where a template left them blank
// (or, for Plural-Forms, where plural entries need it): an existing .po's header stays.
void fill_header(data::PoCatalog& catalog, const std::string& lang) {
  const auto& all = catalog.entries();
  const bool plurals =
      std::any_of(all.begin(), all.end(), [](const data::PoEntry& e) { return e.plural(); });
  const std::string forms = catalog.header_field("Plural-Forms");
  // Language: empty in a template, absent in a catalog older than gettext 0.18 (msginit adds it).
  if (catalog.header_field("Language").empty() && !all.empty() && all[0].is_header())
    catalog.set_header_field("Language", lang);
  const bool two_forms = std::any_of(all.begin(), all.end(),
                                     [](const data::PoEntry& e) { return e.msgstr.size() > 1; });
  if (catalog.nplurals() == 0 && !plural_forms(lang).empty() &&
      (forms.find("INTEGER") != std::string::npos || (forms.empty() && plurals && !two_forms)))
    catalog.set_header_field("Plural-Forms", plural_forms(lang));
  if (catalog.header_field("Content-Type").find("charset=CHARSET") != std::string::npos)
    catalog.set_header_field("Content-Type", "text/plain; charset=UTF-8");
}

// The forms each plural entry gets: the header's, else as many as the entries already have
// (a catalog whose header lost its Plural-Forms), else one.
int forms_of(const data::PoCatalog& catalog, const std::optional<data::PluralForms>& rule) {
  int nplurals = rule ? rule->nplurals() : 0;
  for (const auto& e : catalog.entries())
    if (nplurals == 0 && e.plural() && e.msgstr.size() > 1)
      nplurals = static_cast<int>(e.msgstr.size());
  return std::max(nplurals, 1);
}

// A placeholder is whole to the model when both of its tokenizers give it as one token (a
// SentencePiece "▁" of its own aside): then the model reads it and can write it back.
KeepsWhole keeps_whole(const translate::Translator& translator) {
  auto known = std::make_shared<std::unordered_map<std::string, bool>>();
  return [&translator, known](const std::string& placeholder) {
    auto it = known->find(placeholder);
    if (it != known->end()) return it->second;
    auto one_token = [&](const data::Tokenizer& tokenizer) {
      std::vector<std::string> tokens;
      for (auto& t : tokenizer.tokenize(placeholder))
        if (t != "\xe2\x96\x81") tokens.push_back(std::move(t));
      return tokens.size() == 1 && tokens[0] == placeholder;
    };
    const bool whole =
        one_token(translator.source_tokenizer()) && one_token(translator.target_tokenizer());
    known->emplace(placeholder, whole);
    return whole;
  };
}

// What the model is to translate: each message's lines, and each distinct line once.
struct Work {
  std::vector<Message> messages;
  std::vector<Segment> segments;
  std::vector<std::string> lines_of;             // each segment's line as it is in the msgid
  std::unordered_map<std::string, size_t> seen;  // the same line is translated once
  KeepsWhole whole;                              // which placeholders the model reads whole
  std::map<size_t, std::string> notes;  // entry -> a comment of its own (a changed msgid's)
  const Glossary* glossary = nullptr;   // terms masked and put back as their targets
  size_t terms = 0;                     // of the segments, glossary terms

  // Entry i's form f as lines, each a segment unless it has no letters.
  void add(const data::PoCatalog& catalog, size_t i, int f, const std::string& source,
           bool protect_spans) {
    const data::PoEntry& e = catalog.entries()[i];
    Message m;
    m.entry = i;
    m.form = static_cast<size_t>(f);
    m.lines = split_lines(source);
    for (const auto& line : m.lines) {
      if (line.size() > data::kMaxMessageLineBytes)
        throw Error(catalog.path() + ":" + std::to_string(e.line) + ": a message line of " +
                    std::to_string(line.size()) + " bytes; the model takes lines of at most " +
                    std::to_string(data::kMaxMessageLineBytes));
      Segment s;
      s.parts = protect_spans ? protect(line, /*accelerators=*/m.lines.size() == 1, whole, glossary)
                              : Protected{};
      s.text = protect_spans ? s.parts.text : text::squeeze_spaces(line);
      if (!has_letters(s.text)) {
        m.segment.push_back(-1);
        continue;
      }
      auto [it, fresh] = seen.emplace(line, segments.size());
      if (fresh) {
        terms += s.parts.terms;
        segments.push_back(std::move(s));
        lines_of.push_back(line);
      }
      m.segment.push_back(static_cast<long>(it->second));
    }
    messages.push_back(std::move(m));
  }
};

// The model's translations of the texts, in chunks so that progress can be shown and a caller
// that gave up stops the work.
std::vector<translate::Translation> translate_texts(const std::vector<std::string>& texts,
                                                    translate::Translator& translator,
                                                    const PretranslateOptions& options,
                                                    const std::string& path) {
  std::vector<translate::Translation> results;
  const size_t chunk = std::max<size_t>(options.batch_size * 8, 64);
  for (size_t start = 0; start < texts.size(); start += chunk) {
    if (options.cancelled && options.cancelled()) throw Error(path + ": pre-translation cancelled");
    const std::vector<std::string> part(texts.begin() + start,
                                        texts.begin() + std::min(texts.size(), start + chunk));
    auto out =
        translator.translate(part, options.search, options.batch_size, options.parallel_batches);
    std::move(out.begin(), out.end(), std::back_inserter(results));
    if (options.on_progress) options.on_progress(results.size(), texts.size());
  }
  return results;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// The comment a fuzzy entry whose msgid changed gets with its new suggestion: what changed, how
// like the previous msgid the new one is, and the translation it had, so that nothing is lost.
std::string changed_note(const data::PoEntry& e, const Refresh& r) {
  std::string old;
  for (const auto& form : e.msgstr) {
    std::string one;
    for (char c : form) one += c == '\n' ? std::string("\\n") : std::string(1, c);
    old += (old.empty() ? "\"" : " | \"") + one + "\"";
  }
  return "attnkit: the msgid changed (" + join(r.changes) + "; " + std::to_string(r.similarity) +
         " % like the previous one), whose translation was " + old;
}

// Each message put together from its lines' translations, and filled in, entry by entry.
// `confidence`: each segment's (empty without a calibrated confidence).
void fill_entries(data::PoCatalog& catalog, Work& work, const std::vector<std::string>& restored,
                  const std::vector<double>& confidence, double min_confidence,
                  PretranslateReport& report) {
  std::map<size_t, std::vector<std::string>> filled;
  std::map<size_t, std::vector<size_t>> segments_of;
  for (const auto& m : work.messages) {
    std::string out;
    bool any = false;
    for (size_t l = 0; l < m.lines.size(); ++l) {
      if (l) out += '\n';
      if (m.segment[l] < 0) {
        out += m.lines[l];
      } else {
        out += restored[m.segment[l]];
        segments_of[m.entry].push_back(static_cast<size_t>(m.segment[l]));
        any = true;
      }
    }
    auto& msgstr = filled[m.entry];
    msgstr.resize(std::max(msgstr.size(), m.form + 1));
    msgstr[m.form] = any || !out.empty() ? out : m.lines[0];
  }
  for (auto& [i, msgstr] : filled) {
    const data::PoEntry& e = catalog.entries()[i];
    FilledEntry f{i, FilledEntry::Origin::Model, "", segments_of[i], survives(e.msgid, msgstr[0])};
    std::vector<std::string> comments;
    if (!f.segments.empty()) {
      std::string comment = kModelComment;
      if (!confidence.empty()) {
        f.confidence = 1;
        for (size_t s : f.segments) f.confidence = std::min(f.confidence, confidence[s]);
        if (f.confidence < min_confidence) {
          ++report.low_confidence;
          continue;
        }
        char figure[32];
        std::snprintf(figure, sizeof figure, ", confidence %.2f", f.confidence);
        comment += figure;
      }
      ++report.model;
      comments.push_back(comment);
    } else {
      f.origin = FilledEntry::Origin::Copied;  // "%s", "...": the message is its translation
      ++report.copied;
    }
    if (auto note = work.notes.find(i); note != work.notes.end()) comments.push_back(note->second);
    catalog.fill(i, std::move(msgstr), /*fuzzy=*/true, std::move(comments));
    report.filled.push_back(std::move(f));
  }
}

}  // namespace

PretranslateReport pretranslate(data::PoCatalog& catalog, translate::Translator& translator,
                                const Memory& memory, const PretranslateOptions& options) {
  // The language and the header.
  const std::string lang = catalog_language(catalog, translator, options);
  fill_header(catalog, lang);
  const auto rule = plural_rule(catalog);
  const int nplurals = forms_of(catalog, rule);
  const AcceleratorStyle style = accelerator_style(lang);

  // Translation memory first; what it does not have goes to the model, line by line.
  PretranslateReport report;
  Work work;
  work.whole = keeps_whole(translator);
  work.glossary = options.glossary;
  const auto& entries = catalog.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    const data::PoEntry& e = entries[i];
    if (e.obsolete || e.is_header()) continue;
    ++report.entries;
    if (!e.msgstr.empty() && !e.msgstr[0].empty()) {
      const auto changed = options.refresh_fuzzy ? refresh(e, style) : std::nullopt;
      if (!changed) {
        ++report.translated;
        continue;
      }
      if (changed->cosmetic) {
        catalog.fill(i, changed->msgstr, /*fuzzy=*/false,
                     {std::string(kRefreshComment) + " (" + join(changed->changes) + ")"});
        catalog.clear_fuzzy(i);
        ++report.refreshed;
        report.filled.push_back(
            {i, FilledEntry::Origin::Refreshed, "", {}, survives(e.msgid, e.msgstr[0])});
        continue;
      }
      work.notes[i] = changed_note(e, *changed);
      ++report.resuggested;
    }
    Memory::Match match;
    if (options.use_memory && memory.find(e, nplurals, match, style, options.fuzzy_threshold)) {
      std::string comment = std::string(kMemoryComment) + " (" + match.origin + ")";
      if (match.score < 100)
        comment += ", " + std::to_string(match.score) + " % match of \"" + match.source + "\"";
      std::vector<std::string> comments{comment};
      if (auto note = work.notes.find(i); note != work.notes.end())
        comments.push_back(note->second);
      catalog.fill(i, match.msgstr, /*fuzzy=*/!match.exact, std::move(comments));
      if (match.exact) catalog.clear_fuzzy(i);
      ++report.memory;
      report.fuzzy_memory += match.score < 100;
      report.filled.push_back(
          {i, FilledEntry::Origin::Memory, match.origin, {}, survives(e.msgid, match.msgstr[0])});
      continue;
    }
    for (int f = 0; f < (e.plural() ? nplurals : 1); ++f)
      work.add(catalog, i, f, plural_source(e, f, nplurals, rule ? &*rule : nullptr),
               options.protect);
  }

  // The model.
  std::vector<std::string> texts;
  for (const auto& s : work.segments) texts.push_back(s.text);
  auto results = translate_texts(texts, translator, options, catalog.path());
  report.segments = texts.size();
  report.glossary_terms = work.terms;

  // What must survive, put back where the attention says.
  const auto& target = translator.target_tokenizer();
  auto detokenize = [&](const std::vector<std::string>& tokens) {
    return target.detokenize(tokens);
  };
  std::vector<std::string> restored(work.segments.size());
  for (size_t s = 0; s < work.segments.size(); ++s)
    restored[s] = results[s].target_tokens.empty() ? work.lines_of[s]  // no output: the line
                  : options.protect
                      ? restore(work.segments[s].parts, results[s].target_tokens,
                                results[s].attention, results[s].source_tokens, detokenize, style)
                      : results[s].text;

  // The entries filled in.
  std::vector<double> confidence;
  if (options.confidence && options.confidence->fitted())
    for (const auto& r : results) confidence.push_back((*options.confidence)(r));
  fill_entries(catalog, work, restored, confidence, options.min_confidence, report);
  std::sort(report.filled.begin(), report.filled.end(),
            [](const FilledEntry& a, const FilledEntry& b) { return a.entry < b.entry; });
  for (const auto& f : report.filled) report.survived += f.survived;
  if (options.keep_translations) {
    report.inputs = std::move(texts);
    report.translations = std::move(results);
  }
  return report;
}

const char* to_string(FilledEntry::Origin origin) {
  switch (origin) {
    case FilledEntry::Origin::Memory:
      return "memory";
    case FilledEntry::Origin::Model:
      return "model";
    case FilledEntry::Origin::Copied:
      return "copied";
    case FilledEntry::Origin::Refreshed:
      return "refreshed";
  }
  return "?";
}

CatalogStats stats(const data::PoCatalog& catalog) {
  CatalogStats s;
  for (const auto& e : catalog.entries()) {
    if (e.is_header()) continue;
    if (e.obsolete) {
      ++s.obsolete;
      continue;
    }
    const bool done = !e.msgstr.empty() && !e.msgstr[0].empty();
    if (!done)
      ++s.untranslated;
    else if (e.fuzzy())
      ++s.fuzzy;
    else
      ++s.translated;
    for (const auto& c : e.comments) {
      if (c.rfind(kMemoryComment, 0) == 0) ++s.memory;
      if (c.rfind(kModelComment, 0) == 0) ++s.model;
    }
    if (done) {
      ++s.checked;
      if (survives(e.msgid, e.msgstr[0]))
        ++s.survived;
      else
        s.damaged.push_back(e.line);
    }
  }
  return s;
}

}  // namespace attnkit::po
