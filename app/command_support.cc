#include "app/command_support.h"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "app/options.h"
#include "core/error.h"
#include "core/log.h"
#include "core/service.h"
#include "core/visible_text.h"
#include "storage/migrator.h"

namespace dsync::app {

const OptionSpec kJsonOption{"json", false, "machine-readable JSON output"};

Settings ResolveSettings(const Invocation& inv) {
  Settings s = LoadSettings(inv.Get("config").value_or(""), Environment());
  if (auto db = inv.Get("db")) s.database = *db;
  if (auto level = inv.Get("log-level")) s.log_level = *level;
  if (auto service = inv.Get("service")) {
    if (service->empty() || service->size() > 128) throw UsageError("--service must be 1 to 128 characters");
    s.service = *service;
  }
  if (auto capacity = inv.Get("capacity")) s.consumer.capacity = ParseIntOption("capacity", *capacity, 1, 10000);
  if (auto prefetch = inv.Get("prefetch")) s.consumer.prefetch = ParseIntOption("prefetch", *prefetch, -1, 10000);
  if (auto listen = inv.Get("listen")) {
    CheckHostPort("listen", *listen);
    s.api.listen = *listen;
  }
  s.Validate();
  return s;
}

storage::DbUrl DatabaseUrl(const Settings& s) {
  if (s.database.empty()) {
    throw UsageError("no database: pass --db mysql://user:pass@host:port/schema, set DSYNC_DB_URL, "
                     "or set `database` in the config");
  }
  return storage::DbUrl::Parse(s.database);
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

const char* WaitForStopSignal(const sigset_t& signals) {
  int sig = 0;
  sigwait(&signals, &sig);
  return sig == SIGTERM ? "SIGTERM" : "SIGINT";
}

std::unique_ptr<storage::ConnectionPool> OpenDatabase(const Settings& s, int threads) {
  storage::DbUrl url = DatabaseUrl(s);
  // A frozen process's open transaction is ended by the server once it has been idle
  // as long as a silent node is given before it counts as offline (storage/db_url.h).
  url.idle_transaction_timeout = std::chrono::seconds(
      std::max<int64_t>(1, (s.registry.offline_timeout.count() + 999) / 1000));
  storage::PoolOptions options;
  options.max_size = std::max(url.pool_size, threads);
  auto pool = std::make_unique<storage::ConnectionPool>(url, options);
  storage::Migrator(*pool).RequireCurrent();
  return pool;
}

OperatorStore OpenOperatorStore(const Invocation& inv) {
  OperatorStore s;
  s.settings = ResolveSettings(inv);
  SetupLogging(inv.Get("log-level").value_or("warn"), "cli");
  s.pool = OpenDatabase(s.settings);
  s.store = std::make_unique<api::EventStore>(*s.pool, StoreOptionsFrom(s.settings));
  return s;
}

std::string ServiceHelp(const std::string& what) {
  return what + " (default from config, " + kDefaultService + ")";
}

std::string Cell(const std::string& s, size_t width) {
  std::string out = VisibleText(s);
  if (out.size() > width) {
    size_t cut = width - 3;  // not inside a UTF-8 sequence
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xc0) == 0x80) --cut;
    out = out.substr(0, cut) + "...";
  }
  return out;
}

void PrintJson(const nlohmann::json& j) { std::cout << JsonForTerminal(j, 2) << "\n"; }

}  // namespace dsync::app
