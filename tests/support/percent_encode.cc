#include "tests/support/percent_encode.h"

#include "api/http_text.h"

namespace dsync::testing {

// The server's own encoder (it writes Location headers with it).
std::string PercentEncode(const std::string& s) { return api::PercentEncode(s); }

}  // namespace dsync::testing
