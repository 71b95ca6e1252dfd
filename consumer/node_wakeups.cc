#include "consumer/node_wakeups.h"

namespace dsync::consumer {

NodeWakeups::NodeWakeups(storage::ConnectionPool& pool, Clock& clock, const NodeWakeupOptions& o) {
  if (!o.enabled) return;
  const std::string listen = o.listen.empty() ? o.node_address : o.listen;
  listener_ = wakeup::WakeListener::Bind(listen, "node " + o.node_address,
                                         wakeup::WakeLimiter(Millis(0), o.poll_interval), clock);
  dispatcher_ = std::make_unique<dispatcher::DispatcherWaker>(pool, o.service, clock);
}

NodeWakeups::~NodeWakeups() { Stop(); }

void NodeWakeups::Start(std::function<void()> poll_now) {
  if (listener_) listener_->Start(std::move(poll_now));
}

void NodeWakeups::Stop() {
  if (listener_) listener_->Stop();
}

void NodeWakeups::Polled(bool found_work, bool slots_free) {
  if (listener_) listener_->Result(found_work);
  // The node was full since the last wake-up (so the dispatcher may well hold more
  // for it), workers freed slots, and the assigned events did not fill them: the
  // dispatcher has room to give this node more now. A node that never fills up (light
  // load) sends nothing: a wake-up the dispatcher finds nothing for would hold back
  // its next genuine ones (WakeLimiter).
  if (!slots_free) was_full_ = true;
  if (dispatcher_ && slots_free && was_full_ && freed_.exchange(false, std::memory_order_relaxed)) {
    was_full_ = false;
    if (dispatcher_->Wake()) dispatcher_wakes_++;
  }
}

NodeWakeupStats NodeWakeups::stats() const {
  NodeWakeupStats s;
  if (listener_) {
    s.received = listener_->stats().received.load();
    s.acted = listener_->stats().acted.load();
  }
  s.dispatcher_wakes = dispatcher_wakes_.load();
  return s;
}

}  // namespace dsync::consumer
