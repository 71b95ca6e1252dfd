// Test support: a real HTTP/1.1 receiver on 127.0.0.1 (a port the kernel picks), for the
// http step type's tests. Each request is recorded; the reply is what the test's
// handler returns, including hostile ones (never answering, one byte at a time,
// endless bodies, redirect loops, raw bytes).
//
//   testing::HttpReceiver rx([](const testing::HttpReceiver::Request& r) {
//     return testing::HttpReceiver::Reply{.status = 200, .body = R"({"ok":true})"};
//   });
//   std::string url = rx.Url("/hook");
//   ... rx.requests() ...
//
// Thread safety: one thread per connection; requests() and the handler's captures must
// be thread-safe (requests() copies under a lock).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dsync::testing {

class HttpReceiver {
 public:
  struct Request {
    std::string method, target, body;
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
    std::string Header(const std::string& lower) const {
      for (const auto& [k, v] : headers) if (k == lower) return v;
      return "";
    }
  };
  struct Reply {
    enum class Mode {
      kNormal,        // status, headers, body, Content-Length
      kNeverAnswer,   // read the request, then say nothing until the receiver stops
      kSlowBytes,     // the whole normal answer, one byte every `byte_interval`
      kEndless,       // headers with Content-Length: 10 GB, then zeros until the peer goes
      kEndlessChunked,// chunked, 64 KiB chunks of zeros for ever
      kRaw,           // `body` written as it is (no status line added), then close
    };
    int status = 200;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    Mode mode = Mode::kNormal;
    std::chrono::milliseconds byte_interval{100};

    static Reply Answer(int status, std::string body = "",
                        std::vector<std::pair<std::string, std::string>> headers = {}) {
      Reply r;
      r.status = status;
      r.body = std::move(body);
      r.headers = std::move(headers);
      return r;
    }
    static Reply InMode(Mode mode, std::string body = "", std::chrono::milliseconds byte_interval = std::chrono::milliseconds(100)) {
      Reply r;
      r.mode = mode;
      r.body = std::move(body);
      r.byte_interval = byte_interval;
      return r;
    }
  };
  using Handler = std::function<Reply(const Request&)>;

  explicit HttpReceiver(Handler handler);
  ~HttpReceiver();  // stops: closes the listener, ends every connection, joins
  HttpReceiver(const HttpReceiver&) = delete;
  HttpReceiver& operator=(const HttpReceiver&) = delete;

  int port() const { return port_; }
  std::string Url(const std::string& target) const { return "http://127.0.0.1:" + std::to_string(port_) + target; }
  std::vector<Request> requests() const;
  // Bytes the kEndless modes wrote so far (what the client read, or was offered).
  uint64_t endless_bytes() const { return endless_bytes_.load(); }
  // Connections still open (a client that went away closes its side).
  int open_connections() const { return open_.load(); }

 private:
  void Accept();
  void Serve(int fd);

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> endless_bytes_{0};
  std::atomic<int> open_{0};
  mutable std::mutex mu_;
  std::vector<Request> requests_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace dsync::testing
