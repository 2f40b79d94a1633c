// The server's request handling (src/serve/api.h) on any body: /api/attend's answer and
// /api/translate's checks. A body may only ever be the client's fault (4xx), never a 500.

#include <cstdlib>

#include "api.h"
#include "fuzz_input.h"

ATTNKIT_FUZZ_TARGET(server_api) {
  using namespace attnkit::serve;
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (int endpoint = 0; endpoint < 2; ++endpoint) {
    try {
      const auto json = parse_body(body);
      if (endpoint == 0) {
        attend(json).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      } else {
        translate_request(json, /*max_text_bytes=*/2000, /*max_beam=*/10);
      }
    } catch (...) {
      const auto [status, answer] = error_answer(std::current_exception());
      if (status < 400 || status >= 500 || !answer.contains("error")) std::abort();
    }
  }
  return 0;
}
