#include "storage/db_url.h"

#include <charconv>
#include <regex>

#include "core/error.h"

namespace dsync::storage {
namespace {

[[noreturn]] void Fail(const std::string& why) {
  throw UsageError("bad database URL: " + why +
                   " (expected mysql://user:pass@host:port/schema)");
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view s, const char* what) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) Fail(std::string("truncated %-escape in ") + what);
    int hi = HexDigit(s[i + 1]), lo = HexDigit(s[i + 2]);
    if (hi < 0 || lo < 0) Fail(std::string("bad %-escape in ") + what);
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

long ParseNumber(std::string_view s, long lo, long hi, const std::string& what) {
  long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) {
    Fail(what + " must be a number from " + std::to_string(lo) + " to " + std::to_string(hi) +
         ", got '" + std::string(s) + "'");
  }
  return v;
}

}  // namespace

DbUrl DbUrl::Parse(std::string_view url) {
  constexpr std::string_view kScheme = "mysql://";
  if (url.empty()) Fail("empty");
  if (url.substr(0, kScheme.size()) != kScheme) {
    auto colon = url.find("://");
    Fail(colon == std::string_view::npos ? "missing mysql:// scheme"
                                         : "unsupported scheme '" + std::string(url.substr(0, colon)) + "'");
  }
  std::string_view rest = url.substr(kScheme.size());

  DbUrl out;
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  auto slash = rest.find('/');
  if (slash == std::string_view::npos) Fail("missing /schema");
  std::string_view authority = rest.substr(0, slash);
  out.schema = PercentDecode(rest.substr(slash + 1), "schema");
  if (out.schema.empty()) Fail("missing schema name after /");
  if (out.schema.find('/') != std::string::npos) Fail("schema name contains '/'");

  // userinfo@hostport; the password may itself contain '@' only percent-encoded,
  // but be lenient and split on the last '@'.
  auto at = authority.rfind('@');
  if (at == std::string_view::npos) Fail("missing user@ before the host");
  std::string_view userinfo = authority.substr(0, at);
  std::string_view hostport = authority.substr(at + 1);
  auto colon = userinfo.find(':');
  out.user = PercentDecode(userinfo.substr(0, colon), "user");
  if (colon != std::string_view::npos) out.password = PercentDecode(userinfo.substr(colon + 1), "password");
  if (out.user.empty()) Fail("missing user name");

  std::string_view port_text;
  if (!hostport.empty() && hostport.front() == '[') {
    auto close = hostport.find(']');
    if (close == std::string_view::npos) Fail("unclosed [ in IPv6 host");
    out.host = std::string(hostport.substr(1, close - 1));
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') Fail("unexpected text after ]");
      port_text = after.substr(1);
    }
  } else {
    auto pc = hostport.rfind(':');
    out.host = std::string(hostport.substr(0, pc));
    if (pc != std::string_view::npos) port_text = hostport.substr(pc + 1);
  }
  if (out.host.empty()) Fail("missing host");
  if (!port_text.empty() || hostport.ends_with(":")) out.port = static_cast<int>(ParseNumber(port_text, 1, 65535, "port"));

  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    if (eq == std::string_view::npos) Fail("option '" + std::string(pair) + "' has no value");
    std::string key(pair.substr(0, eq));
    std::string value = PercentDecode(pair.substr(eq + 1), "option value");
    if (key == "socket") {
      if (value.empty()) Fail("socket option is empty");
      out.socket = value;
    } else if (key == "pool_size") {
      out.pool_size = static_cast<int>(ParseNumber(value, 1, 256, key));
    } else if (key == "connect_timeout_ms") {
      out.connect_timeout = std::chrono::milliseconds(ParseNumber(value, 1, 3'600'000, key));
    } else if (key == "read_timeout_ms") {
      out.read_timeout = std::chrono::milliseconds(ParseNumber(value, 1, 3'600'000, key));
    } else if (key == "write_timeout_ms") {
      out.write_timeout = std::chrono::milliseconds(ParseNumber(value, 1, 3'600'000, key));
    } else {
      Fail("unknown option '" + key +
           "' (known: socket, pool_size, connect_timeout_ms, read_timeout_ms, write_timeout_ms)");
    }
  }
  return out;
}

std::string DbUrl::Masked() const {
  std::string s = "mysql://" + user + (password.empty() ? "" : ":***") + "@";
  s += host.find(':') != std::string::npos ? "[" + host + "]" : host;
  s += ":" + std::to_string(port) + "/" + schema;
  if (!socket.empty()) s += "?socket=" + socket;
  return s;
}

DbUrl DbUrl::WithSchema(std::string schema_name) const {
  DbUrl copy = *this;
  copy.schema = std::move(schema_name);
  return copy;
}

std::string MaskPasswords(std::string_view text) {
  static const std::regex kUserinfo(R"(([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@)");
  return std::regex_replace(std::string(text), kUserinfo, "$1***@");
}

}  // namespace dsync::storage
