#pragma once

#include <cstddef>
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

// Where a writer puts its bytes, in pieces of any size. It never throws: a failed write is kept
// and the rest dropped, and write_file_atomic throws once `produce` returns. (LibTorch's archive
// writer must not see a failure: it throws again from its destructor, which ends the process.)
using ByteSink = std::function<void(const void* data, size_t size)>;

// What `produce` writes to its sink into `path` the same way, streamed to the file rather than
// gathered in memory first. `produce` may be called a second time (when the unnamed temporary
// cannot be linked, the bytes go to a named one) and must then write the same bytes.
void write_file_atomic(const std::string& path,
                       const std::function<void(const ByteSink&)>& produce);

// The first line of a message: LibTorch's errors carry their C++ context after it.
std::string first_line(const std::string& text);

}  // namespace attnkit
