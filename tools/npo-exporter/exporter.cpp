// SPDX-License-Identifier: Apache-2.0
#include "exporter.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string_view>

#include <fmt/format.h>

#include "common/bring_up.hpp"

namespace npo::exporter {
namespace {

// Appends text and numbers to the exposition. A 1024-card scrape writes about a million
// samples, so the writer copies into the string's spare capacity with one bounds check per
// sample instead of one append per piece; finish() (or the destructor) trims the string to
// what was written.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out), len_(out.size()) {}
  ~Writer() { finish(); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  /// "# HELP name help\n# TYPE name type\n".
  void family(std::string_view name, std::string_view type, std::string_view help) {
    reserve(2 * name.size() + type.size() + help.size() + 32);
    put("# HELP ");
    put(name);
    put(' ');
    put(help);
    put("\n# TYPE ");
    put(name);
    put(' ');
    put(type);
    put('\n');
  }
  /// "name{labels} value\n" (no braces when `labels` is empty).
  void sample(std::string_view name, std::string_view labels, double v) {
    head(name, labels, {});
    number(v);
    put('\n');
  }
  void sample(std::string_view name, std::string_view labels, std::uint64_t v) {
    head(name, labels, {});
    integer(v);
    put('\n');
  }
  /// "name{labels,extra} value\n".
  void sample2(std::string_view name, std::string_view labels, std::string_view extra, std::uint64_t v) {
    head(name, labels, extra);
    integer(v);
    put('\n');
  }
  /// Trims the string to the bytes written. Idempotent.
  void finish() { out_.resize(len_); }

 private:
  /// Makes room for `n` more bytes past len_ (amortised doubling; new bytes are not zeroed).
  void reserve(std::size_t n) {
    if (len_ + n <= out_.size()) return;
    const std::size_t want = std::max(len_ + n, out_.size() * 2 + 4096);
    out_.resize_and_overwrite(want, [](char*, std::size_t k) { return k; });
  }
  void put(std::string_view v) {
    std::memcpy(out_.data() + len_, v.data(), v.size());
    len_ += v.size();
  }
  void put(char c) { out_[len_++] = c; }
  void head(std::string_view name, std::string_view labels, std::string_view extra) {
    reserve(name.size() + labels.size() + extra.size() + 48);  // + braces, comma, value, newline
    put(name);
    if (!labels.empty()) {
      put('{');
      put(labels);
      if (!extra.empty()) {
        put(',');
        put(extra);
      }
      put('}');
    }
    put(' ');
  }
  void integer(std::uint64_t v) {
    auto r = std::to_chars(out_.data() + len_, out_.data() + out_.size(), v);
    len_ = static_cast<std::size_t>(r.ptr - out_.data());
  }
  void number(double v) {
    if (std::isnan(v)) {
      put("NaN");
    } else if (std::isinf(v)) {
      put(v > 0 ? "+Inf" : "-Inf");
    } else {
      auto r = std::to_chars(out_.data() + len_, out_.data() + out_.size(), v);
      len_ = static_cast<std::size_t>(r.ptr - out_.data());
    }
  }
  std::string& out_;
  std::size_t len_;
};

constexpr std::array<LinkState, 7> kLinkStates = {
    LinkState::kDisabled, LinkState::kModuleWait, LinkState::kDataPathInit, LinkState::kTraining,
    LinkState::kFecLock,  LinkState::kUp,         LinkState::kFault};
constexpr std::array<PortState, 4> kPortStates = {PortState::kHealthy, PortState::kDegraded, PortState::kFailed,
                                                  PortState::kDisabled};
constexpr std::array<LaneHealth, 4> kLaneVerdicts = {LaneHealth::kGood, LaneHealth::kDegraded, LaneHealth::kFailing,
                                                     LaneHealth::kDown};
constexpr std::string_view kCardUpHelp =
    "Whether the card answers (0: removed, its registers read all ones, or the backend is unreachable).";
/// PORT.TRAIN_RESULT codes (TrainResultReg::code, registers.md §7.2).
constexpr std::array<std::string_view, 9> kTrainResults = {"NONE",
                                                           "OK",
                                                           "NO_MODULE",
                                                           "MODULE_NOT_READY",
                                                           "TIMEOUT_DATAPATH",
                                                           "TIMEOUT_CDR_LOCK",
                                                           "TIMEOUT_NEIGHBOR",
                                                           "TIMEOUT_FEC_LOCK",
                                                           "ABORTED"};

/// `key="NAME"` for every value of an enum, built once.
template <typename E, std::size_t N, typename NameFn>
std::array<std::string, N> label_set(std::string_view key, const std::array<E, N>& values, NameFn name) {
  std::array<std::string, N> r;
  for (std::size_t i = 0; i < N; ++i) r[i] = fmt::format("{}=\"{}\"", key, name(values[i]));
  return r;
}

}  // namespace

Collector::Labels& Collector::labels_for(std::uint32_t card, unsigned port) {
  const std::size_t k = static_cast<std::size_t>(card) * kPortSlots + port;
  Labels& lb = labels_.at(k);  // sized for every card in the constructor: rows keep pointers into it
  if (lb.port.empty()) {
    lb.port = fmt::format("card=\"{}\",port=\"{}\"", card, port);
    for (unsigned l = 0; l < lb.lanes.size(); ++l) lb.lanes[l] = fmt::format("{},lane=\"{}\"", lb.port, l);
  }
  return lb;
}

std::string escape_label(std::string_view v) {
  std::string r;
  r.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      r += "\\\\";
    } else if (c == '"') {
      r += "\\\"";
    } else if (c == '\n') {
      r += "\\n";
    } else {
      r += c;
    }
  }
  return r;
}

