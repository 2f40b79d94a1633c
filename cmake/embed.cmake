# Embeds the web page's files into a C++ source, so the server needs no files at run time.
# Usage: cmake -DOUT=web_assets.cpp -DINDEX=... -DAPP=... -DSTYLE=... -DOPENAPI=... -P embed.cmake
file(READ ${INDEX} INDEX_HTML)
file(READ ${APP} APP_JS)
file(READ ${STYLE} STYLE_CSS)
file(READ ${OPENAPI} OPENAPI_JSON)
set(CONTENT "// Generated from web/ by cmake/embed.cmake; do not edit.\n#include \"web_assets.h\"\nnamespace attnkit::serve::web {\n")
string(APPEND CONTENT "const char* const kIndexHtml = R\"attnkit_asset(${INDEX_HTML})attnkit_asset\";\n")
string(APPEND CONTENT "const char* const kAppJs = R\"attnkit_asset(${APP_JS})attnkit_asset\";\n")
string(APPEND CONTENT "const char* const kStyleCss = R\"attnkit_asset(${STYLE_CSS})attnkit_asset\";\n")
string(APPEND CONTENT "const char* const kOpenApiJson = R\"attnkit_asset(${OPENAPI_JSON})attnkit_asset\";\n")
string(APPEND CONTENT "}  // namespace attnkit::serve::web\n")
file(WRITE ${OUT}.tmp "${CONTENT}")
file(RENAME ${OUT}.tmp ${OUT})
