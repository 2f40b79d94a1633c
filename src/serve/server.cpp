#include "attnkit/serve/server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "api.h"
#include "attnkit/core/error.h"
#include "attnkit/core/signals.h"
#include "attnkit/data/po_catalog.h"
#include "attnkit/po/pretranslate.h"
#include "attnkit/translate/translator.h"
#include "attnkit/version.h"
#include "batcher.h"
#include "connections.h"
#include "web_assets.h"

namespace attnkit::serve {
namespace {

using nlohmann::json;

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  // Error messages may quote invalid UTF-8 from the request; replace it rather than throw.
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json; charset=utf-8");
}

// Turns a handler's exceptions into JSON error replies: 4xx for the request's faults, 500 for ours.
template <typename Handler>
httplib::Server::Handler guarded(Handler handler) {
  return [handler](const httplib::Request& req, httplib::Response& res) {
    Connections::Handling busy;
    try {
      handler(req, res);
    } catch (...) {
      const auto [status, body] = error_answer(std::current_exception());
      reply(res, status, body);
    }
  };
}

// A handler that cannot fail; marked as handling its request for the connection's deadlines.
template <typename Handler>
httplib::Server::Handler plain(Handler handler) {
  return [handler](const httplib::Request& req, httplib::Response& res) {
    Connections::Handling busy;
    handler(req, res);
  };
}

// Waits for the batcher's answer in slices, so that a server shutting down past its drain bound
// does not wait here; 503 past `seconds` ("the translation took too long").
template <typename T>
void await(const std::future<T>& future, double seconds, const Connections& connections,
           const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (future.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (connections.cancelled()) throw BadRequest{503, "the server is shutting down"};
    if (std::chrono::steady_clock::now() > deadline)
      throw BadRequest{503, std::string(what) + " took too long"};
  }
}

// POST /api/translate: {"text", "beam"} -> the translation, its tokens, attention and score.
json translate(const json& body, Batcher& batcher, const Connections& connections,
               const ServerOptions& o) {
  const auto request = translate_request(body, o.max_text_bytes, o.max_beam);
  decoding::SearchOptions options;
  options.beam_size = request.beam;
  options.sampling_topk = request.sampling_topk;
  options.sampling_topp = request.sampling_topp;
  options.temperature = request.temperature;
  options.seed = static_cast<uint64_t>(request.seed);
  auto future = batcher.submit(request.text, options, request.target_prefix);
  await(future, o.request_timeout_s, connections, "the translation");
  json answer = translation_json(future.get());
  if (request.alternatives > 0) {
    auto alternatives = std::make_shared<std::vector<translate::Alternative>>();
    auto done = batcher.run([&translator = batcher.translator(), alternatives, request, options] {
      *alternatives =
          translator.alternatives({request.text}, {request.target_prefix},
                                  static_cast<size_t>(request.alternatives), options)[0];
    });
    await(done, o.request_timeout_s, connections, "the alternatives");
    done.get();
    json list = json::array();
    for (const auto& alt : *alternatives) {
      json j = translation_json(alt.translation);
      j["token"] = alt.token;
      j["token_log_prob"] = alt.token_log_prob;
      list.push_back(std::move(j));
    }
    answer["alternatives"] = std::move(list);
  }
  return answer;
}

// What POST /api/po needs besides the batcher: the model (used only on the batcher's thread)
// and the translation memory of its training pairs.
struct PoService {
  translate::Translator& translator;
  po::Memory memory;
  translate::Confidence confidence;  // the model's confidence.json, when calibrated
};

// POST /api/po: a catalog's bytes -> the filled catalog, each suggestion and its attention. The
// job runs on the batcher's thread and owns its data, so that a request that gives up waiting
// (timeout, shutdown) leaves nothing dangling.
json pretranslate(const httplib::Request& req, Batcher& batcher, PoService& service,
                  const Connections& connections, const ServerOptions& o) {
  if (req.body.size() > o.max_catalog_bytes)
    throw BadRequest{413, "the catalog is " + std::to_string(req.body.size()) +
                              " bytes; the limit is " + std::to_string(o.max_catalog_bytes) +
                              " (serve --max-catalog)"};
  const auto request = po_request(req.params, o.max_beam);
  struct Job {
    data::PoCatalog catalog;
    po::PretranslateReport report;
  };
  auto job = std::make_shared<Job>(Job{data::PoCatalog::parse(req.body, request.name), {}});
  po::PretranslateOptions options;
  options.lang = request.lang;
  options.search.beam_size = request.beam;
  options.keep_translations = true;
  options.confidence = &service.confidence;
  // A request that gives up (its timeout, or the server shutting down) stops its job too: the
  // batcher's thread is free for the others, and a shutdown does not wait for a long catalog.
  auto gave_up = std::make_shared<std::atomic<bool>>(false);
  options.cancelled = [gave_up] { return gave_up->load(); };
  auto done = batcher.run([job, options, &service] {
    job->report = po::pretranslate(job->catalog, service.translator, service.memory, options);
    service.translator.add_attention_maps(job->report.translations);
  });
  try {
    await(done, o.catalog_timeout_s, connections, "the catalog");
  } catch (...) {
    *gave_up = true;
    throw;
  }
  done.get();  // rethrows the job's error (a catalog in another language: 400)
  return po_answer(job->catalog, job->report);
}

// What every request must be before anything reads its body (cpp-httplib runs the pre-routing
// handler right after the headers):
//  - a length it says once: two Content-Lengths, or Transfer-Encoding (chunked has no length to
//    check first; gzip beside a Content-Length is two framings) are request smuggling's tools;
//  - a method the path takes: POST on /api/*, GET elsewhere (OPTIONS, a browser's CORS
//    preflight, gets 405 and no CORS headers: pages of other sites cannot call the API);
//  - this server's Host, and no foreign Origin: a page on another site that resolves its own
//    name to 127.0.0.1 (DNS rebinding) sends its name as Host;
//  - the content type the API documents, which a plain HTML form cannot send.
struct Refusal {
  int status;
  std::string message, allow;
};

bool loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host == "[::1]" ||
         host.rfind("127.", 0) == 0;
}

