// The operator commands: produce, events, events show, retry, drain, nodes. Each is a
// thin layer over api::EventStore (the same operations the HTTP API serves): human
// tables by default, the API's JSON with --json. Everything printed that was read from
// the database (codes, errors, payloads, node metadata) goes through VisibleText (or
// JsonForTerminal with --json): a control character, bidi override or zero-width
// character stored by a producer is shown as an escape, never sent to the terminal.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "api/event_store.h"
#include "app/command_support.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "core/visible_text.h"
#include "dispatcher/dispatcher_waker.h"
#include "events/batches.h"
#include "events/status.h"

namespace dsync::app {
namespace {

constexpr size_t kDefaultFileBatch = 1000;

// Stored text shown whole, hidden characters escaped.
std::string Shown(const std::string& s) { return VisibleText(s); }

std::string Or(const std::string& s, const char* fallback) { return s.empty() ? fallback : VisibleText(s); }


// "2026-11-21T10:00:00.123Z" -> "2026-11-21 10:00:00.123".
std::string When(const std::string& iso) {
  if (iso.empty()) return "-";
  std::string out = iso;
  if (out.size() > 10 && out[10] == 'T') out[10] = ' ';
  if (!out.empty() && out.back() == 'Z') out.pop_back();
  return out;
}

// --- produce ---------------------------------------------------------------

std::string GeneratedBatchCode(Clock& clock) {
  auto now = std::chrono::system_clock::to_time_t(clock.WallNow());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  std::random_device rd;
  char suffix[9];
  std::snprintf(suffix, sizeof suffix, "%08x", rd());
  return std::string("produce-") + stamp + "-" + suffix;
}

// JSON given on the command line or in a file: UsageError when it is not JSON or nests
// deeper than kMaxInputJsonDepth, the API's limit too (core/json_limits.h).
nlohmann::json InputJson(const std::string& text, const std::string& what) {
  if (!what.empty()) return ParseInputJson(text, what);
  // A --file line: its file and number come first in the message.
  StoredJson parsed = ParseStoredJson(text, "the JSON", kMaxInputJsonDepth);
  if (parsed.problem == StoredJson::kTooDeep) throw UsageError(parsed.message);
  if (parsed.problem != StoredJson::kNone) throw UsageError("not valid JSON");
  return std::move(parsed.value);
}

api::NewEvent EventFromFlags(const Invocation& inv) {
  api::NewEvent e;
  if (auto event = inv.Get("event")) {
    e = api::ParseNewEvent(InputJson(*event, "--event"));
  }
  if (auto v = inv.Get("code")) e.code = *v;
  if (auto v = inv.Get("topic")) e.topic = *v;
  if (auto v = inv.Get("tenant")) e.tenant_id = *v;
  if (auto v = inv.Get("data-id")) e.data_id = *v;
  if (auto v = inv.Get("trace-id")) e.trace_id = *v;
  if (auto v = inv.Get("payload")) {
    auto payload = InputJson(*v, "--payload");
    if (!payload.is_object()) throw UsageError("--payload must be a JSON object");
    e.payload = std::move(payload);
  }
  if (auto v = inv.Get("priority")) e.priority = ParseIntOption("priority", *v, -1000000, 1000000);
  if (auto v = inv.Get("delay-ms")) e.delay_ms = ParseIntOption("delay-ms", *v, 0, INT32_MAX);  // store checks 31 days
  return e;
}

// Reads every line first: a bad line rejects the whole file before anything is written.
std::vector<api::NewEvent> ReadEventLines(std::istream& in, const std::string& name, const api::EventStore& store) {
  std::vector<api::NewEvent> events;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      api::NewEvent e = api::ParseNewEvent(InputJson(line, ""));
      store.Validate(e);
      events.push_back(std::move(e));
    } catch (const UsageError& err) {
      throw UsageError(name + ":" + std::to_string(number) + ": " + err.what() + "; nothing was written");
    }
  }
  return events;
}

