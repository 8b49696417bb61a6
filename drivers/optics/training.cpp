// SPDX-License-Identifier: Apache-2.0
// drivers/optics: the host-side link training supervisor (link_training.hpp) and
// bring_up_links. One non-blocking FSM per port, all stepped from one poll loop that sleeps
// on the platform clock until the next deadline or poll tick.
#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "card/access.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/backend.hpp"
#include "npo/hal/link_training.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/transceiver.hpp"

namespace npo {

namespace regs = fw::regs;
namespace pr = fw::regs::port;

namespace {
/// CMIS 5.2 §8.9.3: page 11h bytes 134..152 are the latched lane flags (Tx fault, LOS, CDR
/// LOL, adaptive-EQ fault, power/bias alarms and warnings; Rx LOS at 147, Rx CDR LOL at 148).
constexpr std::uint8_t kCmisLatchedLaneFlagsBegin = 134;
constexpr std::uint8_t kCmisLatchedLaneFlagsEnd = 153;  // one past the last
}  // namespace

std::string_view train_code_name(TrainCode c) noexcept {
  switch (c) {
    case TrainCode::kOk: return "OK";
    case TrainCode::kNoModule: return "NO_MODULE";
    case TrainCode::kTimeoutModuleReady: return "TIMEOUT_MODULE_READY";
    case TrainCode::kTimeoutDatapathInit: return "TIMEOUT_DATAPATH_INIT";
    case TrainCode::kTimeoutCdrLock: return "TIMEOUT_CDR_LOCK";
    case TrainCode::kTimeoutNeighbor: return "TIMEOUT_NEIGHBOR";
    case TrainCode::kTimeoutFecLock: return "TIMEOUT_FEC_LOCK";
    case TrainCode::kDisabledFlapping: return "DISABLED_FLAPPING";
    case TrainCode::kCardRemoved: return "CARD_REMOVED";
  }
  return "UNKNOWN";
}

std::string_view train_stage_name(TrainStage s) noexcept {
  switch (s) {
    case TrainStage::kDetect: return "detect";
    case TrainStage::kModuleReady: return "module_ready";
    case TrainStage::kDataPathInit: return "datapath_init";
    case TrainStage::kCdrLock: return "cdr_lock";
    case TrainStage::kFecLock: return "fec_lock";
    case TrainStage::kNeighbor: return "neighbor";
    case TrainStage::kDone: return "done";
  }
  return "unknown";
}

std::optional<std::uint64_t> cmis_duration_ns(std::uint8_t code) noexcept {
  // CMIS 5.2 Table 8-43: each code is a range; the upper bound is the timeout.
  constexpr std::uint64_t kMs = 1'000'000;
  constexpr std::array<std::uint64_t, 13> kUpper = {1 * kMs,      5 * kMs,      10 * kMs,     50 * kMs,    100 * kMs,
                                                    500 * kMs,    1000 * kMs,   5000 * kMs,   10000 * kMs, 60000 * kMs,
                                                    300000 * kMs, 600000 * kMs, 3000000 * kMs};
  if (code < kUpper.size()) return kUpper[code];
  return std::nullopt;
}

// ---- FlapDamper ---------------------------------------------------------------------------

bool FlapDamper::on_down(std::uint64_t t_ns, unsigned count) {
  for (unsigned i = 0; i < count; ++i) downs_.push_back(t_ns);
  while (!downs_.empty() && t_ns >= policy_.window_ns && downs_.front() <= t_ns - policy_.window_ns) {
    downs_.pop_front();
  }
  if (!held_ && policy_.max_downs > 0 && downs_.size() >= policy_.max_downs) {
    held_ = true;
    held_downs_ = static_cast<unsigned>(downs_.size());
    return true;
  }
  return false;
}

unsigned FlapDamper::downs_in_window(std::uint64_t t_ns) const noexcept {
  unsigned n = 0;
  for (auto t : downs_) {
    if (t_ns < policy_.window_ns || t > t_ns - policy_.window_ns) ++n;
  }
  return n;
}

std::string FlapDamper::reason() const {
  if (!held_) return {};
  const double s = static_cast<double>(policy_.window_ns) / 1e9;
  return fmt::format("held down: {} flaps in {:g} s", held_downs_, s);
}

void FlapDamper::release() noexcept {
  held_ = false;
  held_downs_ = 0;
  downs_.clear();
}

// ---- The supervisor -----------------------------------------------------------------------

namespace {

constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();

TrainCode map_card_code(std::uint8_t code) noexcept {
  switch (static_cast<pr::TrainResult>(code)) {
    case pr::TrainResult::kNoModule: return TrainCode::kNoModule;
    case pr::TrainResult::kModuleNotReady: return TrainCode::kTimeoutModuleReady;
    case pr::TrainResult::kDataPathTimeout: return TrainCode::kTimeoutDatapathInit;
    case pr::TrainResult::kCdrLockTimeout: return TrainCode::kTimeoutCdrLock;
    case pr::TrainResult::kNeighborTimeout: return TrainCode::kTimeoutNeighbor;
    case pr::TrainResult::kFecLockTimeout: return TrainCode::kTimeoutFecLock;
    default: return TrainCode::kOk;
  }
}

TrainCode stage_timeout_code(TrainStage s) noexcept {
  switch (s) {
    case TrainStage::kDetect: return TrainCode::kNoModule;
    case TrainStage::kModuleReady: return TrainCode::kTimeoutModuleReady;
    case TrainStage::kDataPathInit: return TrainCode::kTimeoutDatapathInit;
    case TrainStage::kCdrLock: return TrainCode::kTimeoutCdrLock;
    case TrainStage::kFecLock: return TrainCode::kTimeoutFecLock;
    case TrainStage::kNeighbor: return TrainCode::kTimeoutNeighbor;
    case TrainStage::kDone: return TrainCode::kOk;
  }
  return TrainCode::kOk;
}

std::string lane_list(std::uint8_t mask) {
  std::string s;
  for (unsigned l = 0; l < 8; ++l) {
    if ((mask >> l) & 1u) s += fmt::format("{}{}", s.empty() ? "" : ",", l);
  }
  return s;
}

class Supervisor {
 public:
  Supervisor(System& sys, const TrainingPolicy& pol) : sys_(sys), pol_(pol), clock_(card::clock_of(sys)) {}

