#include "saga/steps/http_step.h"

#include <cctype>
#include <chrono>
#include <optional>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/http_client.h"
#include "saga/steps/external_step.h"

namespace dsync::saga {
namespace {

constexpr size_t kHttpDefaultResponseBytes = 1 << 20;
constexpr size_t kHttpMaxResponseBytes = 4 << 20;
constexpr size_t kHttpErrorBodyBytes = 200;

struct Placeholder {
  size_t begin = 0, end = 0;        // the span "{{...}}" in the URL
  std::vector<std::string> path;    // after "payload."
};

// The placeholders of `url`, checked; ConfigError (naming `where`) for a malformed one
// or one outside the path and query.
std::vector<Placeholder> FindPlaceholders(const std::string& url, const std::string& where) {
  std::vector<Placeholder> out;
  size_t sep = url.find("://");
  size_t authority_end = sep == std::string::npos ? 0 : url.find_first_of("/?#", sep + 3);
  if (authority_end == std::string::npos) authority_end = url.size();
  size_t fragment = url.find('#', authority_end);
  size_t pos = 0;
  while ((pos = url.find("{{", pos)) != std::string::npos) {
    size_t close = url.find("}}", pos + 2);
    if (close == std::string::npos) throw ConfigError(where + " has an unclosed {{");
    if (pos < authority_end || (fragment != std::string::npos && pos > fragment)) {
      throw ConfigError(where + " has a placeholder outside the path and query (scheme, host and port are fixed)");
    }
    std::string inner = url.substr(pos + 2, close - pos - 2);
    Placeholder p{pos, close + 2, {}};
    if (inner.rfind("payload.", 0) != 0) {
      throw ConfigError(where + " placeholder {{" + external::Snippet(inner, 40) + "}} must be {{payload.NAME}}");
    }
    std::string rest = inner.substr(8);
    size_t start = 0;
    while (true) {
      size_t dot = rest.find('.', start);
      std::string seg = rest.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      bool ok = !seg.empty();
      for (char c : seg) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
      if (!ok) throw ConfigError(where + " placeholder {{" + external::Snippet(inner, 40) + "}} must be {{payload.NAME}}");
      p.path.push_back(seg);
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    out.push_back(std::move(p));
    pos = close + 2;
  }
  return out;
}

std::string PercentEncode(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string CheckedUrl(const nlohmann::json& v, const std::string& where) {
  if (!v.is_string()) throw ConfigError(where + " must be a string");
  std::string url = v.get<std::string>();
  std::vector<Placeholder> ps = FindPlaceholders(url, where);
  std::string probe = url;  // placeholders as a plain value: the rest must be a usable URL
  for (auto it = ps.rbegin(); it != ps.rend(); ++it) probe.replace(it->begin, it->end - it->begin, "x");
  std::string why;
  if (!ParseHttpUrl(probe, why)) throw ConfigError(where + " " + why);
  return url;
}

std::string CheckedMethod(const nlohmann::json& v, const std::string& where) {
  if (!v.is_string()) throw ConfigError(where + " must be GET, POST, PUT, PATCH or DELETE");
  std::string m = v.get<std::string>();
  for (const char* ok : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
    if (m == ok) return m;
  }
  throw ConfigError(where + " must be GET, POST, PUT, PATCH or DELETE, got \"" + external::Snippet(m, 20) + "\"");
}

struct Endpoint {
  std::string url;  // with placeholders
  std::string method = "POST";
};

class HttpStep final : public StepHandler {
 public:
  HttpStep(std::string name, Endpoint forward, std::optional<Endpoint> undo,
           std::vector<std::pair<std::string, std::string>> headers, size_t max_response, TlsOptions tls)
      : name_(std::move(name)), forward_(std::move(forward)), undo_(std::move(undo)), headers_(std::move(headers)),
        max_response_(max_response), client_(std::move(tls)) {}

  StepResult Execute(StepContext& ctx) override { return Call(ctx, forward_, false); }

  StepResult Compensate(StepContext& ctx) override {
    if (!undo_) return StepResult::Ok();
    return Call(ctx, *undo_, true);
  }

 private:
  StepResult Call(StepContext& ctx, const Endpoint& to, bool compensate) const {
    HttpRequest req;
    req.method = to.method;
    req.url = RenderUrl(to.url, ctx.payload());
    for (const auto& [k, v] : headers_) {
      req.headers.emplace_back(k, external::ExpandEnv(v, "http step '" + name_ + "' header " + k));
    }
    req.headers.emplace_back("Idempotency-Key", external::IdempotencyKey(ctx, compensate));
    if (req.method != "GET") {
      req.body = external::CallContext(ctx, compensate).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    HttpLimits limits;
    limits.max_body_bytes = max_response_;
    Clock& clock = ctx.clock();
    const Clock::TimePoint started = clock.Now();
    auto still_owner = [&ctx] {
      try {
        return ctx.StillOwner();
      } catch (const std::exception&) {
        return true;  // the database did not answer: keep going; the fence decides at commit
      }
    };
    HttpResponse r = client_.Send(req, RealDeadline(clock, ctx.deadline()), ctx.stop_token(), limits, still_owner);
    const Clock::TimePoint ended = clock.Now();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(ended - started);
    // What the error names: method and URL without its query (which may carry values).
    std::string shown = req.url.substr(0, req.url.find('?'));
    const std::string what = std::string(compensate ? "compensation " : "") + "http " + req.method + " " +
                             external::Snippet(shown, 160);
    spdlog::debug("HTTP_STEP_CALL event={} step={} key={} status={} failure={} ms={}", ctx.event_code(),
                  ctx.step_name(), external::IdempotencyKey(ctx, compensate), r.status, static_cast<int>(r.failure),
                  ms.count());
    if (ended >= ctx.deadline() && r.failure != HttpResponse::Failure::kStopped) {
      return StepResult::Transient(what + ": no answer within the step's deadline (" + std::to_string(ms.count()) +
                                   " ms; a late answer is discarded)");
    }
    using F = HttpResponse::Failure;
    switch (r.failure) {
      case F::kNone: break;
      case F::kConnect:
      case F::kTimeout:
      case F::kStopped:
      case F::kUnwanted:
        return StepResult::Transient(what + ": " + external::Snippet(r.error, 300));
      case F::kBadRequest:
      case F::kTls:
      case F::kTooLarge:
      case F::kProtocol:
      case F::kRedirects:
        return StepResult::Permanent(what + ": " + external::Snippet(r.error, 300));
    }
    const int s = r.status;
    if (s >= 200 && s < 300) {
      nlohmann::json output = external::OutputFromText(r.body);
      if (compensate) return StepResult::Ok(std::move(output));
      nlohmann::json saved = {{"output", output}};
      return StepResult::Ok(std::move(output), std::move(saved));
    }
    std::string error = what + " answered " + std::to_string(s);
    if (!r.body.empty()) error += ": " + external::Snippet(r.body, kHttpErrorBodyBytes);
    if (s == 408 || s == 429 || s >= 500) {
      std::optional<std::chrono::milliseconds> after = ParseRetryAfter(r.Header("retry-after"));
      if (after) {
        error += " (Retry-After " + std::to_string(after->count() / 1000) + " s)";
        return StepResult::TransientAfter(error, *after);
      }
      return StepResult::Transient(error);
    }
    return StepResult::Permanent(error);
  }

  const std::string name_;
  const Endpoint forward_;
  const std::optional<Endpoint> undo_;
  const std::vector<std::pair<std::string, std::string>> headers_;  // values may hold ${NAME}
  const size_t max_response_;
  const HttpClient client_;
};

}  // namespace

std::string RenderUrl(const std::string& url, const nlohmann::json& payload) {
  std::vector<Placeholder> ps = FindPlaceholders(url, "url");
  std::string out;
  size_t at = 0;
  for (const Placeholder& p : ps) {
    out.append(url, at, p.begin - at);
    const nlohmann::json* v = &payload;
    std::string dotted = "payload";
    for (const std::string& seg : p.path) {
      dotted += "." + seg;
      if (!v->is_object() || !v->contains(seg)) {
        throw PermanentStepError("url placeholder {{" + dotted + "}}: the payload has no " + dotted.substr(8));
      }
      v = &(*v)[seg];
    }
    if (v->is_string()) {
      out += PercentEncode(v->get<std::string>());
    } else if (v->is_number() || v->is_boolean()) {
      out += PercentEncode(v->dump());
    } else {
      throw PermanentStepError("url placeholder {{" + dotted + "}}: the value must be a string, number or boolean, got " +
                               std::string(v->type_name()));
    }
    at = p.end;
  }
  out.append(url, at, std::string::npos);
  return out;
}

std::unique_ptr<StepHandler> MakeHttpStep(const StepSpec& spec) {
  const std::string where = "http step '" + spec.name + "'";
  std::optional<Endpoint> forward;
  std::string method = "POST";
  std::optional<Endpoint> undo;
  std::vector<std::pair<std::string, std::string>> headers;
  size_t max_response = kHttpDefaultResponseBytes;
  TlsOptions tls;
  for (const auto& [key, value] : spec.params.items()) {
    if (key == "url") {
      forward = Endpoint{CheckedUrl(value, where + " url"), "POST"};
    } else if (key == "method") {
      method = CheckedMethod(value, where + " method");
    } else if (key == "headers") {
      if (!value.is_object()) throw ConfigError(where + " headers must be an object of name -> string");
      for (const auto& [hk, hv] : value.items()) {
        bool ok = !hk.empty();
        for (char c : hk) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos);
        if (!ok) throw ConfigError(where + " header name \"" + external::Snippet(hk, 40) + "\" is not a valid header name");
        std::string lower;
        for (char c : hk) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        for (const char* fixed : {"host", "content-length", "content-type", "transfer-encoding", "connection", "idempotency-key"}) {
          if (lower == fixed) throw ConfigError(where + " header " + hk + " is set by the step itself");
        }
        if (!hv.is_string()) throw ConfigError(where + " header " + hk + " must be a string");
        std::string v = hv.get<std::string>();
        if (v.find("{{") != std::string::npos) {
          throw ConfigError(where + " header " + hk + " has a placeholder: {{payload.x}} is allowed only in the url's path and query");
        }
        for (char c : v) {
          if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) throw ConfigError(where + " header " + hk + " holds a control character");
        }
        external::CheckEnvRefs(v, where + " header " + hk);
        headers.emplace_back(hk, std::move(v));
      }
    } else if (key == "compensate") {
      if (!value.is_object()) throw ConfigError(where + " compensate must be an object {\"url\", \"method\"}");
      Endpoint e;
      bool has_url = false;
      for (const auto& [ck, cv] : value.items()) {
        if (ck == "url") {
          e.url = CheckedUrl(cv, where + " compensate.url");
          has_url = true;
        } else if (ck == "method") {
          e.method = CheckedMethod(cv, where + " compensate.method");
        } else {
          throw ConfigError(where + " compensate." + ck + " is not a key of it (url, method)");
        }
      }
      if (!has_url) throw ConfigError(where + " compensate needs a url");
      undo = e;
    } else if (key == "max_response_bytes") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > static_cast<int64_t>(kHttpMaxResponseBytes)) {
        throw ConfigError(where + " max_response_bytes must be an integer from 1 to " + std::to_string(kHttpMaxResponseBytes));
      }
      max_response = value.get<size_t>();
    } else if (key == "tls_verify") {
      if (!value.is_boolean()) throw ConfigError(where + " tls_verify must be true or false");
      tls.verify_peer = value.get<bool>();
    } else if (key == "ca_file") {
      if (!value.is_string() || value.get<std::string>().empty()) throw ConfigError(where + " ca_file must be a file path");
      tls.ca_file = value.get<std::string>();
    } else {
      throw ConfigError(where + " has unknown key '" + key +
                        "' (url, method, headers, compensate, max_response_bytes, tls_verify, ca_file, timeout_ms, "
                        "max_retry)");
    }
  }
  if (!forward) throw ConfigError(where + " needs a \"url\" (http:// or https://)");
  forward->method = method;
  try {
    return std::make_unique<HttpStep>(spec.name, std::move(*forward), std::move(undo), std::move(headers), max_response,
                                      std::move(tls));
  } catch (const std::runtime_error& e) {
    throw ConfigError(where + ": " + e.what());
  }
}

}  // namespace dsync::saga
