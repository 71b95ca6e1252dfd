// DatasourceProber (consumer/datasource_prober.h) with an injected check: each
// datasource is checked on its own thread, so one that hangs delays neither the
// others' results nor a reader of the snapshot; changes are reported; errors are one
// masked line.
#include "consumer/datasource_prober.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/eventually.h"

namespace dsync::consumer {
namespace {

using namespace std::chrono_literals;

// Polls `cond` every 2 ms for up to 5 s (the checks run on their own threads).
template <class F>
bool Eventually(F cond) {
  return testing::Eventually(cond, 5s, 2ms);
}

// A check that blocks until released, then fails or succeeds as told.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  bool fail = true;
  void Wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return open; });
    if (fail) throw std::runtime_error("Can't connect to mysql://u:secret@10.0.0.9:3306/env_c\n(timeout)");
  }
  void Release(bool should_fail) {
    {
      std::lock_guard lock(mu);
      open = true;
      fail = should_fail;
    }
    cv.notify_all();
  }
};

TEST(DatasourceProberTest, HangingDatasourceDelaysNeitherTheOthersNorTheSnapshot) {
  SystemClock clock;
  Gate gate;
  std::atomic<int> changes{0};
  std::atomic<bool> env_b_up{false};
  DatasourceProber prober(
      {{"env_a", "mysql://a"}, {"env_b", "mysql://b"}, {"env_c", "mysql://c"}}, Millis(20), clock,
      [&](const std::string& name, const std::string&) {
        if (name == "env_c") gate.Wait();
        if (name == "env_b" && !env_b_up) throw std::runtime_error("refused");
      },
      [&] { ++changes; });

  // Nothing checked yet: nothing reached, no error either.
  EXPECT_TRUE(prober.snapshot().reachable.empty());
  EXPECT_TRUE(prober.snapshot().errors.empty());

  prober.Start();
  ASSERT_TRUE(Eventually([&] { return prober.snapshot().reachable.size() == 1 && prober.snapshot().errors.size() == 1; }));
  DatasourceSnapshot s = prober.snapshot();  // env_c still hangs: neither reached nor failed
  EXPECT_EQ(s.reachable, std::vector<std::string>{"env_a"});
  EXPECT_EQ(s.errors.at("env_b"), "refused");
  EXPECT_EQ(s.errors.count("env_c"), 0u);
  ASSERT_TRUE(Eventually([&] { return changes.load() == 2; }));

  // env_b comes back at a later periodic check; reported as a change.
  env_b_up = true;
  ASSERT_TRUE(Eventually([&] { return prober.snapshot().reachable.size() == 2; }));
  EXPECT_EQ(prober.snapshot().reachable, (std::vector<std::string>{"env_a", "env_b"}));
  ASSERT_TRUE(Eventually([&] { return changes.load() == 3; }));

  // The hanging check fails at last: one line, password masked.
  gate.Release(/*should_fail=*/true);
  ASSERT_TRUE(Eventually([&] { return prober.snapshot().errors.count("env_c") == 1; }));
  const std::string err = prober.snapshot().errors.at("env_c");
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  EXPECT_EQ(err.find("secret"), std::string::npos) << err;
  EXPECT_NE(err.find("10.0.0.9"), std::string::npos) << err;
  // That was the fourth change (reported just after the snapshot shows it); unchanged
  // results report none however often they are checked (every 20 ms here).
  ASSERT_TRUE(Eventually([&] { return changes.load() == 4; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(changes.load(), 4);
  prober.Stop();
}

TEST(DatasourceProberTest, ConnectProbeFailsFastOnAClosedPortAndRejectsABadUrl) {
  // Port 1 on loopback: nothing listens, the connect is refused at once.
  auto start = std::chrono::steady_clock::now();
  EXPECT_ANY_THROW(ConnectProbe("x", "mysql://u:p@127.0.0.1:1/db?connect_timeout_ms=2000"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_ANY_THROW(ConnectProbe("x", "not a url"));
}

}  // namespace
}  // namespace dsync::consumer
