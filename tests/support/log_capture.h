// Test support: routes the default spdlog logger into a string for the lifetime of a
// LogCapture, so a test can assert on the one-line log events (codes such as
// EVENT_RESET) that the code under test wrote.
//
// Thread safety: the sink is thread-safe (threads of the code under test may log);
// construct and destroy it on the test's thread, with no other LogCapture alive.
#pragma once

#include <memory>
#include <sstream>
#include <string>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

namespace dsync::testing {

class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("capture", sink);
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Everything logged so far.
  std::string text() {
    spdlog::default_logger()->flush();
    return out_.str();
  }
  // How often `needle` occurs in text().
  int Count(const std::string& needle) {
    const std::string t = text();
    int n = 0;
    for (auto pos = t.find(needle); pos != std::string::npos; pos = t.find(needle, pos + 1)) ++n;
    return n;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace dsync::testing
