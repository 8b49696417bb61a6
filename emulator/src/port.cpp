// SPDX-License-Identifier: Apache-2.0
// The port model's registers and link state machine (registers.md §7.1, §7.2) and the link
// faults of docs/emulator.md, over the CMIS module of port_cmis.cpp and the lane channel
// model of port_channel.cpp.
#include "port.hpp"

#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "card.hpp"
#include "port_internal.hpp"
#include "system.hpp"

namespace npo::emu {

using namespace portdef;  // NOLINT(google-build-using-namespace): the port model's own constants

Port::Port(Card& card, std::mutex& mu, unsigned index)
    : card_(card), sys_(card.system()), mu_(mu), card_index_(card.index()), index_(index) {
  build_cmis();
}

std::uint32_t Port::ctrl() {
  std::lock_guard lock(mu_);
  return ctrl_;
}

std::uint32_t Port::status() {
  std::lock_guard lock(mu_);
  return status_locked();
}

Port::StatusAndFlaps Port::status_and_flaps() {
  std::lock_guard lock(mu_);
  StatusAndFlaps r;
  r.status = status_locked();
  r.flaps = flap_count_;
  return r;
}

void Port::reset_locked() {
  if (state_ != LinkState::kDisabled) enter(LinkState::kDisabled, 0);
  ctrl_ = 0;
  train_count_ = 0;
  flap_count_ = 0;
  train_timeout_ms_ = 500;
  events_ = 0;
  neighbor_ = 0;
  lane_enable_ = 0xff;
  lanes_in_use_ = 0;
  train_result_ = 0;
  up_count_ = 0;
  coeff_updates_ = 0;
  prbs_lanes_ = 0xff;
  inject_train_timeouts_ = 0;
  attempts_ = 0;
  // The firmware re-initialises the modules: back to low power, fresh CMIS memory.
  // Physical faults (dark lanes, BER ramps) belong to the fibre and persist.
  const auto power_on = pub_power_on_ns_.load();
  cdb_power_on(std::nullopt);  // the module reboots: its committed image, no download
  build_cmis();
  pub_power_on_ns_.store(power_on);
  const std::uint64_t now = sys_.sched.now_ns();
  for (auto& lane : lanes_) {
    lane.fec = {};
    lane.prbs_bits = lane.prbs_errors = 0;
    lane.prbs_lock = false;
    lane.prbs.reset();
    lane.trained = false;
    lane.synced_ns = now;
  }
  publish();
}

void Port::remove_locked() {
  if (state_ != LinkState::kDisabled) enter(LinkState::kDisabled, 0);
  publish();  // transmitters go dark: the far ends lose light
}

void Port::attach_cable() {
  std::lock_guard lock(mu_);
  const bool was_cabled = cabled_;
  cabled_ = true;
  // A port whose light path was dark since creation (it ends at an idle switch port) gets its
  // module when a cross-connect first lights it: an enabled port waiting for a module then
  // starts its bring-up, as after a module insertion (docs/topology.md "Optical switches").
  if (!was_cabled && state_ == LinkState::kModuleWait) enter_module_wait(sys_.sched.now_ns(), true);
  publish();
}

void Port::publish() {
  const bool tx =
      cabled_ && !card_.removed() && ((state_ == LinkState::kDataPathInit && dp_activated_) || training_like(state_));
  const std::uint32_t pat = pr::kCtrlPrbsPattern.get(ctrl_);
  const bool gen =
      pr::kCtrlPrbsGen.get(ctrl_) != 0 && pat < fw::prbs::kNumPatterns && tx && state_ == LinkState::kDataPathInit;
  const std::uint32_t w = static_cast<std::uint32_t>(state_) | (rx_ready_ ? kPubRxReady : 0) |
                          (static_cast<std::uint32_t>(tx ? lanes_in_use_ : 0) << kPubTxShift) |
                          ((lane_enable_ & 0xff) << kPubEnableShift) | (gen ? kPubPrbsGen : 0) |
                          (pat << kPubPatternShift);
  pub_.store(w, std::memory_order_release);
  pub_prbs_lanes_.store(gen ? (prbs_lanes_ & lanes_in_use_) : 0, std::memory_order_release);
  // What remote-op routing sees of this port (FabricState::route_reachable): Up, and to whom.
  const bool up = state_ == LinkState::kUp && pr::kNeighborValid.get(neighbor_) != 0;
  card_.shared().link[index_].store(up ? CardState::kLinkUp | pr::kNeighborFabricId.get(neighbor_) : 0,
                                    std::memory_order_release);
}

std::uint64_t Port::read(std::uint32_t reg) {
  std::lock_guard lock(mu_);
  if (reg >= regs::kLaneBase) {
    const unsigned l = (reg - regs::kLaneBase) / regs::kLaneStride;
    if (l >= regs::kLanesPerPort) return 0;
    return lane_read(l, (reg - regs::kLaneBase) % regs::kLaneStride);
  }
  return read_locked(reg);
}

std::uint64_t Port::read_locked(std::uint32_t reg) {
  const std::uint64_t now = sys_.sched.now_ns();
  switch (reg) {
    case pr::kCtrl: return ctrl_;
    case pr::kStatus: return status_locked();
    case pr::kLaneMap: {
      if (state_ == LinkState::kDisabled || state_ == LinkState::kModuleWait) return 0xffffffffu;
      std::uint32_t map = 0xffffffffu;
      unsigned n = 0;
      for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
        if ((lanes_in_use_ >> l) & 1u) {
          map = (map & ~(0xfu << (4 * n))) | (l << (4 * n));
          ++n;
        }
      }
      return map;
    }
    case pr::kSpeed:
      return state_ == LinkState::kDisabled || state_ == LinkState::kModuleWait
                 ? 0
                 : (pr::kSpeedMbdPerLane.make(53125) | pr::kSpeedModulation.make(1));
    case pr::kNeighbor: return neighbor_;
    case pr::kTrainCount: return train_count_;
    case pr::kFlapCount: return flap_count_;
    case pr::kTrainTimeout: return train_timeout_ms_;
    case pr::kEventStatus: return events_;
    case pr::kLaneEnable: return lane_enable_;
    case pr::kTrainResult: return train_result_;
    case pr::kUpCount: return up_count_;
    case pr::kCoeffUpdates: return coeff_updates_;
    case pr::kPrbsLanes: return prbs_lanes_;
    case pr::kModuleTemp:
      if (!cabled_) return 0;
      return static_cast<std::uint32_t>(static_cast<std::int32_t>(
          std::lround(optics::module_temperature_c(module_seed_, pub_power_on_ns_.load(), now) * 256.0)));
    case pr::kModuleVcc: return cabled_ ? clamp_u16(optics::module_vcc_v(module_seed_, now) * 1e4) : 0;
    default: return 0;
  }
}

