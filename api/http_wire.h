// HTTP/1.1 on the wire, for api/http_connections.cc: the request head parser, the chunked
// body decoder and the response head writer. Plain functions and a small state machine
// over bytes already received; no sockets, so each rule is unit-tested
// (tests/unit/http_wire_test.cc).
//
// What is accepted (RFC 9112, strictly, because everything else is a smuggling or a
// slow-client risk): a request line `METHOD /path HTTP/1.0|1.1`, header lines `Name:
// value` ending in CRLF, at most kMaxHeaderCount of them; one Content-Length of digits
// only, or `Transfer-Encoding: chunked` (not both); no line folding.
//
// Thread safety: stateless functions; a ChunkedDecoder belongs to one connection.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsync::api {

inline constexpr size_t kMaxHeaderCount = 100;

struct HttpRequestHead {
  std::string method;
  std::string target;  // origin-form as sent: "/v1/events?limit=5"
  int minor_version = 1;
  std::vector<std::pair<std::string, std::string>> headers;  // values trimmed
  std::optional<int64_t> content_length;
  bool chunked = false;
  bool keep_alive = true;      // HTTP/1.1 unless `Connection: close`; HTTP/1.0 only with keep-alive
  bool expect_continue = false;

  // The first header named `name` (ASCII case-insensitive), or nullptr.
  const std::string* Find(std::string_view name) const;
  // A body follows the head (Content-Length > 0, or chunked).
  bool has_body() const { return chunked || content_length.value_or(0) > 0; }
};

// Parses a request head: everything up to and including the blank line (CRLF CRLF).
// Throws HttpError: 400 malformed, 431 too many headers, 501 a transfer coding other
// than chunked, 505 a version other than HTTP/1.0 and 1.1.
HttpRequestHead ParseRequestHead(std::string_view head);

// Decodes a chunked body as its bytes arrive.
class ChunkedDecoder {
 public:
  // Moves what it can from the front of `in` to `out` (chunk data only). True once the
  // last chunk and the trailer section were read; bytes after them stay in `in`.
  // Throws HttpError 400 on a malformed chunk line.
  bool Feed(std::string& in, std::string& out);

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  State state_ = State::kSize;
  uint64_t left_ = 0;  // bytes of the current chunk still to come
};

// "Not Found" for 404, ...; "Unknown" for a status it does not know.
const char* ReasonPhrase(int status);

// The status line and headers of a response, through the blank line.
std::string ResponseHead(int status, const std::vector<std::pair<std::string, std::string>>& headers);

}  // namespace dsync::api
