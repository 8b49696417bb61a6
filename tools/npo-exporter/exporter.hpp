// SPDX-License-Identifier: Apache-2.0
// npo-exporter core: renders one LinkMonitor snapshot of every card, port and lane as
// Prometheus text exposition format 0.0.4 (docs/observability.md lists every metric), and
// keeps a backend open across faults (a removed card, a restarted npo-emud) so a scrape
// always answers, with `npo_up` / `npo_card_up` at 0 while something is missing.
// Uses only the public npo-hal API.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "npo/hal/hal.hpp"

namespace npo::exporter {

/// The Content-Type of the text exposition format this exporter writes.
inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

/// Renders snapshots of one System. Keeps per-port state across scrapes (time in state).
/// Thread-safety: one thread at a time (the LinkMonitor's rule).
class Collector {
 public:
  /// `system` must outlive the collector. The monitor never changes a link: flap policy is
  /// observed, not enforced (LinkMonitorOptions::enforce_flap_policy = false).
  explicit Collector(System& system);

  /// Takes one snapshot and appends every card/port/lane metric family to `out` (HELP, TYPE
  /// and samples; no `npo_up`). Returns whether every card is gone (a dead daemon reads as
  /// all cards removed). Errors: those of LinkMonitor::snapshot (kResourceExhausted).
  Result<bool> collect(std::string& out);

 private:
  /// Per port: its label sets (built once) and the state tracked for time in state.
  struct Labels {
    std::string port;                  ///< card="C",port="P"
    std::array<std::string, 8> lanes;  ///< card="C",port="P",lane="L"
    int state = -1;                    ///< last health (or training) state seen
    std::uint64_t since_ns = 0;        ///< platform clock when it was first seen
  };
  /// One port or lane of the current snapshot: its labels and where its values are.
  struct PortRow {
    const std::string* labels = nullptr;
    const PortStatus* status = nullptr;
    const PortHealth* health = nullptr;
    double time_in_state_s = 0;
  };
  struct LaneRow {
    const std::string* labels = nullptr;
    const LaneCounters* counters = nullptr;
    const LaneHealthReport* health = nullptr;  ///< null: lane not in use
  };
  static constexpr std::size_t kPortSlots = 16;  ///< ports per card in the register map
  Labels& labels_for(std::uint32_t card, unsigned port);

  System* system_;
  LinkMonitor monitor_;
  std::vector<std::string> card_labels_;  ///< `card="N"` per card (cached)
  std::vector<Labels> labels_;            ///< [card * kPortSlots + port]
  std::vector<PortRow> port_rows_;        ///< reused across scrapes
  std::vector<LaneRow> lane_rows_;
  /// Per card: `card="C",engine="E",queue="Q"` of every queue (built on first use).
  std::vector<std::vector<std::string>> queue_labels_;
  /// Per card, this scrape: the activity counters (registers.md §9); empty/absent when the card
  /// is removed or the read failed.
  std::vector<std::vector<QueueCounters>> queue_counters_;
  std::vector<std::optional<CardCounters>> card_counters_;
  /// Per card, this scrape: POWER_READ (absent: removed, failed, or firmware without it).
  std::vector<std::optional<PowerReading>> power_;
  std::vector<std::vector<ModulePower>> module_power_;
};

/// Options of an Exporter.
struct ExporterOptions {
  /// Backend URI; `emu-remote:` URIs get `mode=ro` (tools::observer_uri) before this.
  std::string uri;
  /// Train the links after opening (an in-process `emu:` backend starts with links down;
  /// npo-emud has trained its own). Never with a read-only attach.
  bool bring_up = false;
};

/// A backend kept open across faults: each scrape() (re)opens the System when it is not
/// open, and drops it when every card reads as removed or the snapshot fails, so the next
/// scrape reopens it (a restarted npo-emud is picked up). Thread-safety: one thread at a time.
class Exporter {
 public:
  explicit Exporter(ExporterOptions options);
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  /// One full exposition: `npo_up`, `npo_exporter_*` and, when the backend is up, every
  /// card/port/lane family. Never fails: an unreachable backend gives `npo_up 0`, the
  /// reason in `npo_exporter_last_error_info` and `npo_card_up 0` for every card seen before. Time: one System::open
  /// when reconnecting (bounded by the backend's own timeouts), else one snapshot.
  std::string scrape();

 private:
  ExporterOptions options_;
  std::unique_ptr<System> system_;
  std::unique_ptr<Collector> collector_;
  std::uint64_t scrapes_ = 0;
  std::uint64_t reconnects_ = 0;
  std::string last_error_;
  /// Cards of the last System that was open: while the backend is down every scrape reports
  /// each of them with `npo_card_up 0` (same labels), so a per-card alert keeps firing.
  std::size_t cards_seen_ = 0;
};

/// Escapes a label value for the text format (backslash, double quote, line feed).
/// Thread-safety: pure function.
[[nodiscard]] std::string escape_label(std::string_view v);

}  // namespace npo::exporter