// The host part of a Host header ("[::1]:8080" -> "[::1]", "localhost:80" -> "localhost").
std::string host_part(const std::string& value) {
  if (!value.empty() && value.front() == '[') return value.substr(0, value.find(']') + 1);
  return value.substr(0, value.find(':'));
}

bool allowed_host(const std::string& host, const ServerOptions& o) {
  for (const auto& h : o.allowed_hosts)
    if (h == "*" || h == host) return true;
  if (host == o.host || (o.host.find(':') != std::string::npos && host == "[" + o.host + "]"))
    return true;
  if (loopback(o.host)) return loopback(host);
  return o.host == "0.0.0.0" || o.host == "::";  // listening everywhere: any name of the machine
}

std::optional<Refusal> screen(const httplib::Request& req, const ServerOptions& o) {
  if (req.get_header_value_count("Content-Length") > 1)
    return Refusal{400, "more than one Content-Length", ""};
  if (req.has_header("Transfer-Encoding")) {
    if (req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos)
      return Refusal{411, "send the body with a Content-Length, not chunked", ""};
    return Refusal{400, "Transfer-Encoding is not accepted: send the body with a Content-Length",
                   ""};
  }
  if (req.has_header("Content-Length")) {
    const std::string length = req.get_header_value("Content-Length");
    if (length.empty() || length.find_first_not_of("0123456789") != std::string::npos)
      return Refusal{400, "Content-Length must be a number of bytes, got '" + length + "'", ""};
  }
  const bool api = req.path.rfind("/api/", 0) == 0;
  if (api ? req.method != "POST" : req.method != "GET" && req.method != "HEAD")
    return Refusal{405, req.method + " is not allowed here; use " + (api ? "POST" : "GET"),
                   api ? "POST" : "GET, HEAD"};
  const std::string host = host_part(req.get_header_value("Host"));
  if (host.empty()) return Refusal{400, "the request has no Host", ""};
  if (!allowed_host(host, o))
    return Refusal{
        421,
        "Host '" + host + "' is not this server's (serve --allow-host " + host + " to accept it)",
        ""};
  if (req.has_header("Origin")) {
    const std::string origin = req.get_header_value("Origin");
    const std::string prefix = "http://";
    const std::string named = origin.rfind(prefix, 0) == 0 ? origin.substr(prefix.size()) : "";
    if (named.empty() || !allowed_host(host_part(named), o))
      return Refusal{403, "requests from pages of " + origin + " are not accepted", ""};
  }
  if (api && req.method == "POST") {
    const std::string type = req.get_header_value("Content-Type");
    const std::string wanted =
        req.path == "/api/po" ? "text/x-gettext-translation" : "application/json";
    if (type.substr(0, type.find(';')) != wanted)
      return Refusal{415, req.path + " takes Content-Type: " + wanted + ", not '" + type + "'", ""};
  }
  return std::nullopt;
}

