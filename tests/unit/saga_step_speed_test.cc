// Plans::StepSpeed, the moving average that decides whether a plan's events run in
// batches (SagaEngine::Batchable). The average itself is private, so each case pins
// it through fast() at the 500 us boundary: first observation = the average, then
// avg += (x - avg) / 8 in whole microseconds, negative durations count as 0.
#include <chrono>
#include <initializer_list>

#include <gtest/gtest.h>

#include "saga/saga_engine.h"

namespace dsync::saga {
namespace {

using namespace std::chrono_literals;
using Speed = Plans::StepSpeed;

// Whether a fresh StepSpeed that observed `durations`, in this order, is fast.
bool FastAfter(std::initializer_list<std::chrono::microseconds> durations) {
  Speed speed;
  for (std::chrono::microseconds d : durations) speed.Observe(d);
  return speed.fast();
}

TEST(SagaStepSpeed, ThresholdIs500Microseconds) {
  EXPECT_EQ(Speed::kFastStep, 500us);
}

TEST(SagaStepSpeed, NotFastBeforeAnyObservation) {
  EXPECT_FALSE(FastAfter({}));
}

TEST(SagaStepSpeed, FirstObservationIsTheAverage) {
  EXPECT_TRUE(FastAfter({100us}));
  // Strictly under the threshold: 499 is fast, 500 is not.
  EXPECT_TRUE(FastAfter({499us}));
  EXPECT_FALSE(FastAfter({500us}));
  EXPECT_FALSE(FastAfter({10ms}));
}

TEST(SagaStepSpeed, OneOutlierMovesTheAverageByAnEighth) {
  // 100 + (3299 - 100) / 8 = 499: still fast; 100 + (3300 - 100) / 8 = 500: not.
  EXPECT_TRUE(FastAfter({100us, 3299us}));
  EXPECT_FALSE(FastAfter({100us, 3300us}));
}

TEST(SagaStepSpeed, TurnsSlowAndFastAgainWithTheObservations) {
  Speed speed;
  speed.Observe(100us);
  ASSERT_TRUE(speed.fast());
  for (int i = 0; i < 20; ++i) speed.Observe(10ms);
  EXPECT_FALSE(speed.fast());  // about 9.3 ms now

  // From there, quick steps need 24 observations to bring it under 500 us (about
  // 100 + 9200 * (7/8)^n): a heavier weight (1/4: 12) or a plain last value (1)
  // would flip far sooner.
  for (int i = 0; i < 20; ++i) speed.Observe(100us);
  EXPECT_FALSE(speed.fast()) << "fast again after only 20 quick steps";
  for (int i = 0; i < 10; ++i) speed.Observe(100us);
  EXPECT_TRUE(speed.fast());
}

TEST(SagaStepSpeed, NegativeDurationCountsAsZero) {
  // A clock step backwards must not look like "nothing observed" (a negative
  // average) nor pull the average below what a 0 would.
  EXPECT_TRUE(FastAfter({-5ms}));

  // 520 + (0 - 520) / 8 = 455: fast. Taken as -8000 it would be -545 (not fast).
  ASSERT_FALSE(FastAfter({520us}));
  EXPECT_TRUE(FastAfter({520us, -8000us}));
}

}  // namespace
}  // namespace dsync::saga
