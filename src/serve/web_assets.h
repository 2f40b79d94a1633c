#pragma once

// The page served at / and the API description at /openapi.json, embedded at build time from
// web/ (cmake/embed.cmake).
namespace attnkit::serve::web {
extern const char* const kIndexHtml;
extern const char* const kAppJs;
extern const char* const kStyleCss;
extern const char* const kOpenApiJson;  // web/openapi.json: the API's contract
}  // namespace attnkit::serve::web