int RunProduceFile(const Invocation& inv, OperatorStore& s, const std::string& file, Clock& clock) {
  for (const char* flag : {"event", "code", "topic", "tenant", "data-id", "payload", "priority", "delay-ms", "trace-id"}) {
    if (inv.Get(flag)) throw UsageError(std::string("--") + flag + " cannot be combined with --file");
  }
  const size_t batch_size = inv.Get("batch-size") ? ParseIntOption("batch-size", *inv.Get("batch-size"), 1, 10000)
                                                  : kDefaultFileBatch;
  std::vector<api::NewEvent> events;
  if (file == "-") {
    events = ReadEventLines(std::cin, "stdin", *s.store);
  } else {
    std::ifstream in(file);
    if (!in) throw UsageError("cannot read --file " + file);
    events = ReadEventLines(in, file, *s.store);
  }
  if (events.empty()) throw UsageError("--file " + file + " has no events");
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < events.size(); ++i) {
    if (!seen.emplace(events[i].code, i).second) {
      throw UsageError("--file " + file + ": code '" + Shown(events[i].code) + "' appears twice; nothing was written");
    }
  }
  const std::string batch = inv.Get("batch").value_or(GeneratedBatchCode(clock));
  // The completion event rides with the last transaction: when its row becomes
  // visible, every event of the batch is in.
  std::optional<api::OnComplete> on_complete;
  if (auto topic = inv.Get("on-complete-topic")) {
    nlohmann::json payload = nlohmann::json::object();
    if (auto p = inv.Get("on-complete-payload")) {
      payload = InputJson(*p, "--on-complete-payload");
      if (!payload.is_object()) throw UsageError("--on-complete-payload must be a JSON object");
    }
    on_complete = api::OnComplete{*topic, std::move(payload), "0"};
    // Checked before any event is written.
    s.store->ValidateOnComplete(batch, *on_complete);
  } else if (inv.Get("on-complete-payload")) {
    throw UsageError("--on-complete-payload needs --on-complete-topic");
  }
  api::BatchResult total{batch, 0, 0};
  for (size_t start = 0; start < events.size(); start += batch_size) {
    size_t end = std::min(events.size(), start + batch_size);
    const bool last = end == events.size();
    auto r = s.store->ProduceBatch(batch, {events.begin() + start, events.begin() + end},
                                   last ? on_complete : std::nullopt);
    total.created += r.created;
    total.existing += r.existing;
  }
  if (inv.Flag("json")) {
    PrintJson({{"batch_code", batch}, {"created", total.created}, {"existing", total.existing}});
  } else {
    std::cout << "batch " << Shown(batch) << ": created=" << total.created << " existing=" << total.existing
              << " (follow it: dsync events --batch " << Shown(batch) << ")\n";
  }
  return 0;
}

}  // namespace

int RunProduce(const Invocation& inv) {
  OperatorStore s = OpenOperatorStore(inv);
  // Wake the leading dispatcher once the events are in (dispatcher/dispatcher_waker.h).
  SystemClock clock;
  dispatcher::DispatcherWaker waker(*s.pool, s.settings.service, clock);
  if (s.settings.dispatcher.wakeups) s.store->OnProduced([&waker] { waker.Wake(); });
  if (auto file = inv.Get("file")) return RunProduceFile(inv, s, *file, clock);
  if (inv.Get("batch") || inv.Get("batch-size") || inv.Get("on-complete-topic") || inv.Get("on-complete-payload")) {
    throw UsageError("--batch, --batch-size and --on-complete-* need --file");
  }
  api::NewEvent e = EventFromFlags(inv);
  auto result = s.store->Produce(e);
  if (inv.Flag("json")) {
    PrintJson({{"created", result.created}, {"event", api::ToJson(result.event)}});
  } else if (result.created) {
    std::cout << "created event " << Shown(result.event.code) << " (id " << result.event.id << ", topic "
              << Shown(result.event.topic) << ", " << Shown(result.event.status) << ")\n";
  } else {
    std::cout << "event " << Shown(result.event.code) << " already exists (id " << result.event.id << ", "
              << Shown(result.event.status) << "); nothing written\n";
  }
  return 0;
}

// --- events ----------------------------------------------------------------

