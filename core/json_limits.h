// Bounded reading of JSON that comes from the database (event payload and result,
// step output and compensation data, process_log, heartbeat metadata). Anyone with
// INSERT rights on distribute_event may write any text there (the plain-SQL producer
// contract), and nlohmann::json copies, compares and serialises values recursively:
// an array nested 100,000 deep runs a process out of stack. Every parse of stored JSON
// goes through here, so no value deeper than kMaxJsonDepth ever exists in memory.
//
//   auto p = ParseStoredJson(row.payload);            // never throws
//   if (p.problem == StoredJson::kTooDeep) ...         // p.message: one line for users
//   nlohmann::json v = ParseJsonBounded(text);         // throws JsonTooDeepError / parse_error
//
// The depth check is a single forward scan (no recursion, no allocation) that counts
// '[' and '{' outside strings; it runs before nlohmann sees the text.
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsync {

// Deepest nesting accepted in stored JSON. Real payloads nest a handful of levels;
// 512 leaves room for any sane document and is far from the stack's limit.
inline constexpr int kMaxJsonDepth = 512;

// Deepest nesting accepted in JSON given as input, by the API and the CLI alike: an
// API request body (POST /v1/events, /v1/batches, /v1/verify ...), and the CLI's
// --event, --payload, --on-complete-payload, --params and each line of
// `produce --file`. Deeper input is refused before it is parsed ("<what> nests deeper
// than 64 levels"). Real documents nest a handful of levels. Stored JSON (rows written
// by plain SQL) is read up to kMaxJsonDepth instead: it exists, and is shown with a
// marker rather than refused.
inline constexpr int kMaxInputJsonDepth = 64;

// Parses JSON given as input (see kMaxInputJsonDepth), `what` naming it in messages.
// Throws UsageError: "<what> nests deeper than 64 levels", "<what> is not valid JSON".
nlohmann::json ParseInputJson(std::string_view text, std::string_view what);

// The text nests arrays/objects deeper than the limit; what() names the limit.
class JsonTooDeepError : public Error {
 public:
  using Error::Error;
};

// Deepest array/object nesting of `text`, counted outside string literals, without
// recursion. Stops scanning once the depth passes `stop_above` (returns that depth).
// Not a validator: malformed text gets a number too (nlohmann rejects it later).
int JsonNestingDepth(std::string_view text, int stop_above = kMaxJsonDepth);

// "<what> nests deeper than 512 levels" (callers add what they did about it).
std::string TooDeepMessage(std::string_view what, int max_depth = kMaxJsonDepth);

// Parses `text` when it nests at most `max_depth` levels. Throws JsonTooDeepError
// (message from TooDeepMessage(what)) before parsing, or nlohmann::json::parse_error.
nlohmann::json ParseJsonBounded(std::string_view text, std::string_view what = "JSON",
                                int max_depth = kMaxJsonDepth);

struct StoredJson {
  enum Problem { kNone, kEmpty, kInvalid, kTooDeep };
  Problem problem = kNone;
  nlohmann::json value;  // the parsed value when problem == kNone; null otherwise
  std::string message;   // one line when problem is kInvalid or kTooDeep
};

// Never throws: empty (blank) text is kEmpty, deep text kTooDeep, malformed kInvalid.
StoredJson ParseStoredJson(std::string_view text, std::string_view what = "JSON",
                           int max_depth = kMaxJsonDepth);

}  // namespace dsync