  struct Fsm {
    Device* dev = nullptr;
    backend::Mmio* m = nullptr;
    PortTraining res;
    TrainStage stage = TrainStage::kDetect;
    std::uint64_t stage_start = 0;
    std::uint64_t deadline = kNever;
    std::uint64_t next_poll = 0;
    std::uint32_t last_status = 0;
    std::uint32_t last_result = 0;
    std::uint32_t flap0 = 0;
    std::uint8_t full_mask = 0xff;
    std::uint8_t enable = 0xff;
    std::uint8_t last_failed = 0;
    unsigned same_failures = 0;
    bool done = false;
    bool cmis_read = false;  // the CMIS state of the current stage was read (once per stage)
  };

  void add(const PortRef& ref, bool retrain, bool held) {
    Fsm f;
    f.dev = &sys_.device(ref.card);
    f.m = card::access(*f.dev).bar0;
    f.res.card = ref.card;
    f.res.port = ref.port;
    f.res.lanes_total = f.dev->info().lanes_per_port;
    f.full_mask = static_cast<std::uint8_t>(f.res.lanes_total >= 8 ? 0xff : ((1u << f.res.lanes_total) - 1));
    f.enable = f.full_mask;
    f.res.module_ready_timeout_ns = pol_.module_ready_ns;
    f.res.datapath_init_timeout_ns = pol_.datapath_init_ns;
    f.stage_start = t0_;
    f.deadline = t0_ + pol_.detect_ns;
    const std::uint32_t ctrl = f.m->read32(regs::port_reg(ref.port, pr::kCtrl));
    if (ctrl == 0xffffffffu && removed(f)) {
      finish(f, TrainCode::kCardRemoved, t0_);
    } else if (held) {
      f.m->write32(regs::port_reg(ref.port, pr::kCtrl), pr::kCtrlEnable.set(ctrl, 0));
      f.res.detail = "held down by the flap policy";
      finish(f, TrainCode::kDisabledFlapping, t0_);
    } else {
      f.last_result = f.m->read32(regs::port_reg(ref.port, pr::kTrainResult));
      f.flap0 = f.m->read32(regs::port_reg(ref.port, pr::kFlapCount));
      // An observer (read-only attach) follows the port as it is: its writes would be dropped.
      const bool ro = f.dev->info().read_only;
      if (!ro) f.m->write32(regs::port_reg(ref.port, pr::kTrainTimeout), pol_.train_timeout_ms);
      const std::uint32_t st = f.m->read32(regs::port_reg(ref.port, pr::kStatus));
      const auto state = static_cast<LinkState>(pr::kStatusState.get(st));
      f.res.up_at_start = state == LinkState::kUp;
      // A fresh training tries every lane again; a link already up keeps the lanes it runs on.
      const auto cur = static_cast<std::uint8_t>(
          pr::kLaneEnableMask.get(f.m->read32(regs::port_reg(ref.port, pr::kLaneEnable))) & f.full_mask);
      if (state == LinkState::kUp && !retrain && pr::kCtrlEnable.get(ctrl) && cur != 0) {
        f.enable = cur;
      } else if (!ro) {
        f.m->write32(regs::port_reg(ref.port, pr::kLaneEnable), f.full_mask);
      }
      const std::uint32_t base = ctrl & ~(pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask());
      if (ro) {
        // nothing to start
      } else if (!pr::kCtrlEnable.get(ctrl)) {
        f.m->write32(regs::port_reg(ref.port, pr::kCtrl), pr::kCtrlEnable.set(base, 1));
      } else if (retrain || state == LinkState::kFault || base != ctrl) {
        f.m->write32(regs::port_reg(ref.port, pr::kCtrl), base | pr::kCtrlTrain.mask());
      }
    }
    fsms_.push_back(std::move(f));
  }

