// A node's own service filter (docs/event-lifecycle.md, "Services"), against a real
// MariaDB: events of two services ASSIGNED (or held) at one node address; the node of
// service A hands back at start, polls and runs only A's events, and leaves B's exactly
// as they were (status, version, node).
#include <string>

#include <gtest/gtest.h>

#include "consumer/consumer_node.h"
#include "tests/integration/dispatcher_fixtures.h"
#include "tests/support/engine_parts.h"
#include "tests/support/eventually.h"

namespace dsync::consumer {
namespace {

using namespace std::chrono_literals;
using namespace dispatcher::fixtures;

constexpr const char* kAddress = "shared:1";

std::string Row(TestSchema& db, const std::string& code) {
  return Text(db, "SELECT CONCAT_WS(' ', status, version, IFNULL(node_address, '-')) FROM distribute_event "
                  "WHERE code = '" + code + "'");
}

TEST(NodeServiceTest, ANodeHandsBackPollsAndRunsOnlyItsServicesEvents) {
  TestSchema db;
  Settings s = TestSettings();
  s.service = "svc-a";
  s.topics["T"].steps = {StepSpec{.name = "s1", .type = "demo"}};
  // What a previous incarnation at the address held, in both services.
  AddEvent(db, {.code = "a-running", .status = "RUNNING", .node = kAddress, .version = 3, .service = "svc-a"});
  AddEvent(db, {.code = "a-assigned", .status = "ASSIGNED", .node = kAddress, .version = 2, .service = "svc-a"});
  AddEvent(db, {.code = "b-running", .status = "RUNNING", .node = kAddress, .version = 3, .service = "svc-b"});
  AddEvent(db, {.code = "b-assigned", .status = "ASSIGNED", .node = kAddress, .version = 2, .service = "svc-b"});

  testing::EngineParts parts(db.pool(), s, kAddress);
  SystemClock clock;
  ConsumerOptions o;
  o.service = "svc-a";
  o.node_address = kAddress;
  o.capacity = 2;
  o.prefetch = 0;  // none held beyond capacity (the default is automatic)
  o.topics = {"*"};
  o.poll_interval = 20ms;
  o.idle_interval = 50ms;
  o.wakeups = false;
  ConsumerNode node(db.pool(), parts.engine, clock, o);
  node.Start();

  // The start hand-back: A's two, not B's.
  EXPECT_EQ(node.stats().handed_back_at_start.load(), 2u);
  EXPECT_EQ(Row(db, "a-running"), "PENDING 4 -");
  EXPECT_EQ(Row(db, "a-assigned"), "PENDING 3 -");
  EXPECT_EQ(Text(db, "SELECT last_error FROM distribute_event WHERE code = 'a-running'"), "reset (not charged): node restarted");
  EXPECT_EQ(Row(db, "b-running"), "RUNNING 3 shared:1");
  EXPECT_EQ(Row(db, "b-assigned"), "ASSIGNED 2 shared:1");

  // New assignments at the address in both services: the poll takes only A's.
  AddEvent(db, {.code = "b-new", .status = "ASSIGNED", .node = kAddress, .version = 2, .service = "svc-b"});
  AddEvent(db, {.code = "a-new", .status = "ASSIGNED", .node = kAddress, .version = 2, .service = "svc-a"});
  ASSERT_TRUE(testing::Eventually([&] { return Row(db, "a-new").rfind("SUCCESS ", 0) == 0; }, 10s))
      << Row(db, "a-new");
  // Polls kept coming after a-new ran; B's events are as they were.
  const uint64_t polls = node.stats().polls.load();
  ASSERT_TRUE(testing::Eventually([&] { return node.stats().polls.load() >= polls + 3; }, 5s));
  EXPECT_EQ(Row(db, "b-new"), "ASSIGNED 2 shared:1");
  EXPECT_EQ(Row(db, "b-assigned"), "ASSIGNED 2 shared:1");
  EXPECT_EQ(Row(db, "b-running"), "RUNNING 3 shared:1");
  EXPECT_EQ(Count(db, "service = 'svc-b' AND JSON_LENGTH(process_log) > 0"), 0);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event_step WHERE job_code LIKE 'b-%'"), 0);
  EXPECT_EQ(node.stats().polled_events.load(), 1u);  // a-new only: the handed-back ones are PENDING
}

}  // namespace
}  // namespace dsync::consumer
