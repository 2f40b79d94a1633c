#pragma once

// The page served at /, embedded at build time from web/ (cmake/embed.cmake).
namespace attnkit::serve::web {
extern const char* const kIndexHtml;
extern const char* const kAppJs;
extern const char* const kStyleCss;
}  // namespace attnkit::serve::web