void Port::write(std::uint32_t reg, std::uint64_t value) {
  const auto v32 = static_cast<std::uint32_t>(value);
  if (reg == pr::kCtrl) {
    set_ctrl(v32);
    return;
  }
  std::lock_guard lock(mu_);
  if (reg >= regs::kLaneBase) {
    const unsigned l = (reg - regs::kLaneBase) / regs::kLaneStride;
    if (l < regs::kLanesPerPort && (reg - regs::kLaneBase) % regs::kLaneStride == ln::kClear && (v32 & 1u)) {
      sync_lanes(sys_.sched.now_ns());
      auto& lane = lanes_[l];
      lane.fec = {};
      lane.prbs_bits = lane.prbs_errors = 0;
      if (lane.prbs) lane.prbs->chk.clear_counters();
    }
    return;
  }
  switch (reg) {
    case pr::kTrainTimeout: train_timeout_ms_ = std::clamp<std::uint32_t>(v32, 10, 60'000); break;
    case pr::kEventStatus: events_ &= ~v32; break;
    case pr::kLaneEnable:
      lane_enable_ = v32 & pr::kLaneEnableMask.mask();
      publish();
      break;
    case pr::kPrbsLanes:
      sync_lanes(sys_.sched.now_ns());
      prbs_lanes_ = v32 & 0xffu;
      publish();
      break;
    default: break;
  }
}

void Port::latch_events(std::uint32_t bits) {
  const std::uint32_t rising = bits & ~events_;
  events_ |= bits;
  if (rising != 0) card_.raise_msix(fw::pci::kMsixVectorGlobal);
}

void Port::enter(LinkState s, std::uint64_t delay_ns) {
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(now);
  const bool was_up = state_ == LinkState::kUp;
  state_ = s;
  if (s == LinkState::kDisabled || s == LinkState::kModuleWait || s == LinkState::kTraining) neighbor_ = 0;
  if (s != LinkState::kFecLock && s != LinkState::kUp) rx_ready_ = false;
  if (s == LinkState::kUp) rx_ready_ = true;
  if (was_up && s != LinkState::kUp) {
    flap_count_ = sat_inc(flap_count_);
    latch_events(pr::kEventLinkDown.mask());
    // The far end loses lock too: after the link-loss debounce it leaves Up for Training
    // (a flap, spec §7.2). Scheduled on the far card, which takes its own lock.
    if (const auto ref = sys_.resolve_peer(card_index_, index_); ref && pr::kCtrlLoopback.get(ctrl_) == 0) {
      if (ref->card < sys_.cards.size())
        sys_.cards[ref->card]->ports()[ref->port].schedule_link_check(kLinkLossDebounceNs);
    }
  }
  for (auto& lane : lanes_) lane.ber_valid = false;
  publish();
  const std::uint64_t epoch = ++epoch_;
  if (delay_ns != 0) {
    sys_.sched.schedule_in(delay_ns, [this, epoch](std::uint64_t) { step(epoch); });
  }
}

void Port::schedule_link_check(std::uint64_t delay_ns) {
  sys_.sched.schedule_in(delay_ns, [this](std::uint64_t) { link_check(); });
}

void Port::link_check() {
  std::lock_guard lock(mu_);
  if (state_ != LinkState::kUp || card_.removed()) return;
  const std::uint64_t now = sys_.sched.now_ns();
  const LinkView v = link_view(now);
  const auto far_state = static_cast<LinkState>(v.pub & 0xf);
  // Light from a transmitter other than the trained neighbour (a switch reconfiguration)
  // breaks the alignment markers at once: a loss like any other.
  const bool same_far_end = pr::kNeighborValid.get(neighbor_) != 0 &&
                            pr::kNeighborFabricId.get(neighbor_) == v.peer_fabric_id &&
                            pr::kNeighborPort.get(neighbor_) == v.peer_port;
  bool lost = !v.has_peer || !same_far_end || (far_state != LinkState::kUp && far_state != LinkState::kFecLock);
  for (unsigned l = 0; l < regs::kLanesPerPort && !lost; ++l) {
    if (((lanes_in_use_ >> l) & 1u) == 0) continue;
    if (!lane_signal(l, now, v) || lane_ber(l, now, v) > optics::kFecLockMaxBer) lost = true;
  }
  if (lost) leave_up_for_training(now, "link lost");
}

void Port::leave_up_for_training(std::uint64_t now, const char* why) {
  card_.log_event(fmt::format("port={} {}", index_, why));
  start_training(now, true);
}

void Port::start_training(std::uint64_t now, bool fresh) {
  if (fresh) attempts_ = 0;
  ++attempts_;
  train_count_ = sat_inc(train_count_);
  train_start_ns_ = now;
  lanes_in_use_ = static_cast<std::uint8_t>(dp_lanes_ & lane_enable_);
  if (lanes_in_use_ == 0) lanes_in_use_ = dp_lanes_;
  for (auto& lane : lanes_) lane.trained = false;
  // TRAIN_RESULT keeps the outcome of the last finished attempt while this one runs.
  enter(LinkState::kTraining, kTrainNs);
}

void Port::train_fail(std::uint8_t code, std::uint8_t lanes, std::uint64_t now) {
  train_result_ = pr::kTrainResultCode.make(code) | pr::kTrainResultState.make(static_cast<std::uint32_t>(state_)) |
                  pr::kTrainResultLanes.make(lanes) | pr::kTrainResultAttempt.make(std::min(attempts_, 255u));
  latch_events(pr::kEventTrainFail.mask());
  card_.log_event(
      fmt::format("port={} training attempt {} failed code={} lanes=0x{:02x}", index_, attempts_, code, lanes));
  if (code == static_cast<std::uint8_t>(pr::TrainResult::kModuleNotReady) ||
      code == static_cast<std::uint8_t>(pr::TrainResult::kDataPathTimeout) || attempts_ >= kTrainAttempts) {
    if (attempts_ >= kTrainAttempts)
      card_.log_event(fmt::format("port={} training failed after {} attempts", index_, attempts_));
    enter(LinkState::kFault, 0);
    return;
  }
  start_training(now, false);
}

void Port::enter_module_wait(std::uint64_t now, bool release_low_power) {
  attempts_ = 0;
  train_start_ns_ = now;
  dp_lanes_ = 0;
  dp_activated_ = false;
  lanes_in_use_ = 0;
  auto& p10 = cmis_[static_cast<unsigned>(CmisPage::k10)];
  p10[kP10DpDeinit - 128] = 0xff;
  std::uint64_t delay = kFirmwarePollNs;
  if (cabled_) {
    refresh_cmis(now);
    if (release_low_power) cmis_[0][kCmisGlobalCtrl] &= static_cast<std::uint8_t>(~kLowPwrRequestSw);
    if ((cmis_[0][kCmisGlobalCtrl] & kLowPwrRequestSw) == 0 && module_state() == kModLowPwr) {
      set_module_state(kModPwrUp);
      module_ready_ns_ = now + kModulePwrUpNs;
    }
    if (module_state() == kModPwrUp) delay = module_ready_ns_ - now + kFirmwarePollNs;
    if (module_state() == kModLowPwr) delay = kTModuleNs;
  }
  enter(LinkState::kModuleWait, cabled_ ? delay : 0);
}

void Port::enter_datapath_init(std::uint64_t now) {
  const std::uint8_t lanes = static_cast<std::uint8_t>(kAppLanes & lane_enable_);
  train_start_ns_ = now;
  lanes_in_use_ = lanes;
  for (auto& lane : lanes_) lane.trained = false;
  // Firmware: stage AppSel 1 on the lanes in use (DataPathID = first lane), deinitialise the
  // others, apply (CMIS ApplyDPInit); the module copies the staged set to the active set.
  auto& p10 = cmis_[static_cast<unsigned>(CmisPage::k10)];
  auto& p11 = cmis_[static_cast<unsigned>(CmisPage::k11)];
  const unsigned first = lanes == 0 ? 0 : static_cast<unsigned>(std::countr_zero(lanes));
  p10[kP10DpDeinit - 128] = static_cast<std::uint8_t>(~lanes);
  p10[kP10ApplyDpInit - 128] = lanes;
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    const std::uint8_t cfg = ((lanes >> l) & 1u) ? static_cast<std::uint8_t>((1u << 4) | (first << 1)) : 0;
    p10[kP10DpConfig - 128 + l] = cfg;
    p11[kP11ActiveSet - 128 + l] = cfg;
    auto& cs = p11[kP11ConfigStatus - 128 + l / 2];
    const std::uint8_t st = ((lanes >> l) & 1u) ? 1 : 0;
    cs = static_cast<std::uint8_t>(l % 2 == 0 ? ((cs & 0xf0) | st) : ((cs & 0x0f) | (st << 4)));
  }
  p10[kP10ApplyDpInit - 128] = 0;  // trigger self-clears
  dp_lanes_ = lanes;
  dp_ready_ns_ = now + kDpInitNs;
  dp_activated_ = false;
  if (lanes == 0) {
    enter(LinkState::kDataPathInit, 0);
    train_fail(static_cast<std::uint8_t>(pr::TrainResult::kDataPathTimeout), 0, now);
    return;
  }
  enter(LinkState::kDataPathInit, kDpInitNs + kFirmwarePollNs);
}

