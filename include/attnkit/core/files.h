#pragma once

#include <cstddef>
#include <functional>
#include <iosfwd>
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

// The whole of a regular file of at most `max_bytes`, else attnkit::Error naming `path` and why:
// missing, a directory, a device or FIFO (/dev/zero would never end), or too large. `what` names
// the file's role in the message ("model weights", "a catalog").
std::string read_small_file(const std::string& path, size_t max_bytes, const std::string& what);

// One line of `in` into `line` (without its '\n'), reading at most about max_bytes of it: a
// longer line is not gathered (a 2 GB line of a sparse file, or /dev/zero, never ends); its rest
// is left in the stream, for the caller to skip (a regular file) or give up on.
enum class LineStatus { Ok, End, TooLong };
LineStatus read_line(std::istream& in, std::string& line, size_t max_bytes);

// An exclusive lock on a directory for this object's life (flock on DIR/.lock, released when the
// process dies, however): a second process asking for it is refused at once with an
// attnkit::Error naming the directory, `what` holds it for, and its holder's pid.
class DirectoryLock {
 public:
  DirectoryLock(const std::string& dir, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

// The first line of a message: LibTorch's errors carry their C++ context after it.
std::string first_line(const std::string& text);

}  // namespace attnkit
