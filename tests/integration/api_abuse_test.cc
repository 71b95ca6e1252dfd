// The HTTP API under hostile and careless clients (issue 34), with real sockets against
// a real server on a real MariaDB: idle and slowloris connections do not delay anyone
// else; a POST without Content-Length is answered at once (411); a huge Content-Length
// is refused and its connection closed without its body being read; whole-phase
// deadlines cut a client that trickles; a foreign Host header is refused when no token
// is set (DNS rebinding); node errors shown without a token name no host, port, user
// or schema.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/options.h"
#include "api/event_store.h"
#include "api/http_server.h"
#include "tests/support/fake_clock.h"
#include "tests/support/saga_fixtures.h"
#include "tests/support/test_db.h"

namespace dsync::api {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

Settings TestSettings() {
  Settings s;
  s.service = "abuse-test";
  testing::AddDemoAndOtherTopics(s, /*max_retry=*/2, /*backoff_base=*/50ms, /*backoff_max=*/100ms);
  return s;
}

// A plain TCP client: what it sends is exactly what the test writes.
class Raw {
 public:
  explicit Raw(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Raw() {
    if (fd_ >= 0) ::close(fd_);
  }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;

  bool connected() const { return connected_; }
  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads until one whole response (head + Content-Length body) came, the peer closed,
  // or `timeout` passed. "" when nothing came.
  std::string ReadResponse(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const size_t head_end = buffer_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        size_t length = 0;
        const size_t cl = buffer_.find("Content-Length: ");
        if (cl != std::string::npos && cl < head_end) length = std::stoul(buffer_.substr(cl + 16));
        if (buffer_.size() >= head_end + 4 + length) {
          std::string out = buffer_.substr(0, head_end + 4 + length);
          buffer_.erase(0, head_end + 4 + length);
          return out;
        }
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return "";
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) return "";
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        std::string out = buffer_;
        buffer_.clear();
        return out;
      }
      buffer_.append(buf, static_cast<size_t>(n));
    }
  }
  // True when the server closed its side within `timeout` (recv returns 0 or an error).
  bool ClosedWithin(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

int StatusOf(const std::string& response) {
  if (response.size() < 12 || response.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::stoi(response.substr(9, 3));
}

std::string BodyOf(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

std::string Request(const std::string& method, const std::string& path, const std::string& host,
                    const std::optional<std::string>& body = std::nullopt, const std::string& extra = "") {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\n" + extra;
  if (body) r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body->size()) + "\r\n";
  r += "\r\n";
  if (body) r += *body;
  return r;
}

json Event(const std::string& code) {
  return {{"code", code}, {"topic", "DEMO"}, {"tenant_id", "t1"}, {"data_id", "d-" + code}, {"payload", json::object()}};
}

class ApiAbuseTest : public ::testing::Test {
 protected:
  ApiAbuseTest() : settings_(TestSettings()), store_(db_.pool(), app::StoreOptionsFrom(settings_)) {}
  ~ApiAbuseTest() override {
    if (server_) server_->Stop();
  }

  HttpOptions Options() {
    HttpOptions o;
    o.listen = "127.0.0.1:0";
    o.connection.max_body_bytes = 64 * 1024;
    o.connection.threads = 6;
    return o;
  }
  void StartServer(HttpOptions o, dsync::Clock* clock = nullptr) {
    server_ = std::make_unique<HttpServer>(store_, std::move(o), clock != nullptr ? *clock : clock_);
    server_->Start();
    ASSERT_GT(server_->port(), 0);
  }
  std::string Host() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  // One request on a fresh connection; the whole response ("" on timeout).
  std::string Call(const std::string& request, std::chrono::milliseconds timeout = 5000ms) {
    Raw c(server_->port());
    if (!c.connected() || !c.Send(request)) return "";
    return c.ReadResponse(timeout);
  }
  int64_t Count() { return db_.QueryInt("SELECT COUNT(*) FROM distribute_event"); }

  testing::TestSchema db_;
  Settings settings_;
  EventStore store_;
  SystemClock clock_;  // before server_: it outlives the server
  FakeClock fake_;     // the same: a test's server may run on it
  std::unique_ptr<HttpServer> server_;
};

// 200 idle connections and 50 that send their head one byte at a time: /healthz still
// answers quickly and event POSTs still work. (Poco's server: /healthz waited for a
// thread for 30 s.)
TEST_F(ApiAbuseTest, IdleAndSlowlorisConnectionsDelayNobody) {
  StartServer(Options());
  std::vector<std::unique_ptr<Raw>> idle, slow;
  for (int i = 0; i < 200; ++i) {
    idle.push_back(std::make_unique<Raw>(server_->port()));
    ASSERT_TRUE(idle.back()->connected());
  }
  const std::string slow_head = "POST /v1/events HTTP/1.1\r\nHost: " + Host() + "\r\nX-Slow: ";
  for (int i = 0; i < 50; ++i) {
    slow.push_back(std::make_unique<Raw>(server_->port()));
    ASSERT_TRUE(slow.back()->connected());
    slow.back()->Send(slow_head);
  }
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    while (!done) {
      for (auto& s : slow) s->Send("a");
      std::this_thread::sleep_for(200ms);
    }
  });

  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = Clock::now();
    const std::string r = Call(Request("GET", "/healthz", Host()), 5000ms);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    EXPECT_EQ(StatusOf(r), 200) << r;
    const std::string p = Call(Request("POST", "/v1/events", Host(), Event("slow-" + std::to_string(i)).dump()));
    EXPECT_EQ(StatusOf(p), 201) << p;
  }
  done = true;
  trickle.join();
  std::sort(ms.begin(), ms.end());
  // The target is 100 ms; 1 s leaves room for a loaded test machine and still fails on
  // a server that gives each connection a thread.
  EXPECT_LT(ms.back(), 1000.0) << "median " << ms[ms.size() / 2] << " ms";
  EXPECT_EQ(Count(), 20);
  EXPECT_GE(server_->stats().connections.open.load(), 250);
}

