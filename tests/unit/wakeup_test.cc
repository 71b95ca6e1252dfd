// Wake-ups (core/wakeup.h): the rate limit with a FakeClock (no sleeping), address
// parsing, the lease-owner encoding (dispatcher/dispatcher_waker.h), and the UDP
// listener and sender over real loopback sockets.
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/clock.h"
#include "core/wakeup.h"
#include "dispatcher/dispatcher_waker.h"
#include "tests/support/eventually.h"
#include "tests/support/fake_clock.h"

namespace dsync::wakeup {
namespace {

using namespace std::chrono_literals;

TEST(WakeLimiterTest, AfterAWastedWakeUpOnlyOneActsPerGap) {
  FakeClock clock;
  WakeLimiter limiter(0ms, 200ms);
  EXPECT_TRUE(limiter.Offer(clock.Now()));
  limiter.Result(false);  // its poll found nothing
  // A flood within the gap: all coalesced into one pending wake-up.
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(limiter.Offer(clock.Now()));
  ASSERT_TRUE(limiter.due().has_value());
  EXPECT_EQ(*limiter.due() - clock.Now(), 200ms);
  clock.Advance(199ms);
  EXPECT_FALSE(limiter.TakeDue(clock.Now()));
  clock.Advance(1ms);
  EXPECT_TRUE(limiter.TakeDue(clock.Now()));
  EXPECT_FALSE(limiter.TakeDue(clock.Now()));  // once
  EXPECT_FALSE(limiter.due().has_value());
}

TEST(WakeLimiterTest, AFloodOverTenSecondsActsAboutOncePerGap) {
  FakeClock clock;
  WakeLimiter limiter(0ms, 200ms);
  int acted = 0;
  for (int ms = 0; ms < 10000; ++ms) {  // one forged datagram per millisecond
    if (limiter.Offer(clock.Now()) || limiter.TakeDue(clock.Now())) {
      ++acted;
      limiter.Result(false);  // the poll it caused found nothing
    }
    clock.Advance(1ms);
  }
  EXPECT_GE(acted, 49);
  EXPECT_LE(acted, 51);
}

TEST(WakeLimiterTest, GenuineWakeUpsWhosePollsFindWorkActAtOnce) {
  FakeClock clock;
  WakeLimiter limiter(0ms, 3000ms);
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(limiter.Offer(clock.Now()));
    limiter.Result(true);
    limiter.Result(false);  // later regular polls finding nothing do not count
    clock.Advance(1500ms);  // a producer every 1.5 s, polls every 3 s: never held back
  }
  EXPECT_TRUE(limiter.Offer(clock.Now()));
  limiter.Result(false);
  clock.Advance(1ms);
  EXPECT_FALSE(limiter.Offer(clock.Now()));  // wasted: now the gap applies
}

TEST(WakeLimiterTest, AFloodDuringItsPollsCausesAtMostOnePollPerGap) {
  // A poller as the node's: an act while a poll runs sets a flag, and one more poll
  // follows it. A forged datagram every ms; each poll takes 5 ms and finds nothing.
  FakeClock clock;
  WakeLimiter limiter(0ms, 1000ms);
  int polls = 0, polling_for = -1;
  bool again = false;
  for (int ms = 0; ms < 10000; ++ms) {
    if (polling_for == 0) {
      limiter.Result(false);
      if (again) {
        again = false;
        ++polls;
        polling_for = 5;
      }
    }
    if (polling_for >= 0) --polling_for;
    if (limiter.Offer(clock.Now()) || limiter.TakeDue(clock.Now())) {
      if (polling_for >= 0) {
        again = true;
      } else {
        ++polls;
        polling_for = 5;
      }
    }
    clock.Advance(1ms);
  }
  EXPECT_EQ(polls, 10);
}

TEST(WakeLimiterTest, AfterNothingAWakeUpDuringAPollWaitsForItsResult) {
  FakeClock clock;
  WakeLimiter limiter(0ms, 1000ms);
  EXPECT_TRUE(limiter.Offer(clock.Now()));
  limiter.Result(false);  // nothing
  clock.Advance(1000ms);
  EXPECT_TRUE(limiter.Offer(clock.Now()));  // a gap later: acts, its poll runs
  clock.Advance(2ms);
  EXPECT_FALSE(limiter.Offer(clock.Now()));  // during that poll: held for its result
  EXPECT_FALSE(limiter.TakeDue(clock.Now()));
  clock.Advance(3ms);
  limiter.Result(true);  // it found work: the held one acts at once
  EXPECT_TRUE(limiter.TakeDue(clock.Now()));
}

TEST(WakeLimiterTest, AfterWorkAWakeUpDuringAPollActsAtOnce) {
  FakeClock clock;
  WakeLimiter limiter(0ms, 1000ms);
  EXPECT_TRUE(limiter.Offer(clock.Now()));
  limiter.Result(true);
  clock.Advance(10ms);
  EXPECT_TRUE(limiter.Offer(clock.Now()));  // its poll runs
  clock.Advance(1ms);
  EXPECT_TRUE(limiter.Offer(clock.Now()));  // during it: acts (the poller folds it)
}

TEST(WakeLimiterTest, AHeldWakeUpWaitsAtMostOneGapForAResultThatNeverComes) {
  FakeClock clock;
  WakeLimiter limiter(0ms, 1000ms);
  EXPECT_TRUE(limiter.Offer(clock.Now()));
  limiter.Result(false);
  clock.Advance(1000ms);
  EXPECT_TRUE(limiter.Offer(clock.Now()));  // no result will come for this one
  clock.Advance(1ms);
  EXPECT_FALSE(limiter.Offer(clock.Now()));
  ASSERT_TRUE(limiter.due().has_value());
  EXPECT_EQ(*limiter.due() - clock.Now(), 999ms);
  clock.Advance(999ms);
  EXPECT_TRUE(limiter.TakeDue(clock.Now()));
}

TEST(WakeLimiterTest, MinGapSpacesActs) {
  FakeClock clock;
  WakeLimiter limiter(5ms, 500ms);
  EXPECT_TRUE(limiter.Offer(clock.Now()));
  limiter.Result(true);
  EXPECT_FALSE(limiter.Offer(clock.Now()));
  clock.Advance(4ms);
  EXPECT_FALSE(limiter.TakeDue(clock.Now()));
  clock.Advance(1ms);
  EXPECT_TRUE(limiter.TakeDue(clock.Now()));
}

TEST(WakeEndpointTest, ParsesHostPortAndRejectsTheRest) {
  auto e = ParseEndpoint("127.0.0.1:7001");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 7001);
  e = ParseEndpoint("[::1]:80");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->port, 80);
  EXPECT_FALSE(ParseEndpoint("host:0"));
  EXPECT_TRUE(ParseEndpoint("host:0", /*allow_port_zero=*/true));
  EXPECT_FALSE(ParseEndpoint("myhost:123456"));  // hostname:pid beyond a port
  EXPECT_FALSE(ParseEndpoint("nocolon"));
  EXPECT_FALSE(ParseEndpoint(":80"));
  EXPECT_FALSE(ParseEndpoint("h:8x"));
  EXPECT_FALSE(ParseEndpoint("[::1]80"));
}

