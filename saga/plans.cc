// Plans: a topic's steps as handlers, built once from the config (saga_engine.h), and
// how fast each plan's steps run here (Plans::StepSpeed).
#include "saga/saga_engine.h"

#include "core/error.h"

namespace dsync::saga {

Plans::Plans(const std::map<std::string, TopicSettings>& topics, const StepRegistry& registry)
    : topics_(topics) {
  for (const auto& [name, topic] : topics_) {
    Plan plan;
    plan.topic = &topic;
    for (size_t i = 0; i < topic.steps.size(); ++i) {
      const StepSpec& spec = topic.steps[i];
      // Same shape as the settings loader's errors: "config: <path>: <reason>".
      std::string where = "config: topics." + name + ".steps[" + std::to_string(i) + "] (" + spec.name + ")";
      if (spec.name.empty() || spec.name.size() > kMaxStepNameLength) {
        throw ConfigError(where + ": step name must be 1 to 50 characters");
      }
      if (spec.type.size() > kMaxStepNameLength) {
        throw ConfigError(where + ": step type must be at most 50 characters");
      }
      try {
        plan.steps.push_back(Step{spec, registry.Create(spec)});
      } catch (const ConfigError& e) {
        std::string_view reason = e.what();
        if (reason.starts_with("config: ")) reason.remove_prefix(8);
        throw ConfigError(where + ": " + std::string(reason));
      }
    }
    plans_.emplace(name, std::move(plan));
  }
}

void Plans::StepSpeed::Observe(std::chrono::microseconds took) {
  const int64_t us = std::max<int64_t>(0, took.count());
  int64_t avg = average_us_.load(std::memory_order_relaxed);
  // Lost updates between threads only blur an average.
  average_us_.store(avg < 0 ? us : avg + (us - avg) / 8, std::memory_order_relaxed);
}

bool Plans::StepSpeed::fast() const {
  const int64_t avg = average_us_.load(std::memory_order_relaxed);
  return avg >= 0 && avg < kFastStep.count();
}

bool Plans::StepSpeed::observed() const { return average_us_.load(std::memory_order_relaxed) >= 0; }

bool Plans::AllObservedFast() const {
  bool any = false;
  for (const auto& [_, plan] : plans_) {
    if (!plan.speed->observed()) continue;
    if (!plan.speed->fast()) return false;
    any = true;
  }
  return any;
}

const Plans::Plan* Plans::Find(const std::string& topic) const {
  auto it = plans_.find(topic);
  return it == plans_.end() ? nullptr : &it->second;
}

}  // namespace dsync::saga
