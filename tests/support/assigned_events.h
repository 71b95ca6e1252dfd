// The consumer's poll as the saga tests need it: every event ASSIGNED to a node, read
// the way ConsumerNode::PollOnce reads them (events::PollAssigned, without a limit
// and with the latency left unobserved), for
// tests that drive SagaEngine::ClaimBatch / RunBatch without a node.
//
//   std::vector<saga::AssignedEvent> polled = testing::PollAssigned(db.pool(), "10.0.0.1:7001");
//
// Thread safety: stateless.
#pragma once

#include <string>
#include <vector>

#include "saga/saga_engine.h"
#include "storage/connection_pool.h"

namespace dsync::testing {

// In id order. Throws DbError.
// `service`: the column default of events inserted without one.
std::vector<saga::AssignedEvent> PollAssigned(storage::ConnectionPool& pool, const std::string& node,
                                              const std::string& service = "kbs-sync");

// The event with that code as a poll would hand it to the engine, whatever its status
// (events::ReadEvent, the one reader of an event row); an AssignedEvent with id 0 when
// there is none. Throws DbError.
saga::AssignedEvent LoadAssigned(storage::ConnectionPool& pool, const std::string& code);

}  // namespace dsync::testing
