// Which of the config's datasources this node can reach, for its heartbeat metadata
// (registry/node_metadata.h `datasources`, `datasource_errors`): the dispatcher gives a
// node only events whose next work it reaches (dispatcher/assignment_planner.h), and the
// node's saga engine hands an event on before a step needing a datasource whose last
// check failed (consumer/consumer_node.h).
//
//   consumer::DatasourceProber prober(urls, Millis(30000), clock, ConnectProbe, on_change);
//   prober.Start();                 // checks each at once, then every interval
//   prober.snapshot().reachable;    // names whose last check succeeded
//
// Each datasource is checked on its own thread (connect, then SELECT 1), so a
// datasource that hangs delays neither the others' results nor the heartbeat, which
// only reads the last snapshot. A failing datasource is re-checked sooner (after 1 s,
// doubling up to the interval), so a short outage costs seconds. The connect is bounded by the URL's
// connect_timeout_ms (default 5 s) and the query by the same limit. Until its first
// check ends a datasource counts as not reached: a node that just started gets no
// event needing it before it knows. `on_change` runs on the checking thread whenever
// a datasource's reachability (or, for a failing one, its error) changes, so the node
// can beat at once rather than at its next heartbeat.
//
// Thread safety: snapshot() from any thread; Start/Stop from one controlling thread.
// Stop() waits for checks in progress (at most their timeouts).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"

namespace dsync::consumer {

// One check of a datasource: returns normally when it answered, throws (any
// std::exception, its message being the reason) when it did not.
using ProbeFn = std::function<void(const std::string& name, const std::string& url)>;

// The real check: a fresh connection (storage::Connection) with read and write
// timeouts bounded by the connect timeout, then SELECT 1.
void ConnectProbe(const std::string& name, const std::string& url);

struct DatasourceSnapshot {
  std::vector<std::string> reachable;         // sorted
  std::map<std::string, std::string> errors;  // name -> last failure (passwords masked, one line)
};

class DatasourceProber {
 public:
  DatasourceProber(std::map<std::string, std::string> urls, Millis interval, Clock& clock,
                   ProbeFn probe = ConnectProbe, std::function<void()> on_change = {});
  ~DatasourceProber();  // Stop()s

  void Start();
  void Stop();
  DatasourceSnapshot snapshot() const;

 private:
  void Loop(const std::string& name, const std::string& url, std::stop_token stop);

  const std::map<std::string, std::string> urls_;
  const Millis interval_;
  Clock& clock_;
  const ProbeFn probe_;
  const std::function<void()> on_change_;

  mutable std::mutex mu_;
  // name -> nullopt: reached at the last check; a string: why not. Absent: not yet checked.
  std::map<std::string, std::optional<std::string>> state_;
  std::vector<std::jthread> threads_;
};

}  // namespace dsync::consumer