void Port::set_ctrl(std::uint32_t ctrl) {
  std::lock_guard lock(mu_);
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(now);
  const std::uint32_t old = ctrl_;
  const std::uint32_t prbs_bits = pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask();
  ctrl_ = ctrl & (pr::kCtrlEnable.mask() | pr::kCtrlLoopback.mask() | prbs_bits | pr::kCtrlPrbsSide.mask() |
                  pr::kCtrlPrbsPattern.mask());
  if (pr::kCtrlPrbsPattern.get(old) != pr::kCtrlPrbsPattern.get(ctrl_) || ((old ^ ctrl_) & prbs_bits) != 0) {
    for (auto& lane : lanes_) {
      if (lane.prbs) lane.prbs->chk_pattern = 0xff;  // new pattern: the checker hunts again
      lane.prbs_lock = false;
    }
  }
  const bool enable = pr::kCtrlEnable.get(ctrl_) != 0;
  const bool train = pr::kCtrlTrain.get(ctrl) != 0;
  const bool prbs_now = (ctrl_ & prbs_bits) != 0;
  const bool prbs_before = (old & prbs_bits) != 0;
  auto aborted = [&] {
    if (state_ == LinkState::kTraining || state_ == LinkState::kFecLock) {
      train_result_ = pr::kTrainResultCode.make(static_cast<std::uint32_t>(pr::TrainResult::kAborted)) |
                      pr::kTrainResultState.make(static_cast<std::uint32_t>(state_)) |
                      pr::kTrainResultAttempt.make(std::min(attempts_, 255u));
    }
  };
  if (!enable) {
    if (state_ != LinkState::kDisabled) {
      aborted();
      card_.log_event(fmt::format("port={} disabled", index_));
      dp_lanes_ = 0;
      dp_activated_ = false;
      cmis_[static_cast<unsigned>(CmisPage::k10)][kP10DpDeinit - 128] = 0xff;
      enter(LinkState::kDisabled, 0);
    }
    publish();
    return;
  }
  if (!pr::kCtrlEnable.get(old) || (train && state_ == LinkState::kFault)) {
    card_.log_event(fmt::format("port={} {}", index_, train ? "retrain" : "enable"));
    enter_module_wait(now, true);
  } else if (train && state_ != LinkState::kDisabled && state_ != LinkState::kModuleWait) {
    card_.log_event(fmt::format("port={} retrain", index_));
    aborted();
    if (state_ == LinkState::kDataPathInit && !dp_activated_) {
      // Still activating the data path: training starts when it is done.
    } else if (prbs_now) {
      enter(LinkState::kDataPathInit, 0);
    } else {
      start_training(now, true);
    }
  } else if (prbs_now && !prbs_before && training_like(state_)) {
    card_.log_event(fmt::format("port={} prbs start pattern={}", index_, pr::kCtrlPrbsPattern.get(ctrl_)));
    aborted();
    enter(LinkState::kDataPathInit, 0);  // hold with the data path active
  } else if (!prbs_now && prbs_before && state_ == LinkState::kDataPathInit && dp_activated_) {
    card_.log_event(fmt::format("port={} prbs stop", index_));
    start_training(now, true);
  }
  publish();
}

