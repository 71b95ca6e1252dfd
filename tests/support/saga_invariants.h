// The saga-order invariant (docs/event-lifecycle.md "Invariants checked by tests"), checked with SQL over every event
// of a schema. For the saga engine's integration tests, the consumer's end-to-end
// tests and the chaos suite:
//
//   EXPECT_SAGA_ORDER(db.pool());
//
// For each event, its steps in plan (tree) order — position from the code
// "<event>#<pos>[.<child>...]", children right after their parent — must be:
//   - forward executions a prefix: the steps that ever reached SUCCESS
//     (executed_at set) come first, with executed_at non-decreasing;
//   - compensations in exact reverse: among them and the step right after (a failing
//     step that saved compensation data), statuses read SUCCESS* COMPENSATING?
//     COMPENSATED*, compensated_at non-increasing in plan order and never before
//     the last execution;
//   - the event's terminal status agrees: SUCCESS = every step SUCCESS; COMPENSATED =
//     none left SUCCESS, COMPENSATING or EXECUTING.
// Times are compared at the columns' precision (ms), so equal times pass.
//
// Thread safety: stateless; call it when no engine is writing the schema.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "storage/connection_pool.h"

namespace dsync::testing {

// Every violation over all events of the pool's schema, one line each ("event E1
// (COMPENSATED): step E1#1 compensated before E1#2 (not reverse order)"); empty when
// the invariant holds. Throws DbError.
std::vector<std::string> SagaOrderViolations(storage::ConnectionPool& pool);

// "\n  line" per violation, for a gtest message.
std::string JoinLines(const std::vector<std::string>& lines);

}  // namespace dsync::testing

// A gtest expectation: every event of the schema satisfies the saga-order invariant.
#define EXPECT_SAGA_ORDER(pool)                                                           \
  do {                                                                                    \
    auto dsync_saga_violations_ = ::dsync::testing::SagaOrderViolations(pool);            \
    EXPECT_TRUE(dsync_saga_violations_.empty())                                           \
        << "saga-order invariant violated:" << ::dsync::testing::JoinLines(dsync_saga_violations_); \
  } while (0)
