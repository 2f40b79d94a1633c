#include "attnkit/core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "attnkit/core/error.h"

namespace attnkit {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

void write_atomically(const std::string& path, const std::string& what,
                      const std::function<void(const std::string& tmp)>& write) {
  const std::string tmp = path + ".tmp";
  try {
    write(tmp);
  } catch (const std::exception& e) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot write " + what + " (" + first_line(e.what()) + ")");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error(path + ": cannot write " + what + " (" + why + ")");
  }
}

namespace {

// Writes what `produce` gives its sink to `fd`, then syncs it. Pieces below kSmall are gathered
// (LibTorch's archive writer hands over each member's 30-odd-byte header and descriptor on their
// own: a system call each otherwise). The first failed write stops the writing and is thrown once
// `produce` returns: the sink itself never throws (see ByteSink).
void stream_to(int fd, const std::function<void(const ByteSink&)>& produce) {
  constexpr size_t kSmall = 64 << 10;
  std::string pending;
  int error = 0;
  const auto write_out = [&](const char* p, size_t size) {
    while (error == 0 && size > 0) {
      const ssize_t n = ::write(fd, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        error = errno;
      else
        p += n, size -= static_cast<size_t>(n);
    }
  };
  const auto flush = [&] {
    write_out(pending.data(), pending.size());
    pending.clear();
  };
  produce([&](const void* data, size_t size) {
    const auto* p = static_cast<const char*>(data);
    if (pending.size() + size <= kSmall) return void(pending.append(p, size));
    flush();
    if (size < kSmall)
      pending.append(p, size);
    else
      write_out(p, size);
  });
  flush();
  if (error != 0) throw Error(std::strerror(error));
  if (::fsync(fd) != 0) throw Error(std::strerror(errno));
}

// Closes the descriptor on every path.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_file_atomic(path, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

void write_file_atomic(const std::string& path,
                       const std::function<void(const ByteSink&)>& produce) {
  write_atomically(path, "the file", [&](const std::string& tmp) {
    // The bytes go to an unnamed file (O_TMPFILE) that gets the temporary's name only once
    // complete and synced: a process killed (kill -9) while writing a checkpoint leaves nothing
    // behind, rather than a checkpoint.pt.tmp as large as the checkpoint. Filesystems without
    // O_TMPFILE get a named temporary from the start.
    const std::string dir = [&] {
      const auto slash = path.find_last_of('/');
      return slash == std::string::npos ? std::string(".") : path.substr(0, slash + 1);
    }();
    Fd anonymous{::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666)};
    if (anonymous.fd >= 0) {
      stream_to(anonymous.fd, produce);
      std::remove(tmp.c_str());  // a stale one from a process killed between link and rename
      const std::string self = "/proc/self/fd/" + std::to_string(anonymous.fd);
      if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) == 0) return;
    }
    Fd named{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)};
    if (named.fd < 0) throw Error(std::strerror(errno));
    stream_to(named.fd, produce);
    if (::close(named.fd) != 0) {
      named.fd = -1;
      throw Error(std::strerror(errno));
    }
    named.fd = -1;
  });
}

}  // namespace attnkit