  void run(std::uint64_t timeout_ns) {
    const std::uint64_t end = timeout_ns > kNever - t0_ ? kNever : t0_ + timeout_ns;
    for (;;) {
      std::uint64_t now = clock_.now_ns();
      std::uint64_t next = kNever;
      bool pending = false;
      const Fsm* gone = nullptr;
      for (auto& f : fsms_) {
        if (f.done) continue;
        if (now >= f.next_poll || now >= f.deadline) step(f, now);
        if (f.done) {
          if (f.res.code == TrainCode::kCardRemoved && gone == nullptr) gone = &f;
          continue;
        }
        pending = true;
        next = std::min({next, f.next_poll, f.deadline});
      }
      if (!pending) break;
      if (gone != nullptr && stop_on_removal) {
        // A whole-fabric bring-up cannot complete without the card: its partners would only
        // run into their stage timeouts. Stop now; the caller reports the removed card.
        for (auto& f : fsms_) {
          if (!f.done) {
            f.res.detail = fmt::format("bring-up stopped: card {} removed", gone->res.card);
            finish(f, stage_timeout_code(f.stage), now);
          }
        }
        break;
      }
      if (now >= end) {
        for (auto& f : fsms_) {
          if (!f.done) {
            f.res.detail =
                fmt::format("bring-up timeout ({} ms) in stage {}", timeout_ns / 1'000'000, train_stage_name(f.stage));
            finish(f, stage_timeout_code(f.stage), now);
          }
        }
        break;
      }
      next = std::min(next, end);
      if (next > now) clock_.sleep_until(next);
    }
  }

  std::vector<PortTraining> results() {
    std::vector<PortTraining> out;
    out.reserve(fsms_.size());
    for (auto& f : fsms_) out.push_back(std::move(f.res));
    return out;
  }

  std::uint64_t t0_ = 0;
  /// Stop supervising every port as soon as one card is found removed (bring_up_links).
  bool stop_on_removal = false;

 private:
  bool removed(Fsm& f) { return f.m->read32(regs::global::kMagic) == 0xffffffffu; }

  std::uint64_t rel(std::uint64_t now) const { return now - t0_; }

