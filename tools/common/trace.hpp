// SPDX-License-Identifier: Apache-2.0
// tools/common: `--trace FILE` -- events collected in memory and written as Chrome trace-event
// JSON ({"traceEvents": [...]}, the "JSON Object Format" that chrome://tracing, Perfetto's UI
// and trace_processor load). Complete events ("ph":"X") for spans (a DMA op from submit to
// completion, a training stage), instant events ("ph":"i") for points (a fault, a link
// change), metadata ("ph":"M") naming processes and threads. Time stamps are microseconds
// (fractions allowed) since the writer was created, on the steady clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "npo/hal/error.hpp"
#include "npo/hal/port.hpp"

namespace npo::tools {

/// Collects trace events and writes them to a file. Thread-safety: every method may be
/// called from any thread (one mutex).
class TraceWriter {
 public:
  /// `path` empty: disabled (every call is a no-op and write() writes nothing).
  explicit TraceWriter(std::string path = {});

  [[nodiscard]] bool enabled() const noexcept { return !path_.empty(); }
  /// ns since the writer was created (steady clock): the time base of every event.
  [[nodiscard]] std::uint64_t now_ns() const noexcept;

  /// A span [ts_ns, ts_ns + dur_ns) on track `tid`.
  void complete(std::string_view name, std::string_view cat, std::uint32_t tid, std::uint64_t ts_ns,
                std::uint64_t dur_ns, nlohmann::json args = nlohmann::json::object());
  /// A point at ts_ns on track `tid` (thread scope).
  void instant(std::string_view name, std::string_view cat, std::uint32_t tid, std::uint64_t ts_ns,
               nlohmann::json args = nlohmann::json::object());
  /// Names track `tid` (a queue, a port) in viewers; `sort` orders tracks.
  void thread_name(std::uint32_t tid, std::string_view name, int sort = 0);
  /// Names the process (the tool) in viewers.
  void process_name(std::string_view name);

  /// Events recorded so far.
  [[nodiscard]] std::size_t size() const;

  /// Writes {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}} to the path
  /// (replacing it); otherData gets "steady_origin_ns": the steady clock (CLOCK_MONOTONIC) at
  /// ts 0. Errors: kUnavailable when the file cannot be written.
  Result<void> write(const nlohmann::json& other_data = nlohmann::json::object()) const;

 private:
  std::string path_;
  std::chrono::steady_clock::time_point t0_;
  mutable std::mutex mu_;
  std::vector<nlohmann::json> events_;
};

/// Trace track of port `port` of card `card` for training and link events (above the tools'
/// own tracks, which stay below it).
[[nodiscard]] constexpr std::uint32_t port_tid(std::uint32_t card, unsigned port) noexcept {
  return 1'000'000 + card * 16 + port;
}

/// Records a bring-up's training on `trace`: per port, one span per training stage the port
/// went through (TrainStage order, each as long as PortTraining::stage_ns, from `start_ns` on
/// the writer's clock), and an instant at its end: "link up" or "training failed" with the
/// result code and detail (ports without a module: nothing). Ports are named "card C port P".
void trace_training(TraceWriter& trace, const LinkBringUp& up, std::uint64_t start_ns);

/// Adds `--trace FILE` bound to `path`, with `what` describing the events.
CLI::Option* add_trace_option(CLI::App& app, std::string& path, const std::string& what);

}  // namespace npo::tools
