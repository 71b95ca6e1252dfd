// Both(f, g): runs f here and g on another thread at once, and returns both results
// (source and target are different servers: their reads overlap). An exception from
// either reaches the caller: f's after g has ended, else g's.
#pragma once

#include <future>
#include <utility>

namespace dsync::table {

template <class F, class G>
auto Both(F&& f, G&& g) {
  auto second = std::async(std::launch::async, std::forward<G>(g));
  auto first = f();
  return std::make_pair(std::move(first), second.get());
}

}  // namespace dsync::table