  void enter(Fsm& f, TrainStage s, std::uint64_t now) {
    if (f.stage != s) {
      f.res.stage_ns[static_cast<std::size_t>(f.stage)] += now - f.stage_start;
      f.stage = s;
      f.stage_start = now;
      f.cmis_read = false;
    }
    f.next_poll = now + pol_.poll_ns;
    const std::uint64_t slack = pol_.slack_ns;
    switch (s) {
      case TrainStage::kDetect: f.deadline = now + pol_.detect_ns; break;
      case TrainStage::kModuleReady: f.deadline = now + f.res.module_ready_timeout_ns + slack; break;
      case TrainStage::kDataPathInit: f.deadline = now + f.res.datapath_init_timeout_ns + slack; break;
      case TrainStage::kCdrLock: {
        // The card makes card_attempts attempts of TRAIN_TIMEOUT (+ t_fec) before Fault.
        const std::uint64_t attempt = std::uint64_t{pol_.train_timeout_ms} * 1'000'000 + pol_.fec_lock_ns;
        f.deadline = now + std::max(1u, pol_.card_attempts) * attempt + slack;
        break;
      }
      case TrainStage::kFecLock: f.deadline = now + pol_.fec_lock_ns + slack; break;
      case TrainStage::kNeighbor: f.deadline = now + pol_.neighbor_ns + slack; break;
      case TrainStage::kDone: f.deadline = kNever; break;
    }
  }

  void finish(Fsm& f, TrainCode code, std::uint64_t now) {
    if (f.stage != TrainStage::kDone) f.res.stage_ns[static_cast<std::size_t>(f.stage)] += now - f.stage_start;
    f.res.code = code;
    f.res.total_ns = rel(now);
    f.done = true;
    f.res.lane_enable = f.enable;
    f.res.dropped_lanes = static_cast<std::uint8_t>(f.full_mask & ~f.enable);
    if (code == TrainCode::kOk) {
      f.res.stage = TrainStage::kDone;
      f.stage = TrainStage::kDone;
      const std::uint32_t st = f.m->read32(regs::port_reg(f.res.port, pr::kStatus));
      f.res.lanes_up = pr::kStatusLaneCount.get(st);
      if (f.res.lanes_up == 0) f.res.lanes_up = static_cast<unsigned>(std::popcount(f.enable));
      std::string d = fmt::format("up {}/{} lanes", f.res.lanes_up, f.res.lanes_total);
      if (f.res.dropped_lanes != 0) {
        d += fmt::format(": lane{} {} dropped (no CDR lock)", std::popcount(f.res.dropped_lanes) > 1 ? "s" : "",
                         lane_list(f.res.dropped_lanes));
      }
      f.res.detail = d;
    } else {
      f.res.stage = f.stage;
      if (f.res.detail.empty()) {
        f.res.detail = fmt::format("{} in stage {}", train_code_name(code), train_stage_name(f.stage));
        if (code == TrainCode::kTimeoutCdrLock && f.res.failed_lanes != 0) {
          f.res.detail += fmt::format(" (lanes {} without CDR lock)", lane_list(f.res.failed_lanes));
        }
      }
    }
  }

  /// The card gave up (Fault) or the host deadline passed with `code`: retry with a fresh
  /// budget if the host budget allows, else finish.
  void fail_or_retry(Fsm& f, TrainCode code, std::uint8_t lanes, bool from_card, std::uint64_t now) {
    if (!from_card) {
      f.res.attempts.push_back(
          {.attempt = 0, .code = code, .failed_lanes = lanes, .from_card = false, .at_ns = rel(now)});
    }
    if (code == TrainCode::kTimeoutCdrLock) f.res.failed_lanes = lanes;
    if (code != TrainCode::kNoModule && f.res.host_retries < pol_.host_retries) {
      ++f.res.host_retries;
      const std::uint32_t ctrl = f.m->read32(regs::port_reg(f.res.port, pr::kCtrl));
      f.m->write32(regs::port_reg(f.res.port, pr::kCtrl), ctrl | pr::kCtrlTrain.mask());
      enter(f, TrainStage::kModuleReady, now);
      return;
    }
    finish(f, code, now);
  }

