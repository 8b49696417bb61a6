// SPDX-License-Identifier: Apache-2.0
#include "common/trace.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "common/output.hpp"

namespace npo::tools {
namespace {

double us(std::uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

}  // namespace

TraceWriter::TraceWriter(std::string path) : path_(std::move(path)), t0_(std::chrono::steady_clock::now()) {}

std::uint64_t TraceWriter::now_ns() const noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count());
}

void TraceWriter::complete(std::string_view name, std::string_view cat, std::uint32_t tid, std::uint64_t ts_ns,
                           std::uint64_t dur_ns, nlohmann::json args) {
  if (!enabled()) return;
  nlohmann::json e = {{"name", name}, {"cat", cat},      {"ph", "X"},         {"pid", ::getpid()},
                      {"tid", tid},   {"ts", us(ts_ns)}, {"dur", us(dur_ns)}, {"args", std::move(args)}};
  std::lock_guard lock(mu_);
  events_.push_back(std::move(e));
}

void TraceWriter::instant(std::string_view name, std::string_view cat, std::uint32_t tid, std::uint64_t ts_ns,
                          nlohmann::json args) {
  if (!enabled()) return;
  nlohmann::json e = {{"name", name},      {"cat", cat}, {"ph", "i"},       {"s", "t"},
                      {"pid", ::getpid()}, {"tid", tid}, {"ts", us(ts_ns)}, {"args", std::move(args)}};
  std::lock_guard lock(mu_);
  events_.push_back(std::move(e));
}

void TraceWriter::thread_name(std::uint32_t tid, std::string_view name, int sort) {
  if (!enabled()) return;
  std::lock_guard lock(mu_);
  events_.push_back(
      {{"name", "thread_name"}, {"ph", "M"}, {"pid", ::getpid()}, {"tid", tid}, {"args", {{"name", name}}}});
  events_.push_back({{"name", "thread_sort_index"},
                     {"ph", "M"},
                     {"pid", ::getpid()},
                     {"tid", tid},
                     {"args", {{"sort_index", sort}}}});
}

void TraceWriter::process_name(std::string_view name) {
  if (!enabled()) return;
  std::lock_guard lock(mu_);
  events_.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", ::getpid()}, {"tid", 0}, {"args", {{"name", name}}}});
}

std::size_t TraceWriter::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

Result<void> TraceWriter::write(const nlohmann::json& other_data) const {
  if (!enabled()) return {};
  std::string text;
  {
    std::lock_guard lock(mu_);
    text.reserve(events_.size() * 160 + 256);
    text += "{\"displayTimeUnit\":\"ns\",\"otherData\":";
    // where ts 0 lies on the steady clock (CLOCK_MONOTONIC): traces of several processes of
    // one host (the provider's FI_NPO_TRACE files) can be put on one time line
    nlohmann::json other = other_data.is_object() ? other_data : nlohmann::json::object();
    other["steady_origin_ns"] = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t0_.time_since_epoch()).count());
    text += other.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    text += ",\"traceEvents\":[\n";
    for (std::size_t i = 0; i < events_.size(); ++i) {
      text += events_[i].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      text += i + 1 < events_.size() ? ",\n" : "\n";
    }
    text += "]}\n";
  }
  std::ofstream out(path_, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) {
    return npo::fail(Code::kUnavailable, fmt::format("cannot write trace file '{}': {}", path_, std::strerror(errno)));
  }
  return {};
}

void trace_training(TraceWriter& trace, const LinkBringUp& up, std::uint64_t start_ns) {
  if (!trace.enabled()) return;
  for (const auto& p : up.ports) {
    const std::uint32_t tid = port_tid(p.card, p.port);
    trace.thread_name(tid, fmt::format("card {} port {}", p.card, p.port), static_cast<int>(tid));
    std::uint64_t t = start_ns;
    for (std::size_t st = 0; st < kTrainStageCount; ++st) {
      if (p.stage_ns[st] == 0) continue;
      trace.complete(fmt::format("training: {}", train_stage_name(static_cast<TrainStage>(st))), "training", tid, t,
                     p.stage_ns[st], {{"stage", train_stage_name(static_cast<TrainStage>(st))}});
      t += p.stage_ns[st];
    }
    if (p.code == TrainCode::kNoModule) continue;  // an empty cage: no link to speak of
    const bool ok = p.code == TrainCode::kOk;
    trace.instant(ok ? "link up" : "training failed", ok ? "link" : "link,fault", tid, start_ns + p.total_ns,
                  {{"code", train_code_name(p.code)},
                   {"lanes_up", p.lanes_up},
                   {"lanes_total", p.lanes_total},
                   {"detail", p.detail}});
  }
}

CLI::Option* add_trace_option(CLI::App& app, std::string& path, const std::string& what) {
  return app.add_option("--trace", path,
                        "write a Chrome/Perfetto trace-event JSON file (chrome://tracing, ui.perfetto.dev): " + what);
}

}  // namespace npo::tools