// Deadlines cover a whole phase: a client that sends a head byte every 100 ms is cut at
// header_timeout (with a 408), not kept alive by each byte; an idle connection closes
// at idle_timeout; a body that stalls closes at body_timeout.
TEST_F(ApiAbuseTest, WholePhaseDeadlinesCutTricklingAndIdleClients) {
  HttpOptions o = Options();
  o.connection.idle_timeout = 500ms;
  o.connection.header_timeout = 1000ms;
  o.connection.body_timeout = 1000ms;
  StartServer(o);

  Raw idle(server_->port());
  const auto t0 = Clock::now();
  EXPECT_TRUE(idle.ClosedWithin(3000ms));
  EXPECT_LT(Clock::now() - t0, 2000ms);

  Raw trickle(server_->port());
  const std::string head = "GET /healthz HTTP/1.1\r\nHost: " + Host() + "\r\nX-Slow: " + std::string(100, 'a');
  const auto t1 = Clock::now();
  std::string got;
  for (char c : head) {
    if (!trickle.Send(std::string(1, c))) break;
    pollfd p{trickle.fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) break;  // the server answered (408) or closed
  }
  got = trickle.ReadResponse(2000ms);
  const auto cut_after = Clock::now() - t1;
  EXPECT_EQ(StatusOf(got), 408) << got;
  EXPECT_LT(cut_after, 2500ms);
  EXPECT_GE(cut_after, 900ms);

  Raw stall(server_->port());
  stall.Send("POST /v1/events HTTP/1.1\r\nHost: " + Host() +
             "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"code\":");
  const std::string r = stall.ReadResponse(3000ms);
  EXPECT_EQ(StatusOf(r), 408) << r;
  EXPECT_TRUE(stall.ClosedWithin(2000ms));
  EXPECT_GE(server_->stats().connections.timed_out_idle.load(), 1u);
  EXPECT_GE(server_->stats().connections.timed_out_head.load(), 1u);
  EXPECT_GE(server_->stats().connections.timed_out_body.load(), 1u);
  EXPECT_EQ(Count(), 0);
}

