#include "api/http_wire.h"

#include <algorithm>
#include <cctype>

#include "api/http_text.h"

namespace dsync::api {
namespace {

// RFC 9110 token characters (method and header names).
bool IsTokenChar(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-':
    case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

// True when the comma-separated list `value` holds `token` (ASCII case-insensitive).
bool ListHas(std::string_view value, std::string_view token) {
  for (std::string_view item : Split(value, ',')) {
    if (IEquals(Trim(item), token)) return true;
  }
  return false;
}

[[noreturn]] void Bad(const std::string& why) { throw HttpError(400, why); }

}  // namespace

const std::string* HttpRequestHead::Find(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (IEquals(k, name)) return &v;
  }
  return nullptr;
}

HttpRequestHead ParseRequestHead(std::string_view head) {
  HttpRequestHead h;
  size_t eol = head.find("\r\n");
  if (eol == std::string_view::npos) Bad("malformed request line");
  const std::string_view line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    Bad("malformed request line");
  }
  h.method = std::string(line.substr(0, sp1));
  h.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  const std::string_view version = line.substr(sp2 + 1);
  if (!IsToken(h.method)) Bad("malformed request method");
  if (h.target.empty() || h.target[0] != '/') Bad("the request target must be a path starting with /");
  for (char c : h.target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) Bad("malformed request target");
  }
  if (version == "HTTP/1.1") h.minor_version = 1;
  else if (version == "HTTP/1.0") h.minor_version = 0;
  else if (version.starts_with("HTTP/")) throw HttpError(505, "only HTTP/1.0 and HTTP/1.1 are served");
  else Bad("malformed request line");

  size_t pos = eol + 2;
  while (pos < head.size()) {
    eol = head.find("\r\n", pos);
    if (eol == std::string_view::npos) Bad("malformed header section");
    const std::string_view field = head.substr(pos, eol - pos);
    pos = eol + 2;
    if (field.empty()) break;  // the blank line
    if (field[0] == ' ' || field[0] == '\t') Bad("folded header lines are not accepted");
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos || !IsToken(field.substr(0, colon))) Bad("malformed header line");
    const std::string_view value = Trim(field.substr(colon + 1));
    for (char c : value) {
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) Bad("control character in a header value");
    }
    if (h.headers.size() >= kMaxHeaderCount) {
      throw HttpError(431, "more than " + std::to_string(kMaxHeaderCount) + " header lines");
    }
    h.headers.emplace_back(std::string(field.substr(0, colon)), std::string(value));
  }

  for (const auto& [name, value] : h.headers) {
    if (IEquals(name, "Content-Length")) {
      if (value.empty() || value.size() > 18 || value.find_first_not_of("0123456789") != std::string::npos) {
        Bad("malformed Content-Length");
      }
      const int64_t n = std::stoll(value);
      if (h.content_length && *h.content_length != n) Bad("conflicting Content-Length headers");
      h.content_length = n;
    } else if (IEquals(name, "Transfer-Encoding")) {
      if (!IEquals(Trim(value), "chunked") || h.chunked) {
        throw HttpError(501, "only Transfer-Encoding: chunked is accepted");
      }
      h.chunked = true;
    } else if (IEquals(name, "Connection")) {
      if (ListHas(value, "close")) h.keep_alive = false;
      else if (h.minor_version == 0 && ListHas(value, "keep-alive")) h.keep_alive = true;
    } else if (IEquals(name, "Expect")) {
      if (!IEquals(value, "100-continue")) throw HttpError(417, "only Expect: 100-continue is understood");
      h.expect_continue = true;
    }
  }
  if (h.minor_version == 0) {
    const std::string* c = h.Find("Connection");
    h.keep_alive = c != nullptr && ListHas(*c, "keep-alive") && !ListHas(*c, "close");
  }
  if (h.chunked && h.content_length) Bad("both Content-Length and Transfer-Encoding");
  return h;
}

bool ChunkedDecoder::Feed(std::string& in, std::string& out) {
  size_t pos = 0;
  auto finish = [&](bool done) {
    in.erase(0, pos);
    return done;
  };
  for (;;) {
    switch (state_) {
      case State::kSize: {
        const size_t eol = in.find("\r\n", pos);
        if (eol == std::string::npos) {
          if (in.size() - pos > 1024) Bad("malformed chunk size line");
          return finish(false);
        }
        std::string_view line = std::string_view(in).substr(pos, eol - pos);
        line = Trim(line.substr(0, line.find(';')));  // chunk extensions are ignored
        if (line.empty() || line.size() > 15 || line.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos) {
          Bad("malformed chunk size");
        }
        left_ = std::stoull(std::string(line), nullptr, 16);
        pos = eol + 2;
        state_ = left_ == 0 ? State::kTrailer : State::kData;
        break;
      }
      case State::kData: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(left_, in.size() - pos));
        out.append(in, pos, take);
        pos += take;
        left_ -= take;
        if (left_ > 0) return finish(false);
        state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd:
        if (in.size() - pos < 2) return finish(false);
        if (in.compare(pos, 2, "\r\n") != 0) Bad("malformed chunk: data not followed by CRLF");
        pos += 2;
        state_ = State::kSize;
        break;
      case State::kTrailer: {
        const size_t eol = in.find("\r\n", pos);
        if (eol == std::string::npos) {
          if (in.size() - pos > 8192) Bad("malformed chunked trailer");
          return finish(false);
        }
        const bool blank = eol == pos;
        pos = eol + 2;
        if (blank) {
          state_ = State::kDone;
          return finish(true);
        }
        break;  // a trailer field: ignored
      }
      case State::kDone:
        return finish(true);
    }
  }
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string ResponseHead(int status, const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + ReasonPhrase(status) + "\r\n";
  for (const auto& [name, value] : headers) {
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
  out += "\r\n";
  return out;
}

}  // namespace dsync::api
