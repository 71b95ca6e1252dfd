// What the `http` and `exec` step types (http_step.h, exec_step.h) share: the JSON
// context a receiver gets, ${NAME} secrets from the node's environment, and turning
// what a receiver answered into a step output that is safe to store.
//
// The context (request body of an http step, stdin of an exec step):
//   {"action": "execute" | "compensate",
//    "code": <event code>, "step": <step name>, "idempotency_key": <key>,
//    "attempt": <the event's claim attempt>, "step_retry": <this step's failures so far>,
//    "tenant_id": ..., "data_id": ..., "payload": <event payload>,
//    "outputs": {<earlier step name>: <its output>, ...},
//    "forward_output": <compensate only: what the forward call returned>}
// The idempotency key is the step code; a compensation's is the step code + "-compensate".
//
// Thread safety: pure functions, except that ExpandEnv reads the process environment.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "saga/step_handler.h"

namespace dsync::saga::external {

inline constexpr const char* kCompensateSuffix = "-compensate";

std::string IdempotencyKey(StepContext& ctx, bool compensate);
nlohmann::json CallContext(StepContext& ctx, bool compensate);

// At config load: every "${" in `text` opens a reference ${NAME} (NAME: letters,
// digits, underscore, not starting with a digit). Throws ConfigError naming `what`.
void CheckEnvRefs(const std::string& text, const std::string& what);
// At call time: `text` with each ${NAME} replaced by the environment variable's value.
// A variable that is not set is a PermanentStepError naming it (never a value).
std::string ExpandEnv(const std::string& text, const std::string& what);

// `text` with every byte that is not part of well-formed UTF-8 replaced by U+FFFD.
std::string Utf8Safe(std::string_view text);
// One line for an error message: control characters as spaces, invalid UTF-8 as
// U+FFFD, at most `max` bytes of `text` (then "...").
std::string Snippet(std::string_view text, size_t max = 200);
// What a receiver answered, as the step's output: its JSON when it parses (within
// kMaxJsonDepth), else the text as a JSON string (Utf8Safe); null when empty.
nlohmann::json OutputFromText(const std::string& text);

}  // namespace dsync::saga::external
