// The HTTP server's text helpers (api/http_server.cc): JSON answers and error bodies,
// percent-coding, UTF-8 and header checks, strict body and number parsing. Plain
// functions of their arguments, kept apart so the server file holds routing, streams
// and HTTP concerns only.
//
// Thread safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsync::api {

// A rejection decided by the HTTP layer itself (auth, routing, size, media type).
struct HttpError : Error {
  HttpError(int status, const std::string& message, std::string allow = {})
      : Error(message), status(status), allow(std::move(allow)) {}
  int status;
  std::string allow;  // for 405
};

// JSON text of anything we answer: invalid UTF-8 (a row written by plain SQL may hold
// any bytes) becomes U+FFFD instead of an exception.
std::string Dump(const nlohmann::json& j);
// {"error": "<message>"}: one line of at most 1,000 bytes, control characters blanked.
std::string ErrorBody(const std::string& message);
// Decodes %XX (and '+' as a space in query strings). Throws HttpError 400.
std::string PercentDecode(std::string_view s, bool plus_as_space);
// Every byte but RFC 3986's unreserved characters as %XX.
std::string PercentEncode(std::string_view s);
// Valid UTF-8 without control characters (what EventStore accepts in any text field).
bool IsCleanText(std::string_view s);
std::vector<std::string_view> Split(std::string_view s, char sep);
// Equal iff `given` equals `secret`; the time taken depends on the secret's length
// only, never on where the first difference is.
bool ConstantTimeEquals(const std::string& secret, const std::string& given);
bool IEquals(std::string_view a, std::string_view b);  // ASCII case-insensitive
std::string_view Trim(std::string_view s);              // spaces and tabs at both ends
// The method as a metric label: a known method's name, else "other".
const char* MethodLabel(const std::string& m);
// Parses JSON with a nesting limit (a deep body would otherwise recurse through the
// stack when serialised). Throws UsageError.
nlohmann::json ParseJsonBody(const std::string& body);
// Error text for a client without the token: database URLs, 'user'@'host' pairs, the
// quoted names after "on", "host", "database", "schema", "user", "table", IP
// addresses and host:port pairs are replaced by placeholders ("<database URL>",
// "'***'", "<host>", "<host>:<port>"). Heuristic, for texts that dsync and the MySQL
// client library write; the rest of the text stays.
std::string MaskEndpoints(std::string_view text);
// Strict non-negative integer of at most `max_digits` digits. Throws UsageError.
int64_t ParseCount(const std::string& name, const std::string& text, size_t max_digits);

}  // namespace dsync::api
