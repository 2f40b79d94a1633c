#include "attnkit/core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>

#include "attnkit/core/error.h"

namespace attnkit {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string read_small_file(const std::string& path, size_t max_bytes, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(path + ": cannot open " + what + " (" + std::strerror(errno) + ")");
  if (S_ISDIR(st.st_mode)) throw Error(path + ": a directory, not " + what);
  if (!S_ISREG(st.st_mode)) throw Error(path + ": not a regular file (" + what + " must be one)");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw Error(path + ": " + std::to_string(st.st_size) + " bytes, more than " + what +
                " may hold (" + std::to_string(max_bytes) + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open " + what);
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& what) {
  const std::string path = dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path + ": cannot create the lock (" + std::strerror(errno) + ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {0};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    throw Error(dir + ": in use by another attnkit (" + (pid.empty() ? "" : "pid " + pid + ", ") +
                what + "); wait for it, or use another directory");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The pid only helps the message: a lock without it still locks.
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

LineStatus read_line(std::istream& in, std::string& line, size_t max_bytes) {
  line.clear();
  char buffer[8192];
  bool any = false;
  while (true) {
    in.getline(buffer, sizeof buffer);
    const auto got = static_cast<size_t>(in.gcount());
    any = any || got > 0;
    if (!in.fail()) {  // the delimiter ended it (and was counted), or the stream's end did
      const bool delimited = !in.eof();
      line.append(buffer, got - (delimited && got > 0 ? 1 : 0));
      return line.size() > max_bytes ? LineStatus::TooLong : LineStatus::Ok;
    }
    if (in.eof()) {  // the end, after `got` characters of a last line without '\n'
      line.append(buffer, got);
      if (!any) return LineStatus::End;
      in.clear(std::ios::eofbit);
      return line.size() > max_bytes ? LineStatus::TooLong : LineStatus::Ok;
    }
    if (in.bad()) return any ? LineStatus::Ok : LineStatus::End;
    in.clear();  // the buffer filled before the line ended
    line.append(buffer, got);
    if (line.size() > max_bytes) return LineStatus::TooLong;  // the rest is the caller's
  }
}

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