Collector::Collector(System& system)
    : system_(&system), monitor_(system, [] {
        LinkMonitorOptions o;
        o.enforce_flap_policy = false;
        return o;
      }()) {
  labels_.resize(system.device_count() * kPortSlots);
  card_labels_.reserve(system.device_count());
  for (std::size_t c = 0; c < system.device_count(); ++c) card_labels_.push_back(fmt::format("card=\"{}\"", c));
}

Result<bool> Collector::collect(std::string& out) {
  auto snap = monitor_.snapshot();
  if (!snap) return std::unexpected(snap.error());
  Writer w(out);

  std::vector<PortRow>& ports = port_rows_;
  std::vector<LaneRow>& lanes = lane_rows_;
  ports.clear();
  lanes.clear();
  std::size_t removed = 0;
  for (const auto& cp : snap->cards) {
    if (cp.removed) ++removed;
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      const PortStatus& st = cp.ports[i];
      const PortHealth* h = i < cp.health.size() ? &cp.health[i] : nullptr;
      Labels& lb = labels_for(cp.card, st.port);
      PortRow pr{&lb.port, &st, h, 0};
      // Time in state: since the first snapshot that saw the port's current health state
      // (the training state while the monitor gives no health).
      const int state = h != nullptr ? static_cast<int>(h->state) : 100 + static_cast<int>(st.state);
      if (lb.state != state) {
        lb.state = state;
        lb.since_ns = snap->timestamp_ns;
      }
      pr.time_in_state_s = static_cast<double>(snap->timestamp_ns - lb.since_ns) / 1e9;
      if (st.module_present) {
        for (std::size_t l = 0; l < st.lanes.size() && l < lb.lanes.size(); ++l) {
          LaneRow lr{&lb.lanes[l], &st.lanes[l], nullptr};
          if (h != nullptr) {
            for (const auto& lh : h->lanes) {
              if (lh.lane == l) lr.health = &lh;
            }
          }
          lanes.push_back(lr);
        }
      }
      ports.push_back(pr);
    }
  }

  // ---- cards ----
  w.family("npo_card_info", "gauge",
           "Identity of a card (always 1): PCI address, fabric ID, partition, model, serial, firmware, driver.");
  // GLOBAL.PARTITION now (registers.md §3.8; fabric management moves cards at run time); -1: removed.
  std::vector<std::int64_t> part(system_->device_count(), -1);
  for (std::size_t c = 0; c < system_->device_count(); ++c) {
    if (system_->device(c).info().removed) continue;
    if (auto p = system_->device(c).partition(); p) part[c] = *p;
  }
  for (std::size_t c = 0; c < system_->device_count(); ++c) {
    const DeviceInfo& d = system_->device(c).info();
    const std::string labels = fmt::format(
        "{},bdf=\"{}\",fabric_id=\"{}\",partition=\"{}\",model=\"{}\",serial=\"{:016x}\",firmware=\"{}\",driver=\"{}\"",
        card_labels_[c], escape_label(d.bdf), d.fabric_id, part[c] < 0 ? std::string("none") : std::to_string(part[c]),
        escape_label(d.model), d.serial, escape_label(d.firmware.firmware), escape_label(d.driver));
    w.sample("npo_card_info", labels, std::uint64_t{1});
  }
  w.family("npo_card_partition", "gauge",
           "The partition the card is in (GLOBAL.PARTITION; 0 unassigned): remote DMA reaches only its partition.");
  for (std::size_t c = 0; c < system_->device_count(); ++c)
    if (part[c] >= 0) w.sample("npo_card_partition", card_labels_[c], static_cast<std::uint64_t>(part[c]));
  w.family("npo_card_up", "gauge", kCardUpHelp);
  for (const auto& cp : snap->cards)
    w.sample("npo_card_up", card_labels_[cp.card], std::uint64_t{cp.removed ? 0u : 1u});
  w.family("npo_card_hbm_bytes", "gauge", "Device memory (HBM) of the card, bytes.");
  for (std::size_t c = 0; c < system_->device_count(); ++c)
    w.sample("npo_card_hbm_bytes", card_labels_[c], system_->device(c).info().hbm_bytes);
  w.family("npo_card_stats_dma", "gauge",
           "Whether the card's counters were read by one statistics DMA (1) or register by register (0).");
  for (const auto& cp : snap->cards)
    w.sample("npo_card_stats_dma", card_labels_[cp.card], std::uint64_t{cp.via_stats_dma ? 1u : 0u});

  // ---- DMA queues, windows, mailbox: the card's activity counters (registers.md §9) ----
  // Read from the card's registers (not counted here): they show the DMA of whichever process
  // owns the card, also on a read-only attach. Removed cards are skipped.
  queue_counters_.resize(system_->device_count());
  card_counters_.resize(system_->device_count());
  queue_labels_.resize(system_->device_count());
  power_.resize(system_->device_count());
  module_power_.resize(system_->device_count());
  for (std::size_t c = 0; c < system_->device_count(); ++c) {
    queue_counters_[c].clear();
    card_counters_[c].reset();
    power_[c].reset();
    module_power_[c].clear();
  }
  for (const auto& cp : snap->cards) {
    if (cp.removed || cp.card >= system_->device_count()) continue;
    const Device& dev = system_->device(cp.card);
    if (auto q = dev.queue_counters()) queue_counters_[cp.card] = std::move(*q);
    if (auto k = dev.card_counters()) card_counters_[cp.card] = *k;
    // Power (mailbox POWER_READ): absent on firmware without it, or when the read failed.
    Device& pdev = system_->device(cp.card);
    if (auto pw = pdev.power()) power_[cp.card] = *pw;
    if (auto mp = pdev.module_power()) module_power_[cp.card] = std::move(*mp);
    auto& ql = queue_labels_[cp.card];
    if (ql.size() != queue_counters_[cp.card].size()) {
      ql.clear();
      for (const auto& qc : queue_counters_[cp.card])
        ql.push_back(fmt::format("{},engine=\"{}\",queue=\"{}\"", card_labels_[cp.card], qc.engine, qc.queue));
    }
  }
  w.family("npo_dma_queue_ops_total", "counter",
           "DMA ops the queue completed, by completion status, counted by the card since its last reset "
           "(QUEUE.OPS_OK and OPS_ERROR, registers.md 9).");
  for (std::size_t c = 0; c < queue_counters_.size(); ++c) {
    const auto& qs = queue_counters_[c];
    for (std::size_t q = 0; q < qs.size(); ++q) {
      w.sample2("npo_dma_queue_ops_total", queue_labels_[c][q], "status=\"ok\"", qs[q].ops_ok);
      w.sample2("npo_dma_queue_ops_total", queue_labels_[c][q], "status=\"error\"", qs[q].ops_error);
    }
  }
  w.family("npo_dma_queue_bytes_total", "counter",
           "Bytes moved by the queue's data ops that completed OK, counted by the card since its last reset "
           "(QUEUE.BYTES).");
  for (std::size_t c = 0; c < queue_counters_.size(); ++c) {
    const auto& qs = queue_counters_[c];
    for (std::size_t q = 0; q < qs.size(); ++q) w.sample("npo_dma_queue_bytes_total", queue_labels_[c][q], qs[q].bytes);
  }
  w.family("npo_card_windows", "gauge",
           "Window table entries valid now: windows the card exports to remote ops (GLOBAL.WINDOWS_VALID).");
  for (std::size_t c = 0; c < card_counters_.size(); ++c) {
    if (card_counters_[c])
      w.sample("npo_card_windows", card_labels_[c], std::uint64_t{card_counters_[c]->windows_valid});
  }
  w.family("npo_mailbox_errors_total", "counter",
           "Requests of the card's mailbox that ended in an error status or a transport error, since the card's "
           "last reset (GLOBAL.MBOX_ERRORS).");
  for (std::size_t c = 0; c < card_counters_.size(); ++c) {
    if (card_counters_[c])
      w.sample("npo_mailbox_errors_total", card_labels_[c], std::uint64_t{card_counters_[c]->mailbox_errors});
  }

  // ---- power (mailbox.md §3.9) ----
  auto card_power = [&](std::string_view name, std::string_view type, std::string_view help, auto value) {
    w.family(name, type, help);
    for (std::size_t c = 0; c < power_.size(); ++c) {
      if (power_[c]) w.sample(name, card_labels_[c], value(*power_[c]));
    }
  };
  card_power("npo_card_power_watts", "gauge", "Card power, average over the last 10 ms, watts.",
             [](const PowerReading& p) { return p.power_mw / 1000.0; });
  card_power("npo_card_power_avg_watts", "gauge",
             "Card power averaged over the last second, watts (what the power limit bounds).",
             [](const PowerReading& p) { return p.power_avg_mw / 1000.0; });
  card_power("npo_card_energy_joules_total", "counter", "Energy the card used since it powered on, joules.",
             [](const PowerReading& p) { return static_cast<double>(p.energy_mj) / 1000.0; });
  card_power("npo_card_power_limit_watts", "gauge", "Power limit the card enforces, watts.",
             [](const PowerReading& p) { return p.limit_mw / 1000.0; });
  card_power("npo_card_power_limit_default_watts", "gauge", "Default power limit of the card, watts.",
             [](const PowerReading& p) { return p.default_limit_mw / 1000.0; });
  card_power("npo_card_throttled", "gauge",
             "Whether the card throttles its DMA engines now to hold its power limit (1) or not (0).",
             [](const PowerReading& p) { return std::uint64_t{p.throttled() ? 1u : 0u}; });
  card_power("npo_card_throttled_seconds_total", "counter",
             "Time the card spent throttled since it powered on, seconds.",
             [](const PowerReading& p) { return static_cast<double>(p.throttled_ns) / 1e9; });
  card_power("npo_card_temperature_celsius", "gauge", "Die temperature of the card, degrees Celsius.",
             [](const PowerReading& p) { return p.temp_c; });
  w.family("npo_module_power_watts", "gauge",
           "Power drawn by the port's module cage (its rail, measured by the card), watts.");
  for (std::size_t c = 0; c < module_power_.size(); ++c) {
    for (const auto& m : module_power_[c]) {
      if (m.present && m.port < kPortSlots)
        w.sample("npo_module_power_watts", labels_for(static_cast<std::uint32_t>(c), m.port).port, m.draw_mw / 1000.0);
    }
  }
  w.family("npo_module_power_class", "gauge",
           "CMIS power class (1..8) the port's module advertises (page 00h byte 200).");
  for (std::size_t c = 0; c < module_power_.size(); ++c) {
    for (const auto& m : module_power_[c]) {
      if (m.present && m.port < kPortSlots)
        w.sample("npo_module_power_class", labels_for(static_cast<std::uint32_t>(c), m.port).port,
                 std::uint64_t{m.power_class});
    }
  }

  // ---- ports ----
  w.family("npo_port_link_up", "gauge",
           "Whether the link carries traffic: both ends Up with FEC lock and every lane in use locked.");
  for (const auto& p : ports) w.sample("npo_port_link_up", *p.labels, std::uint64_t{p.health && p.health->link_up});
  w.family("npo_port_state", "gauge", "Port health state (LinkMonitor): 1 for the current state, 0 for the others.");
  static const auto kPortStateLabels = label_set("state", kPortStates, port_state_name);
  for (const auto& p : ports) {
    for (std::size_t i = 0; i < kPortStates.size(); ++i) {
      const bool cur = p.health != nullptr && p.health->state == kPortStates[i];
      w.sample2("npo_port_state", *p.labels, kPortStateLabels[i], cur ? 1u : 0u);
    }
  }
  w.family("npo_port_training_state", "gauge",
           "Port training state machine (STATUS.STATE, registers.md 7.2): 1 for the current state, 0 for the others.");
  static const auto kLinkStateLabels = label_set("state", kLinkStates, link_state_name);
  for (const auto& p : ports) {
    for (std::size_t i = 0; i < kLinkStates.size(); ++i)
      w.sample2("npo_port_training_state", *p.labels, kLinkStateLabels[i], p.status->state == kLinkStates[i] ? 1u : 0u);
  }
  w.family("npo_port_training_result", "gauge",
           "Result of the port's last training attempt (PORT.TRAIN_RESULT); the series of the current result is 1.");
  static const auto kResultLabels = label_set("result", kTrainResults, [](std::string_view n) { return n; });
  for (const auto& p : ports) {
    const auto code = p.status->train_result.code;
    w.sample2(
        "npo_port_training_result", *p.labels,
        code < kResultLabels.size() ? std::string_view(kResultLabels[code]) : std::string_view("result=\"UNKNOWN\""),
        1u);
  }
  w.family("npo_port_time_in_state_seconds", "gauge",
           "Seconds (platform clock) since this exporter first saw the port in its current health state.");
  for (const auto& p : ports) w.sample("npo_port_time_in_state_seconds", *p.labels, p.time_in_state_s);
  w.family("npo_port_speed_bytes_per_second", "gauge",
           "Payload rate of the link, bytes per second (0 when the link is not up; 800 Gb/s = 1e11).");
  for (const auto& p : ports) {
    const bool up = p.health != nullptr && p.health->link_up;
    w.sample("npo_port_speed_bytes_per_second", *p.labels, up ? p.status->speed_gbps() * 1e9 / 8 : 0.0);
  }
  w.family("npo_port_lanes", "gauge", "Lanes carrying the link when it is up, else 0.");
  for (const auto& p : ports)
    w.sample("npo_port_lanes", *p.labels, std::uint64_t{p.health ? p.health->lane_count : 0u});
  w.family("npo_port_lanes_up", "gauge", "Physical lanes with signal and CDR lock (STATUS.LANES_UP).");
  for (const auto& p : ports)
    w.sample("npo_port_lanes_up", *p.labels, static_cast<std::uint64_t>(std::popcount(p.status->lanes_up)));
  w.family("npo_port_module_present", "gauge", "Whether a transceiver module sits in the port's cage.");
  for (const auto& p : ports) w.sample("npo_port_module_present", *p.labels, std::uint64_t{p.status->module_present});
  w.family("npo_port_flaps_total", "counter", "Link flaps of the port since reset (PORT.FLAP_COUNT).");
  for (const auto& p : ports) w.sample("npo_port_flaps_total", *p.labels, std::uint64_t{p.status->flap_count});
  w.family("npo_port_link_up_transitions_total", "counter", "Entries of the link into Up since reset (PORT.UP_COUNT).");
  for (const auto& p : ports)
    w.sample("npo_port_link_up_transitions_total", *p.labels, std::uint64_t{p.status->up_count});
  w.family("npo_port_training_attempts_total", "counter",
           "Training attempts of the port since reset (PORT.TRAIN_COUNT).");
  for (const auto& p : ports)
    w.sample("npo_port_training_attempts_total", *p.labels, std::uint64_t{p.status->train_count});
  w.family("npo_port_module_temperature_celsius", "gauge", "Transceiver module temperature (DDM), degrees Celsius.");
  for (const auto& p : ports) {
    if (p.status->module_temp_c) w.sample("npo_port_module_temperature_celsius", *p.labels, *p.status->module_temp_c);
  }
  w.family("npo_port_module_supply_volts", "gauge", "Transceiver module supply voltage (DDM), volts.");
  for (const auto& p : ports) {
    if (p.status->module_vcc_v) w.sample("npo_port_module_supply_volts", *p.labels, *p.status->module_vcc_v);
  }

  // ---- lanes ----
  w.family("npo_lane_pre_fec_ber", "gauge",
           "Pre-FEC bit error ratio of the lane over the last monitor interval (lanes in use with traffic).");
  for (const auto& l : lanes) {
    if (l.health != nullptr && l.health->ber) w.sample("npo_lane_pre_fec_ber", *l.labels, *l.health->ber);
  }
  w.family(
      "npo_lane_health", "gauge",
      "Lane health verdict with hysteresis (GOOD, DEGRADED, FAILING, DOWN): 1 for the current verdict, lanes in use.");
  static const auto kVerdictLabels = label_set("verdict", kLaneVerdicts, lane_health_name);
  for (const auto& l : lanes) {
    if (l.health == nullptr) continue;
    for (std::size_t i = 0; i < kLaneVerdicts.size(); ++i)
      w.sample2("npo_lane_health", *l.labels, kVerdictLabels[i], l.health->verdict == kLaneVerdicts[i] ? 1u : 0u);
  }
  w.family("npo_lane_in_use", "gauge", "Whether the lane carries the port's link (negotiated lane map).");
  for (const auto& l : lanes) w.sample("npo_lane_in_use", *l.labels, std::uint64_t{l.health != nullptr});
  w.family("npo_lane_fec_codewords_total", "counter", "RS(544,514) codewords received on the lane.");
  for (const auto& l : lanes) w.sample("npo_lane_fec_codewords_total", *l.labels, l.counters->codewords);
  w.family("npo_lane_fec_corrected_codewords_total", "counter", "Codewords the FEC corrected (1..15 symbol errors).");
  for (const auto& l : lanes) w.sample("npo_lane_fec_corrected_codewords_total", *l.labels, l.counters->corrected);
  w.family("npo_lane_fec_uncorrectable_codewords_total", "counter",
           "Codewords the FEC could not correct (more than 15 symbol errors).");
  for (const auto& l : lanes)
    w.sample("npo_lane_fec_uncorrectable_codewords_total", *l.labels, l.counters->uncorrectable);
  w.family("npo_lane_fec_symbol_errors_total", "counter", "Symbols the FEC corrected.");
  for (const auto& l : lanes) w.sample("npo_lane_fec_symbol_errors_total", *l.labels, l.counters->symbol_errors);
  w.family(
      "npo_lane_fec_codewords_by_symbol_errors_total", "counter",
      "Codewords by number of symbol errors (FEC histogram bins 0..15; bins 1..15 appear from their first count).");
  static const std::array<std::string, 16> kBins = [] {
    std::array<std::string, 16> b;
    for (unsigned i = 0; i < 16; ++i) b[i] = fmt::format("bin=\"{}\"", i);
    return b;
  }();
  // Bin 0 always; bins 1..15 from their first count on (a healthy lane has 15 empty bins:
  // writing them would double a 1024-card exposition). An absent bin reads as 0.
  for (const auto& l : lanes) {
    for (unsigned b = 0; b < 16; ++b) {
      if (b == 0 || l.counters->fec_bins[b] != 0)
        w.sample2("npo_lane_fec_codewords_by_symbol_errors_total", *l.labels, kBins[b], l.counters->fec_bins[b]);
    }
  }
  w.family("npo_lane_snr_decibels", "gauge", "Receiver signal-to-noise ratio of the lane, dB (0: no signal).");
  for (const auto& l : lanes) w.sample("npo_lane_snr_decibels", *l.labels, l.counters->snr_db);
  w.family("npo_lane_cdr_lock", "gauge", "Whether the lane's receiver has clock and data recovery lock.");
  for (const auto& l : lanes) w.sample("npo_lane_cdr_lock", *l.labels, std::uint64_t{l.counters->cdr_lock});
  w.family("npo_lane_tx_bias_amperes", "gauge", "Laser bias current of the lane (DDM), amperes.");
  for (const auto& l : lanes) w.sample("npo_lane_tx_bias_amperes", *l.labels, l.counters->tx_bias_ma / 1e3);
  w.family("npo_lane_tx_power_watts", "gauge", "Optical transmit power of the lane (DDM), watts.");
  for (const auto& l : lanes) w.sample("npo_lane_tx_power_watts", *l.labels, l.counters->tx_power_mw / 1e3);
  w.family("npo_lane_rx_power_watts", "gauge", "Optical receive power of the lane (DDM), watts.");
  for (const auto& l : lanes) w.sample("npo_lane_rx_power_watts", *l.labels, l.counters->rx_power_mw / 1e3);

  return removed == snap->cards.size() && !snap->cards.empty();
}

