// SPDX-License-Identifier: Apache-2.0
// drivers/optics: per-lane health verdicts and port states (link_health.hpp). Pure logic.
#include <algorithm>
#include <bit>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "npo/hal/link_health.hpp"

namespace npo {

namespace {
// What MODULE_PRESENT = 0 means: no module, or a light path still dark (assess_port).
constexpr std::string_view kNoModuleReason = "no module (or its cable ends at a switch port with no cross-connect yet)";
}  // namespace

std::string_view lane_health_name(LaneHealth h) noexcept {
  switch (h) {
    case LaneHealth::kGood: return "GOOD";
    case LaneHealth::kDegraded: return "DEGRADED";
    case LaneHealth::kFailing: return "FAILING";
    case LaneHealth::kDown: return "DOWN";
  }
  return "UNKNOWN";
}

std::string_view port_state_name(PortState s) noexcept {
  switch (s) {
    case PortState::kHealthy: return "HEALTHY";
    case PortState::kDegraded: return "DEGRADED";
    case PortState::kFailed: return "FAILED";
    case PortState::kDisabled: return "DISABLED";
  }
  return "UNKNOWN";
}

namespace {
// A counter that went backwards was cleared: the interval counts from 0.
std::uint64_t delta(std::uint64_t prev, std::uint64_t cur) noexcept { return cur >= prev ? cur - prev : cur; }

// RS(544,514) over GF(2^10): 5440 bits per codeword; an uncorrectable codeword counts as
// 16 symbol errors, the least it can have (registers.md §7.3).
constexpr double kBitsPerCodeword = 5440.0;
constexpr double kUncorrectableSymbols = 16.0;

LaneHealth worst(LaneHealth a, LaneHealth b) noexcept { return a > b ? a : b; }

void check_ddm(double value, const std::optional<xcvr::ThresholdSet>& t, std::string_view what, std::string_view unit,
               LaneAssessment& a) {
  if (!t) return;
  if (value > t->high_alarm) {
    a.level = worst(a.level, LaneHealth::kFailing);
    a.reasons.push_back(fmt::format("{} {:.4f} {} above high alarm {:.4f} {}", what, value, unit, t->high_alarm, unit));
  } else if (value < t->low_alarm) {
    a.level = worst(a.level, LaneHealth::kFailing);
    a.reasons.push_back(fmt::format("{} {:.4f} {} below low alarm {:.4f} {}", what, value, unit, t->low_alarm, unit));
  } else if (value > t->high_warning) {
    a.level = worst(a.level, LaneHealth::kDegraded);
    a.reasons.push_back(
        fmt::format("{} {:.4f} {} above high warning {:.4f} {}", what, value, unit, t->high_warning, unit));
  } else if (value < t->low_warning) {
    a.level = worst(a.level, LaneHealth::kDegraded);
    a.reasons.push_back(
        fmt::format("{} {:.4f} {} below low warning {:.4f} {}", what, value, unit, t->low_warning, unit));
  }
}
}  // namespace

std::optional<double> pre_fec_ber(const LaneCounters& prev, const LaneCounters& cur) noexcept {
  const std::uint64_t cw = delta(prev.codewords, cur.codewords);
  if (cw == 0) return std::nullopt;
  const double errs = static_cast<double>(delta(prev.symbol_errors, cur.symbol_errors)) +
                      kUncorrectableSymbols * static_cast<double>(delta(prev.uncorrectable, cur.uncorrectable));
  return errs / (kBitsPerCodeword * static_cast<double>(cw));
}

LaneAssessment assess_lane(const LaneCounters& prev, const LaneCounters& cur, bool locked, const LaneDdmFlags& flags,
                           const xcvr::Thresholds* thresholds, std::optional<double> baseline, bool came_back,
                           const HealthLimits& limits) {
  LaneAssessment a;
  if (!locked) {
    a.level = LaneHealth::kDown;
    a.reasons.push_back(flags.rx_los || !cur.signal ? "no signal (Rx LOS)" : "no CDR lock");
    return a;
  }
  a.codewords = delta(prev.codewords, cur.codewords);
  a.uncorrectable = delta(prev.uncorrectable, cur.uncorrectable);
  for (unsigned b = std::min<unsigned>(limits.tail_bin, 16); b < 16; ++b) {
    a.tail_codewords += delta(prev.fec_bins[b], cur.fec_bins[b]);
  }
  a.ber = pre_fec_ber(prev, cur);
  if (a.ber) {
    const double ber = *a.ber;
    if (ber > limits.ber_failing) {
      a.level = worst(a.level, LaneHealth::kFailing);
      a.reasons.push_back(fmt::format("pre-FEC BER {:.2e} above the KP4 limit {:.1e}", ber, limits.ber_failing));
    } else if (ber > limits.ber_warning) {
      a.level = worst(a.level, LaneHealth::kDegraded);
      a.reasons.push_back(fmt::format("pre-FEC BER {:.2e} above the warning level {:.1e}", ber, limits.ber_warning));
    }
    if (baseline) {
      const double base = std::max(*baseline, limits.baseline_floor);
      const double errors = ber * kBitsPerCodeword * static_cast<double>(a.codewords);
      const double ratio = ber / base;
      if (ratio >= limits.baseline_factor && errors >= static_cast<double>(limits.min_errors_for_change)) {
        a.level = worst(a.level, LaneHealth::kDegraded);
        a.reasons.push_back(fmt::format("pre-FEC BER {:.2e} is {:.0f}x the baseline {:.2e}{}", ber, ratio, *baseline,
                                        came_back ? fmt::format(" (came back {:.0f}x worse)", ratio) : ""));
      }
    }
  }
  if (a.uncorrectable > limits.uncorrectable_max) {
    a.level = worst(a.level, LaneHealth::kFailing);
    a.reasons.push_back(fmt::format("{} uncorrectable codewords", a.uncorrectable));
  }
  if (a.tail_codewords > limits.tail_max) {
    a.level = worst(a.level, LaneHealth::kFailing);
    a.reasons.push_back(
        fmt::format("FEC tail: {} codewords with >= {} symbol errors", a.tail_codewords, limits.tail_bin));
  }
  if (flags.rx_los) {
    a.level = worst(a.level, LaneHealth::kFailing);
    a.reasons.push_back("module reports Rx LOS");
  }
  if (flags.tx_fault) {
    a.level = worst(a.level, LaneHealth::kFailing);
    a.reasons.push_back("module reports Tx fault");
  }
  if (thresholds != nullptr) {
    check_ddm(cur.rx_power_mw, thresholds->rx_power_mw, "rx power", "mW", a);
    check_ddm(cur.tx_power_mw, thresholds->tx_power_mw, "tx power", "mW", a);
    check_ddm(cur.tx_bias_ma, thresholds->tx_bias_ma, "tx bias", "mA", a);
  }
  return a;
}

LaneHealthReport LaneHealthTracker::update(const LaneCounters& prev, const LaneCounters& cur, bool locked,
                                           const LaneDdmFlags& flags, const xcvr::Thresholds* thresholds) {
  LaneAssessment a = assess_lane(prev, cur, locked, flags, thresholds, baseline_, came_back_, limits_);
  LaneHealthReport r;
  r.raw = a.level;
  r.ber = a.ber;
  r.tail_codewords = a.tail_codewords;
  r.uncorrectable = a.uncorrectable;
  const bool no_evidence = !a.ber && a.reasons.empty() && a.level == LaneHealth::kGood;

  const LaneHealth before = verdict_;
  if (a.level == LaneHealth::kDown) {
    verdict_ = LaneHealth::kDown;
    came_back_ = came_back_ || baseline_.has_value();
    run_ = 0;
    run_dir_ = 0;
  } else if (!started_ || verdict_ == LaneHealth::kDown) {
    // First interval, or back from DOWN: report what this interval shows.
    if (!no_evidence || !started_) verdict_ = a.level;
    run_ = 0;
    run_dir_ = 0;
  } else if (no_evidence || a.level == verdict_) {
    run_ = 0;
    run_dir_ = 0;
  } else {
    const int dir = a.level > verdict_ ? 1 : -1;
    if (dir != run_dir_) {
      run_dir_ = dir;
      run_ = 0;
      run_level_ = a.level;
    }
    ++run_;
    // The level that persisted through the whole run: the least change from the verdict.
    run_level_ = dir > 0 ? std::min(run_level_, a.level) : std::max(run_level_, a.level);
    const unsigned need = dir > 0 ? limits_.worsen_intervals : limits_.recover_intervals;
    if (run_ >= std::max(need, 1u)) {
      verdict_ = run_level_;
      run_ = 0;
      run_dir_ = 0;
      // The run moved the verdict by the least change it held throughout; an interval beyond
      // the new verdict (FAILING when the run settled on DEGRADED) already counts toward the
      // next step, so "FAILING for 1 of 2 intervals", not "0 of 2".
      if (a.level != verdict_) {
        run_dir_ = a.level > verdict_ ? 1 : -1;
        run_ = 1;
        run_level_ = a.level;
      }
    }
  }
  started_ = true;

  // Baseline: the first healthy intervals with traffic after the lane first came up.
  if (!baseline_ && a.ber && a.level == LaneHealth::kGood) {
    base_err_ += *a.ber * kBitsPerCodeword * static_cast<double>(a.codewords);
    base_bits_ += kBitsPerCodeword * static_cast<double>(a.codewords);
    if (++base_n_ >= std::max(limits_.baseline_intervals, 1u)) baseline_ = base_err_ / base_bits_;
  }
  if (came_back_ && a.level == LaneHealth::kGood && a.ber) came_back_ = false;

  r.verdict = verdict_;
  if (no_evidence) r.raw = verdict_;  // nothing measured: the interval holds the verdict
  r.baseline_ber = baseline_;
  r.pending = run_;
  // The verdict's own reason: refreshed by every interval at the verdict's level, dropped
  // when the verdict changes without such an interval (a mixed run).
  if (verdict_ != before) verdict_reason_.clear();
  if (a.level == verdict_ && !no_evidence) {
    verdict_reason_ = !a.reasons.empty() ? a.reasons.front()
                      : a.ber            ? fmt::format("pre-FEC BER {:.2e} within limits", *a.ber)
                                         : std::string();
  }
  if (r.raw == r.verdict || r.raw == LaneHealth::kDown) {
    r.verdict_reason = verdict_reason_;
  } else {
    const unsigned need = r.raw > r.verdict ? limits_.worsen_intervals : limits_.recover_intervals;
    r.verdict_reason = fmt::format("{} ({} for {} of {} intervals)",
                                   verdict_reason_.empty() ? std::string("held by hysteresis") : verdict_reason_,
                                   lane_health_name(r.raw), run_, need);
  }
  r.reasons = std::move(a.reasons);
  if (r.verdict != r.raw && r.raw != LaneHealth::kDown) {
    r.reasons.push_back(fmt::format("{} for {} interval{}; verdict stays {} (needs {})", lane_health_name(r.raw), run_,
                                    run_ == 1 ? "" : "s", lane_health_name(r.verdict),
                                    r.raw > r.verdict ? limits_.worsen_intervals : limits_.recover_intervals));
  }
  if (r.reasons.empty()) {
    r.reasons.push_back(r.ber ? fmt::format("pre-FEC BER {:.2e} within limits", *r.ber)
                              : std::string("no codewords in the interval"));
  }
  if (r.verdict_reason.empty()) r.verdict_reason = r.reasons.front();
  return r;
}

void LaneHealthTracker::seed(const LaneCounters& since_clear, bool locked) {
  if (!locked) return;
  const LaneAssessment a = assess_lane(LaneCounters{}, since_clear, true, {}, nullptr, std::nullopt, false, limits_);
  // History, not a verdict: a lane averaged since link-up says nothing about now, but a
  // healthy average is the best baseline there is (many intervals' worth of bits).
  if (!baseline_ && a.ber && a.level == LaneHealth::kGood) baseline_ = *a.ber;
  started_ = true;
  came_back_ = false;
  verdict_ = LaneHealth::kGood;
  verdict_reason_.clear();
  run_ = 0;
  run_dir_ = 0;
}

std::uint8_t lanes_in_use(const PortStatus& st) noexcept {
  std::uint8_t m = 0;
  for (const std::uint8_t phys : st.lane_map) {
    if (phys < 8) m |= static_cast<std::uint8_t>(1u << phys);
  }
  if (m != 0) return m;
  return static_cast<std::uint8_t>(st.lane_enable & st.lanes_up);
}

namespace {

// TRAIN_RESULT.CODE names (registers.md §7.2 "Training results"), as train_code_name spells
// the host's codes.
std::string_view card_code_name(std::uint8_t code) noexcept {
  switch (code) {
    case 0: return "NONE";
    case 1: return "OK";
    case 2: return "NO_MODULE";
    case 3: return "TIMEOUT_MODULE_READY";
    case 4: return "TIMEOUT_DATAPATH_INIT";
    case 5: return "TIMEOUT_CDR_LOCK";
    case 6: return "TIMEOUT_NEIGHBOR";
    case 7: return "TIMEOUT_FEC_LOCK";
    case 8: return "ABORTED";
    default: return "UNKNOWN";
  }
}

// "lane 3", "lanes 0, 4".
std::string lane_list(std::uint8_t mask) {
  std::string out;
  for (unsigned l = 0; l < 8; ++l) {
    if ((mask >> l) & 1u) out += fmt::format("{}{}", out.empty() ? "" : ", ", l);
  }
  return fmt::format("lane{} {}", std::popcount(mask) == 1 ? "" : "s", out);
}

// Why a port with a module is not Up.
std::string down_reason(const PortStatus& st, unsigned total, const PortTraining* last) {
  if (last != nullptr && last->code != TrainCode::kOk) {
    std::string r = fmt::format("training failed: {}", train_code_name(last->code));
    if (last->code == TrainCode::kTimeoutCdrLock && last->failed_lanes != 0) {
      r += fmt::format(" (lanes 0x{:02x})", last->failed_lanes);
    }
    return r;
  }
  const auto& tr = st.train_result;
  if (st.state == LinkState::kFault) {
    // The port (not the card) gave up after its retry budget: the card's TRAIN_RESULT says
    // why; the host must act (registers.md §7.2 "Fault: the port needs host action").
    std::string r = fmt::format("port in Fault after {} attempt{}: {}", tr.attempt, tr.attempt == 1 ? "" : "s",
                                card_code_name(tr.code));
    const std::uint8_t full = static_cast<std::uint8_t>(total >= 8 ? 0xff : ((1u << total) - 1));
    const std::uint8_t usable = static_cast<std::uint8_t>(full & st.lane_enable);
    const std::uint8_t failed = static_cast<std::uint8_t>(tr.failed_lanes & usable);
    if (failed != 0) {
      r += fmt::format(", {} without CDR lock", lane_list(failed));
      const std::uint8_t rest = static_cast<std::uint8_t>(usable & ~failed);
      if (rest != 0) {
        r += fmt::format(
            "; the card does not drop lanes itself: a host retrain (npo::train_ports, npo-link train) "
            "runs on the other {}/{} lanes",
            std::popcount(rest), total);
      } else {
        r += "; no lane locks: check the fibre and the far end";
      }
    } else {
      r += "; needs a host retrain";
    }
    return r;
  }
  std::string r = fmt::format("down: {}", link_state_name(st.state));
  if (st.state == LinkState::kTraining && tr.code > 2 && tr.code != 8 && tr.attempt != 0) {
    r += fmt::format(" (attempt {} failed: {})", tr.attempt, card_code_name(tr.code));
  }
  return r;
}

}  // namespace

namespace {

/// A lane's verdict in a port's reason.
struct LaneFinding {
  unsigned lane;
  LaneHealth verdict;
  std::string why;
  std::optional<double> ber;
};

/// `why` with its numbers blanked: lanes failing for the same kind of reason group together.
std::string reason_kind(const std::string& why) {
  std::string k;
  for (std::size_t i = 0; i < why.size(); ++i) {
    const char c = why[i];
    const bool num = (c >= '0' && c <= '9') || ((c == '.' || c == '-' || c == '+' || c == 'e') && i > 0 &&
                                                why[i - 1] >= '0' && why[i - 1] <= '9');
    if (!num) {
      k += c;
    } else if (k.empty() || k.back() != '#') {
      k += '#';
    }
  }
  return k;
}

/// "0", "0-7", "0-2, 5": lane numbers (ascending) with runs joined.
std::string lane_list(const std::vector<unsigned>& l) {
  std::string out;
  for (std::size_t i = 0; i < l.size();) {
    std::size_t j = i;
    while (j + 1 < l.size() && l[j + 1] == l[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? fmt::format("{}", l[i]) : fmt::format("{}-{}", l[i], l[j]);
    i = j + 1;
  }
  return out;
}

/// One detail per group of lanes with the same verdict and the same kind of reason: "lane 2
/// FAILING: ..." for one lane, "lanes 0-7 FAILING: <the worst lane's reason> (worst: lane 3)"
/// for several (the highest pre-FEC BER, else the first), so eight failing lanes read as one.
void append_lane_findings(const std::vector<LaneFinding>& f, std::vector<std::string>& details) {
  std::vector<bool> done(f.size(), false);
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (done[i]) continue;
    const std::string kind = reason_kind(f[i].why);
    std::vector<unsigned> group;
    std::size_t worst = i;
    for (std::size_t j = i; j < f.size(); ++j) {
      if (done[j] || f[j].verdict != f[i].verdict || reason_kind(f[j].why) != kind) continue;
      done[j] = true;
      group.push_back(f[j].lane);
      if (f[j].ber && (!f[worst].ber || *f[j].ber > *f[worst].ber)) worst = j;
    }
    std::sort(group.begin(), group.end());
    const std::string_view name = lane_health_name(f[i].verdict);
    if (group.size() == 1) {
      details.push_back(fmt::format("lane {} {}: {}", f[i].lane, name, f[i].why));
    } else {
      details.push_back(
          fmt::format("lanes {} {}: {} (worst: lane {})", lane_list(group), name, f[worst].why, f[worst].lane));
    }
  }
}

}  // namespace

PortHealth assess_port(const PortStatus& st, std::span<const LaneHealthReport> lanes, unsigned lanes_total,
                       std::string_view held_reason, const PortTraining* last, const PortContext& ctx) {
  PortHealth h;
  h.lanes.assign(lanes.begin(), lanes.end());
  if (!held_reason.empty()) {
    h.state = PortState::kDisabled;
    h.reason = std::string(held_reason);
    return h;
  }
  if (!st.enabled) {
    h.state = PortState::kDisabled;
    // MODULE_PRESENT = 0 is also what a port shows whose cable ends at an optical-switch port
    // with no cross-connect yet (dark since creation, docs/topology.md "Optical switches"):
    // the registers cannot tell the two apart, so the reason names both.
    h.reason = st.module_present ? "disabled by host" : "disabled by host; " + std::string(kNoModuleReason);
    return h;
  }
  if (!st.module_present) {
    if (ctx.had_module || st.events.module_change || st.up_count > 0) {
      // A module that was there and is gone: the link it carried is down.
      h.state = PortState::kFailed;
      h.module_lost = true;
      h.reason = "module removed";
      return h;
    }
    // Nothing plugged in: nothing can fail (a cable the plan expects here is reported by
    // check_topology as missing).
    h.state = PortState::kDisabled;
    h.reason = std::string(kNoModuleReason);
    return h;
  }
  const unsigned total = lanes_total == 0 ? 8 : lanes_total;
  if (st.state != LinkState::kUp) {
    h.state = PortState::kFailed;
    h.reason = down_reason(st, total, last);
    return h;
  }
  const std::uint8_t used = lanes_in_use(st);
  // The lanes that must hold lock: LANE_MAP's, else (nothing mapped) every enabled lane.
  std::uint8_t mapped = 0;
  for (const std::uint8_t phys : st.lane_map) {
    if (phys < 8) mapped |= static_cast<std::uint8_t>(1u << phys);
  }
  const std::uint8_t must_lock = mapped != 0 ? mapped : st.lane_enable;
  const std::uint8_t locked = static_cast<std::uint8_t>(must_lock & st.lanes_up);
  if (must_lock != 0 && locked == 0) {
    // The card still says Up (it takes the link down after the 10 ms debounce), but no lane
    // in use has CDR lock: the link carries nothing.
    h.state = PortState::kFailed;
    h.reason = fmt::format("down: no CDR lock on {} in use (the card still says Up)", lane_list(must_lock));
    return h;
  }
  const unsigned in_use = st.lane_count != 0 ? st.lane_count : static_cast<unsigned>(std::popcount(st.lanes_up));
  const std::uint8_t unlocked = static_cast<std::uint8_t>(must_lock & ~st.lanes_up);
  const unsigned carrying = in_use > static_cast<unsigned>(std::popcount(unlocked))
                                ? in_use - static_cast<unsigned>(std::popcount(unlocked))
                                : 0;
  h.link_up = true;
  h.lane_count = carrying;
  h.reason = fmt::format("up {}/{} lanes", carrying, total);
  h.state = PortState::kHealthy;
  std::vector<std::string> details;
  const std::uint8_t full = static_cast<std::uint8_t>(total >= 8 ? 0xff : ((1u << total) - 1));
  const std::uint8_t dropped = static_cast<std::uint8_t>(full & ~st.lane_enable);
  if (in_use < total) h.state = PortState::kDegraded;
  for (unsigned l = 0; l < 8; ++l) {
    if ((dropped >> l) & 1u) {
      const bool cdr = last != nullptr && ((last->dropped_lanes >> l) & 1u) != 0;
      details.push_back(fmt::format("lane {} dropped ({})", l, cdr ? "no CDR lock" : "LANE_ENABLE"));
    }
  }
  std::uint8_t reported = 0;
  std::vector<LaneFinding> findings;
  for (const auto& lr : lanes) {
    if (lr.lane < 8 && ((used >> lr.lane) & 1u) == 0) {
      // Not part of the link (negotiated away by either end, registers.md §7.2): its
      // receiver state says nothing about the link's health.
      // This end kept it enabled, so the far end negotiated it away; a lane dark here too
      // (a lost lane goes dark at both ends) says so, naming this end's loss as well.
      if (((dropped >> lr.lane) & 1u) == 0) {
        details.push_back(fmt::format("lane {} not in use (the far end dropped it{})", lr.lane,
                                      lr.verdict == LaneHealth::kDown ? "; no signal here either" : ""));
      }
      continue;
    }
    if (lr.lane < 8) reported |= static_cast<std::uint8_t>(1u << lr.lane);
    if (lr.verdict == LaneHealth::kGood) continue;
    if (lr.verdict == LaneHealth::kFailing || lr.verdict == LaneHealth::kDown) {
      h.state = PortState::kFailed;
    } else if (h.state == PortState::kHealthy) {
      h.state = PortState::kDegraded;
    }
    const std::string& why =
        !lr.verdict_reason.empty() ? lr.verdict_reason : (lr.reasons.empty() ? std::string() : lr.reasons.front());
    findings.push_back({lr.lane, lr.verdict, why, lr.ber});
  }
  append_lane_findings(findings, details);
  // Lanes in use without CDR lock that no verdict covered (e.g. the first snapshot).
  for (unsigned l = 0; l < 8; ++l) {
    if (((unlocked >> l) & 1u) != 0 && ((reported >> l) & 1u) == 0) {
      h.state = PortState::kFailed;
      details.push_back(fmt::format("lane {} DOWN: no CDR lock", l));
    }
  }
  for (std::size_t i = 0; i < details.size(); ++i) h.reason += (i == 0 ? ": " : "; ") + details[i];
  return h;
}

}  // namespace npo