  /// New TRAIN_RESULT values: record the attempt; lane degrade on repeated partial CDR failure.
  void on_result(Fsm& f, std::uint32_t raw, std::uint64_t now) {
    f.last_result = raw;
    const auto code = static_cast<std::uint8_t>(pr::kTrainResultCode.get(raw));
    if (code == static_cast<std::uint8_t>(pr::TrainResult::kNone) ||
        code == static_cast<std::uint8_t>(pr::TrainResult::kAborted)) {
      return;
    }
    const auto lanes = static_cast<std::uint8_t>(pr::kTrainResultLanes.get(raw) & f.enable);
    const TrainCode tc = map_card_code(code);
    f.res.attempts.push_back({.attempt = pr::kTrainResultAttempt.get(raw),
                              .code = tc,
                              .failed_lanes = lanes,
                              .from_card = true,
                              .at_ns = rel(now)});
    if (tc != TrainCode::kTimeoutCdrLock) {
      f.same_failures = 0;
      f.last_failed = 0;
      return;
    }
    f.res.failed_lanes = lanes;
    f.same_failures = (lanes == f.last_failed) ? f.same_failures + 1 : 1;
    f.last_failed = lanes;
    const auto remaining = static_cast<std::uint8_t>(f.enable & ~lanes);
    if (pol_.allow_degrade && lanes != 0 && remaining != 0 &&
        static_cast<unsigned>(std::popcount(remaining)) >= pol_.min_lanes &&
        f.same_failures >= std::max(1u, pol_.degrade_after_attempts)) {
      f.enable = remaining;
      f.same_failures = 0;
      f.last_failed = 0;
      f.m->write32(regs::port_reg(f.res.port, pr::kLaneEnable), f.enable);
      const std::uint32_t ctrl = f.m->read32(regs::port_reg(f.res.port, pr::kCtrl));
      f.m->write32(regs::port_reg(f.res.port, pr::kCtrl), ctrl | pr::kCtrlTrain.mask());
      enter(f, TrainStage::kCdrLock, now);  // fresh budget: new deadline
      f.stage_start = now;
    }
  }

  /// Reads the module's advertised durations (page 01h bytes 144 and 167) once per port.
  void read_durations(Fsm& f) {
    if (!pol_.use_module_durations) return;
    std::array<std::byte, 24> b{};  // page 01h bytes 144..167
    if (!read_transceiver(*f.dev, f.res.port, 0, 0x01, 144, b)) return;
    if (auto d = cmis_duration_ns(static_cast<std::uint8_t>(b[0]) & 0x0f)) f.res.datapath_init_timeout_ns = *d;
    if (auto d = cmis_duration_ns(static_cast<std::uint8_t>(b[23]) & 0x0f)) f.res.module_ready_timeout_ns = *d;
  }

  /// CMIS Module State (lower page byte 3 bits 3:1); nullopt if unreadable.
  std::optional<std::uint8_t> module_state(Fsm& f) {
    std::array<std::byte, 1> b{};
    if (!read_transceiver(*f.dev, f.res.port, 0, 0, 3, b)) return std::nullopt;
    return static_cast<std::uint8_t>((static_cast<std::uint8_t>(b[0]) >> 1) & 0x7);
  }

  /// Whether every enabled lane's DataPathState (page 11h bytes 128..131) is DPActivated (4);
  /// nullopt when page 11h cannot be read.
  std::optional<bool> datapath_activated(Fsm& f) {
    std::array<std::byte, 4> b{};
    if (!read_transceiver(*f.dev, f.res.port, 0, 0x11, 128, b)) return std::nullopt;
    for (unsigned l = 0; l < 8; ++l) {
      if (((f.enable >> l) & 1u) == 0) continue;
      const unsigned v = (static_cast<unsigned>(b[l / 2]) >> ((l % 2) * 4)) & 0xf;
      if (v != 4) return false;
    }
    return true;
  }

