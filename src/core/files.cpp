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

void write_all(int fd, const std::string& bytes) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(std::strerror(errno));
    written += static_cast<size_t>(n);
  }
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
      write_all(anonymous.fd, bytes);
      std::remove(tmp.c_str());  // a stale one from a process killed between link and rename
      const std::string self = "/proc/self/fd/" + std::to_string(anonymous.fd);
      if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) == 0) return;
    }
    Fd named{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)};
    if (named.fd < 0) throw Error(std::strerror(errno));
    write_all(named.fd, bytes);
    if (::close(named.fd) != 0) {
      named.fd = -1;
      throw Error(std::strerror(errno));
    }
    named.fd = -1;
  });
}

}  // namespace attnkit
