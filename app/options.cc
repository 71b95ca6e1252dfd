#include "app/options.h"

#include <algorithm>

#include "config/step_datasources.h"

namespace dsync::app {

dispatcher::DispatcherOptions DispatcherOptionsFrom(const Settings& s) {
  dispatcher::DispatcherOptions o;
  o.service = s.service;
  o.dispatcher = s.dispatcher;
  o.sweep_interval = s.registry.sweep_interval;
  o.cycle = CycleOptionsFrom(s);
  o.planner = PlannerConfigFrom(s);
  o.sweeper = SweeperOptionsFrom(s);
  o.retention = s.retention;
  o.batches = BatchCompleterOptionsFrom(s);
  o.schedules = SchedulerOptionsFrom(s);
  return o;
}

dispatcher::PlannerConfig PlannerConfigFrom(const Settings& s) {
  using dispatcher::Strategy;
  dispatcher::PlannerConfig config;
  config.batch_size = std::max(1, s.dispatcher.batch_size);
  for (const auto& [name, topic] : s.topics) {
    dispatcher::TopicPolicy p;
    p.strategy = dispatcher::ParseStrategy(topic.strategy).value_or(Strategy::kLeastLoad);
    p.ordered = topic.ordered;
    p.batch_limit = std::max(0, topic.batch_limit);
    p.datasources = dispatcher::TopicDatasources(topic);
    p.concurrency_key = topic.concurrency_key;
    p.concurrency_limit = topic.concurrency_key.empty() ? 0 : std::max(0, topic.concurrency_limit);
    for (const StepSpec& step : topic.steps) {
      p.steps.push_back(
          {step.name, StepDatasources(step), RelayedDatasources(step), RelaySourceDatasources(step)});
    }
    config.topics[name] = p;
  }
  config.fair = s.fairness.enabled;
  config.tenant_weights = s.fairness.weights;
  config.datasource_limits = s.datasource_limits;
  return config;
}

dispatcher::CycleOptions CycleOptionsFrom(const Settings& s) {
  dispatcher::CycleOptions o;
  o.service = s.service;
  o.offline_timeout = s.registry.offline_timeout;
  return o;
}

dispatcher::SweeperOptions SweeperOptionsFrom(const Settings& s) {
  dispatcher::SweeperOptions o;
  o.service = s.service;
  o.offline_timeout = s.registry.offline_timeout;
  o.purge_after = s.registry.purge_after;
  for (const auto& [name, topic] : s.topics) {
    o.topic_timeouts[name] = topic.max_processing_time;
    o.topic_claim_timeouts[name] = topic.claim_timeout;
  }
  o.default_timeout = TopicSettings{}.max_processing_time;
  o.default_claim_timeout = TopicSettings{}.claim_timeout;
  return o;
}

dispatcher::BatchCompleterOptions BatchCompleterOptionsFrom(const Settings& s) {
  dispatcher::BatchCompleterOptions o;
  o.service = s.service;
  o.topics = s.topics;
  return o;
}

control::SchedulerOptions SchedulerOptionsFrom(const Settings& s) {
  control::SchedulerOptions o;
  o.service = s.service;
  o.schedules = s.schedules;
  o.topics = s.topics;
  return o;
}

consumer::ConsumerOptions ConsumerOptionsFrom(const Settings& s) {
  consumer::ConsumerOptions o;
  o.service = s.service;
  o.capacity = s.consumer.capacity;
  o.prefetch = s.consumer.prefetch;  // -1: automatic (consumer::AutoPrefetch)
  o.heartbeat_interval = s.registry.heartbeat_interval;
  o.poll_interval = s.consumer.poll_interval;
  o.idle_interval = std::max(s.consumer.poll_interval, s.dispatcher.idle_interval);
  o.drain_timeout = s.consumer.drain_timeout;
  o.offline_timeout = s.registry.offline_timeout;
  o.wakeups = s.consumer.wakeups;
  o.wakeup_listen = s.consumer.wakeup_listen;
  return o;
}

api::StoreOptions StoreOptionsFrom(const Settings& s) {
  api::StoreOptions o;
  o.service = s.service;
  o.topics = s.topics;
  o.schedules = s.schedules;
  o.datasources = s.datasources;
  o.relay = s.relay;
  o.max_payload_bytes = s.api.max_body_bytes;
  o.offline_timeout = s.registry.offline_timeout;
  return o;
}

api::HttpOptions HttpOptionsFrom(const Settings& s) {
  api::HttpOptions o;
  o.listen = s.api.listen;
  o.token = s.api.token;
  o.allowed_hosts = s.api.allowed_hosts;
  o.connection.max_body_bytes = s.api.max_body_bytes;
  return o;
}

}  // namespace dsync::app