  void step(Fsm& f, std::uint64_t now) {
    const unsigned p = f.res.port;
    const std::uint32_t st = f.m->read32(regs::port_reg(p, pr::kStatus));
    if (st == 0xffffffffu && removed(f)) {
      finish(f, TrainCode::kCardRemoved, now);
      return;
    }
    const auto state = static_cast<LinkState>(pr::kStatusState.get(st));
    const bool present = pr::kStatusModulePresent.get(st) != 0;
    const bool changed = st != f.last_status;
    f.last_status = st;
    // Flaps during supervision count against the flap policy.
    const std::uint32_t flaps = f.m->read32(regs::port_reg(p, pr::kFlapCount)) - f.flap0;
    if (pol_.flap.max_downs > 0 && flaps >= pol_.flap.max_downs) {
      const std::uint32_t ctrl = f.m->read32(regs::port_reg(p, pr::kCtrl));
      f.m->write32(regs::port_reg(p, pr::kCtrl), pr::kCtrlEnable.set(ctrl, 0));
      f.res.detail = fmt::format("held down: {} flaps during training", flaps);
      finish(f, TrainCode::kDisabledFlapping, now);
      return;
    }
    const std::uint32_t tr = f.m->read32(regs::port_reg(p, pr::kTrainResult));
    if (tr != f.last_result) on_result(f, tr, now);
    if (f.done) return;

    if (!present && f.stage != TrainStage::kDetect) {
      f.res.detail = fmt::format("module absent in stage {}", train_stage_name(f.stage));
      finish(f, TrainCode::kNoModule, now);
      return;
    }
    const std::uint64_t in_stage = now - f.stage_start;
    // Poll proportionally to the time already spent (1/8), between poll_ns and 8 x poll_ns.
    auto schedule = [&] {
      f.next_poll = now + std::clamp<std::uint64_t>(in_stage / 8, pol_.poll_ns, 8 * pol_.poll_ns);
      if (changed) f.next_poll = now + pol_.poll_ns;
    };

    switch (f.stage) {
      case TrainStage::kDetect:
        if (present) {
          read_durations(f);
          enter(f, TrainStage::kModuleReady, now);
          f.next_poll = now;  // the module-ready check at once: no tick lost
          return;
        }
        if (now >= f.deadline) {
          f.res.detail = "no module";
          finish(f, TrainCode::kNoModule, now);
          return;
        }
        schedule();
        return;
      case TrainStage::kModuleReady:
        if (state >= LinkState::kDataPathInit && state != LinkState::kFault) {
          enter(f, TrainStage::kDataPathInit, now);
          f.next_poll = now;
          return;
        }
        // Once per stage: the module's own view (CMIS Module State). The card drives the
        // module; the host reads it to report where a slow module is.
        if (!f.cmis_read && state == LinkState::kModuleWait) {
          f.cmis_read = true;
          f.res.cmis_module_state = module_state(f);
        }
        break;
      case TrainStage::kDataPathInit:
        if (state == LinkState::kTraining || state == LinkState::kFecLock || state == LinkState::kUp) {
          enter(f, TrainStage::kCdrLock, now);
          return;
        }
        if (!f.cmis_read && state == LinkState::kDataPathInit) {
          f.cmis_read = true;
          f.res.cmis_datapath_activated = datapath_activated(f);
        }
        break;
      case TrainStage::kCdrLock:
        if (state == LinkState::kFecLock) {
          enter(f, TrainStage::kFecLock, now);
          return;
        }
        if (state == LinkState::kUp) {
          enter(f, TrainStage::kFecLock, now);
          enter(f, TrainStage::kNeighbor, now);
          break;  // check the neighbour below
        }
        break;
      case TrainStage::kFecLock:
        if (state == LinkState::kUp) {
          enter(f, TrainStage::kNeighbor, now);
          break;
        }
        if (state == LinkState::kTraining) {  // attempt failed; the card retries
          enter(f, TrainStage::kCdrLock, now);
          return;
        }
        break;
      default: break;
    }
    if (f.stage == TrainStage::kNeighbor) {
      if (state != LinkState::kUp) {
        enter(f, TrainStage::kCdrLock, now);  // dropped out of Up: a flap; the card retrains
        return;
      }
      const std::uint64_t nb = f.m->read64(regs::port_reg(p, pr::kNeighbor));
      if (pr::kNeighborValid.get(nb)) {
        f.res.neighbor_fabric_id = static_cast<std::uint32_t>(pr::kNeighborFabricId.get(nb));
        f.res.neighbor_port = static_cast<unsigned>(pr::kNeighborPort.get(nb));
        finish(f, TrainCode::kOk, now);
        return;
      }
    }
    // The card gave up: its TRAIN_RESULT says why.
    if (state == LinkState::kFault) {
      const auto code = static_cast<std::uint8_t>(pr::kTrainResultCode.get(tr));
      TrainCode tc = map_card_code(code);
      if (tc == TrainCode::kOk) tc = stage_timeout_code(f.stage);
      fail_or_retry(f, tc, static_cast<std::uint8_t>(pr::kTrainResultLanes.get(tr) & f.enable), true, now);
      return;
    }
    if (now >= f.deadline) {
      TrainCode tc = stage_timeout_code(f.stage);
      std::uint8_t lanes = 0;
      if (f.stage == TrainStage::kModuleReady) {
        f.res.cmis_module_state = module_state(f);
        if (f.res.cmis_module_state) {
          f.res.detail = fmt::format("CMIS module state {} at the deadline", *f.res.cmis_module_state);
        }
      } else if (f.stage == TrainStage::kDataPathInit) {
        f.res.cmis_datapath_activated = datapath_activated(f);
        if (auto dp = f.res.cmis_datapath_activated; dp && !*dp)
          f.res.detail = "CMIS data path not DPActivated at the deadline";
      } else if (f.stage == TrainStage::kCdrLock) {
        lanes = static_cast<std::uint8_t>(f.enable & ~pr::kStatusLanesUp.get(st));
        if (lanes == 0) tc = TrainCode::kTimeoutNeighbor;
      }
      fail_or_retry(f, tc, lanes, false, now);
      return;
    }
    schedule();
  }

