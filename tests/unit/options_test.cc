// app/options.h: every module's Options struct from the settings (issue 39 item 4).
// What is checked: built from the default settings, each struct equals its own
// default-constructed value field by field (the defaults beside the fields are the
// configured defaults, so a struct built by hand behaves as configured), and each
// configured key reaches its field.
#include <string>

#include <gtest/gtest.h>

#include "app/options.h"
#include "config/settings.h"
#include "core/service.h"

namespace dsync::app {
namespace {

using namespace std::chrono_literals;

TEST(OptionsTest, TheServiceDefaultIsOneConstant) {
  EXPECT_STREQ(kDefaultService, "kbs-sync");
  EXPECT_EQ(Settings{}.service, kDefaultService);
  EXPECT_EQ(consumer::ConsumerOptions{}.service, kDefaultService);
  EXPECT_EQ(api::StoreOptions{}.service, kDefaultService);
  EXPECT_EQ(dispatcher::DispatcherOptions{}.service, kDefaultService);
  EXPECT_EQ(dispatcher::SweeperOptions{}.service, kDefaultService);
  EXPECT_EQ(dispatcher::CycleOptions{}.service, kDefaultService);
  EXPECT_EQ(dispatcher::BatchCompleterOptions{}.service, kDefaultService);
  EXPECT_EQ(control::SchedulerOptions{}.service, kDefaultService);
}

TEST(OptionsTest, ConsumerDefaultsAreTheConfiguredOnes) {
  const consumer::ConsumerOptions d;
  const consumer::ConsumerOptions o = ConsumerOptionsFrom(Settings{});
  EXPECT_EQ(d.prefetch, -1) << "automatic, as consumer.prefetch's default";
  EXPECT_EQ(o.prefetch, d.prefetch);
  EXPECT_EQ(o.service, d.service);
  EXPECT_EQ(o.capacity, d.capacity);
  EXPECT_EQ(o.heartbeat_interval, d.heartbeat_interval);
  EXPECT_EQ(o.poll_interval, d.poll_interval);
  EXPECT_EQ(o.idle_interval, d.idle_interval);
  EXPECT_EQ(o.drain_timeout, d.drain_timeout);
  EXPECT_EQ(o.offline_timeout, d.offline_timeout);
  EXPECT_EQ(o.wakeups, d.wakeups);
  EXPECT_EQ(o.wakeup_listen, d.wakeup_listen);
}

TEST(OptionsTest, ConsumerOptionsReadTheirKeys) {
  Settings s;
  s.service = "svc";
  s.consumer.capacity = 3;
  s.consumer.prefetch = 0;
  s.consumer.poll_interval = 50ms;
  s.dispatcher.idle_interval = 40ms;  // shorter than the poll: the poll wins
  s.consumer.drain_timeout = 7s;
  s.registry.heartbeat_interval = 2s;
  s.registry.offline_timeout = 9s;
  s.consumer.wakeups = false;
  s.consumer.wakeup_listen = "127.0.0.1:9";
  const consumer::ConsumerOptions o = ConsumerOptionsFrom(s);
  EXPECT_EQ(o.service, "svc");
  EXPECT_EQ(o.capacity, 3);
  EXPECT_EQ(o.prefetch, 0);
  EXPECT_EQ(o.poll_interval, 50ms);
  EXPECT_EQ(o.idle_interval, 50ms);
  EXPECT_EQ(o.drain_timeout, 7s);
  EXPECT_EQ(o.heartbeat_interval, 2s);
  EXPECT_EQ(o.offline_timeout, 9s);
  EXPECT_FALSE(o.wakeups);
  EXPECT_EQ(o.wakeup_listen, "127.0.0.1:9");
}

TEST(OptionsTest, DispatcherPartsDefaultsAreTheConfiguredOnes) {
  const dispatcher::DispatcherOptions o = DispatcherOptionsFrom(Settings{});
  const dispatcher::DispatcherOptions d;
  EXPECT_EQ(o.sweep_interval, d.sweep_interval);
  EXPECT_EQ(o.dispatcher.poll_interval, d.dispatcher.poll_interval);
  EXPECT_EQ(o.dispatcher.batch_size, d.dispatcher.batch_size);
  EXPECT_EQ(o.cycle.offline_timeout, d.cycle.offline_timeout);
  EXPECT_EQ(o.planner.batch_size, d.planner.batch_size);
  const dispatcher::SweeperOptions sd;
  EXPECT_EQ(o.sweeper.offline_timeout, sd.offline_timeout);
  EXPECT_EQ(o.sweeper.purge_after, sd.purge_after);
  EXPECT_EQ(o.sweeper.default_timeout, sd.default_timeout);
  EXPECT_EQ(o.sweeper.default_claim_timeout, sd.default_claim_timeout);
  EXPECT_EQ(o.retention.interval, d.retention.interval);
  // Fairness is on by default, in the config and in a PlannerConfig built by hand alike.
  EXPECT_TRUE(o.planner.fair);
  EXPECT_EQ(o.planner.fair, d.planner.fair);
}

TEST(OptionsTest, EveryDispatcherPartHasTheServiceAndTheTopics) {
  Settings s;
  s.service = "svc";
  s.registry.sweep_interval = 1500ms;
  s.registry.offline_timeout = 12s;
  s.registry.purge_after = 24h;
  s.dispatcher.batch_size = 7;
  TopicSettings t;
  t.max_processing_time = 9s;
  t.claim_timeout = 4s;
  t.strategy = "round_robin";
  t.steps = {StepSpec{.name = "s", .type = "demo"}};
  s.topics["T"] = t;
  ScheduleSettings sch;
  sch.cron = "0 3 * * *";
  sch.topic = "T";
  s.schedules["nightly"] = sch;
  const dispatcher::DispatcherOptions o = DispatcherOptionsFrom(s);
  EXPECT_EQ(o.service, "svc");
  EXPECT_EQ(o.cycle.service, "svc");
  EXPECT_EQ(o.sweeper.service, "svc");
  EXPECT_EQ(o.batches.service, "svc");
  EXPECT_EQ(o.schedules.service, "svc");
  EXPECT_EQ(o.sweep_interval, 1500ms);
  EXPECT_EQ(o.cycle.offline_timeout, 12s);
  EXPECT_EQ(o.sweeper.offline_timeout, 12s);
  EXPECT_EQ(o.sweeper.purge_after, 24h);
  EXPECT_EQ(o.sweeper.topic_timeouts.at("T"), 9s);
  EXPECT_EQ(o.sweeper.topic_claim_timeouts.at("T"), 4s);
  EXPECT_EQ(o.planner.batch_size, 7);
  EXPECT_EQ(o.planner.topics.at("T").strategy, dispatcher::Strategy::kRoundRobin);
  EXPECT_EQ(o.batches.topics.count("T"), 1u);
  EXPECT_EQ(o.schedules.schedules.at("nightly").cron, "0 3 * * *");
  EXPECT_EQ(o.schedules.topics.count("T"), 1u);
}

TEST(OptionsTest, ApiOptionsReadTheirKeys) {
  const api::StoreOptions d;
  const api::StoreOptions dflt = StoreOptionsFrom(Settings{});
  EXPECT_EQ(dflt.max_payload_bytes, d.max_payload_bytes);
  EXPECT_EQ(dflt.offline_timeout, d.offline_timeout);
  EXPECT_EQ(dflt.relay.window_bytes, d.relay.window_bytes);

  Settings s;
  s.service = "svc";
  s.api.max_body_bytes = 4096;
  s.api.listen = "127.0.0.1:0";
  s.api.token = "t";
  s.api.allowed_hosts = {"example.org"};
  s.registry.offline_timeout = 11s;
  s.datasources["a"] = "mysql://u@h/a";
  s.relay.verify_wait = 5s;
  s.topics["T"].steps = {StepSpec{.name = "s", .type = "demo"}};
  const api::StoreOptions o = StoreOptionsFrom(s);
  EXPECT_EQ(o.service, "svc");
  EXPECT_EQ(o.max_payload_bytes, 4096);
  EXPECT_EQ(o.offline_timeout, 11s);
  EXPECT_EQ(o.datasources.at("a"), "mysql://u@h/a");
  EXPECT_EQ(o.relay.verify_wait, 5s);
  EXPECT_EQ(o.topics.count("T"), 1u);

  const api::HttpOptions h = HttpOptionsFrom(s);
  EXPECT_EQ(h.listen, "127.0.0.1:0");
  EXPECT_EQ(h.token, "t");
  EXPECT_EQ(h.allowed_hosts, std::vector<std::string>{"example.org"});
  EXPECT_EQ(h.connection.max_body_bytes, 4096);
  const api::HttpOptions hd = HttpOptionsFrom(Settings{});
  EXPECT_EQ(hd.listen, api::HttpOptions{}.listen);
  EXPECT_EQ(hd.connection.max_body_bytes, api::HttpOptions{}.connection.max_body_bytes);
}

}  // namespace
}  // namespace dsync::app
