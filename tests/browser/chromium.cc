#include "tests/browser/chromium.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <Poco/Base64Decoder.h>
#include <Poco/Buffer.h>
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/NetException.h>
#include <Poco/Net/WebSocket.h>
#include <Poco/StreamCopier.h>

namespace dsync::testing {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::string HttpGet(uint16_t port, const std::string& path) {
  Poco::Net::HTTPClientSession s("127.0.0.1", port);
  s.setTimeout(Poco::Timespan(5, 0));
  Poco::Net::HTTPRequest req(Poco::Net::HTTPRequest::HTTP_GET, path, Poco::Net::HTTPMessage::HTTP_1_1);
  s.sendRequest(req);
  Poco::Net::HTTPResponse resp;
  std::string body;
  Poco::StreamCopier::copyToString(s.receiveResponse(resp), body);
  return body;
}

}  // namespace

Chromium::Chromium() {
  char tmpl[] = "/tmp/dsync-chromium.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  profile_ = tmpl;
  const char* env = std::getenv("DSYNC_CHROMIUM");
  const std::string binary = env && *env ? env : "/usr/bin/chromium";
  std::vector<std::string> args = {binary,
                                   "--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--disable-quic",
                                   "--no-first-run",
                                   "--disable-background-networking",
                                   "--disable-component-update",
                                   "--disable-sync",
                                   "--disable-extensions",
                                   "--disable-dev-shm-usage",
                                   "--remote-debugging-address=127.0.0.1",
                                   "--remote-debugging-port=0",
                                   "--user-data-dir=" + profile_,
                                   "--window-size=1280,800",
                                   "about:blank"};
  const std::string log = profile_ + "/chromium.log";
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);  // its own group: the helpers it forks go with it
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  // Chromium writes the port it chose (and the browser target's path) into the profile.
  uint16_t port = 0;
  for (int i = 0; i < 300 && port == 0; ++i) {
    std::ifstream f(profile_ + "/DevToolsActivePort");
    int p = 0;
    if (f >> p && p > 0) port = static_cast<uint16_t>(p);
    else std::this_thread::sleep_for(100ms);
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;
      std::ifstream l(log);
      std::stringstream text;
      text << l.rdbuf();
      throw std::runtime_error("chromium exited at start: " + text.str().substr(0, 2000));
    }
  }
  if (port == 0) throw std::runtime_error("chromium did not open its DevTools port in 30 s");
  std::string ws_path;
  for (int i = 0; i < 50 && ws_path.empty(); ++i) {
    for (const auto& t : json::parse(HttpGet(port, "/json/list"))) {
      if (t.value("type", "") == "page") {
        const std::string url = t.value("webSocketDebuggerUrl", "");
        ws_path = url.substr(url.find('/', std::string("ws://").size()));
        break;
      }
    }
    if (ws_path.empty()) std::this_thread::sleep_for(100ms);
  }
  if (ws_path.empty()) throw std::runtime_error("chromium has no page target");
  session_ = std::make_unique<Poco::Net::HTTPClientSession>("127.0.0.1", port);
  Poco::Net::HTTPRequest req(Poco::Net::HTTPRequest::HTTP_GET, ws_path, Poco::Net::HTTPMessage::HTTP_1_1);
  Poco::Net::HTTPResponse resp;
  ws_ = std::make_unique<Poco::Net::WebSocket>(*session_, req, resp);
  ws_->setMaxPayloadSize(64 << 20);
  ws_->setReceiveTimeout(Poco::Timespan(30, 0));
  Call("Runtime.enable");
  Call("Page.enable");
  Call("Emulation.setDeviceMetricsOverride",
       {{"width", 1280}, {"height", 800}, {"deviceScaleFactor", 1}, {"mobile", false}});
}

Chromium::~Chromium() {
  try {
    if (ws_) ws_->close();
  } catch (...) {
  }
  if (pid_ > 0) {
    kill(-pid_, SIGTERM);
    int status = 0;
    bool gone = false;
    for (int i = 0; i < 50 && !gone; ++i) {
      gone = waitpid(pid_, &status, WNOHANG) == pid_;
      if (!gone) std::this_thread::sleep_for(100ms);
    }
    if (!gone) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
  }
  std::error_code ec;
  if (!profile_.empty()) std::filesystem::remove_all(profile_, ec);
}

json Chromium::Receive(int id) {
  Poco::Buffer<char> buffer(0);
  for (;;) {
    buffer.resize(0);
    int flags = 0;
    do {  // a message may come in fragments; the last has FIN
      const int n = ws_->receiveFrame(buffer, flags);
      if (n <= 0 && flags == 0) throw std::runtime_error("the DevTools connection closed");
    } while ((flags & Poco::Net::WebSocket::FRAME_FLAG_FIN) == 0);
    json msg = json::parse(std::string(buffer.begin(), buffer.size()), nullptr, false);
    if (msg.is_discarded()) continue;
    if (msg.contains("id") && msg["id"] == id) {
      if (msg.contains("error")) throw std::runtime_error("DevTools error: " + msg["error"].dump());
      return msg.value("result", json::object());
    }
    const std::string method = msg.value("method", "");
    if (method == "Runtime.exceptionThrown") {
      errors_.push_back("exception: " + msg["params"]["exceptionDetails"].dump().substr(0, 500));
    } else if (method == "Runtime.consoleAPICalled" && msg["params"].value("type", "") == "error") {
      errors_.push_back("console.error: " + msg["params"]["args"].dump().substr(0, 500));
    } else if (method == "Page.javascriptDialogOpening") {
      // The console asks in its own <dialog>; a native alert/confirm is a bug (or an attack).
      errors_.push_back("native dialog: " + msg["params"].dump().substr(0, 500));
      const std::string dismiss =
          json{{"id", next_id_++}, {"method", "Page.handleJavaScriptDialog"}, {"params", {{"accept", false}}}}.dump();
      ws_->sendFrame(dismiss.data(), static_cast<int>(dismiss.size()), Poco::Net::WebSocket::FRAME_TEXT);
    }
  }
}

json Chromium::Call(const std::string& method, const json& params) {
  const int id = next_id_++;
  const std::string text = json{{"id", id}, {"method", method}, {"params", params}}.dump();
  ws_->sendFrame(text.data(), static_cast<int>(text.size()), Poco::Net::WebSocket::FRAME_TEXT);
  return Receive(id);
}

void Chromium::Navigate(const std::string& url) { Call("Page.navigate", {{"url", url}}); }

json Chromium::Eval(const std::string& expression) {
  json r = Call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}});
  if (r.contains("exceptionDetails")) {
    throw std::runtime_error("evaluating `" + expression + "` threw: " + r["exceptionDetails"].dump().substr(0, 500));
  }
  return r["result"].value("value", json(nullptr));
}

bool Chromium::WaitFor(const std::string& expression, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    json v;
    try {
      v = Eval("!!(" + expression + ")");
    } catch (const std::runtime_error&) {
      v = false;  // e.g. the page is between two documents
    }
    if (v == true) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
}

void Chromium::Screenshot(const std::string& png_path) {
  json r = Call("Page.captureScreenshot", {{"format", "png"}});
  std::istringstream in(r.value("data", ""));
  Poco::Base64Decoder decoder(in);
  std::ofstream out(png_path, std::ios::binary);
  out << decoder.rdbuf();
  if (!out) throw std::runtime_error("cannot write " + png_path);
}

}  // namespace dsync::testing