Exporter::Exporter(ExporterOptions options) : options_(std::move(options)) {}
Exporter::~Exporter() = default;

std::string Exporter::scrape() {
  const auto t0 = std::chrono::steady_clock::now();
  ++scrapes_;
  std::string body;
  bool up = false;
  if (!system_) {
    auto s = System::open(options_.uri);
    if (!s) {
      last_error_ = s.error().to_string();
    } else {
      system_ = std::move(*s);
      if (scrapes_ > 1) ++reconnects_;
      if (options_.bring_up) {
        if (auto f = tools::bring_up(*system_); !f) last_error_ = f.error().error.to_string();
      }
      collector_ = std::make_unique<Collector>(*system_);
      cards_seen_ = system_->device_count();
    }
  }
  if (collector_) {
    body.reserve(1u << 20);
    auto gone = collector_->collect(body);
    if (!gone) {
      last_error_ = gone.error().to_string();
      body.clear();
    } else {
      up = true;
      if (*gone) {
        // Every card reads as removed: a dead daemon (or a backend that lost all cards).
        // Report them at 0 now and reopen on the next scrape.
        last_error_ = "every card reads as removed";
        up = false;
      } else {
        last_error_.clear();
      }
    }
    if (!up) {
      collector_.reset();
      system_.reset();
    }
  }
  std::string out;
  out.reserve(body.size() + 1024);
  {
    Writer w(out);
    w.family("npo_up", "gauge", "Whether the backend answered the last scrape (0: unreachable, or every card gone).");
    w.sample("npo_up", "", std::uint64_t{up ? 1u : 0u});
    w.family("npo_exporter_scrapes_total", "counter", "Scrapes this exporter served.");
    w.sample("npo_exporter_scrapes_total", "", scrapes_);
    w.family("npo_exporter_reconnects_total", "counter", "Times the exporter reopened the backend after losing it.");
    w.sample("npo_exporter_reconnects_total", "", reconnects_);
    w.family("npo_exporter_last_error_info", "gauge", "The last error of the backend (1 while there is one).");
    if (!last_error_.empty()) {
      w.sample("npo_exporter_last_error_info", fmt::format("error=\"{}\"", escape_label(last_error_)),
               std::uint64_t{1});
    }
  }
  if (body.empty() && cards_seen_ != 0) {
    // The backend is down (the collector wrote nothing): every card seen before is reported
    // not answering, with the labels it had, so `npo_card_up == 0` alerts fire and hold.
    Writer w(out);
    w.family("npo_card_up", "gauge", kCardUpHelp);
    for (std::size_t c = 0; c < cards_seen_; ++c)
      w.sample("npo_card_up", fmt::format("card=\"{}\"", c), std::uint64_t{0});
  }
  out += body;
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Writer w(out);
  w.family("npo_exporter_scrape_duration_seconds", "gauge", "Wall time this scrape took to collect, seconds.");
  w.sample("npo_exporter_scrape_duration_seconds", "", dt);
  w.finish();
  return out;
}

}  // namespace npo::exporter