  System& sys_;
  TrainingPolicy pol_;
  backend::Clock& clock_;
  std::vector<Fsm> fsms_;
};

}  // namespace

namespace {

Result<std::vector<PortTraining>> supervise(System& system, std::span<const PortRef> ports,
                                            const TrainingPolicy& policy, std::uint64_t timeout_ns, bool retrain,
                                            std::span<const PortRef> held_down, bool stop_on_removal);

}  // namespace

Result<std::vector<PortTraining>> train_ports(System& system, std::span<const PortRef> ports,
                                              const TrainingPolicy& policy, std::uint64_t timeout_ns, bool retrain,
                                              std::span<const PortRef> held_down) {
  return supervise(system, ports, policy, timeout_ns, retrain, held_down, false);
}

namespace {

Result<std::vector<PortTraining>> supervise(System& system, std::span<const PortRef> ports,
                                            const TrainingPolicy& policy, std::uint64_t timeout_ns, bool retrain,
                                            std::span<const PortRef> held_down, bool stop_on_removal) {
  std::vector<PortRef> list(ports.begin(), ports.end());
  if (list.empty()) {
    for (std::size_t c = 0; c < system.device_count(); ++c) {
      for (unsigned p = 0; p < system.device(c).port_count(); ++p) list.push_back({static_cast<std::uint32_t>(c), p});
    }
  }
  for (const auto& r : list) {
    if (r.card >= system.device_count()) {
      return fail(Code::kOutOfRange, fmt::format("card {} outside 0..{}", r.card, system.device_count() - 1),
                  {.card = r.card});
    }
    if (r.port >= system.device(r.card).port_count()) {
      return fail(Code::kOutOfRange,
                  fmt::format("port {} outside 0..{}", r.port, system.device(r.card).port_count() - 1),
                  {.card = r.card, .port = r.port});
    }
  }
  Supervisor sup(system, policy);
  sup.t0_ = card::clock_of(system).now_ns();
  sup.stop_on_removal = stop_on_removal;
  for (const auto& r : list) {
    const bool held = std::find(held_down.begin(), held_down.end(), r) != held_down.end();
    sup.add(r, retrain, held);
  }
  sup.run(timeout_ns);
  return sup.results();
}

/// The card of the first port that ended CARD_REMOVED, if any.
std::optional<std::uint32_t> removed_card(const std::vector<PortTraining>& res) {
  for (const auto& r : res) {
    if (r.code == TrainCode::kCardRemoved) return r.card;
  }
  return std::nullopt;
}

}  // namespace

Result<LinkBringUp> bring_up_links(System& system, const TrainingPolicy& policy, std::uint64_t timeout_ns) {
  const auto w0 = std::chrono::steady_clock::now();
  auto& clock = card::clock_of(system);
  const std::uint64_t t0 = clock.now_ns();
  for (std::size_t c = 0; c < system.device_count(); ++c) {
    auto& m = *card::access(system.device(c)).bar0;
    if (m.read32(regs::global::kMagic) == 0xffffffffu) {
      return fail(Code::kUnavailable, "card removed", {.card = static_cast<std::uint32_t>(c)});
    }
  }
  auto res = supervise(system, {}, policy, timeout_ns, false, {}, true);
  if (!res) return std::unexpected(res.error());
  if (auto gone = removed_card(*res)) return fail(Code::kUnavailable, "card removed", {.card = *gone});
  // Settle: a port can finish Up and then lose its link when its partner retrains later in
  // the same bring-up (a lane degrade retrains one end; the other follows after the 10 ms
  // link-loss debounce, registers.md §7.2). Wait past the debounce and one training poll,
  // and supervise again every port that reached Up but no longer is, until all hold.
  constexpr std::uint64_t kSettleNs = 50'000'000;
  for (int round = 0; round < 3; ++round) {
    clock.sleep_until(clock.now_ns() + kSettleNs);
    std::vector<PortRef> again;
    std::vector<std::size_t> where;
    for (std::size_t i = 0; i < res->size(); ++i) {
      const auto& r = (*res)[i];
      if (r.code != TrainCode::kOk) continue;
      const std::uint32_t st = card::access(system.device(r.card)).bar0->read32(regs::port_reg(r.port, pr::kStatus));
      if (st == 0xffffffffu || pr::kStatusLinkUp.get(st) != 0) continue;
      again.push_back({r.card, r.port});
      where.push_back(i);
    }
    if (again.empty()) break;
    const std::uint64_t used = clock.now_ns() - t0;
    auto redo = supervise(system, again, policy, timeout_ns > used ? timeout_ns - used : 0, false, {}, true);
    if (!redo) return std::unexpected(redo.error());
    if (auto gone = removed_card(*redo)) {
      return fail(Code::kUnavailable, "card removed", {.card = *gone});
    }
    for (std::size_t k = 0; k < redo->size() && k < where.size(); ++k) (*res)[where[k]] = std::move((*redo)[k]);
  }
  // A module latches Rx LOS / CDR LOL on a lane whose data path is active while the far end
  // is still dark, which is how every link comes up when its two ends start at different
  // times. Those latches describe the bring-up, not the link: read them away (CMIS 5.2
  // §8.9.3, latched lane flags clear on read; mailbox.md §3.5) once every port has settled
  // Up, so the first read after the bring-up (npo-link ddm, a LinkMonitor judging module
  // flags) reports only what happened on the running link. A condition that persists (a
  // dead lane) latches again at the module's next refresh. Ports Up before this bring-up keep
  // their latches (events a reader has not seen yet).
  for (const auto& r : *res) {
    if (r.code != TrainCode::kOk || r.up_at_start) continue;
    auto& dev = system.device(r.card);
    if (dev.info().read_only) continue;
    std::array<std::byte, kCmisLatchedLaneFlagsEnd - kCmisLatchedLaneFlagsBegin> latched{};
    // A module that does not answer is no bring-up failure: its flags just stay.
    (void)read_transceiver(dev, r.port, 0, 0x11, kCmisLatchedLaneFlagsBegin, latched);
  }
  LinkBringUp out;
  for (auto& r : *res) {
    if (r.code == TrainCode::kNoModule && r.stage == TrainStage::kDetect) continue;
    ++out.ports_with_module;
    if (r.code == TrainCode::kOk) {
      ++out.up;
      if (r.lanes_up < r.lanes_total) ++out.degraded;
    } else {
      ++out.failed;
    }
  }
  out.ports = std::move(*res);
  out.elapsed_ns = clock.now_ns() - t0;
  out.wall_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w0).count());
  return out;
}

Result<LinkBringUp> bring_up_links(System& system, std::uint64_t timeout_ns) {
  return bring_up_links(system, TrainingPolicy{}, timeout_ns);
}

}  // namespace npo