void Port::step(std::uint64_t epoch) {
  std::lock_guard lock(mu_);
  if (epoch_ != epoch || card_.removed()) return;
  const std::uint64_t now = sys_.sched.now_ns();
  switch (state_) {
    case LinkState::kModuleWait: {
      if (!cabled_) return;  // no module: wait without timeout (insertion restarts the wait)
      refresh_cmis(now);
      const std::uint8_t ms = module_state();
      if (ms == kModReady) {
        enter_datapath_init(now);
      } else if (now - train_start_ns_ >= kTModuleNs) {
        train_fail(static_cast<std::uint8_t>(pr::TrainResult::kModuleNotReady), 0, now);
      } else {
        const std::uint64_t deadline = train_start_ns_ + kTModuleNs;
        const std::uint64_t at = ms == kModPwrUp ? std::min(deadline, module_ready_ns_ + kFirmwarePollNs) : deadline;
        const std::uint64_t ep = epoch_;
        sys_.sched.schedule_at(at, [this, ep](std::uint64_t) { step(ep); });
      }
      break;
    }
    case LinkState::kDataPathInit: {
      if (dp_activated_) break;  // holding for PRBS
      if (now >= dp_ready_ns_) {
        dp_activated_ = true;
        const bool prbs = (ctrl_ & (pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask())) != 0;
        if (prbs) {
          for (auto& lane : lanes_) lane.synced_ns = now;
          publish();
          card_.log_event(fmt::format("port={} data path activated, holding for prbs", index_));
        } else {
          start_training(now, true);
        }
      } else if (now - train_start_ns_ >= kTDataPathNs) {
        train_fail(static_cast<std::uint8_t>(pr::TrainResult::kDataPathTimeout), 0, now);
      } else {
        const std::uint64_t ep = epoch_;
        sys_.sched.schedule_at(dp_ready_ns_, [this, ep](std::uint64_t) { step(ep); });
      }
      break;
    }
    case LinkState::kTraining: {
      const LinkView v = link_view(now);
      const std::uint8_t need = lanes_in_use_;
      std::uint8_t locked = 0;
      for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
        if (((need >> l) & 1u) && lane_signal(l, now, v) && lane_ber(l, now, v) < optics::kCdrLockMaxBer)
          locked |= static_cast<std::uint8_t>(1u << l);
      }
      if (inject_train_timeouts_ > 0) locked = 0;  // training_timeout fault: CDR never locks
      const std::uint8_t far_enable =
          v.has_peer ? static_cast<std::uint8_t>(v.pub >> kPubEnableShift) : static_cast<std::uint8_t>(0xff);
      const std::uint8_t required = static_cast<std::uint8_t>(need & far_enable);
      const bool rx_ready = required != 0 && (locked & required) == required;
      if (rx_ready != rx_ready_) {
        rx_ready_ = rx_ready;
        publish();
      }
      const auto far_state = static_cast<LinkState>(v.pub & 0xf);
      const bool far_ready =
          v.has_peer && training_like(far_state) && (v.loopback ? rx_ready : (v.pub & kPubRxReady) != 0);
      if (rx_ready && far_ready) {
        // Tx equalisation: the receiver of each lane asks the far transmitter for one tap
        // step per request until its optimum; then the neighbour exchange.
        unsigned requests = 0;
        for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
          if ((required >> l) & 1u) {
            requests += optics::tx_eq_steps(optics::kTxEqPreset, lanes_[l].optimum);
            lanes_[l].trained = true;
            lanes_[l].ber_valid = false;
          }
        }
        coeff_updates_ = requests;
        lanes_in_use_ = required;
        enter(LinkState::kFecLock, kFecLockNs);
        train_start_ns_ = now;
        neighbor_ = pr::kNeighborFabricId.make(v.peer_fabric_id) | pr::kNeighborPort.make(v.peer_port) |
                    pr::kNeighborValid.make(1);
      } else if (now - train_start_ns_ >= std::uint64_t{train_timeout_ms_} * kMsNs) {
        const std::uint8_t failed = static_cast<std::uint8_t>((v.has_peer ? required : need) & ~locked);
        if (inject_train_timeouts_ > 0) --inject_train_timeouts_;
        train_fail(static_cast<std::uint8_t>(failed != 0 ? pr::TrainResult::kCdrLockTimeout
                                                         : pr::TrainResult::kNeighborTimeout),
                   failed, now);
      } else {
        const std::uint64_t ep = epoch_;
        const std::uint64_t deadline = train_start_ns_ + std::uint64_t{train_timeout_ms_} * kMsNs;
        sys_.sched.schedule_at(std::min(now + kTrainNs, deadline), [this, ep](std::uint64_t) { step(ep); });
      }
      break;
    }
    case LinkState::kFecLock: {
      const LinkView v = link_view(now);
      std::uint8_t bad = 0, nolock = 0;
      for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
        if (((lanes_in_use_ >> l) & 1u) == 0) continue;
        const bool sig = lane_signal(l, now, v);
        const double ber = lane_ber(l, now, v);
        if (!sig || ber > optics::kFecLockMaxBer) bad |= static_cast<std::uint8_t>(1u << l);
        if (!sig || ber >= optics::kCdrLockMaxBer) nolock |= static_cast<std::uint8_t>(1u << l);
      }
      if (bad == 0) {
        const std::uint64_t nb = neighbor_;
        enter(LinkState::kUp, 0);
        neighbor_ = nb;
        up_count_ = sat_inc(up_count_);
        train_result_ = pr::kTrainResultCode.make(static_cast<std::uint32_t>(pr::TrainResult::kOk)) |
                        pr::kTrainResultState.make(static_cast<std::uint32_t>(LinkState::kUp)) |
                        pr::kTrainResultAttempt.make(std::min(attempts_, 255u));
        latch_events(pr::kEventLinkUp.mask());
        card_.log_event(fmt::format("port={} up neighbor={}:{} lanes=0x{:02x}", index_, pr::kNeighborFabricId.get(nb),
                                    pr::kNeighborPort.get(nb), lanes_in_use_));
      } else if (now - train_start_ns_ >= kTFecNs) {
        train_fail(static_cast<std::uint8_t>(pr::TrainResult::kFecLockTimeout), nolock, now);
      } else {
        const std::uint64_t ep = epoch_;
        sys_.sched.schedule_in(kFecPollNs, [this, ep](std::uint64_t) { step(ep); });
      }
      break;
    }
    default: break;
  }
}