void add_page(httplib::Server& server) {
  server.Get("/", plain([](const httplib::Request&, httplib::Response& res) {
               res.set_content(web::kIndexHtml, "text/html; charset=utf-8");
             }));
  server.Get("/app.js", plain([](const httplib::Request&, httplib::Response& res) {
               res.set_content(web::kAppJs, "application/javascript; charset=utf-8");
             }));
  server.Get("/style.css", plain([](const httplib::Request&, httplib::Response& res) {
               res.set_content(web::kStyleCss, "text/css; charset=utf-8");
             }));
  // The API's contract (web/openapi.json, checked against real responses by tests/cli), with
  // this build's version.
  server.Get("/openapi.json", plain([](const httplib::Request&, httplib::Response& res) {
               static const std::string doc = [] {
                 auto j = json::parse(web::kOpenApiJson);
                 j["info"]["version"] = kVersion;
                 return j.dump(1);
               }();
               res.set_content(doc, "application/json; charset=utf-8");
             }));
}

// The JSON endpoints' body limit (the server's own is the larger catalog limit).
void check_body(const httplib::Request& req, const ServerOptions& o) {
  if (req.body.size() > o.max_body_bytes)
    throw BadRequest{413, "the body is " + std::to_string(req.body.size()) +
                              " bytes; the limit is " + std::to_string(o.max_body_bytes)};
}

// The API; `batcher` and `po` are null without a model.
void add_api(httplib::Server& server, const ServerOptions& o, Batcher* batcher, PoService* po,
             const Connections& connections) {
  server.Get("/healthz", plain([&o, batcher, po, &connections](const httplib::Request&,
                                                               httplib::Response& res) {
               json health = {{"status", "ok"},
                              {"version", kVersion},
                              {"model", !o.model_dir.empty()},
                              {"connections", connections.open()},
                              {"timed_out", connections.timed_out()}};
               if (batcher) {
                 health["decoder_calls"] = batcher->batches_run();
                 health["sentences"] = batcher->sentences_run();
               }
               if (po) {  // the model's (read once it loaded: immutable)
                 const auto& config = po->translator.config();
                 health["arch"] = translate::to_string(config.arch);
                 health["compute_type"] = kernels::to_string(config.compute_type());
               }
               reply(res, 200, health);
             }));
  server.Post("/api/attend", guarded([&o](const httplib::Request& req, httplib::Response& res) {
                check_body(req, o);
                reply(res, 200, attend(parse_body(req.body)));
              }));
  server.Post("/api/translate", guarded([&o, batcher, &connections](const httplib::Request& req,
                                                                    httplib::Response& res) {
                check_body(req, o);
                if (!batcher)
                  throw BadRequest{503, "no model loaded (start the server with --model DIR)"};
                reply(res, 200, translate(parse_body(req.body), *batcher, connections, o));
              }));
  server.Post("/api/po", guarded([&o, batcher, po, &connections](const httplib::Request& req,
                                                                 httplib::Response& res) {
                if (!batcher)
                  throw BadRequest{503, "no model loaded (start the server with --model DIR)"};
                reply(res, 200, pretranslate(req, *batcher, *po, connections, o));
              }));
  server.set_error_handler(plain([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) reply(res, res.status, {{"error", "HTTP " + std::to_string(res.status)}});
  }));
}

// Binds o.host:o.port (any free port for 0); returns the port.
int bind(httplib::Server& server, const ServerOptions& o) {
  const int port = o.port == 0 ? server.bind_to_any_port(o.host)
                               : (server.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0)
    throw Error("serve: cannot listen on " + o.host +
                (o.port ? ":" + std::to_string(o.port) : std::string()) +
                " (the port is in use, or the address is not this machine's)");
  return port;
}