namespace {

void PrintEventTable(const std::vector<api::EventRow>& events) {
  std::cout << std::left << std::setw(26) << "CODE" << std::setw(14) << "TOPIC" << std::setw(13) << "STATUS"
            << std::setw(22) << "NODE" << std::setw(8) << "ATTEMPT" << std::setw(8) << "RETRIES" << std::setw(6)
            << "PROG" << std::setw(24) << "CREATED" << "LAST_ERROR\n";
  for (const auto& e : events) {
    std::cout << std::left << std::setw(26) << Cell(e.code, 25) << std::setw(14) << Cell(e.topic, 13)
              << std::setw(13) << Cell(e.status, 12) << std::setw(22) << Cell(Or(e.node_address, "-"), 21) << std::setw(8)
              << e.attempt << std::setw(8) << e.retry_count << std::setw(6)
              << (e.progress ? std::to_string(*e.progress) + "%" : "-") << std::setw(24) << When(e.create_time)
              << Cell(e.last_error, 60) << "\n";
  }
}

int ShowEvent(const Invocation& inv, OperatorStore& s, const std::string& code) {
  api::EventDetail d = s.store->Get(code);
  if (inv.Flag("json")) {
    PrintJson(api::ToJson(d));
    return 0;
  }
  const auto& e = d.event;
  auto field = [](const char* name, const std::string& value) {
    std::cout << std::left << std::setw(15) << name << value << "\n";
  };
  field("code", Shown(e.code));
  field("topic", Shown(e.topic));
  field("status", Shown(e.status) + (e.phase == "COMPENSATE" && !api::IsTerminal(e.status) ? " (compensation phase)" : ""));
  field("entity", Shown(e.tenant_id) + " / " + Shown(e.data_id));
  field("node", Or(e.node_address, "-"));
  // Retries are the steps' own failures; resets (node died, connection lost) are not
  // charged to them (docs/event-lifecycle.md, "Retry arithmetic").
  field("attempt", std::to_string(e.attempt) + " (retries " + std::to_string(e.retry_count) + " of " +
                       std::to_string(e.max_retry) + ", resets not charged " + std::to_string(e.reset_count) +
                       ", version " + std::to_string(e.version) + ")");
  field("progress", e.progress ? std::to_string(*e.progress) + "%" : "-");
  // Per-step routing: what the next step needs, since the event was handed on.
  if (!e.route.empty()) field("route", Shown(e.route) + " (handed on: its next step needs this)");
  field("created", When(e.create_time));
  field("started", When(e.started_time));
  field("finished", When(e.finished_time));
  if (!e.batch_code.empty()) field("batch", Shown(e.batch_code));
  if (!e.trace_id.empty()) field("trace", Shown(e.trace_id));
  field("payload", Cell(e.payload, 200));
  if (JsonNestingDepth(e.payload) > kMaxJsonDepth) field("payload_error", TooDeepMessage("payload") + "; not parsed");
  if (!e.result.empty()) field("result", Cell(e.result, 300));
  if (!e.last_error.empty()) field("last_error", Cell(e.last_error, 300));

  std::cout << "\nsteps:\n";
  std::cout << "  " << std::left << std::setw(4) << "#" << std::setw(16) << "NAME" << std::setw(12) << "TYPE"
            << std::setw(13) << "STATUS" << std::setw(8) << "RETRIES" << std::setw(22) << "NODE" << "ERROR\n";
  for (const auto& st : d.steps) {
    std::cout << "  " << std::left << std::setw(4) << st.sort << std::setw(16)
              << Cell((st.parent_step_id ? "  " : "") + st.name, 15) << std::setw(12) << Cell(st.type, 11)
              << std::setw(13) << Cell(st.status, 12) << std::setw(8)
              << (std::to_string(st.retry_count) +
                  (st.compensation_retry_count ? "+" + std::to_string(st.compensation_retry_count) + "c" : ""))
              << std::setw(22) << Cell(Or(st.node_address, "-"), 21) << Cell(st.error_details, 60) << "\n";
    // A running step's progress (e.g. table_sync's chunks and rows), as it reports it.
    if ((st.status == events::ToText(events::StepStatus::kExecuting) ||
         st.status == events::ToText(events::StepStatus::kCompensating)) && !st.output.empty()) {
      std::cout << "      progress: " << Cell(st.output, 200) << "\n";
    }
  }
  if (d.steps.empty()) std::cout << "  (none yet)\n";
  if (d.steps_truncated) std::cout << "  (only the first 10000 steps and timeline entries are shown)\n";

  std::cout << "\ntimeline:\n";
  for (const auto& t : d.timeline) {
    std::cout << "  " << std::left << std::setw(24) << When(t.finished_at.empty() ? t.started_at : t.finished_at)
              << std::setw(11) << Cell(t.action, 10) << std::setw(16) << Cell(t.step_name, 15) << std::setw(13) << Cell(t.status, 12)
              << "attempt " << t.attempt << " on " << Or(t.node_address, "-")
              << (t.failures ? ", " + std::to_string(t.failures) + " failure(s)" : "") << "\n";
  }
  if (d.timeline.empty()) std::cout << "  (nothing ran yet)\n";

  std::cout << "\ntransitions (last " << d.process_log.size() << "):\n";
  if (!d.process_log_error.empty()) std::cout << "  (" << d.process_log_error << ")\n";
  for (const auto& entry : d.process_log) {
    auto str = [&](const char* k) { return entry.contains(k) && entry[k].is_string() ? entry[k].get<std::string>() : ""; };
    std::cout << "  " << std::left << std::setw(24) << Cell(When(str("at")), 23) << std::setw(13) << Cell(str("from"), 12) << "-> "
              << std::setw(13) << Cell(str("to"), 12) << std::setw(22) << Cell(str("node"), 21) << Cell(str("why"), 80) << "\n";
  }
  return 0;
}

}  // namespace