TEST(WakeOwnerTest, TheLeaseOwnerCarriesTheWakeAddress) {
  const std::string owner = dispatcher::WithWakeAddress("host:12:00ff", "127.0.0.1:41234");
  EXPECT_EQ(owner, "host:12:00ff wake=127.0.0.1:41234");
  EXPECT_EQ(dispatcher::WakeAddressOf(owner).value_or(""), "127.0.0.1:41234");
  EXPECT_FALSE(dispatcher::WakeAddressOf("host:12:00ff"));
  EXPECT_FALSE(dispatcher::WakeAddressOf("host:12:00ff wake=garbage"));
  EXPECT_EQ(dispatcher::WithWakeAddress("host:12:00ff", ""), "host:12:00ff");
  const std::string long_owner(180, 'h');
  EXPECT_EQ(dispatcher::WithWakeAddress(long_owner, "127.0.0.1:41234"), long_owner);  // 191 chars max
}

// A raw datagram to `address` (the listener's), as a forger would send it.
void SendRaw(uint16_t port, std::string_view bytes) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  sendto(fd, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  close(fd);
}

uint16_t PortOf(const std::string& address) { return ParseEndpoint(address)->port; }

// Polls `f` every millisecond for up to 2 s.
template <typename F>
bool WaitUntil(F f) {
  return testing::Eventually(f, 2000ms, 1ms);
}

