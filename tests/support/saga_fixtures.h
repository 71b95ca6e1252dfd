// Test support: the plans the saga, API and console tests build their engines from
// (steps of the built-in `demo` type, see README.md "Built-in steps"), and the step
// specs the step types' own tests build their handlers from.
//
// Thread safety: value-returning functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/settings.h"

namespace dsync::testing {

// A plan step `name` of step type `type`, with the type's `params`.
inline StepSpec Step(const std::string& name, const std::string& type = "demo",
                     nlohmann::json params = nlohmann::json::object()) {
  StepSpec s;
  s.name = name;
  s.type = type;
  s.params = std::move(params);
  return s;
}

// A topic of demo steps (default s1, s2, s3) with the given retry policy.
inline TopicSettings DemoTopic(int max_retry, Millis backoff_base, Millis backoff_max,
                               const std::vector<std::string>& steps = {"s1", "s2", "s3"}) {
  TopicSettings t;
  t.max_retry = max_retry;
  t.backoff_base = backoff_base;
  t.backoff_max = backoff_max;
  for (const std::string& name : steps) t.steps.push_back(Step(name));
  return t;
}

// The topics of the API and console tests: DEMO (s1, s2, s3) and OTHER (one step, only).
inline void AddDemoAndOtherTopics(Settings& s, int max_retry, Millis backoff_base, Millis backoff_max) {
  s.topics["DEMO"] = DemoTopic(max_retry, backoff_base, backoff_max);
  s.topics["OTHER"] = DemoTopic(max_retry, backoff_base, backoff_max, {"only"});
}

}  // namespace dsync::testing