// The phase deadlines are read on the server's clock (issue 39 item 3): with a fake
// clock and a head deadline of a minute, a client that keeps sending head bytes gets
// no answer while the fake clock stays short of the deadline, and a 408 once the clock
// is advanced past it, within seconds of real time (on the real clock it would take a
// minute, and the loop below gives up long before). Nothing sleeps through a deadline:
// each byte wakes the I/O thread, which reads the clock again.
TEST_F(ApiAbuseTest, AHeadPastItsDeadlineOnTheServersClockGets408) {
  HttpOptions o = Options();
  o.connection.idle_timeout = 3600000ms;
  o.connection.header_timeout = 60000ms;
  StartServer(o, &fake_);

  Raw c(server_->port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send("GET /healthz HTTP/1.1\r\nHost: " + Host() + "\r\nX-Slow: a"));
  // Short of the deadline (at most 55 s after the head's first byte): no answer.
  Millis advanced{0};
  for (int i = 0; i < 11; ++i) {
    fake_.Advance(5000ms);
    advanced += 5000ms;
    ASSERT_TRUE(c.Send("a"));
    const std::string early = c.ReadResponse(50ms);
    ASSERT_EQ(early, "") << "answered " << advanced.count() << " ms (fake) into a 60000 ms head deadline";
  }
  // Past it: 408. (The head's deadline counts from when the I/O thread read its first
  // byte, which may be a step later than it was sent: a few more steps at most.)
  std::string got;
  while (got.empty() && advanced < 120000ms) {
    fake_.Advance(5000ms);
    advanced += 5000ms;
    if (!c.Send("a")) break;  // closed: the answer is waiting to be read
    got = c.ReadResponse(1500ms);
  }
  if (got.empty()) got = c.ReadResponse(1500ms);
  EXPECT_EQ(StatusOf(got), 408) << got;
  EXPECT_NE(BodyOf(got).find("took longer than 60000 ms"), std::string::npos) << got;
  EXPECT_GE(advanced, 60000ms);
  EXPECT_EQ(server_->stats().connections.timed_out_head.load(), 1u);
}

// A POST without Content-Length (and not chunked) is answered at once with 411, not
// after the socket timeout.
TEST_F(ApiAbuseTest, PostWithoutContentLengthIs411AtOnce) {
  StartServer(Options());
  Raw c(server_->port());
  const auto t0 = Clock::now();
  c.Send("POST /v1/events HTTP/1.1\r\nHost: " + Host() + "\r\nContent-Type: application/json\r\n\r\n");
  const std::string r = c.ReadResponse(2000ms);
  EXPECT_EQ(StatusOf(r), 411) << r;
  EXPECT_LT(Clock::now() - t0, 1000ms);
  EXPECT_NE(BodyOf(r).find("Content-Length"), std::string::npos) << r;
  EXPECT_TRUE(c.ClosedWithin(2000ms));
  EXPECT_EQ(Count(), 0);
}