void Port::lane_dark(unsigned lane, std::uint64_t until) {
  std::lock_guard lock(mu_);
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(now);
  lanes_[lane].dark_until_ns = until;
  lanes_[lane].ber_valid = false;
  auto& p11 = cmis_[static_cast<unsigned>(CmisPage::k11)];
  p11[kP11RxLos - 128] |= static_cast<std::uint8_t>(1u << lane);
  p11[kP11RxLol - 128] |= static_cast<std::uint8_t>(1u << lane);
  if (state_ == LinkState::kUp && ((lanes_in_use_ >> lane) & 1u)) schedule_link_check(kLinkLossDebounceNs);
}

void Port::lane_ramp(std::optional<unsigned> lane, double to, std::uint64_t dur) {
  std::lock_guard lock(mu_);
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(now);
  const LinkView v = link_view(now);
  std::uint64_t first_cross = kForever;
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    if (lane && *lane != l) continue;
    auto& ln_ = lanes_[l];
    const double from = std::max(1e-20, std::min(lane_ber(l, now, v) == 0.5 ? 1e-12 : lane_ber(l, now, v), to));
    ln_.ramp = true;
    ln_.ramp_start_ns = now;
    ln_.ramp_dur_ns = dur;
    ln_.ramp_from = from;
    ln_.ramp_to = to;
    if (to > optics::kFecLockMaxBer) {
      const double f = dur == 0 ? 0.0 : std::log(optics::kFecLockMaxBer / from) / std::log(to / from);
      first_cross = std::min(first_cross, static_cast<std::uint64_t>(f * static_cast<double>(dur)));
    }
  }
  // A lane that crosses the FEC lock limit takes the link down after the debounce.
  if (first_cross != kForever) schedule_link_check(first_cross + kLinkLossDebounceNs + 1);
}

