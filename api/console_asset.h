// One file of the web console (api/console/) as built into the binary, apart from
// api/console.h so that the generated table of them (cmake/embed_assets.cmake) compiles
// without the API's headers.
#pragma once

#include <string_view>
#include <vector>

namespace dsync::api::console {

struct Asset {
  const char* name;          // file name in api/console/, e.g. "app.js"
  const char* content_type;  // "text/javascript; charset=utf-8", ...
  std::string_view text;
};

// Every embedded file (generated at build time).
const std::vector<Asset>& EmbeddedAssets();

}  // namespace dsync::api::console
