// Test support: waiting for background progress (another thread's, a server's) by
// polling a condition, for tests that must not wait for a timeout to pass instead.
//
//   ASSERT_TRUE(testing::Eventually([&] { return done.load(); }, std::chrono::seconds(5)));
//
// Thread safety: stateless; `done` runs on the calling thread.
#pragma once

#include <chrono>
#include <thread>

namespace dsync::testing {

// Polls `done` every `poll` until it holds (true), or until it still does not hold
// when asked after `limit` has passed (false).
template <class F>
bool Eventually(F&& done, std::chrono::milliseconds limit = std::chrono::seconds(10),
                std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const bool late = std::chrono::steady_clock::now() > deadline;
    if (done()) return true;
    if (late) return false;
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace dsync::testing