// A Content-Length over max_body_bytes is refused from the head, and the connection is
// closed: the body the client goes on sending is not read (it meets a closed socket
// long before 64 MiB; Poco's server read all of it).
TEST_F(ApiAbuseTest, HugeContentLengthIsRefusedAndItsBodyNeverRead) {
  StartServer(Options());
  Raw c(server_->port());
  c.Send("POST /v1/events HTTP/1.1\r\nHost: " + Host() +
         "\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n");
  const std::string r = c.ReadResponse(2000ms);
  EXPECT_EQ(StatusOf(r), 413) << r;
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  const std::string block(1 << 20, 'x');
  int64_t sent = 0;
  const auto t0 = Clock::now();
  timeval tv{2, 0};
  ::setsockopt(c.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  while (sent < (64LL << 20) && Clock::now() - t0 < 10s) {
    const ssize_t n = ::send(c.fd(), block.data(), block.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += n;
  }
  EXPECT_LT(sent, 16LL << 20) << "the server went on reading the refused body";
  EXPECT_LT(Clock::now() - t0, 5s);
  // The server is fine.
  EXPECT_EQ(StatusOf(Call(Request("GET", "/healthz", Host()))), 200);
}

// DNS rebinding: with no token, a request whose Host is not a loopback name (or the
// listen host) is refused with 421 before anything runs, a retry POST included.
TEST_F(ApiAbuseTest, ForeignHostIsRefusedWithoutAToken) {
  StartServer(Options());
  const std::string before_post = Call(Request("POST", "/v1/events", Host(), Event("rb-1").dump()));
  ASSERT_EQ(StatusOf(before_post), 201) << before_post;
  store_.pool().Run("fail it", [](storage::Connection& c) {
    return c.Execute("UPDATE distribute_event SET status = 'FAILED' WHERE code = 'rb-1'");
  });
  for (const std::string& host : {std::string("attacker.example"), std::string("attacker.example:") +
                                                                        std::to_string(server_->port()),
                                  std::string("127.0.0.1.attacker.example")}) {
    SCOPED_TRACE(host);
    const std::string get = Call(Request("GET", "/v1/events", host));
    EXPECT_EQ(StatusOf(get), 421) << get;
    EXPECT_TRUE(json::parse(BodyOf(get)).contains("error")) << get;
    EXPECT_EQ(BodyOf(get).find('\n'), std::string::npos);
    EXPECT_EQ(StatusOf(Call(Request("POST", "/v1/events/rb-1/retry", host, std::string("{}")))), 421);
    EXPECT_EQ(StatusOf(Call(Request("POST", "/v1/events", host, Event("rb-2").dump()))), 421);
    EXPECT_EQ(StatusOf(Call(Request("GET", "/", host))), 421);
  }
  EXPECT_EQ(db_.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE code = 'rb-1' AND status = 'FAILED'"), 1);
  EXPECT_EQ(Count(), 1);
  // The loopback names, with any port, are answered.
  for (const std::string& host : {std::string("localhost"), std::string("LOCALHOST:1234"), std::string("127.0.0.1"),
                                  std::string("[::1]:8080")}) {
    EXPECT_EQ(StatusOf(Call(Request("GET", "/healthz", host))), 200) << host;
  }
  // HTTP/1.1 without Host is malformed; no browser sends that.
  EXPECT_EQ(StatusOf(Call("GET /healthz HTTP/1.1\r\n\r\n")), 421);
}

TEST_F(ApiAbuseTest, WithATokenAnyHostUnlessAllowedHostsIsGiven) {
  HttpOptions o = Options();
  o.token = "tok-123";
  StartServer(o);
  const std::string auth = "Authorization: Bearer tok-123\r\n";
  EXPECT_EQ(StatusOf(Call(Request("GET", "/healthz", "dsync.example.org", std::nullopt, auth))), 200);
  server_->Stop();

  o.allowed_hosts = {"dsync.internal"};
  StartServer(o);
  EXPECT_EQ(StatusOf(Call(Request("GET", "/healthz", "dsync.internal:443", std::nullopt, auth))), 200);
  EXPECT_EQ(StatusOf(Call(Request("GET", "/healthz", "attacker.example", std::nullopt, auth))), 421);
  EXPECT_EQ(StatusOf(Call(Request("GET", "/healthz", "localhost", std::nullopt, auth))), 421);
  server_->Stop();

  o.allowed_hosts = {"*"};
  o.token = "";
  StartServer(o);
  EXPECT_EQ(StatusOf(Call(Request("GET", "/healthz", "anything.example"))), 200);
}

// A node's datasource errors name the database host, port, user and schema: without a
// token only the datasource and a class are shown (nodes and overview); with one, all.
TEST_F(ApiAbuseTest, NodeErrorsNameNoHostPortUserOrSchemaWithoutAToken) {
  // As storage/connection.cc words a failed connect: the masked URL, then the driver's text.
  const std::string secret_error =
      "mysql://sync_admin:***@db-7.corp.internal:3307/billing_prod: Can't connect to server on "
      "'db-7.corp.internal' (115)";
  const json metadata = {{"capacity", 4},
                         {"datasources", json::array({"env_a"})},
                         {"datasource_errors", {{"env_b", secret_error},
                                                {"env_c", "Access denied for user 'sync_admin'@'10.1.2.3' (using password: YES)"}}}};
  store_.pool().Run("node row", [&](storage::Connection& c) {
    return c.Execute("INSERT INTO distribute_node_registry (service_name, node_address, status, last_heartbeat_time, "
                     "metadata) VALUES ('abuse-test', '10.0.0.1:1', 1, NOW(3), ?)",
                     metadata.dump());
  });
  // An event whose step failed on an unreachable datasource: its error names the URL.
  const std::string step_error = "step s1: " + secret_error;
  store_.pool().Run("failed event", [&](storage::Connection& c) {
    return c.Execute("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, status, last_error, "
                     "service) VALUES ('t1', 'ds-1', 'd1', 'DEMO', '{}', 'FAILED', ?, 'abuse-test')",
                     step_error);
  });
  auto leaks = [](const std::string& text) {
    for (const char* s : {"db-7", "corp.internal", "3307", "sync_admin", "billing_prod", "10.1.2.3"}) {
      if (text.find(s) != std::string::npos) return std::string(s);
    }
    return std::string();
  };

  StartServer(Options());
  const std::string nodes = Call(Request("GET", "/v1/nodes", Host()));
  ASSERT_EQ(StatusOf(nodes), 200) << nodes;
  EXPECT_EQ(leaks(nodes), "") << nodes;
  const json errors = json::parse(BodyOf(nodes))["nodes"][0]["datasource_errors"];
  EXPECT_EQ(errors["env_b"].get<std::string>().rfind("unreachable", 0), 0u) << errors;
  EXPECT_EQ(errors["env_c"].get<std::string>().rfind("access denied", 0), 0u) << errors;
  const std::string overview = Call(Request("GET", "/v1/overview", Host()));
  ASSERT_EQ(StatusOf(overview), 200) << overview;
  EXPECT_EQ(leaks(overview), "") << overview;
  for (const std::string path : {"/v1/events/ds-1", "/v1/events?code=ds"}) {
    const std::string event = Call(Request("GET", path, Host()));
    ASSERT_EQ(StatusOf(event), 200) << event;
    EXPECT_EQ(leaks(event), "") << event;
    EXPECT_NE(event.find("<database URL>"), std::string::npos) << event;
  }
  server_->Stop();

  HttpOptions o = Options();
  o.token = "tok-9";
  StartServer(o);
  const std::string authed = Call(Request("GET", "/v1/nodes", Host(), std::nullopt, "Authorization: Bearer tok-9\r\n"));
  ASSERT_EQ(StatusOf(authed), 200) << authed;
  EXPECT_NE(authed.find("db-7.corp.internal:3307"), std::string::npos) << authed;
}

// Pipelined keep-alive requests on one connection are all answered, in order.
TEST_F(ApiAbuseTest, KeepAliveAndPipelinedRequestsAreAnswered) {
  StartServer(Options());
  Raw c(server_->port());
  c.Send(Request("GET", "/healthz", Host()) + Request("POST", "/v1/events", Host(), Event("ka-1").dump()) +
         Request("GET", "/nope", Host()) + Request("GET", "/v1/events/ka-1", Host()));
  EXPECT_EQ(StatusOf(c.ReadResponse(3000ms)), 200);
  EXPECT_EQ(StatusOf(c.ReadResponse(3000ms)), 201);
  EXPECT_EQ(StatusOf(c.ReadResponse(3000ms)), 404);
  const std::string got = c.ReadResponse(3000ms);
  EXPECT_EQ(StatusOf(got), 200) << got;
  EXPECT_EQ(json::parse(BodyOf(got))["code"], "ka-1");
}

}  // namespace
}  // namespace dsync::api
