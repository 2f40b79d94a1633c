#pragma once

#include <string>

// A new model directory made from another (attnkit average, attnkit quantize): it never replaces
// a model, and it carries the files that describe the model besides its weights.
namespace attnkit::cli {

// The new directory, written whole: its files go into a staging directory beside `out`
// (OUT.partial), renamed to `out` by commit(). A run killed before that leaves no half a model
// in `out`; the next run clears the staging directory and starts again.
class NewModelDir {
 public:
  // An attnkit::Error when `out` is `model` itself or already holds a model (config.json or
  // model.pt). The staging directory gets the model's description: config.json, the
  // vocabularies and any SentencePiece models.
  NewModelDir(const std::string& command, const std::string& model, const std::string& out);
  ~NewModelDir();
  NewModelDir(const NewModelDir&) = delete;
  NewModelDir& operator=(const NewModelDir&) = delete;
  // Where the files go until commit().
  const std::string& staging() const { return staging_; }
  void commit();

 private:
  std::string out_, staging_;
  bool committed_ = false;
};

}  // namespace attnkit::cli
