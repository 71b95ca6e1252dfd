// `dsync capture` (run the config's captures), `dsync capture resume NAME` and
// `dsync captures` (list them): app/capture_command.cc, docs/capture.md.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "capture/capture_runner.h"
#include "core/clock.h"
#include "storage/connection_pool.h"

#include "app/cli.h"
#include "config/settings.h"
#include "saga/step_handler.h"

namespace dsync::app {

std::vector<CommandSpec> CaptureCommandSpecs();

// The config's captures as a component of a process (`dsync capture`, `dsync all`):
// one CaptureRunner thread per capture. Start() starts them; Stop() (or destruction)
// stops them, each committing what it read and releasing its lease.
class CaptureComponent {
 public:
  // `pool` (the framework database) and `clock` must outlive it.
  CaptureComponent(storage::ConnectionPool& pool, const Settings& s, Clock& clock);
  ~CaptureComponent();
  void Start();
  void Stop();
  const std::string& holder() const { return holder_; }
  size_t size() const { return runners_.size(); }
  // Each capture's name and its reader's counters (for /metrics).
  std::vector<std::pair<std::string, const capture::RunnerStats*>> Stats() const;
  // Database connections the component uses at most.
  static int Connections(const Settings& s) { return static_cast<int>(s.captures.size()) * 2; }

 private:
  std::string holder_;
  std::vector<std::unique_ptr<capture::CaptureRunner>> runners_;
  std::vector<std::jthread> threads_;
};

// `capture`: runs every capture of the config until SIGTERM/SIGINT (exit 0); a
// preflight refusal at start is one line and exit 1. `capture resume NAME`.
int RunCapture(const Invocation& inv);
// `captures`: each capture's state, position, lag, counters, paused tables, error.
int RunCaptures(const Invocation& inv);

// A node's plans and registry gain the capture topic and its step when the config
// has captures (a node applies captured changes).
std::map<std::string, TopicSettings> WithCaptureTopic(std::map<std::string, TopicSettings> topics, const Settings& s);
saga::StepRegistry WithCaptureStep(saga::StepRegistry registry, const Settings& s);
// A node serving a list of topics serves the capture topic too (when there are captures).
std::vector<std::string> ServingCaptureTopic(std::vector<std::string> topics, const Settings& s);

}  // namespace dsync::app
