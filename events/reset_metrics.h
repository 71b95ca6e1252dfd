// The metric family of events handed back to PENDING (events/reset.h), which more than
// one component counts: the dispatcher's sweeper (node_offline, timed_out) and the
// consumer node (node_restarted, node_drained, run_abandoned). Each writes its reasons
// with WriteEventResets; metrics::Registry shows them as one family.
//
// Thread safety: a function of its arguments.
#pragma once

#include <cstdint>
#include <string>

#include "core/metrics.h"

namespace dsync::events {

// dsync_event_resets_total{reason="..."} n, as a shared sample of `w`.
inline void WriteEventResets(metrics::TextWriter& w, const std::string& reason, uint64_t n) {
  w.SharedSample("dsync_event_resets_total", "Events handed back to PENDING, by reason.", metrics::Type::kCounter,
                 {{"reason", reason}}, static_cast<double>(n));
}

}  // namespace dsync::events
