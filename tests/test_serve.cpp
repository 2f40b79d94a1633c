// The server's API below HTTP (src/serve/api.h): what a request may ask of /api/attend, and the
// answers that stay inside web/openapi.json's schema. HTTP itself: tests/cli/test_serve.py and
// tests/cli/test_hostile.py.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "serve/api.h"

namespace attnkit::serve {
namespace {

using nlohmann::json;

int status_of(const json& body) {
  try {
    attend(body);
    return 200;
  } catch (const BadRequest& e) {
    return e.status;
  }
}

TEST(ServeAttend, FiniteInputsWhoseResultOverflowsAre400NotNulls) {
  EXPECT_EQ(status_of({{"q", {{1, 0}}}, {"k", {{1, 0}, {0, 1}}}}), 200);
  // 3e38 is a float, its square is not: the scores would be infinite, and JSON has no number
  // for them.
  EXPECT_EQ(status_of({{"q", {{3e38, 0}}}, {"k", {{3e38, 0}, {0, 1}}}}), 400);
  EXPECT_EQ(status_of({{"q", {{1e39, 0}}}, {"k", {{1, 0}}}}), 400);  // not a float at all
  try {
    attend({{"mechanism", "self"}, {"x", {{3e38, 3e38}}}});
    ADD_FAILURE();
  } catch (const BadRequest& e) {
    EXPECT_NE(e.message.find("overflow float32"), std::string::npos) << e.message;
  }
}

}  // namespace
}  // namespace attnkit::serve
