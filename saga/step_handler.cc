#include "saga/step_handler.h"

#include "core/error.h"
#include "events/transitions.h"
#include "storage/db_url.h"

namespace dsync::saga {

void StepContext::InsertAtCommit(std::string_view head, std::string_view tail, std::vector<storage::Value> row) {
  events::InsertDeferredRow(tx(), events::DeferredRow{std::string(head), std::string(tail), std::move(row)});
}

Datasources::Datasources(std::map<std::string, std::string> urls) : urls_(std::move(urls)) {}

storage::ConnectionPool& Datasources::Get(const std::string& name) {
  std::lock_guard lock(mu_);
  auto open = pools_.find(name);
  if (open != pools_.end()) return *open->second;
  auto url = urls_.find(name);
  if (url == urls_.end()) {
    std::string known;
    for (const auto& [n, _] : urls_) known += (known.empty() ? "" : ", ") + n;
    throw UsageError("unknown datasource '" + name + "' (known: " +
                     (known.empty() ? "none" : known) + ")");
  }
  auto pool = std::make_unique<storage::ConnectionPool>(storage::DbUrl::Parse(url->second));
  auto& ref = *pool;
  pools_.emplace(name, std::move(pool));
  return ref;
}

int Datasources::KillLentStatements() {
  std::vector<storage::ConnectionPool*> pools;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, pool] : pools_) pools.push_back(pool.get());
  }
  int killed = 0;
  for (storage::ConnectionPool* pool : pools) killed += pool->KillLentStatements();
  return killed;
}

void StepRegistry::Register(const std::string& type, Factory factory) {
  factories_[type] = std::move(factory);
}

std::unique_ptr<StepHandler> StepRegistry::Create(const StepSpec& spec) const {
  auto it = factories_.find(spec.type);
  if (it == factories_.end()) {
    std::string known;
    for (const auto& [type, _] : factories_) known += (known.empty() ? "" : ", ") + type;
    throw ConfigError("unknown step type '" + spec.type + "' (known: " +
                      (known.empty() ? "none" : known) + ")");
  }
  auto handler = it->second(spec);
  if (!handler) throw ConfigError("step type '" + spec.type + "' built no handler");
  return handler;
}

}  // namespace dsync::saga
