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

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_atomically(path, "the file", [&](const std::string& tmp) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) throw Error(std::strerror(errno));
    size_t written = 0;
    while (written < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const std::string why = std::strerror(errno);
        ::close(fd);
        throw Error(why);
      }
      written += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error(why);
    }
    if (::close(fd) != 0) throw Error(std::strerror(errno));
  });
}

}  // namespace attnkit
