// Percent-encoding for test URLs (query values, path segments): every byte but the
// RFC 3986 unreserved characters becomes %XX. Shared by the HTTP API and console tests.
#pragma once

#include <string>

namespace dsync::testing {

std::string PercentEncode(const std::string& s);

}  // namespace dsync::testing
