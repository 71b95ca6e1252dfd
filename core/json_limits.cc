// Bounded reading of stored JSON (see json_limits.h).
//
// Thread safety: pure functions.
#include "core/json_limits.h"

namespace dsync {

int JsonNestingDepth(std::string_view text, int stop_above) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    switch (ch) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > stop_above) return deepest;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default: break;
    }
  }
  return deepest;
}

std::string TooDeepMessage(std::string_view what, int max_depth) {
  return std::string(what) + " nests deeper than " + std::to_string(max_depth) + " levels";
}

nlohmann::json ParseJsonBounded(std::string_view text, std::string_view what, int max_depth) {
  if (JsonNestingDepth(text, max_depth) > max_depth) throw JsonTooDeepError(TooDeepMessage(what, max_depth));
  return nlohmann::json::parse(text);
}

nlohmann::json ParseInputJson(std::string_view text, std::string_view what) {
  StoredJson parsed = ParseStoredJson(text, what, kMaxInputJsonDepth);
  if (parsed.problem == StoredJson::kTooDeep) throw UsageError(parsed.message);
  if (parsed.problem != StoredJson::kNone) throw UsageError(std::string(what) + " is not valid JSON");
  return std::move(parsed.value);
}

StoredJson ParseStoredJson(std::string_view text, std::string_view what, int max_depth) {
  StoredJson out;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    out.problem = StoredJson::kEmpty;
    return out;
  }
  if (JsonNestingDepth(text, max_depth) > max_depth) {
    out.problem = StoredJson::kTooDeep;
    out.message = TooDeepMessage(what, max_depth);
    return out;
  }
  nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    out.problem = StoredJson::kInvalid;
    out.message = std::string(what) + " is not valid JSON";
    return out;
  }
  out.value = std::move(parsed);
  return out;
}

}  // namespace dsync
