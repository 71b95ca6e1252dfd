#include "dispatcher/dispatcher_waker.h"

#include <spdlog/spdlog.h>

#include "dispatcher/lease_lock.h"

namespace dsync::dispatcher {
namespace {

constexpr std::string_view kWakeTag = " wake=";
constexpr size_t kOwnerColumnChars = 191;  // distribute_lease_lock.owner (V001)

// Params: lock_name. The current leader's owner id (NULL/absent: nobody leads now).
constexpr const char* kSelectLeaderOwner = R"(
SELECT owner FROM distribute_lease_lock WHERE lock_name = ? AND owner IS NOT NULL AND expires_at > NOW(3))";

}  // namespace

std::string WithWakeAddress(std::string owner, const std::string& address) {
  if (address.empty() || owner.size() + kWakeTag.size() + address.size() > kOwnerColumnChars) return owner;
  return owner + std::string(kWakeTag) + address;
}

std::optional<std::string> WakeAddressOf(std::string_view owner) {
  const size_t at = owner.rfind(kWakeTag);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view address = owner.substr(at + kWakeTag.size());
  if (!wakeup::ParseEndpoint(address)) return std::nullopt;
  return std::string(address);
}

DispatcherWaker::DispatcherWaker(storage::ConnectionPool& pool, std::string service, Clock& clock, Millis refresh)
    : pool_(pool), lock_name_(DispatcherLockName(service)), clock_(clock), refresh_(refresh) {}

bool DispatcherWaker::Wake() {
  std::string address;
  {
    std::lock_guard lock(mu_);
    const Clock::TimePoint now = clock_.Now();
    if (!read_at_ || now - *read_at_ >= refresh_) {
      read_at_ = now;
      try {
        address_ = pool_.Run("read dispatcher wake address", [&](storage::Connection& c) {
          auto rs = c.Query(kSelectLeaderOwner, lock_name_);
          std::string out;
          if (rs->next()) out = WakeAddressOf(std::string(rs->getString(1))).value_or("");
          return out;
        });
      } catch (const std::exception& e) {
        spdlog::debug("WAKEUP_LOOKUP_FAILED lock={} err={}", lock_name_, e.what());
        address_.clear();
      }
    }
    address = address_;
  }
  return !address.empty() && sender_.Send(address);
}

}  // namespace dsync::dispatcher
