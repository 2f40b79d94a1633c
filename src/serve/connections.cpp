#include "connections.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <utility>

namespace attnkit::serve {
namespace {

using Clock = std::chrono::steady_clock;

// The connection the calling thread serves, for Connections::Handling.
// How long a connection may spend reading its request on its thread while others wait for one.
constexpr double kPressureRead = 1.0;
// How long before the drain ends handlers that give up are told to, to send their 503.
constexpr double kCancelGrace = 1.0;

thread_local void* t_owner = nullptr;
thread_local void* t_connection = nullptr;

uint64_t inode_of(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) ? static_cast<uint64_t>(st.st_ino) : 0;
}

// A connected (not listening) TCP socket whose local port is `port`: the server's side of a
// connection.
bool is_server_side(int fd, int port) {
  int listening = 0;
  socklen_t len = sizeof listening;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening) return false;
  sockaddr_storage addr{};
  len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  if (addr.ss_family == AF_INET)
    return ntohs(reinterpret_cast<sockaddr_in&>(addr).sin_port) == port;
  if (addr.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<sockaddr_in6&>(addr).sin6_port) == port;
  return false;
}

}  // namespace

// httplib deletes its task queue when it stops listening; the Connections outlive it.
class Connections::Queue : public httplib::TaskQueue {
 public:
  explicit Queue(Connections& c) : c_(c) {}
  void enqueue(std::function<void()> fn) override { c_.enqueue(std::move(fn)); }
  void shutdown() override { c_.shutdown(); }

 private:
  Connections& c_;
};

Connections::Connections(int port, ConnectionLimits limits)
    : port_(port), limits_(limits), watchdog_([this] { watch(); }) {}

Connections::~Connections() { shutdown(); }

httplib::TaskQueue* Connections::new_task_queue() { return new Queue(*this); }

Connections::Connection* Connections::find_new_socket() {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return nullptr;
  Connection* found = nullptr;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || fd == dirfd(dir)) continue;
    const uint64_t inode = inode_of(static_cast<int>(fd));
    if (inode == 0) continue;
    bool known = false;
    for (const auto& c : live_) known = known || c.inode == inode;
    if (known || !is_server_side(static_cast<int>(fd), port_)) continue;
    // Nothing closes the new socket yet: its connection's thread starts after this.
    const int own = fcntl(static_cast<int>(fd), F_DUPFD_CLOEXEC, 0);
    live_.push_back({own, inode, Phase::Reading, Clock::now(), false, false, {}});
    found = &live_.back();
    break;
  }
  closedir(dir);
  return found;
}

void Connections::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  Connection* c = find_new_socket();
  if (!c) {
    live_.push_back({-1, 0, Phase::Reading, Clock::now(), false, false, {}});
    c = &live_.back();
  }
  auto task = [this, c, fn = std::move(fn)] {
    t_owner = this;
    t_connection = c;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      c->running = true;
      c->started = Clock::now();
    }
    fn();  // reads, handles, answers and closes the socket
    t_connection = nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    if (c->own >= 0) ::close(c->own);  // under the lock, as cut() uses it
    live_.remove_if([c](const Connection& x) { return &x == c; });
    changed_.notify_all();
  };
  if (threads_ < limits_.max_connections) {
    ++threads_;
    std::thread([this, task = std::move(task)]() mutable { serve(std::move(task)); }).detach();
  } else {
    waiting_.push_back({c, std::move(task)});
  }
}