void Port::module_presence(bool present) {
  std::lock_guard lock(mu_);
  if (cabled_ == present) return;
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(now);
  card_.log_event(fmt::format("port={} module {}", index_, present ? "inserted" : "removed"));
  latch_events(pr::kEventModuleChange.mask());
  if (!present) {
    cabled_ = false;
    dp_lanes_ = 0;
    dp_activated_ = false;
    if (state_ != LinkState::kDisabled) {
      train_result_ = pr::kTrainResultCode.make(static_cast<std::uint32_t>(pr::TrainResult::kNoModule)) |
                      pr::kTrainResultState.make(static_cast<std::uint32_t>(state_)) |
                      pr::kTrainResultAttempt.make(std::min(attempts_, 255u));
      lanes_in_use_ = 0;
      enter(LinkState::kModuleWait, 0);
    }
    publish();
    return;
  }
  cabled_ = true;
  cdb_power_on(std::nullopt);  // a module powering up boots its committed image
  build_cmis();
  pub_power_on_ns_.store(now);
  if (state_ == LinkState::kModuleWait) enter_module_wait(now, true);
  publish();
}

void Port::flap_storm(std::uint32_t left, std::uint64_t every, std::uint64_t delay) {
  sys_.sched.schedule_in(delay, [this, left, every](std::uint64_t t) {
    {
      std::lock_guard lock(mu_);
      if (state_ == LinkState::kUp && !card_.removed()) leave_up_for_training(t, "link drop (flap_storm)");
    }
    if (left > 1) flap_storm(left - 1, every, every);
  });
}

