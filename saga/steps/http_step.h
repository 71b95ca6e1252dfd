// The built-in `http` step type (README.md "Custom steps"): calls a service in any
// language as a step.
//
//   {"name": "refresh", "type": "http", "url": "http://cache.local/spaces/{{payload.space_id}}/refresh",
//    "method": "POST", "headers": {"Authorization": "Bearer ${CACHE_TOKEN}"}, "timeout_ms": 10000,
//    "compensate": {"url": "http://cache.local/spaces/{{payload.space_id}}/refresh", "method": "DELETE"}}
//
// Config (checked when the plan is built, one-line ConfigError otherwise):
//   url                required; http:// or https:// only. {{payload.a.b}} placeholders
//                      only in the path and query (not in scheme, host or port), each
//                      replaced by that payload value (a string, number or boolean),
//                      percent-encoded. A value that is missing, null, an object or
//                      an array fails the call (permanent).
//   method             GET, POST (default), PUT, PATCH or DELETE.
//   headers            optional {"Name": "value"}; a value may hold ${NAME}, the node's
//                      environment variable, resolved at each call and never written
//                      to a step row or a log. No placeholders; Host, Content-Length,
//                      Content-Type, Transfer-Encoding, Connection and Idempotency-Key
//                      are set by the step.
//   compensate         optional {"url", "method"} as above (method default POST); the
//                      forward headers are sent too. Without it compensation does nothing.
//   max_response_bytes optional, default 1048576, at most 4194304.
//   tls_verify         optional, default true: https checks the certificate and name.
//   ca_file            optional: a PEM file of CAs to trust instead of the system's.
//   timeout_ms         the step's usual deadline: the whole call (connect, TLS, request,
//                      redirects, response) ends by it; an answer after it is discarded.
//                      A call also ends when the node no longer owns the event (checked
//                      every 2 s while it waits).
// A call: the context JSON (external_step.h) as the body (not for GET), header
// Idempotency-Key: <step code> (compensation: "<step code>-compensate", the body's
// forward_output holding the forward call's output). 2xx: success, the body as the step's
// output (JSON if it parses, else the text with invalid UTF-8 replaced by U+FFFD).
// 408, 429, 5xx, connection failures and timeouts: transient, the retry no sooner than
// Retry-After (capped at the topic's backoff_max_ms). Other statuses, a body over
// max_response_bytes, a redirect loop (more than 5, same origin only), a certificate not
// accepted: permanent, with the status and the first 200 bytes of the body.
//
// Thread safety: the handler is immutable after construction; calls run in parallel.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "config/settings.h"
#include "saga/step_handler.h"

namespace dsync::saga {

// The factory registered as "http". Throws ConfigError for bad params.
std::unique_ptr<StepHandler> MakeHttpStep(const StepSpec& spec);

// `url` with its {{payload.x}} placeholders replaced, percent-encoded (exposed for
// tests). Throws PermanentStepError for a missing or unusable value.
std::string RenderUrl(const std::string& url, const nlohmann::json& payload);

}  // namespace dsync::saga