int RunEvents(const Invocation& inv) {
  if (inv.Flag("attention")) return RunEventsAttention(inv);
  if (!inv.args.empty() && inv.args[0] != "show") {
    throw UsageError("unexpected argument '" + inv.args[0] + "' for 'dsync events' (did you mean: dsync events show CODE)");
  }
  if (!inv.args.empty() && inv.args.size() != 2) throw UsageError("'dsync events show' needs CODE");
  OperatorStore s = OpenOperatorStore(inv);
  if (!inv.args.empty()) return ShowEvent(inv, s, inv.args[1]);

  if (auto batch = inv.Get("batch")) {
    auto progress = s.store->GetBatch(*batch);
    if (inv.Flag("json")) {
      PrintJson(api::ToJson(progress));
      return 0;
    }
    std::cout << "batch " << Shown(progress.batch_code) << ": " << progress.terminal << "/" << progress.total
              << " terminal (" << std::fixed << std::setprecision(1) << progress.percent_done << "%)";
    for (const auto& [status, n] : progress.by_status) std::cout << " " << Shown(status) << "=" << n;
    std::cout << "\n";
    if (const auto& c = progress.completion) {
      std::cout << "completion: " << Shown(c->status);
      if (!c->completion_code.empty()) std::cout << " " << Shown(c->completion_code);
      if (!c->conflict.empty()) std::cout << " (" << Shown(c->conflict) << ")";
      std::cout << "\n";
    }
    return 0;
  }
  api::EventFilter filter;
  filter.topic = inv.Get("topic").value_or("");
  filter.status = inv.Get("status").value_or("");
  for (auto& ch : filter.status) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (auto limit = inv.Get("limit")) filter.limit = ParseIntOption("limit", *limit, 1, 1000);
  if (auto after = inv.Get("after")) filter.after = ParseIntOption("after", *after, 1, INT32_MAX);
  auto page = s.store->List(filter);
  if (inv.Flag("json")) {
    nlohmann::json events = nlohmann::json::array();
    for (const auto& e : page.events) events.push_back(api::ToJson(e));
    PrintJson({{"events", events}, {"next", page.next ? nlohmann::json(*page.next) : nlohmann::json(nullptr)}});
    return 0;
  }
  PrintEventTable(page.events);
  if (page.events.empty()) std::cout << "(no events)\n";
  if (page.next) std::cout << "(more: --after " << *page.next << ")\n";
  return 0;
}

// --- retry -----------------------------------------------------------------

