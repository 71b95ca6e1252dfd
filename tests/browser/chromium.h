// A headless Chromium (Debian's /usr/bin/chromium, or DSYNC_CHROMIUM) driven over the
// DevTools protocol with Poco's WebSocket client: nothing is downloaded, no driver
// package is needed. For the console's browser tests.
//
//   testing::Chromium browser;                        // starts it (fresh profile, loopback)
//   browser.Navigate("http://127.0.0.1:8080/#/overview");
//   browser.WaitFor("document.body.dataset.view === 'overview'");
//   json v = browser.Eval("document.title");
//   browser.Screenshot("overview.png");
//
// Flags: --headless --no-sandbox (the tests run as root) --disable-gpu --disable-quic
// --no-first-run --disable-background-networking --disable-component-update
// --disable-sync, --remote-debugging-port=0 on 127.0.0.1, a temporary --user-data-dir.
// The process is killed (by its pid) and the profile removed when the object goes.
//
// Thread safety: one thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace Poco::Net {
class HTTPClientSession;
class WebSocket;
}  // namespace Poco::Net

namespace dsync::testing {

class Chromium {
 public:
  Chromium();  // throws std::runtime_error when it cannot start or be reached
  ~Chromium();
  Chromium(const Chromium&) = delete;
  Chromium& operator=(const Chromium&) = delete;

  // One DevTools command on the page; returns its result, throws on a protocol error.
  nlohmann::json Call(const std::string& method, const nlohmann::json& params = nlohmann::json::object());
  void Navigate(const std::string& url);
  // The value of a JavaScript expression (promises awaited); throws when it throws.
  nlohmann::json Eval(const std::string& expression);
  // Polls `expression` until it is truthy; false after `timeout`.
  bool WaitFor(const std::string& expression, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
  void Screenshot(const std::string& png_path);

  // Uncaught exceptions and console errors seen on the page so far (one line each).
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  nlohmann::json Receive(int id);

  int pid_ = 0;
  std::string profile_;
  std::unique_ptr<Poco::Net::HTTPClientSession> session_;
  std::unique_ptr<Poco::Net::WebSocket> ws_;
  int next_id_ = 1;
  std::vector<std::string> errors_;
};

}  // namespace dsync::testing
