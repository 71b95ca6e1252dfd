#include "consumer/datasource_prober.h"

#include <algorithm>
#include <exception>

#include <spdlog/spdlog.h>

#include "storage/connection.h"
#include "storage/db_url.h"

namespace dsync::consumer {
namespace {

// Params: none. The cheapest statement that proves the session works.
constexpr const char* kPing = "SELECT 1";

// While a datasource fails, it is checked again after this, doubling up to the
// interval: a blip (a database restart) costs seconds of routing, not an interval.
constexpr Millis kFirstRetry{1000};

// Error texts go into the registry row and logs: one line, no password, bounded.
constexpr size_t kMaxErrorLength = 300;

std::string OneLine(std::string text) {
  text = storage::MaskPasswords(text);
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  if (text.size() > kMaxErrorLength) text = text.substr(0, kMaxErrorLength - 3) + "...";
  return text.empty() ? "check failed" : text;
}

}  // namespace

void ConnectProbe(const std::string& /*name*/, const std::string& url) {
  storage::DbUrl u = storage::DbUrl::Parse(url);
  u.read_timeout = std::min(u.read_timeout, u.connect_timeout);
  u.write_timeout = std::min(u.write_timeout, u.connect_timeout);
  storage::Connection c(u);
  c.QueryInt(kPing);
}

DatasourceProber::DatasourceProber(std::map<std::string, std::string> urls, Millis interval, Clock& clock,
                                   ProbeFn probe, std::function<void()> on_change)
    : urls_(std::move(urls)),
      interval_(interval),
      clock_(clock),
      probe_(std::move(probe)),
      on_change_(std::move(on_change)) {}

DatasourceProber::~DatasourceProber() { Stop(); }

void DatasourceProber::Start() {
  if (!threads_.empty()) return;
  for (const auto& [name, url] : urls_) {
    threads_.emplace_back([this, &name = name, &url = url](std::stop_token stop) { Loop(name, url, stop); });
  }
}

void DatasourceProber::Stop() {
  for (auto& t : threads_) t.request_stop();
  threads_.clear();  // joins
}

DatasourceSnapshot DatasourceProber::snapshot() const {
  DatasourceSnapshot s;
  std::lock_guard lock(mu_);
  for (const auto& [name, error] : state_) {
    if (error) s.errors[name] = *error;
    else s.reachable.push_back(name);  // state_ is ordered: sorted
  }
  return s;
}

void DatasourceProber::Loop(const std::string& name, const std::string& url, std::stop_token stop) {
  Millis retry = kFirstRetry;
  Millis pause = interval_;
  do {
    std::optional<std::string> error;
    try {
      probe_(name, url);
    } catch (const std::exception& e) {
      error = OneLine(e.what());
    } catch (...) {
      error = "check failed";
    }
    bool changed;
    {
      std::lock_guard lock(mu_);
      auto it = state_.find(name);
      changed = it == state_.end() || it->second != error;
      state_[name] = error;
    }
    pause = error ? std::min(interval_, retry) : interval_;
    retry = error ? std::min(interval_, retry * 2) : kFirstRetry;
    if (!changed) continue;
    if (error) {
      spdlog::warn("DATASOURCE_UNREACHABLE datasource={} err=\"{}\"", name, *error);
    } else {
      spdlog::info("DATASOURCE_REACHABLE datasource={}", name);
    }
    if (on_change_ && !stop.stop_requested()) on_change_();
  } while (clock_.SleepFor(pause, stop));
}

}  // namespace dsync::consumer
