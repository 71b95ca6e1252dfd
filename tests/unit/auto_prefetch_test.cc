// consumer::AutoPrefetch, consumer.prefetch -1: the events a node may hold beyond its
// capacity, by whether its steps are fast (consumer/consumer_node.h).
#include <gtest/gtest.h>

#include "consumer/consumer_node.h"

namespace dsync::consumer {
namespace {

TEST(AutoPrefetch, SlowOrUnknownStepsHoldAsManyAsCapacity) {
  for (int capacity : {1, 8, 16, 256, 10000}) EXPECT_EQ(AutoPrefetch(capacity, false), capacity) << capacity;
}

TEST(AutoPrefetch, FastStepsHoldThreeTimesCapacityUpTo256) {
  EXPECT_EQ(AutoPrefetch(1, true), 3);
  EXPECT_EQ(AutoPrefetch(8, true), 24);
  EXPECT_EQ(AutoPrefetch(16, true), 48);
  EXPECT_EQ(AutoPrefetch(85, true), 255);
  EXPECT_EQ(AutoPrefetch(86, true), 256);  // capped
  EXPECT_EQ(AutoPrefetch(128, true), 256);
}

TEST(AutoPrefetch, NeverFewerThanCapacity) {
  EXPECT_EQ(AutoPrefetch(256, true), 256);
  EXPECT_EQ(AutoPrefetch(1000, true), 1000);
  EXPECT_EQ(AutoPrefetch(10000, true), 10000);
}

}  // namespace
}  // namespace dsync::consumer
