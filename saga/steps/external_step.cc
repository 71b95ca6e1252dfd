#include "saga/steps/external_step.h"

#include <cctype>
#include <cstdlib>

#include "core/error.h"
#include "core/json_limits.h"
#include "core/visible_text.h"

namespace dsync::saga::external {
namespace {

bool EnvNameChar(char c, bool first) {
  return c == '_' || std::isalpha(static_cast<unsigned char>(c)) || (!first && std::isdigit(static_cast<unsigned char>(c)));
}

// Calls `on_ref(name)` for each ${NAME} and `on_text(piece)` between them; false (and
// `bad` set) at a malformed reference.
template <class OnText, class OnRef>
bool WalkEnvRefs(const std::string& text, OnText on_text, OnRef on_ref, std::string& bad) {
  size_t pos = 0;
  while (true) {
    size_t open = text.find("${", pos);
    if (open == std::string::npos) {
      on_text(std::string_view(text).substr(pos));
      return true;
    }
    on_text(std::string_view(text).substr(pos, open - pos));
    size_t close = text.find('}', open + 2);
    if (close == std::string::npos) {
      bad = "an unclosed ${";
      return false;
    }
    std::string name = text.substr(open + 2, close - open - 2);
    bool ok = !name.empty();
    for (size_t i = 0; ok && i < name.size(); ++i) ok = EnvNameChar(name[i], i == 0);
    if (!ok) {
      bad = "${" + Snippet(name, 40) + "} (a reference is ${NAME}: letters, digits and _)";
      return false;
    }
    on_ref(name);
    pos = close + 1;
  }
}

}  // namespace

std::string IdempotencyKey(StepContext& ctx, bool compensate) {
  return compensate ? ctx.idempotency_key() + kCompensateSuffix : ctx.idempotency_key();
}

nlohmann::json CallContext(StepContext& ctx, bool compensate) {
  nlohmann::json c = {{"action", compensate ? "compensate" : "execute"},
                      {"code", ctx.event_code()},
                      {"step", ctx.step_name()},
                      {"idempotency_key", IdempotencyKey(ctx, compensate)},
                      {"attempt", ctx.attempt()},
                      {"step_retry", ctx.step_retry_count()},
                      {"tenant_id", ctx.tenant_id()},
                      {"data_id", ctx.data_id()},
                      {"payload", ctx.payload()},
                      {"outputs", ctx.PreviousOutputs()}};
  if (compensate) {
    const nlohmann::json& saved = ctx.compensation_data();
    c["forward_output"] = saved.is_object() && saved.contains("output") ? saved["output"] : nlohmann::json(nullptr);
  }
  return c;
}

void CheckEnvRefs(const std::string& text, const std::string& what) {
  std::string bad;
  if (!WalkEnvRefs(text, [](std::string_view) {}, [](const std::string&) {}, bad)) {
    throw ConfigError(what + " has " + bad);
  }
}

std::string ExpandEnv(const std::string& text, const std::string& what) {
  std::string out, bad;
  bool ok = WalkEnvRefs(
      text, [&](std::string_view piece) { out.append(piece); },
      [&](const std::string& name) {
        const char* value = std::getenv(name.c_str());
        if (value == nullptr) {
          throw PermanentStepError(what + " names ${" + name + "}, which is not set in the node's environment");
        }
        out += value;
      },
      bad);
  if (!ok) throw PermanentStepError(what + " has " + bad);
  return out;
}

std::string Utf8Safe(std::string_view text) {
  std::string out;
  while (true) {
    std::optional<size_t> bad = FirstInvalidUtf8(text);
    if (!bad) {
      out.append(text);
      return out;
    }
    out.append(text.substr(0, *bad));
    out += "\xEF\xBF\xBD";  // U+FFFD
    text.remove_prefix(*bad + 1);
  }
}

std::string Snippet(std::string_view text, size_t max) {
  const bool cut = text.size() > max;
  if (cut) {
    text = text.substr(0, max);
    // Not in the middle of a UTF-8 sequence: drop a trailing partial one.
    size_t back = 0;
    while (back < 3 && back < text.size() && (static_cast<unsigned char>(text[text.size() - 1 - back]) & 0xC0) == 0x80) ++back;
    if (back < text.size() && (static_cast<unsigned char>(text[text.size() - 1 - back]) & 0xC0) == 0xC0) {
      text = text.substr(0, text.size() - 1 - back);
    }
  }
  std::string out = Utf8Safe(text);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = ' ';
  }
  return cut ? out + "..." : out;
}

nlohmann::json OutputFromText(const std::string& text) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return nullptr;
  StoredJson parsed = ParseStoredJson(text, "output");
  if (parsed.problem == StoredJson::kNone) return std::move(parsed.value);
  return Utf8Safe(text);
}

}  // namespace dsync::saga::external
