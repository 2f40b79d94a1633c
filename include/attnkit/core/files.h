#pragma once

#include <functional>
#include <string>

// Writing output files so that nothing already written is lost: every file attnkit writes (model
// weights, checkpoints, vocabularies, configs, corpora, pictures) goes through here.
namespace attnkit {

// Calls write(tmp) to write a temporary file beside `path`, then renames it over `path`: readers
// never see a half-written file, and a crash or a full disk keeps the previous one. On failure the
// temporary is removed and an attnkit::Error names `path`, `what` was being written and why.
void write_atomically(const std::string& path, const std::string& what,
                      const std::function<void(const std::string& tmp)>& write);

// `bytes` into `path` the same way, synced to disk before the rename.
void write_file_atomic(const std::string& path, const std::string& bytes);

// The first line of a message: LibTorch's errors carry their C++ context after it.
std::string first_line(const std::string& text);

}  // namespace attnkit
