#include "saga/backoff.h"

#include <algorithm>
#include <cstdint>

namespace dsync::saga {

Millis BackoffCeiling(const BackoffSpec& spec, int retries) {
  const int64_t base = std::max<int64_t>(0, spec.base.count());
  const int64_t max = std::max<int64_t>(base, spec.max.count());
  int64_t d = base;
  for (int i = 0; i < retries && d < max; ++i) d *= 2;  // stops doubling at the cap
  return Millis(std::min(d, max));
}

Millis RetryBackoff(const BackoffSpec& spec, int retries, const UniformRandom& random) {
  const int64_t ceiling = BackoffCeiling(spec, retries).count();
  double r = random ? random() : 0.0;
  r = std::clamp(r, 0.0, 1.0);
  const int64_t half = ceiling / 2;
  // Uniform over [half, ceiling]: half + round(r * (ceiling - half)).
  return Millis(half + static_cast<int64_t>(r * static_cast<double>(ceiling - half) + 0.5));
}

}  // namespace dsync::saga