int RunRetry(const Invocation& inv) {
  api::RetryFrom from = api::RetryFrom::kFailedStep;
  if (auto f = inv.Get("from")) {
    if (*f == "start") {
      from = api::RetryFrom::kStart;
    } else if (*f != "failed-step" && *f != "failed_step") {
      throw UsageError("--from must be start or failed-step, got '" + *f + "'");
    }
  }
  OperatorStore s = OpenOperatorStore(inv);
  api::EventRow e = s.store->Retry(inv.args.at(0), from);
  if (inv.Flag("json")) {
    PrintJson(api::ToJson(e));
  } else {
    std::cout << "event " << Shown(e.code) << " re-driven "
              << (e.phase == "COMPENSATE" ? "to finish its compensation (retry it again once COMPENSATED to run it forward)"
                  : from == api::RetryFrom::kStart ? "from the start" : "from the failed step")
              << ": " << Shown(e.status) << " (version " << e.version << "); follow it: dsync events show " << Shown(e.code) << "\n";
  }
  return 0;
}

// --- drain -----------------------------------------------------------------

int RunDrain(const Invocation& inv) {
  OperatorStore s = OpenOperatorStore(inv);
  api::NodeView n = s.store->Drain(inv.args.at(0));
  if (inv.Flag("json")) {
    PrintJson(api::ToJson(n));
  } else {
    std::cout << "node " << Shown(n.node_address) << " is draining: it takes no new events, finishes its " << n.in_flight
              << " in-flight event(s) and exits (watch: dsync nodes)\n";
  }
  return 0;
}

// --- nodes -----------------------------------------------------------------

int RunNodes(const Invocation& inv) {
  OperatorStore s = OpenOperatorStore(inv);
  auto nodes = s.store->Nodes(inv.Flag("all"));
  if (inv.Flag("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& n : nodes) out.push_back(api::ToJson(n));
    PrintJson(out);
    return 0;
  }
  std::cout << std::left << std::setw(28) << "ADDRESS" << std::setw(10) << "STATUS" << std::setw(10) << "CAPACITY"
            << std::setw(11) << "IN_FLIGHT" << std::setw(7) << "LOAD" << std::setw(10) << "HEARTBEAT" << std::setw(24)
            << "TOPICS" << "DATASOURCES\n";
  for (const auto& n : nodes) {
    std::ostringstream load, age;
    load << std::fixed << std::setprecision(2) << n.load;
    age << std::fixed << std::setprecision(1) << n.heartbeat_age_ms / 1000.0 << "s";
    std::string topics;
    for (const auto& t : n.topics) topics += (topics.empty() ? "" : ",") + Shown(t);
    // DATASOURCES: those reached; "(all: not reported)" for a node of an older version.
    std::string datasources = n.datasources ? "" : "(all: not reported)";
    if (n.datasources) {
      for (const auto& d : *n.datasources) datasources += (datasources.empty() ? "" : ",") + Shown(d);
      if (datasources.empty()) datasources = "(none)";
    }
    std::cout << std::left << std::setw(28) << Shown(n.node_address) << std::setw(10) << n.status << std::setw(10)
              << n.capacity << std::setw(11) << n.in_flight << std::setw(7) << load.str() << std::setw(10)
              << age.str() << std::setw(23) << (topics.empty() ? "*" : topics) << ' ' << datasources
              << (n.metadata_valid ? "" : "  (invalid metadata)") << "\n";
    // What the node cannot do, one line each, indented under it.
    for (const auto& [name, error] : n.datasource_errors) {
      std::cout << "    unreachable datasource " << Shown(name) << ": " << Shown(error) << "\n";
    }
    for (const auto& [topic, reason] : n.bad_topics) {
      std::cout << "    bad topic " << Shown(topic) << ": " << Shown(reason) << "\n";
    }
    if (n.not_claimed_count > 0) {
      std::cout << "    did not claim " << n.not_claimed_count << " event(s) given to it (handed back; last "
                << Shown(n.last_not_claimed_time) << ")\n";
    }
  }
  if (nodes.empty()) {
    std::cout << "(no " << (inv.Flag("all") ? "" : "live ") << "nodes for service " << s.settings.service << ")\n";
  }
  return 0;
}

}  // namespace dsync::app
