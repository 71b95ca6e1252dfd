#include "api/http_text.h"

#include <algorithm>
#include <cctype>
#include <regex>

#include "core/json_limits.h"

namespace dsync::api {

using nlohmann::json;

// JSON text of anything we answer: invalid UTF-8 (a row written by plain SQL may hold
// any bytes) becomes U+FFFD instead of an exception.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string ErrorBody(const std::string& message) {
  std::string line = message.substr(0, 1000);
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return Dump(json{{"error", line}});
}

// Decodes %XX (and '+' as a space in query strings). Throws HttpError 400.
std::string PercentDecode(std::string_view s, bool plus_as_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) throw HttpError(400, "malformed percent-encoding in the URL");
      const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0) throw HttpError(400, "malformed percent-encoding in the URL");
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (s[i] == '+' && plus_as_space) {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string PercentEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

// Valid UTF-8 without control characters (what EventStore accepts in any text field).
bool IsCleanText(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) return false;
    i += len;
  }
  return true;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

// Equal iff `given` equals `secret`; the time taken depends on the secret's length
// only, never on where the first difference is.
bool ConstantTimeEquals(const std::string& secret, const std::string& given) {
  unsigned char diff = secret.size() == given.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned char>(static_cast<unsigned char>(secret[i]) ^ g);
  }
  return diff == 0;
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

const char* MethodLabel(const std::string& m) {
  static const char* kKnown[] = {"GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"};
  for (const char* k : kKnown) {
    if (m == k) return k;
  }
  return "other";
}

// Parses JSON with a nesting limit (a deep body would otherwise recurse through the
// stack when serialised). Throws UsageError.
json ParseJsonBody(const std::string& body) {
  if (body.empty()) throw UsageError("the request body is empty; expected a JSON object");
  // The one input limit of the API and the CLI (core/json_limits.h), checked before parsing.
  if (JsonNestingDepth(body, kMaxInputJsonDepth) > kMaxInputJsonDepth) {
    throw UsageError(TooDeepMessage("the body", kMaxInputJsonDepth));
  }
  try {
    return json::parse(body);
  } catch (const json::parse_error& e) {
    throw UsageError("the body is not valid JSON (at byte " + std::to_string(e.byte) + ")");
  }
}

// Strict non-negative integer of at most `max_digits` digits. Throws UsageError.
int64_t ParseCount(const std::string& name, const std::string& text, size_t max_digits) {
  if (text.empty() || text.size() > max_digits ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    throw UsageError(name + " must be a positive integer");
  }
  return std::stoll(text);
}

std::string MaskEndpoints(std::string_view text) {
  using std::regex;
  static const regex kUrl(R"([A-Za-z][A-Za-z0-9+.-]*://[^\s'"]*[^\s'":,;.)])");
  static const regex kUserAtHost(R"('[^']*'@'[^']*')");
  static const regex kQuotedName(R"(\b(on|host|database|schema|user|table|server|db)( name)? '[^']*')", regex::icase);
  static const regex kBracketed(R"(\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\](:[0-9]{1,5})?)");
  static const regex kIpv4(R"(\b[0-9]{1,3}(\.[0-9]{1,3}){3}(:[0-9]{1,5})?\b)");
  static const regex kHostPort(R"(\b[A-Za-z0-9_-]*[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*:[0-9]{2,5}\b)");
  std::string out(text);
  out = std::regex_replace(out, kUrl, "<database URL>");
  out = std::regex_replace(out, kUserAtHost, "'***'@'***'");
  out = std::regex_replace(out, kQuotedName, "$1$2 '***'");
  out = std::regex_replace(out, kBracketed, "<host>");
  out = std::regex_replace(out, kIpv4, "<host>");
  out = std::regex_replace(out, kHostPort, "<host>:<port>");
  return out;
}

}  // namespace dsync::api
