// `attnkit serve` and `attnkit plot`.

#include <filesystem>
#include <iostream>
#include <memory>

#include "attnkit/core/error.h"
#include "attnkit/serve/server.h"
#include "attnkit/viz/plot.h"
#include "checks.h"
#include "commands.h"

namespace attnkit::cli {

Command add_serve_command(CLI::App& parent) {
  auto* app =
      parent.add_subcommand("serve", "The translation API, the playground and the web page");
  auto o = std::make_shared<serve::ServerOptions>();
  app->add_option("--model", o->model_dir, "Model directory (without it: the playground only)");
  checks::add_compute_type(app, o->compute_type);
  app->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  app->add_option("--allow-host", o->allowed_hosts,
                  "Accept requests whose Host is NAME too (repeatable; '*': any). Without it, "
                  "only the listening address (and, on loopback, localhost) is accepted");
  app->add_option("--port", o->port, "Port (0: any free port)")
      ->check(checks::port())
      ->capture_default_str();
  app->add_option("--max-connections", o->max_connections,
                  "Connections served at once, each on its own thread; more wait their turn")
      ->check(checks::range(1, 4096))
      ->capture_default_str();
  // Before 0.3 the server had this many HTTP worker threads; connections have their own now.
  app->add_option("--workers", o->max_connections, "Old name of --max-connections")
      ->check(checks::range(1, 4096))
      ->group("");
  app->add_option("--max-text", o->max_text_bytes, "Longest sentence, in bytes")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--max-body", o->max_body_bytes, "Largest JSON request body, in bytes")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--max-catalog", o->max_catalog_bytes,
                  "Largest catalog the PO page (POST /api/po) takes, in bytes")
      ->check(checks::at_least(1))
      ->capture_default_str();
  app->add_option("--catalog-timeout", o->catalog_timeout_s,
                  "Seconds before a catalog's pre-translation fails")
      ->check(checks::range(0, 86400, true))
      ->capture_default_str();
  app->add_option("--max-batch-tokens", o->max_batch_tokens,
                  "Source tokens per decoder call, padding counted (0: no limit)")
      ->check(checks::non_negative())
      ->capture_default_str();
  app->add_option("--max-batch", o->max_batch, "Sentences per decoder call")
      ->check(checks::range(1, 4096))
      ->capture_default_str();
  app->add_option("--timeout", o->request_timeout_s, "Seconds before a translation request fails")
      ->check(checks::range(0, 86400, true))
      ->capture_default_str();
  app->add_option("--read-timeout", o->read_timeout_s,
                  "Seconds a client has to send its whole request; then 408")
      ->check(checks::range(0, 3600, true))
      ->capture_default_str();
  app->add_option("--write-timeout", o->write_timeout_s,
                  "Seconds a client has to read its whole answer; then the connection is cut")
      ->check(checks::range(0, 3600, true))
      ->capture_default_str();
  app->add_option("--drain", o->drain_s,
                  "On SIGINT/SIGTERM, seconds the requests in flight have to finish")
      ->check(checks::range(0, 3600))
      ->capture_default_str();
  app->add_option("--batch-window", o->batch_window_ms,
                  "Milliseconds the batcher waits for concurrent requests to share a decoder call")
      ->check(checks::range(0, 10000))
      ->capture_default_str();
  return {app,
          [o] {
            o->on_listening = [](const std::string& url) {
              std::cout << "listening on " << url << std::endl;
            };
            return serve::run_server(*o);
          },
          ThreadPolicy::Blas};
}

Command add_plot_command(CLI::App& parent) {
  auto* app =
      parent.add_subcommand("plot", "Loss and BLEU curves of a training run (metrics.jsonl)");
  auto metrics = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  app->add_option("metrics", *metrics, "A model directory's metrics.jsonl")->required();
  app->add_option("--out", *out, "Output prefix (writes PREFIX.png and PREFIX.svg)")->required();
  return {app, [metrics, out] {
            const auto charts = viz::training_charts(*metrics);
            viz::render_charts(charts, *out + ".png");
            viz::render_charts(charts, *out + ".svg");
            std::cout << "wrote " << *out << ".png and " << *out << ".svg\n";
            return 0;
          }};
}

}  // namespace attnkit::cli