void Port::inject_fault(const Fault& f, Port* far) {
  const std::uint64_t now = sys_.sched.now_ns();
  switch (f.kind) {
    case FaultKind::kBerRamp:
      lane_ramp(f.lane, f.value, f.duration_ns);
      if (far != nullptr) far->lane_ramp(f.lane, f.value, f.duration_ns);
      break;
    case FaultKind::kLaneLoss: {
      const std::uint64_t until = f.duration_ns == 0 ? kForever : saturating_add(now, f.duration_ns);
      lane_dark(f.lane.value_or(0), until);
      if (far != nullptr) far->lane_dark(f.lane.value_or(0), until);
      break;
    }
    case FaultKind::kFlapStorm: {
      // One event at a time, each scheduling the next: a count of 2^32-1 costs one pending
      // event, not 2^32 of them at once.
      flap_storm(f.count, f.duration_ns == 0 ? 50 * kMsNs : f.duration_ns, 0);
      break;
    }
    case FaultKind::kModuleRemoval:
      module_presence(false);
      if (f.duration_ns != 0) {
        sys_.sched.schedule_in(f.duration_ns, [this](std::uint64_t) { module_presence(true); });
      }
      break;
    case FaultKind::kTrainingTimeout: {
      std::lock_guard lock(mu_);
      inject_train_timeouts_ += f.count;
      break;
    }
    default: break;
  }
}

}  // namespace npo::emu
