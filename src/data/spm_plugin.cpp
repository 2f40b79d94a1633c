// A plugin around libsentencepiece, loaded with dlopen(RTLD_LOCAL | RTLD_DEEPBIND).
//
// Debian's libsentencepiece carries its own copy of protobuf-lite and exports it. Linked into
// the same process as LibTorch (which uses libprotobuf.so), the two copies interpose on each
// other and the process crashes while loading. Kept behind this plugin, SentencePiece's
// symbols never enter the global scope and bind to its own copy. The interface is plain C.

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

void copy_error(const std::string& message, char* error, size_t size) {
  if (!error || size == 0) return;
  std::strncpy(error, message.c_str(), size - 1);
  error[size - 1] = '\0';
}

}  // namespace

extern "C" {

using attnkit_spm_emit = void (*)(void* context, const char* text, size_t size);

void* attnkit_spm_load(const char* path, char* error, size_t error_size) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const auto status = sp->Load(path);
  if (!status.ok()) {
    copy_error(status.ToString(), error, error_size);
    delete sp;
    return nullptr;
  }
  return sp;
}

void attnkit_spm_free(void* handle) { delete static_cast<sentencepiece::SentencePieceProcessor*>(handle); }

int attnkit_spm_encode(void* handle, const char* text, size_t size, attnkit_spm_emit emit, void* context) {
  std::vector<std::string> pieces;
  if (!static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Encode(std::string(text, size), &pieces).ok())
    return 1;
  for (const auto& p : pieces) emit(context, p.data(), p.size());
  return 0;
}

int attnkit_spm_decode(void* handle, const char* const* pieces, const size_t* sizes, size_t count,
                       attnkit_spm_emit emit, void* context) {
  std::vector<std::string> in;
  for (size_t i = 0; i < count; ++i) in.emplace_back(pieces[i], sizes[i]);
  std::string out;
  if (!static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Decode(in, &out).ok()) return 1;
  emit(context, out.data(), out.size());
  return 0;
}

int attnkit_spm_train(const char* args, char* error, size_t error_size) {
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  if (!status.ok()) {
    copy_error(status.ToString(), error, error_size);
    return 1;
  }
  return 0;
}

}  // extern "C"