// SIGINT / SIGTERM stop the server from accepting and leave the rest to the drain. Not
// httplib::Server::stop(): it sets the listening socket to INVALID_SOCKET, and cpp-httplib 0.11
// checks that before a connection's first request, so a connection accepted but not yet on a
// thread of its own (waiting its turn behind --max-connections, or a thread the scheduler had not
// run yet) was closed unanswered, its request already sent (the test of SIGTERM under load lost
// one in twelve that way on a busy machine). shutdown(2) of the listening socket wakes accept(2)
// with EINVAL, which ends httplib's accept loop (it closes the socket, keeps its number) and
// starts the drain of Connections::shutdown(); every connection accepted before it is served.
// Only the first signal acts: after the accept loop closed it, the number may name another file.
std::atomic<int> g_listening{-1};
void on_signal(int) {
  const int fd = g_listening.exchange(-1);
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);  // async-signal-safe (POSIX.1-2008)
}

}  // namespace

int run_server(const ServerOptions& o) {
  std::unique_ptr<translate::Translator> translator;
  std::unique_ptr<PoService> po;  // before the batcher: a job still running refers to it
  std::unique_ptr<Batcher> batcher;
  if (!o.model_dir.empty()) {
    translator = std::make_unique<translate::Translator>(o.model_dir, o.compute_type);
    translator->set_max_batch_tokens(o.max_batch_tokens);
    po = std::make_unique<PoService>(
        PoService{*translator, {}, translate::Confidence::load(o.model_dir)});
    const auto& corpus = translator->config().train_corpus;
    if (!corpus.empty() && std::filesystem::exists(corpus)) po->memory.add_corpus(corpus);
    batcher = std::make_unique<Batcher>(*translator, o.max_batch, o.batch_window_ms);
  }
  httplib::Server server;
  server.set_payload_max_length(std::max(o.max_body_bytes, o.max_catalog_bytes));
  // cpp-httplib sets SO_REUSEPORT by default, which lets a second server bind the same port and
  // take half its connections: only SO_REUSEADDR (a restart may bind while old connections close).
  socket_t listening = INVALID_SOCKET;
  server.set_socket_options([&listening](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listening = sock;
  });
  // One request per connection ("Connection: close" on every answer): cpp-httplib 0.11 reads each
  // request through a buffer of its own and drops pipelined requests it read ahead (3 sent, 1
  // answered); closing tells a pipelining client to send the rest again (RFC 9112, 9.3.2), and
  // no idle keep-alive connection holds a thread. The per-call timeouts below are within the
  // whole-request deadlines that Connections enforces.
  server.set_keep_alive_max_count(1);
  const auto seconds = [](double s) { return std::chrono::duration<double>(s); };
  server.set_keep_alive_timeout(static_cast<time_t>(std::ceil(o.read_timeout_s)));
  server.set_read_timeout(seconds(o.read_timeout_s));
  server.set_write_timeout(seconds(o.write_timeout_s));
  server.set_pre_routing_handler([&o](const httplib::Request& req, httplib::Response& res) {
    const auto refused = screen(req, o);
    if (!refused) return httplib::Server::HandlerResponse::Unhandled;
    if (refused->status == 405) res.set_header("Allow", refused->allow);
    reply(res, refused->status, {{"error", refused->message}});
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  });
  add_page(server);
  const int port = bind(server, o);
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of 8 connections lost SYNs and waited
  // a second for the retransmission. Listening again on the bound socket sets the backlog.
  if (listening != INVALID_SOCKET) ::listen(listening, SOMAXCONN);
  ConnectionLimits limits;
  limits.max_connections = o.max_connections;
  limits.read_timeout_s = o.read_timeout_s;
  limits.write_timeout_s = o.write_timeout_s;
  limits.drain_s = o.drain_s;
  Connections connections(port, limits);
  server.new_task_queue = [&connections] { return connections.new_task_queue(); };
  add_api(server, o, batcher.get(), po.get(), connections);

  g_listening = listening;
  SignalGuard stop_on({SIGINT, SIGTERM}, on_signal);
  if (o.on_listening) o.on_listening("http://" + o.host + ":" + std::to_string(port) + "/");
  server.listen_after_bind();  // false after a signal: the accept loop ended on EINVAL
  g_listening = -1;
  return 0;
}

}  // namespace attnkit::serve
