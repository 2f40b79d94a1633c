#pragma once

// Private to src/serve: the connections of `attnkit serve`, each on its own thread, each request
// under a deadline, and a shutdown that drains what is in flight within a bound.
//
// Why: cpp-httplib 0.11 serves a connection on one task-queue thread for the connection's whole
// life and times out each read call, not a request. With its ThreadPool of N workers, N clients
// sending a byte a second (or N idle keep-alive connections) held every worker: /healthz timed
// out and SIGTERM waited for them to leave; connections queued behind them were closed unanswered
// at shutdown (28 dropped requests in the test that found it). This queue replaces the pool:
//  - every connection gets a thread of its own, up to `max_connections` (more wait their turn):
//    a connection is cheap, the CPU-bound work is bounded elsewhere (the batcher, the /api/attend
//    limits);
//  - a request has `read_timeout` from the connection's start to its handler (request line,
//    headers and body together) and `write_timeout` from the handler's end to the connection's
//    end; a watchdog answers 408 to a client that is too slow to ask and cuts (shutdown(2)) one
//    that is too slow to read;
//  - while connections wait their turn, one that has spent more than kPressureRead of its own
//    turn still reading its request gives way: 300 clients sending a header every half second
//    held every thread for their whole read deadline, and /healthz waited 7-10 s behind them;
//  - shutdown() cuts the connections with nothing in a handler, lets the handlers finish for up
//    to `drain`, then cuts the rest and sets cancelled(), which handlers that wait poll.
//
// cpp-httplib hands the accepted socket to the queue inside an opaque closure, so enqueue() finds
// it as the one connected socket on the server's port that it has not seen (it runs on the accept
// thread right after accept(2), before the next). Without /proc, connections run without deadlines.

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

namespace attnkit::serve {

struct ConnectionLimits {
  size_t max_connections = 256;
  double read_timeout_s = 10;
  double write_timeout_s = 10;
  double drain_s = 10;
};

class Connections {
 public:
  Connections(int port, ConnectionLimits limits);
  ~Connections();  // shuts down if shutdown() was not called

  // The TaskQueue httplib asks for (it owns and deletes the handle; the handle forwards here).
  httplib::TaskQueue* new_task_queue();

  // Marks the calling connection's request as being handled for the guard's lifetime: no read
  // deadline while it lasts, and shutdown() waits for it (up to `drain`).
  class Handling {
   public:
    Handling();
    ~Handling();
    Handling(const Handling&) = delete;
    Handling& operator=(const Handling&) = delete;
  };

  // True once shutdown() has waited `drain` for the handlers: a handler that waits must give up.
  bool cancelled() const;
  size_t open() const;         // connections being served now
  uint64_t timed_out() const;  // connections cut by a deadline so far
  void shutdown();

 private:
  enum class Phase { Reading, Handling, Writing };
  struct Connection {
    // A duplicate of the connection's descriptor, ours to close when the connection ends (-1: not
    // found; served without deadlines). httplib closes its own descriptor on the connection's
    // thread whenever the connection ends, and the accept thread may be given that number at once
    // for the next one: a deadline cutting by httplib's number could cut that next connection. Ours
    // keeps the socket, and its number, until the connection has left live_.
    int own = -1;
    uint64_t inode = 0;
    Phase phase = Phase::Reading;
    std::chrono::steady_clock::time_point since;
    bool cut = false;
    // On a thread of its own since `started` (a connection may first wait its turn).
    bool running = false;
    std::chrono::steady_clock::time_point started;
  };
  class Queue;

  static void mark(Phase phase);
  void enqueue(std::function<void()> fn);
  void serve(std::function<void()> fn);
  Connection* find_new_socket();
  bool cut(Connection& c, bool answer_408);  // false: already cut, or not found
  void watch();

  const int port_;
  const ConnectionLimits limits_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::list<Connection> live_;
  struct Waiting {
    Connection* connection;
    std::function<void()> task;
  };
  std::deque<Waiting> waiting_;
  std::function<void()> next_waiting();
  size_t threads_ = 0;
  bool stopping_ = false, cancelled_ = false, shut_down_ = false;
  uint64_t timed_out_ = 0;
  std::thread watchdog_;
};

}  // namespace attnkit::serve
