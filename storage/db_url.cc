#include "storage/db_url.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <regex>

#include "core/error.h"

namespace dsync::storage {
namespace {

[[noreturn]] void Fail(const std::string& why) {
  throw UsageError("bad database URL: " + why +
                   " (expected mysql://user:pass@host:port[,host:port...]/schema)");
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

bool IsHostNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

// One entry of the host list: name, name:port, [v6], [v6]:port.
DbHost ParseHost(std::string_view entry) {
  DbHost host;
  std::string_view port_text;
  bool has_port = false;
  if (entry.front() == '[') {
    auto close = entry.find(']');
    if (close == std::string_view::npos) Fail("unclosed [ in IPv6 host");
    host.name = std::string(entry.substr(1, close - 1));
    if (host.name.empty() || host.name.find(':') == std::string::npos ||
        host.name.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos) {
      Fail("'" + std::string(entry.substr(0, close + 1)) + "' is not an IPv6 address");
    }
    std::string_view after = entry.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') Fail("unexpected text after ]");
      port_text = after.substr(1);
      has_port = true;
    }
  } else {
    auto colon = entry.find(':');
    if (colon != std::string_view::npos && entry.find(':', colon + 1) != std::string_view::npos) {
      Fail("IPv6 host '" + std::string(entry) + "' must be in brackets, like [::1]:3306");
    }
    host.name = std::string(entry.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = entry.substr(colon + 1);
      has_port = true;
    }
    if (host.name.empty()) Fail("missing host");
    for (char c : host.name) {
      if (!IsHostNameChar(c)) Fail("bad character in host '" + host.name + "'");
    }
  }
  if (has_port) host.port = static_cast<int>(ParseNumber(port_text, 1, 65535, "port"));
  return host;
}

std::vector<DbHost> ParseHostList(std::string_view list) {
  if (list.empty()) Fail("missing host");
  std::vector<DbHost> hosts;
  for (;;) {
    auto comma = list.find(',');
    std::string_view entry = list.substr(0, comma);
    if (entry.empty()) Fail("empty entry in the host list");
    DbHost host = ParseHost(entry);
    for (const DbHost& seen : hosts) {
      if (seen.port == host.port && std::equal(seen.name.begin(), seen.name.end(), host.name.begin(),
                                               host.name.end(), [](char a, char b) {
                                                 return std::tolower(static_cast<unsigned char>(a)) ==
                                                        std::tolower(static_cast<unsigned char>(b));
                                               })) {
        Fail("host " + host.Label() + " is listed twice");
      }
    }
    hosts.push_back(std::move(host));
    if (comma == std::string_view::npos) break;
    list = list.substr(comma + 1);
  }
  return hosts;
}

std::string PercentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

}  // namespace

std::string DbHost::Label() const {
  return (name.find(':') != std::string::npos ? "[" + name + "]" : name) + ":" + std::to_string(port);
}

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

  // userinfo@hostlist; the password may itself contain '@' only percent-encoded,
  // but be lenient and split on the last '@' (a host list never contains one).
  auto at = authority.rfind('@');
  if (at == std::string_view::npos) Fail("missing user@ before the host");
  std::string_view userinfo = authority.substr(0, at);
  std::string_view hostport = authority.substr(at + 1);
  auto colon = userinfo.find(':');
  out.user = PercentDecode(userinfo.substr(0, colon), "user");
  if (colon != std::string_view::npos) out.password = PercentDecode(userinfo.substr(colon + 1), "password");
  if (out.user.empty()) Fail("missing user name");

  out.hosts = ParseHostList(hostport);

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
    } else if (key == "order") {
      if (value == "failover") out.order = HostOrder::kFailover;
      else if (value == "random") out.order = HostOrder::kRandom;
      else Fail("order must be failover or random, got '" + value + "'");
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
           "' (known: order, socket, pool_size, connect_timeout_ms, read_timeout_ms, write_timeout_ms)");
    }
  }
  if (!out.socket.empty() && out.hosts.size() > 1) Fail("socket option needs a single host");
  return out;
}

namespace {

std::string Format(const DbUrl& url, const std::string& user_text, const std::string& password_text) {
  std::string s = "mysql://" + user_text + (url.password.empty() ? "" : ":" + password_text) + "@";
  for (size_t i = 0; i < url.hosts.size(); ++i) s += (i ? "," : "") + url.hosts[i].Label();
  s += "/" + url.schema;
  std::string query;
  if (url.order == HostOrder::kRandom) query += "&order=random";
  if (!url.socket.empty()) query += "&socket=" + url.socket;
  if (!query.empty()) s += "?" + query.substr(1);
  return s;
}

}  // namespace

std::string DbUrl::Masked() const { return Format(*this, user, "***"); }

std::string DbUrl::Unmasked() const { return Format(*this, PercentEncode(user), PercentEncode(password)); }

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
