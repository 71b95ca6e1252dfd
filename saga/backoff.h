// Retry delays: exponential, capped and jittered, as a pure function.
//
//   Millis d = saga::RetryBackoff({topic.backoff_base, topic.backoff_max}, retries_so_far, rnd);
//
// The n-th retry (n = failures so far, 0 for the first) waits a delay drawn uniformly
// from [c/2, c] where c = min(max, base * 2^n) ("equal jitter"): it doubles per
// failure, never exceeds `max`, and two events that failed together spread out.
// The delay is added to the database clock in SQL (next_run_time = NOW(3) + delay);
// no process clock is involved.
//
// Thread safety: pure; the random source is the caller's.
#pragma once

#include <chrono>
#include <functional>

namespace dsync::saga {

using Millis = std::chrono::milliseconds;

struct BackoffSpec {
  Millis base{1000};  // delay cap for the first retry
  Millis max{60000};  // no delay exceeds this
};

// Returns a number in [0, 1). Tests pass a constant; the engine a seeded generator.
using UniformRandom = std::function<double()>;

// REQUIRES: 0 <= base <= max; retries >= 0 (negative counts as 0).
Millis RetryBackoff(const BackoffSpec& spec, int retries, const UniformRandom& random);

// The delay before jitter: min(max, base * 2^retries), overflow-safe.
Millis BackoffCeiling(const BackoffSpec& spec, int retries);

}  // namespace dsync::saga
