// Retry backoff (pure) and the deadline timer (with a FakeClock).
#include <atomic>
#include <chrono>
#include <random>
#include <stop_token>
#include <thread>

#include <gtest/gtest.h>

#include "core/clock.h"
#include "saga/backoff.h"
#include "saga/deadline_timer.h"
#include "tests/support/fake_clock.h"

namespace dsync::saga {
namespace {

using namespace std::chrono_literals;

UniformRandom Fixed(double r) {
  return [r] { return r; };
}

TEST(SagaBackoff, CeilingDoublesPerRetryUpToTheCap) {
  BackoffSpec spec{1000ms, 60000ms};
  EXPECT_EQ(BackoffCeiling(spec, 0), 1000ms);
  EXPECT_EQ(BackoffCeiling(spec, 1), 2000ms);
  EXPECT_EQ(BackoffCeiling(spec, 2), 4000ms);
  EXPECT_EQ(BackoffCeiling(spec, 5), 32000ms);
  EXPECT_EQ(BackoffCeiling(spec, 6), 60000ms);  // 64 s capped
  EXPECT_EQ(BackoffCeiling(spec, 1000), 60000ms);  // no overflow
  EXPECT_EQ(BackoffCeiling(spec, -3), 1000ms);
  EXPECT_EQ(BackoffCeiling({0ms, 0ms}, 10), 0ms);
}

TEST(SagaBackoff, JitterStaysWithinHalfToFullCeiling) {
  BackoffSpec spec{100ms, 1000ms};
  EXPECT_EQ(RetryBackoff(spec, 0, Fixed(0.0)), 50ms);
  EXPECT_EQ(RetryBackoff(spec, 0, Fixed(0.5)), 75ms);
  EXPECT_EQ(RetryBackoff(spec, 0, Fixed(0.9999999)), 100ms);
  EXPECT_EQ(RetryBackoff(spec, 1, Fixed(0.0)), 100ms);
  EXPECT_EQ(RetryBackoff(spec, 1, Fixed(0.9999999)), 200ms);
  EXPECT_EQ(RetryBackoff(spec, 10, Fixed(0.0)), 500ms);
  EXPECT_EQ(RetryBackoff(spec, 10, Fixed(0.9999999)), 1000ms);
  // Out-of-range sources are clamped; no source means the lower bound.
  EXPECT_EQ(RetryBackoff(spec, 0, Fixed(-1.0)), 50ms);
  EXPECT_EQ(RetryBackoff(spec, 0, Fixed(7.0)), 100ms);
  EXPECT_EQ(RetryBackoff(spec, 0, nullptr), 50ms);
}

TEST(SagaBackoff, RandomDelaysCoverTheRangeAndNeverLeaveIt) {
  BackoffSpec spec{1000ms, 60000ms};
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int retries = 0; retries < 8; ++retries) {
    Millis ceiling = BackoffCeiling(spec, retries);
    Millis lo = ceiling, hi = 0ms;
    for (int i = 0; i < 2000; ++i) {
      Millis d = RetryBackoff(spec, retries, [&] { return uniform(rng); });
      ASSERT_GE(d, ceiling / 2);
      ASSERT_LE(d, ceiling);
      lo = std::min(lo, d);
      hi = std::max(hi, d);
    }
    EXPECT_LT(lo, ceiling / 2 + ceiling / 20) << retries;  // spread over the range
    EXPECT_GT(hi, ceiling - ceiling / 20) << retries;
  }
}

TEST(SagaDeadlineTimer, FiresTheStopAtTheDeadlineOnly) {
  FakeClock clock;
  DeadlineTimer timer(clock);
  std::stop_source early, late;
  auto t1 = timer.Arm(clock.Now() + 100ms, early);
  auto t2 = timer.Arm(clock.Now() + 10s, late);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(early.stop_requested());
  clock.Advance(150ms);
  for (int i = 0; i < 200 && !early.stop_requested(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(early.stop_requested());
  EXPECT_FALSE(late.stop_requested());
}

TEST(SagaDeadlineTimer, ADisarmedDeadlineNeverFires) {
  FakeClock clock;
  DeadlineTimer timer(clock);
  std::stop_source source;
  { auto ticket = timer.Arm(clock.Now() + 10ms, source); }
  clock.Advance(1s);
  std::this_thread::sleep_for(60ms);
  EXPECT_FALSE(source.stop_requested());
}

TEST(SagaDeadlineTimer, RealClockDeadline) {
  SystemClock clock;
  DeadlineTimer timer(clock);
  std::stop_source source;
  auto t0 = std::chrono::steady_clock::now();
  auto ticket = timer.Arm(clock.Now() + 30ms, source);
  EXPECT_FALSE(clock.SleepFor(5s, source.get_token()));  // woken by the deadline
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 25ms);
  EXPECT_LT(waited, 1s);
}

}  // namespace
}  // namespace dsync::saga