// One thread: its connection, then any that waited for a thread.
void Connections::serve(std::function<void()> task) {
  while (task) {
    task();
    task = nullptr;  // releases httplib's closure while the server is still there
    std::lock_guard<std::mutex> lock(mutex_);
    task = next_waiting();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  --threads_;
  changed_.notify_all();  // under the lock: nothing of *this is touched once it is released
}

namespace {

// Whether a connection's request head has arrived whole (peeked, not read): such a request
// needs its thread for milliseconds, where a client still sending may hold it for seconds.
bool head_arrived(int fd) {
  char buffer[8192];
  const ssize_t n = recv(fd, buffer, sizeof buffer, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 && std::string_view(buffer, static_cast<size_t>(n)).find("\r\n\r\n") !=
                      std::string_view::npos;
}

}  // namespace

// The next connection to get a thread, under the lock: the first among the oldest waiting whose
// request has arrived whole, else the oldest. Slow clients beyond --max-connections then delay
// a quick request (/healthz) by one freed thread, not by every slow client ahead of it.
std::function<void()> Connections::next_waiting() {
  if (waiting_.empty()) return nullptr;
  constexpr size_t kLookAhead = 64;
  auto pick = waiting_.begin();
  size_t looked = 0;
  for (auto it = waiting_.begin(); it != waiting_.end() && looked < kLookAhead; ++it, ++looked)
    if (it->connection->own >= 0 && head_arrived(it->connection->own)) {
      pick = it;
      break;
    }
  auto task = std::move(pick->task);
  waiting_.erase(pick);
  return task;
}

// Ends a connection from outside its thread: its blocked read or write returns and httplib closes
// its descriptor. Called under the lock, on our own descriptor of the socket (Connection::own),
// which stays open until the connection has left live_, under the lock too.
bool Connections::cut(Connection& c, bool answer_408) {
  if (c.cut || c.own < 0) return false;
  if (answer_408) {
    static const char kAnswer[] =
        "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: application/json\r\n"
        "Content-Length: 47\r\n\r\n{\"error\":\"the request took too long to arrive\"}";
    (void)!send(c.own, kAnswer, sizeof kAnswer - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  ::shutdown(c.own, SHUT_RDWR);
  c.cut = true;
  return true;
}

void Connections::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!shut_down_) {
    changed_.wait_for(lock, std::chrono::milliseconds(100));
    const auto now = Clock::now();
    for (auto& c : live_) {
      const double age = std::chrono::duration<double>(now - c.since).count();
      if (c.cut || c.phase == Phase::Handling) continue;
      const bool reading = c.phase == Phase::Reading;
      if (age > (reading ? limits_.read_timeout_s : limits_.write_timeout_s)) {
        if (cut(c, /*answer_408=*/reading)) ++timed_out_;
      }
    }
    // Under pressure, the slowest readers give their threads to the connections waiting.
    size_t waiting = waiting_.size();
    while (waiting > 0) {
      Connection* slowest = nullptr;
      for (auto& c : live_)
        if (c.running && !c.cut && c.phase == Phase::Reading &&
            std::chrono::duration<double>(now - c.started).count() > kPressureRead &&
            (!slowest || c.started < slowest->started))
          slowest = &c;
      if (!slowest || !cut(*slowest, /*answer_408=*/true)) break;
      ++timed_out_;
      --waiting;
    }
  }
}

void Connections::shutdown() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopping_) return;
  stopping_ = true;
  // No new connections arrive. Those open finish their requests (the watchdog still holds each
  // to its deadlines) within `drain`. Handlers still working near its end (a long catalog) are
  // told to give up with 503 (cancelled()), with a moment left for those answers to go out; at
  // the end every socket is cut.
  const double grace = std::min(kCancelGrace, limits_.drain_s / 4);
  changed_.wait_for(lock, std::chrono::duration<double>(limits_.drain_s - grace),
                    [&] { return live_.empty(); });
  cancelled_ = true;
  changed_.wait_for(lock, std::chrono::duration<double>(grace), [&] { return live_.empty(); });
  for (auto& c : live_) cut(c, /*answer_408=*/false);
  changed_.wait(lock, [&] { return threads_ == 0; });
  shut_down_ = true;
  lock.unlock();
  changed_.notify_all();
  watchdog_.join();
}

bool Connections::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

size_t Connections::open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_.size();
}

uint64_t Connections::timed_out() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timed_out_;
}

// Moves the calling thread's connection, if it serves one, to `phase` from now on.
void Connections::mark(Phase phase) {
  auto* owner = static_cast<Connections*>(t_owner);
  auto* c = static_cast<Connection*>(t_connection);
  if (!owner || !c) return;
  std::lock_guard<std::mutex> lock(owner->mutex_);
  c->phase = phase;
  c->since = Clock::now();
}

Connections::Handling::Handling() { mark(Phase::Handling); }
Connections::Handling::~Handling() { mark(Phase::Writing); }

}  // namespace attnkit::serve
