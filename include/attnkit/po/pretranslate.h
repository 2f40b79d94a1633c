#pragma once

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "attnkit/data/po_catalog.h"
#include "attnkit/decoding/search.h"
#include "attnkit/po/fuzzy_memory.h"
#include "attnkit/po/glossary.h"
#include "attnkit/po/protect.h"
#include "attnkit/translate/confidence.h"
#include "attnkit/translate/translator.h"

// Pre-translating a catalog for the people who translate it (`attnkit po translate`): every
// untranslated entry gets a suggestion, from a translation memory when one has the exact message,
// else from the model through po::protect/restore, marked "#, fuzzy" so that msgfmt ignores it
// until a person has reviewed it. A translator comment says where each suggestion came from
// ("attnkit: machine translation" / "attnkit: translation memory (FILE)"); `po stats` counts them.
namespace attnkit::po {

inline constexpr const char* kModelComment = "attnkit: machine translation";
inline constexpr const char* kMemoryComment = "attnkit: translation memory";
inline constexpr const char* kRefreshComment = "attnkit: carried over from the previous msgid";

// Exact matches. Compendium catalogs (the translated, non-fuzzy entries of other .po files) match
// on context and message, as msgmerge's do; corpus pairs (the model's training data, source TAB
// target) match on the message alone, whitespace squeezed and the accelerator set aside.
// Fuzzy matches (po/fuzzy_memory.h), when asked for: the most similar message of either, one
// form and no accelerator in a compendium's, used only if every span the msgid protects
// survives in its translation.
class Memory {
 public:
  void add_catalog(const data::PoCatalog& catalog);
  // Returns the number of pairs read; a missing file is an attnkit::Error.
  size_t add_corpus(const std::string& tsv_path);
  size_t size() const { return exact_.size() + loose_.size(); }

  struct Match {
    std::vector<std::string> msgstr;
    std::string origin;  // the file it came from
    bool exact = false;  // context and message matched as they are (no fuzzy mark needed)
    int score = 100;     // a fuzzy match's similarity (0..100)
    std::string source;  // a fuzzy match's message, the one its translation translates
  };
  // A match for `e` in the catalog's number of plural forms, or nullopt.
  // A corpus match's accelerator goes back in `style` (the catalog's language's).
  // `fuzzy_threshold` > 0: a fuzzy match of at least that similarity when no exact one.
  bool find(const data::PoEntry& e, int nplurals, Match& match,
            AcceleratorStyle style = AcceleratorStyle::Appended, int fuzzy_threshold = 0) const;

 private:
  FuzzyMemory fuzzy_;
  std::map<std::tuple<bool, std::string, std::string>, Match> exact_;
  std::map<std::string, std::pair<std::string, std::string>> loose_;  // key -> (target, file)
};

// "zh_CN" -> ("zh", "CN"); "sr@latin" -> ("sr", ""); "pt-BR" -> ("pt", "BR").
std::pair<std::string, std::string> split_language(const std::string& code);
// Whether a model for `model_lang` may translate a catalog in `catalog_lang`: the same language,
// and the same region when both name one (zh_CN is not zh_TW).
bool language_matches(const std::string& model_lang, const std::string& catalog_lang);
// Plural-Forms for a language gettext's msginit knows by heart ("" when this table does not).
std::string plural_forms(const std::string& lang);

struct PretranslateOptions {
  std::string lang;     // the catalog's language (its header's Language: when empty)
  bool protect = true;  // po::protect/restore around the model (off: measure without)
  bool use_memory = true;
  // Fuzzy matches of at least this similarity (0..100) come before the model; 0: none.
  int fuzzy_threshold = 0;
  // Fuzzy entries whose msgid changed (po/refresh.h): a cosmetic change carried into the
  // translation, which is no longer fuzzy; any other, a new suggestion (the old translation kept
  // in a comment). Off: fuzzy entries are left as they are.
  bool refresh_fuzzy = false;
  // A calibrated confidence (translate/confidence.h, the model's confidence.json): each model
  // suggestion's comment gives it ("attnkit: machine translation, confidence 0.82"), the lowest
  // of its lines'; one under `min_confidence` is left untranslated.
  const translate::Confidence* confidence = nullptr;
  double min_confidence = 0;
  // A project's glossary: each term the model is given is masked as a placeholder, and its
  // agreed translation put where the attention says (po::protect).
  const Glossary* glossary = nullptr;
  decoding::SearchOptions search;
  size_t batch_size = 32;
  int parallel_batches = 0;
  // Called with (done, total) segments while the model translates.
  std::function<void(size_t, size_t)> on_progress;
  // Asked between chunks of segments: true stops the work with attnkit::Error (a server whose
  // client gave up, or that is shutting down).
  std::function<bool()> cancelled;
  // Keep each segment's translation (tokens, attention) in the report: the web page shows the
  // attention behind each suggestion.
  bool keep_translations = false;
};

// An entry pretranslate() filled, and where its suggestion came from.
struct FilledEntry {
  enum class Origin { Memory, Model, Copied, Refreshed };
  size_t entry = 0;  // index into data::PoCatalog::entries()
  Origin origin = Origin::Model;
  std::string memory;            // Origin::Memory: the file it came from
  std::vector<size_t> segments;  // Origin::Model: its lines' segments, in order (msgid, plural)
  bool survived = false;         // po::survives(msgid, msgstr[0])
  double confidence = -1;        // Origin::Model with a calibrated confidence: 0..1
};
const char* to_string(FilledEntry::Origin origin);

struct PretranslateReport {
  size_t entries = 0;               // messages, the header and obsolete entries excluded
  size_t translated = 0;            // already translated (left as they are)
  size_t memory = 0;                // filled from a translation memory
  size_t fuzzy_memory = 0;          // of those, by a fuzzy match
  size_t model = 0;                 // filled by the model
  size_t copied = 0;                // nothing to translate (no letters): copied from the msgid
  size_t refreshed = 0;             // fuzzy entries carried across a cosmetic msgid change
  size_t resuggested = 0;           // fuzzy entries whose msgid changed otherwise, filled anew
  size_t low_confidence = 0;        // left untranslated: the model's confidence was too low
  size_t glossary_terms = 0;        // glossary terms in the lines the model translated
  size_t segments = 0;              // lines the model translated
  size_t survived = 0;              // filled entries whose protected spans survived (po::survives)
  std::vector<FilledEntry> filled;  // in catalog order
  // With PretranslateOptions::keep_translations: what the model read and wrote for each segment
  // (the protected line, e.g. "Open %s", and its translation with attention).
  std::vector<std::string> inputs;
  std::vector<translate::Translation> translations;
};

// Fills `catalog`'s untranslated entries (see above) and the header fields msginit fills for a
// new translation (an empty Language, a template's Plural-Forms and charset). Throws
// attnkit::Error when the catalog names no language, or one the model was not trained for.
PretranslateReport pretranslate(data::PoCatalog& catalog, translate::Translator& translator,
                                const Memory& memory, const PretranslateOptions& options);

// What `po stats` prints.
struct CatalogStats {
  size_t translated = 0, fuzzy = 0, untranslated = 0, obsolete = 0;
  size_t memory = 0, model = 0;      // entries whose translator comment names attnkit's source
  size_t checked = 0, survived = 0;  // translated or fuzzy entries, and those po::survives
  std::vector<size_t> damaged;       // the msgid lines of the others
};
CatalogStats stats(const data::PoCatalog& catalog);

}  // namespace attnkit::po