TEST(WakeListenerTest, ActsOnTheMagicOnlyAndRateLimitsAFlood) {
  SystemClock clock;
  auto listener = WakeListener::Bind("127.0.0.1:0", "test", WakeLimiter(0ms, 300ms), clock);
  ASSERT_TRUE(listener);
  std::atomic<int> woken{0};
  listener->Start([&] { woken++; });
  const uint16_t port = PortOf(listener->address());

  SendRaw(port, "hello");  // not the magic: ignored
  ASSERT_TRUE(WaitUntil([&] { return listener->stats().ignored.load() == 1; }));
  EXPECT_EQ(woken.load(), 0);

  WakeSender sender;
  ASSERT_TRUE(sender.Send(listener->address()));
  ASSERT_TRUE(WaitUntil([&] { return woken.load() == 1; }));
  listener->Result(false);

  // 2,000 forged wake-ups (in rounds: loopback drops what overflows the socket
  // buffer): at most the one deferred wake-up acts within the gap.
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 100; ++i) SendRaw(port, kMagic);
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(WaitUntil([&] { return listener->stats().received.load() >= 200; }));
  EXPECT_LE(woken.load(), 2);
  ASSERT_TRUE(WaitUntil([&] { return woken.load() == 2; }));  // the coalesced one, after the gap
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(woken.load(), 2);
  EXPECT_GE(listener->stats().coalesced.load(), 199u);
  listener->Stop();
}

TEST(WakeListenerTest, AWakeUpHeldForAPollsResultActsAsSoonAsTheResultFindsWork) {
  // Fake time stands still, so the held wake-up can only act through Result's notify;
  // without it the loop would look again after its 1 s timeout.
  FakeClock clock;
  auto listener = WakeListener::Bind("127.0.0.1:0", "test", WakeLimiter(0ms, 3000ms), clock);
  ASSERT_TRUE(listener);
  std::atomic<int> woken{0};
  listener->Start([&] { woken++; });
  WakeSender sender;
  ASSERT_TRUE(sender.Send(listener->address()));
  ASSERT_TRUE(WaitUntil([&] { return woken.load() == 1; }));
  listener->Result(false);
  clock.Advance(3000ms);
  ASSERT_TRUE(sender.Send(listener->address()));
  ASSERT_TRUE(WaitUntil([&] { return woken.load() == 2; }));  // a gap later: acts; its poll runs
  ASSERT_TRUE(sender.Send(listener->address()));
  ASSERT_TRUE(WaitUntil([&] { return listener->stats().coalesced.load() == 1; }));  // held
  const auto t0 = std::chrono::steady_clock::now();
  listener->Result(true);
  ASSERT_TRUE(WaitUntil([&] { return woken.load() == 3; }));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
  listener->Stop();
}

TEST(WakeListenerTest, ATakenPortOrAForeignAddressDisablesWakeUps) {
  SystemClock clock;
  auto first = WakeListener::Bind("127.0.0.1:0", "first", WakeLimiter(0ms, 100ms), clock);
  ASSERT_TRUE(first);
  EXPECT_FALSE(WakeListener::Bind(first->address(), "second", WakeLimiter(0ms, 100ms), clock));
  EXPECT_FALSE(WakeListener::Bind("192.0.2.1:7001", "not local", WakeLimiter(0ms, 100ms), clock));
  EXPECT_FALSE(WakeListener::Bind("myhost:123456", "hostname:pid", WakeLimiter(0ms, 100ms), clock));
}

TEST(WakeSenderTest, UnresolvableAddressesAreRefusedQuietly) {
  WakeSender sender;
  EXPECT_FALSE(sender.Send("myhost:123456"));
  EXPECT_FALSE(sender.Send("no-such-host.invalid:7001"));
  EXPECT_EQ(sender.sent(), 0u);
}

TEST(WakeSignalTest, NotifyEndsTheWaitEarly) {
  SystemClock clock;
  WakeSignal signal(clock);
  std::stop_source stop;
  auto start = std::chrono::steady_clock::now();
  std::jthread notifier([&] {
    std::this_thread::sleep_for(20ms);
    signal.Notify();
  });
  EXPECT_TRUE(signal.WaitFor(5000ms, stop.get_token()));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2000ms);
}

TEST(WakeSignalTest, OnAFakeClockThePausePassesInFakeTime) {
  FakeClock clock;
  WakeSignal signal(clock);
  std::stop_source stop;
  const auto t0 = clock.Now();
  EXPECT_TRUE(signal.WaitFor(5000ms, stop.get_token()));  // no one notifies: the pause passes
  EXPECT_EQ(clock.Now() - t0, 5000ms);
  signal.Notify();
  EXPECT_TRUE(signal.WaitFor(5000ms, stop.get_token()));  // notified: no time passes
  EXPECT_EQ(clock.Now() - t0, 5000ms);
  stop.request_stop();
  EXPECT_FALSE(signal.WaitFor(5000ms, stop.get_token()));
  EXPECT_EQ(clock.Now() - t0, 5000ms);
}

}  // namespace
}  // namespace dsync::wakeup
