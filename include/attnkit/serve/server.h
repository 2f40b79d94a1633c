#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/kernels/gemm/compute_type.h"

// `attnkit serve`: the translation API, the mechanism playground and the web page, on
// cpp-httplib. Concurrent translation requests are batched into one decoder call.
namespace attnkit::serve {

struct ServerOptions {
  std::string model_dir;                             // empty: the playground only
  std::optional<kernels::ComputeType> compute_type;  // unset: the model directory's
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: any free port (printed)
  size_t max_connections = 256;        // served at once, each on its own thread; more wait
  size_t max_text_bytes = 2000;        // longest sentence accepted
  size_t max_body_bytes = 65536;       // largest JSON request body
  size_t max_catalog_bytes = 1 << 20;  // largest catalog POST /api/po takes
  int max_beam = 10;
  size_t max_batch = 32;           // sentences per decoder call
  size_t max_batch_tokens = 0;     // and source tokens, padding counted (0: no limit)
  double batch_window_ms = 5;      // how long the batcher waits for company
  double request_timeout_s = 30;   // a translation's longest wait for the decoder
  double catalog_timeout_s = 600;  // a catalog's (POST /api/po)
  double read_timeout_s = 10;      // from a connection's start to its complete request
  double write_timeout_s = 10;     // from the answer's start to its last byte
  double drain_s = 10;             // on SIGINT/SIGTERM: how long requests in flight may finish
  // The Host names a request may give besides the listening address's own (and, on a loopback
  // address, localhost and the loopback addresses): a page on another site that reaches a
  // loopback server through DNS rebinding sends its own name. "*": any.
  std::vector<std::string> allowed_hosts;
  // Called with the server's address ("http://host:port/") once it listens (optional).
  std::function<void(const std::string& url)> on_listening;
};

// Blocks until the process is signalled (SIGINT/SIGTERM; the previous handlers are restored on
// return). Then it accepts no connection, lets those open finish for up to `drain_s` and returns.
int run_server(const ServerOptions& options);

}  // namespace attnkit::serve
