// How the HTTP API's connections are served (api/http_server.h is what it serves).
//
// Poco's HTTPServer gives each connection a pool thread from its first byte to its
// last, with a per-recv() timeout: 20 idle connections delayed /healthz by 30 s, and a
// client sending one header byte every few seconds held a thread forever. Here one I/O
// thread poll()s every connection that is not being answered and reads each request
// whole under deadlines that cover a whole phase, not one recv():
//
//   idle    keep-alive (or before the first byte): idle_timeout, then closed silently
//   head    request line and headers, from their first byte: header_timeout, then 408
//   body    from the end of the head: body_timeout, then 408
//
// Only a complete request reaches a worker (`threads` of them, a bounded queue in
// front), so slow or idle clients cost a file descriptor and a buffer, never a thread.
// A worker writes its answer itself (each write bounded by write_timeout) and hands a
// keep-alive connection back to the I/O thread. An event stream keeps its worker for
// as long as it runs; no read deadline applies once the answer started.
//
// Decided on the I/O thread, before any body is read: malformed heads (400, 431, 501,
// 505), a POST/PUT/PATCH without Content-Length and not chunked (411), Content-Length
// over max_body_bytes (413), and whatever the service's Screen() refuses (Host,
// token, route, method, media type). A refused request that announced a body is
// answered and its connection closed: its body is never read (the socket discards at
// most kLingerBytes for at most kLingerTime after the answer, so that the client sees
// the answer rather than a reset).
//
// Past max_connections, a new connection evicts the one idle the longest (or, with
// none idle, the oldest still sending its head); with none of those it is closed.
//
// Thread safety: Start/Stop from one controlling thread; the service's Screen runs on
// the I/O thread, Serve on the workers, concurrently with each other.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/http_wire.h"
#include "core/clock.h"

namespace dsync::api {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// A whole answer. Content-Length and Connection are added when it is sent.
struct HttpReply {
  HttpReply() = default;
  HttpReply(int status, std::string body, std::string content_type = "application/json")
      : status(status), body(std::move(body)), content_type(std::move(content_type)) {}
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  HttpHeaders headers;
};

// A request read whole.
struct HttpRequest {
  HttpRequestHead head;
  std::string body;  // chunked bodies decoded
};

struct HttpConnectionOptions {
  int threads = 16;                          // workers: requests answered at once
  int max_queued = 256;                      // complete requests waiting for a worker; then 503
  int max_connections = 1024;                // open connections; then the longest idle is closed
  int64_t max_body_bytes = 1048576;          // larger bodies: 413
  size_t max_header_bytes = 16384;           // request line and headers; larger: 431
  std::chrono::milliseconds idle_timeout{10000};    // keep-alive, and before the first byte
  std::chrono::milliseconds header_timeout{10000};  // request line and headers, whole
  std::chrono::milliseconds body_timeout{30000};    // the body, whole
  std::chrono::milliseconds write_timeout{10000};   // one answer (one stream write), whole
};

// Counters of the connection layer (dsync_http_connections*, api/http_metrics.cc).
struct HttpConnectionStats {
  std::atomic<int> open{0};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> timed_out_idle{0};
  std::atomic<uint64_t> timed_out_head{0};
  std::atomic<uint64_t> timed_out_body{0};
  std::atomic<uint64_t> evicted{0};    // closed to make room (max_connections)
  std::atomic<uint64_t> refused{0};    // answered on the I/O thread (4xx/5xx) before a worker saw them
};

// A worker's way to answer one request.
class HttpResponder {
 public:
  // Sends a whole answer. False when the client is gone or stalled past write_timeout.
  bool Send(const HttpReply& reply);
  // A chunked answer written piece by piece (event streams): Begin, Write..., End.
  // The connection closes afterwards.
  bool Begin(int status, const std::string& content_type, const HttpHeaders& headers);
  bool Write(std::string_view data);  // one chunk; false when the client is gone
  void End();                         // the last chunk
  bool started() const { return started_; }
  // Close the connection after this answer even if the client would keep it.
  void Close() { keep_alive_ = false; }

 private:
  friend class HttpConnections;
  HttpResponder(int fd, bool keep_alive, std::chrono::milliseconds write_timeout, Clock& clock)
      : fd_(fd), keep_alive_(keep_alive), write_timeout_(write_timeout), clock_(clock) {}
  bool WriteAll(std::string_view data);

  int fd_;
  bool keep_alive_;
  std::chrono::milliseconds write_timeout_;
  Clock& clock_;
  bool started_ = false;
  bool chunked_ = false;
  bool failed_ = false;
};

// What the connections serve.
class HttpService {
 public:
  virtual ~HttpService() = default;
  // On the I/O thread once the head is read, before the body: nullopt to read the body
  // and Serve it, or the answer that refuses it. Must not block (no database).
  virtual std::optional<HttpReply> Screen(const HttpRequestHead& head) = 0;
  // On a worker, with the whole request.
  virtual void Serve(HttpRequest& request, HttpResponder& out) = 0;
  // An answer the connection layer gave by itself (malformed, 408, 411, 413, 503), for
  // metrics; on the I/O thread.
  virtual void Refused(const HttpRequestHead* head, int status) = 0;
};

class HttpConnections {
 public:
  // Every phase deadline and write deadline is read on `clock` (the server's). With a
  // fake clock a deadline passes when the clock is advanced: the I/O thread looks at
  // the clock at least once a second (real time), so it sees it within a second.
  // `service`, `stats` and `clock` must outlive the connections.
  HttpConnections(HttpService& service, HttpConnectionOptions options, HttpConnectionStats& stats, Clock& clock);
  ~HttpConnections();  // Stop()s
  HttpConnections(const HttpConnections&) = delete;
  HttpConnections& operator=(const HttpConnections&) = delete;

  // Serves `listen_fd` (bound and listening; owned from now on). Once only.
  void Start(int listen_fd);
  // Closes the listening socket and every connection not being answered; running
  // answers finish (streams must be ended by the service), then the workers exit.
  // Idempotent.
  void Stop();

 private:
  struct Connection;
  void IoLoop();
  void WorkerLoop();
  // False when accept() ran out of descriptors (accepting pauses briefly).
  bool Accept(Clock::TimePoint now);
  // Both true when the connection went to a worker (the I/O thread must not touch it).
  bool OnReadable(Connection& c, Clock::TimePoint now);
  bool Advance(Connection& c, Clock::TimePoint now);
  void Refuse(Connection& c, const HttpReply& reply, bool close, Clock::TimePoint now);
  void Expire(Connection& c, Clock::TimePoint now);
  void Wake();

  HttpService& service_;
  const HttpConnectionOptions options_;
  HttpConnectionStats& stats_;
  Clock& clock_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  std::thread io_thread_;
  std::vector<std::thread> workers_;
  std::vector<std::unique_ptr<Connection>> connections_;  // I/O thread only

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<std::unique_ptr<Connection>> queue_;     // complete requests for the workers
  std::vector<std::unique_ptr<Connection>> returned_; // keep-alive connections back from workers
  bool workers_stop_ = false;
  int in_workers_ = 0;  // connections a worker holds or will hold (queue_ included)
};

}  // namespace dsync::api
