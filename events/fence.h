// The fence of an owned event (docs/event-lifecycle.md, "every write after the claim
// is fenced by (id, version)"): a value, returned by each fenced transition of
// events/transitions.h when it matched (the version the event has after it), so no
// caller advances a version by hand. A transaction that may run again (a retried
// Transact) starts from a copy of the fence it held, and its result replaces the
// held one only once it committed.
//
// Thread safety: a plain value.
#pragma once

#include <cstdint>

namespace dsync::events {

struct Fence {
  int64_t id = 0;
  int version = 0;
  // After a status change (every status change bumps the version by one).
  Fence Next() const { return Fence{id, version + 1}; }
};

}  // namespace dsync::events
