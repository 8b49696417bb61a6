// SPDX-License-Identifier: Apache-2.0
// What the receivers of a port see (docs/emulator.md "Channel model"): the far end's light
// through the channel, lane BER, the FEC and PRBS counters integrated lazily over emulated
// time, the lane registers (registers.md §7.3, §7.4), TELEMETRY and the statistics record.
#include <algorithm>
#include <bit>
#include <cmath>

#include "card.hpp"
#include "port.hpp"
#include "port_internal.hpp"
#include "system.hpp"

namespace npo::emu {

using namespace portdef;  // NOLINT(google-build-using-namespace): the port model's own constants

Port::LinkView Port::link_view(std::uint64_t now) {
  LinkView v;
  if (pr::kCtrlLoopback.get(ctrl_) != 0) {
    // Near-end loopback inside the SerDes: no optics in the path.
    v.has_peer = true;
    v.loopback = true;
    v.pub = pub_.load(std::memory_order_acquire);
    v.far_tx = static_cast<std::uint8_t>(v.pub >> kPubTxShift);
    v.far_prbs = static_cast<std::uint8_t>(pub_prbs_lanes_.load(std::memory_order_acquire));
    v.peer_fabric_id = card_.fabric_id();
    v.peer_port = index_;
    v.ch = ChannelParams{0.0, 0.0, 0};
    v.far_seed = module_seed_;
    v.far_temp_c = optics::module_temperature_c(module_seed_, pub_power_on_ns_.load(), now);
    return v;
  }
  const auto ref = sys_.resolve_peer(card_index_, index_);
  if (!ref || ref->card >= sys_.cards.size()) return v;
  Card* peer = sys_.cards[ref->card].get();
  if (peer == nullptr || ref->port >= peer->ports().size()) return v;
  const Port& q = peer->ports()[ref->port];
  v.has_peer = true;
  v.pub = q.published();
  v.far_tx = peer->removed() ? 0 : static_cast<std::uint8_t>(v.pub >> kPubTxShift);
  v.far_prbs = static_cast<std::uint8_t>(q.published_prbs_lanes());
  v.peer_fabric_id = peer->fabric_id();
  v.peer_port = ref->port;
  v.ch = sys_.channel_of(card_index_, index_);
  v.far_seed = q.module_seed();  // fixed at construction
  v.far_temp_c = optics::module_temperature_c(q.module_seed(), q.power_on_ns(), now);
  return v;
}

bool Port::lane_signal(unsigned l, std::uint64_t now, const LinkView& v) const {
  return cabled_ && v.has_peer && ((v.far_tx >> l) & 1u) != 0 && ((v.ch.dead_lanes >> l) & 1u) == 0 &&
         now >= lanes_[l].dark_until_ns;
}

double Port::lane_ber(unsigned l, std::uint64_t now, const LinkView& v) {
  if (!lane_signal(l, now, v)) return 0.5;
  auto& lane = lanes_[l];
  if (!lane.ber_valid || now < lane.ber_cache_ns || now - lane.ber_cache_ns > 50 * kMsNs) {
    const double far_tx = optics::tx_power_dbm(v.far_temp_c, lane_tx_offset_db(v.far_seed, l));
    const double eq = lane.trained ? 0.0 : optics::tx_eq_penalty_db(optics::kTxEqPreset, lane.optimum);
    const double snr = optics::snr_db(far_tx - v.ch.loss_db, lane.spread_db, v.ch.snr_penalty_db, eq);
    lane.snr_cache = snr;
    lane.rx_mw_cache = optics::dbm_to_mw(far_tx - v.ch.loss_db);
    lane.ber_cache = optics::ber_from_snr_db(snr);
    lane.ber_cache_ns = now;
    lane.ber_valid = true;
  }
  double ber = lane.ber_cache;
  if (lane.ramp && now >= lane.ramp_start_ns) {
    const double f =
        lane.ramp_dur_ns == 0
            ? 1.0
            : std::min(1.0, static_cast<double>(now - lane.ramp_start_ns) / static_cast<double>(lane.ramp_dur_ns));
    const double from = std::max(lane.ramp_from, 1e-30);
    ber = std::max(ber, from * std::pow(lane.ramp_to / from, f));
  }
  return std::min(ber, 0.5);
}

void Port::sync_lanes(std::uint64_t now, const LinkView* known) {
  const bool counting = state_ == LinkState::kFecLock || state_ == LinkState::kUp;
  const bool prbs = state_ == LinkState::kDataPathInit && dp_activated_ &&
                    (ctrl_ & (pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask())) != 0;
  std::optional<LinkView> view;
  if (known != nullptr) view = *known;
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    auto& lane = lanes_[l];
    std::uint64_t from = lane.synced_ns;
    lane.synced_ns = now;
    if (now <= from || ((lanes_in_use_ >> l) & 1u) == 0 || (!counting && !prbs)) {
      if (!prbs) lane.prbs_lock = false;
      continue;
    }
    if (!view) view = link_view(now);
    if (prbs) {
      sync_prbs(l, from, now, *view);
      continue;
    }
    if (lane.dark_until_ns > from) from = std::min(lane.dark_until_ns, now);
    if (from >= now || !lane_signal(l, now, *view)) continue;
    // Codewords arrive at exactly 19 531 250 per second per lane (53.125 GBd x 2 / 5440):
    // t_ns x 5 / 256, so whole-interval counts add up exactly.
    const auto cw = [](std::uint64_t t) { return (t >> 8) * 5 + (((t & 0xff) * 5) >> 8); };
    if (lane.ramp && lane.ramp_start_ns < now && saturating_add(lane.ramp_start_ns, lane.ramp_dur_ns) > from) {
      // BER moves during the interval: integrate in up to 8 pieces, BER at each midpoint.
      const std::uint64_t span = now - from;
      const unsigned pieces =
          static_cast<unsigned>(std::min<std::uint64_t>(8, std::max<std::uint64_t>(1, span / kMsNs)));
      for (unsigned i = 0; i < pieces; ++i) {
        const std::uint64_t a = from + span * i / pieces, b = from + span * (i + 1) / pieces;
        optics::add_codewords(lane.fec, cw(b) - cw(a), lane_ber(l, a + (b - a) / 2, *view), lane.rng);
      }
    } else {
      optics::add_codewords(lane.fec, cw(now) - cw(from), lane_ber(l, now, *view), lane.rng);
    }
  }
}

void Port::sync_prbs(unsigned l, std::uint64_t from, std::uint64_t to, const LinkView& v) {
  auto& lane = lanes_[l];
  const unsigned local = pr::kCtrlPrbsPattern.get(ctrl_);
  const bool checking = pr::kCtrlPrbsCheck.get(ctrl_) != 0 && ((prbs_lanes_ >> l) & 1u) != 0;
  if (!checking || local >= fw::prbs::kNumPatterns) {
    lane.prbs_lock = false;
    return;
  }
  // The stream this checker receives: host side = the module loops the card's own pattern
  // back over the electrical path; loopback = own pattern through the SerDes; else the far
  // end's generator over the fibre.
  bool src_on = false;
  unsigned src = 0;
  double ber = 0.5;
  if (pr::kCtrlPrbsSide.get(ctrl_) != 0) {
    src_on = pr::kCtrlPrbsGen.get(ctrl_) != 0 && ((prbs_lanes_ >> l) & 1u) != 0 && cabled_;
    src = local;
    ber = optics::kHostSideBer;
  } else {
    src_on = (v.pub & kPubPrbsGen) != 0 && ((v.far_prbs >> l) & 1u) != 0 && lane_signal(l, to, v);
    src = (v.pub >> kPubPatternShift) & 0xf;
    ber = lane_ber(l, to, v);
  }
  if (!src_on) {
    lane.prbs_lock = false;
    return;
  }
  if (!lane.prbs) lane.prbs = std::make_unique<PrbsLaneState>();
  auto& st = *lane.prbs;
  if (st.gen_pattern != src) {
    st.gen =
        fw::prbs::PrbsGenerator(static_cast<fw::prbs::Pattern>(src), static_cast<std::uint32_t>(lane.rng.next()) | 1u);
    st.gen_pattern = static_cast<std::uint8_t>(src);
  }
  if (st.chk_pattern != local) {
    st.chk = fw::prbs::PrbsChecker(static_cast<fw::prbs::Pattern>(local));
    st.chk_pattern = static_cast<std::uint8_t>(local);
  }
  // Bits on the line in the interval; a sample of at most 16 kbit goes bit-exactly through
  // the channel (errors at the lane's BER) into the checker; the rest is extrapolated.
  const std::uint64_t total =
      static_cast<std::uint64_t>(static_cast<double>(to - from) * optics::kLineBitsPerSecond * 1e-9);
  const std::uint64_t sample = std::min<std::uint64_t>(total, 16384);
  const std::uint64_t b0 = st.chk.bits(), e0 = st.chk.errors();
  const double lq = ber > 0 && ber < 1 ? std::log1p(-ber) : -1.0;
  auto gap = [&]() -> std::uint64_t {
    if (ber <= 0) return ~std::uint64_t{0};
    const double g = std::floor(std::log(1.0 - lane.rng.uniform()) / lq);
    return g > 1e18 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(g);
  };
  std::uint64_t next_err = gap();
  for (std::uint64_t done = 0; done < sample;) {
    const unsigned k = static_cast<unsigned>(std::min<std::uint64_t>(64, sample - done));
    std::uint64_t w = st.gen.next_bits(k);
    while (next_err < k) {
      w ^= std::uint64_t{1} << (k - 1 - next_err);
      const std::uint64_t g = gap();
      next_err = g == ~std::uint64_t{0} ? g : next_err + 1 + g;
    }
    if (next_err != ~std::uint64_t{0}) next_err -= k;
    st.chk.feed_bits(w, k);
    done += k;
  }
  std::uint64_t bits = st.chk.bits() - b0, errors = st.chk.errors() - e0;
  if (st.chk.locked() && total > sample) {
    const std::uint64_t extra = total - sample;
    bits += extra;
    errors += lane.rng.poisson(ber * static_cast<double>(extra));
  }
  lane.prbs_bits += bits;
  lane.prbs_errors += errors;
  lane.prbs_lock = st.chk.locked();
}

std::uint32_t Port::lane_status(unsigned l, std::uint64_t now, const LinkView& v) {
  const bool rx_on = (state_ == LinkState::kDataPathInit && dp_activated_) || training_like(state_);
  if (!rx_on) return 0;
  const bool sig = lane_signal(l, now, v);
  // A pending training_timeout fault keeps CDR from locking in Training only: it is a fault
  // of the next training, not of a link that is already Up (which keeps its lock).
  const bool blocked = inject_train_timeouts_ != 0 && state_ == LinkState::kTraining;
  const bool cdr = sig && lane_ber(l, now, v) < optics::kCdrLockMaxBer && !blocked;
  return ln::kLaneStatusSignal.make(sig ? 1 : 0) | ln::kLaneStatusCdrLock.make(cdr ? 1 : 0) |
         ln::kLaneStatusPrbsLock.make(lanes_[l].prbs_lock ? 1 : 0);
}

std::uint32_t Port::status_locked() {
  const std::uint64_t now = sys_.sched.now_ns();
  if (state_ == LinkState::kDisabled || state_ == LinkState::kModuleWait) return status_view(now, LinkView{});
  return status_view(now, link_view(now));
}

std::uint32_t Port::status_view(std::uint64_t now, const LinkView& v) {
  const bool up = state_ == LinkState::kUp;
  const bool has_dp = state_ != LinkState::kDisabled && state_ != LinkState::kModuleWait;
  std::uint32_t lanes_up = 0;
  if (has_dp) {
    for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
      if (ln::kLaneStatusCdrLock.get(lane_status(l, now, v)) != 0) lanes_up |= 1u << l;
    }
  }
  return pr::kStatusState.make(static_cast<std::uint32_t>(state_)) | pr::kStatusFecLock.make(up ? 1 : 0) |
         pr::kStatusModulePresent.make(cabled_ ? 1 : 0) | pr::kStatusLanesUp.make(lanes_up) |
         pr::kStatusLaneCount.make(has_dp ? static_cast<std::uint32_t>(std::popcount(lanes_in_use_)) : 0) |
         pr::kStatusLinkUp.make(up ? 1 : 0);
}

std::uint64_t Port::lane_read(unsigned l, std::uint32_t reg) {
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(now);  // lazy: counters and PRBS lock catch up with emulated time
  const auto& lane = lanes_[l];
  if (reg >= ln::kFecBin0 && reg < ln::kFecBin0 + regs::kFecBins * 8) return lane.fec.bins[(reg - ln::kFecBin0) / 8];
  switch (reg) {
    case ln::kCodewords: return lane.fec.codewords;
    case ln::kCorrected: return lane.fec.corrected;
    case ln::kUncorrectable: return lane.fec.uncorrectable;
    case ln::kSymbolErrors: return lane.fec.symbol_errors;
    case ln::kPrbsBits: return lane.prbs_bits;
    case ln::kPrbsErrors: return lane.prbs_errors;
    default: break;
  }
  const LinkView v = link_view(now);
  const double own_temp = optics::module_temperature_c(module_seed_, pub_power_on_ns_.load(), now);
  return lane_reg_value(l, reg, now, v, own_temp);
}

std::uint32_t Port::lane_reg_value(unsigned l, std::uint32_t reg, std::uint64_t now, const LinkView& v,
                                   double own_temp_c) {
  auto& lane = lanes_[l];
  switch (reg) {
    case ln::kTxEq: return (lane.trained ? lane.optimum : optics::kTxEqPreset).encode();
    case ln::kSnr: {
      if (!lane_signal(l, now, v)) return 0;
      const double ber = lane_ber(l, now, v);
      double snr = lane.snr_cache;
      if (ber > lane.ber_cache * 1.0001) {
        // A BER ramp dominates: report the SNR that gives this BER (bisection).
        double lo = -10, hi = lane.snr_cache;
        for (int i = 0; i < 30; ++i) {
          const double mid = (lo + hi) / 2;
          (optics::ber_from_snr_db(mid) > ber ? lo : hi) = mid;
        }
        snr = lo;
      }
      return static_cast<std::uint32_t>(static_cast<std::int32_t>(std::lround(snr * 256.0)));
    }
    case ln::kLaneStatus: return lane_status(l, now, v);
    case ln::kRxPower:
      if (!lane_signal(l, now, v)) return 0;
      (void)lane_ber(l, now, v);  // refreshes rx_mw_cache
      return clamp_u16(lane.rx_mw_cache * 1e4);
    case ln::kTxPower:
    case ln::kTxBias: {
      const bool tx = ((pub_.load() >> kPubTxShift) >> l) & 1u;
      if (!tx) return 0;
      if (reg == ln::kTxBias) return clamp_u16(optics::tx_bias_ma(own_temp_c, lane.bias_offset_ma) * 1e3);
      return clamp_u16(optics::dbm_to_mw(optics::tx_power_dbm(own_temp_c, lane.tx_offset_db)) * 1e4);
    }
    default: return 0;
  }
}

Port::Telemetry Port::telemetry() {
  std::lock_guard lock(mu_);
  Telemetry t;
  if (!cabled_) return t;
  const std::uint64_t now = sys_.sched.now_ns();
  refresh_cmis(now);
  t.mod_temp_q8 = static_cast<std::int16_t>((cmis_[0][kCmisTemp] << 8) | cmis_[0][kCmisTemp + 1]);
  t.mod_vcc = static_cast<std::uint16_t>((cmis_[0][kCmisVcc] << 8) | cmis_[0][kCmisVcc + 1]);
  // Worst lane's pre-FEC BER over about the last second, from the counters (registers.md
  // §7.3 estimator): each lane keeps two counter snapshots about a second apart.
  sync_lanes(now);
  double worst = 0;
  bool measured = false;
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    auto& lane = lanes_[l];
    const LaneModel::Snap cur{now, lane.fec.codewords, lane.fec.symbol_errors, lane.fec.uncorrectable};
    if (cur.cw < lane.tel_new.cw) lane.tel_old = lane.tel_new = cur;  // cleared since
    const LaneModel::Snap base = now - lane.tel_new.t >= 1'000'000'000 ? lane.tel_new : lane.tel_old;
    if (now - lane.tel_new.t >= 1'000'000'000) {
      lane.tel_old = lane.tel_new;
      lane.tel_new = cur;
    }
    if (((lanes_in_use_ >> l) & 1u) == 0 || cur.cw <= base.cw) continue;
    if (state_ != LinkState::kUp && state_ != LinkState::kFecLock) continue;
    measured = true;
    const double ber = (static_cast<double>(cur.se - base.se) + 16.0 * static_cast<double>(cur.unc - base.unc)) /
                       (5440.0 * static_cast<double>(cur.cw - base.cw));
    worst = std::max(worst, ber);
  }
  if (measured) {
    t.max_ber = worst <= 0 ? 0xffffffffu : static_cast<std::uint32_t>(std::lround(-std::log10(worst) * 1000.0));
  }
  return t;
}

Port::PowerView Port::power_view() {
  std::lock_guard lock(mu_);
  PowerView v;
  if (!cabled_) return v;
  const std::uint64_t now = sys_.sched.now_ns();
  const auto& p00 = cmis_[static_cast<unsigned>(CmisPage::k00)];
  v.present = true;
  v.low_power = module_state() == kModLowPwr;
  v.byte200 = p00[200 - 128];
  v.max_power_q = p00[201 - 128];
  v.dp_lanes = static_cast<unsigned>(std::popcount(dp_lanes_));
  if (state_ == LinkState::kUp || state_ == LinkState::kFecLock) {
    v.trained_lanes = static_cast<unsigned>(std::popcount(lanes_in_use_));
  }
  // The formula refresh_cmis writes into TempMonValue (the DDM value).
  const double t = optics::module_temperature_c(module_seed_, pub_power_on_ns_.load(), now);
  v.temp_q8 = static_cast<std::int16_t>(std::lround(std::clamp(t, -127.0, 127.0) * 256.0));
  return v;
}

void Port::fill_record_locked(fw::stats::PortRecord& r) {
  const std::uint64_t now = sys_.sched.now_ns();
  const bool has_dp = state_ != LinkState::kDisabled && state_ != LinkState::kModuleWait;
  const LinkView v = has_dp ? link_view(now) : LinkView{};
  sync_lanes(now, has_dp ? &v : nullptr);
  r.ctrl = ctrl_;
  r.status = status_view(now, v);
  r.lane_map = static_cast<std::uint32_t>(read_locked(pr::kLaneMap));
  r.speed = static_cast<std::uint32_t>(read_locked(pr::kSpeed));
  r.neighbor = neighbor_;
  r.train_count = train_count_;
  r.flap_count = flap_count_;
  r.train_timeout = train_timeout_ms_;
  r.event_status = events_;
  r.lane_enable = lane_enable_;
  r.train_result = train_result_;
  r.up_count = up_count_;
  r.coeff_updates = coeff_updates_;
  r.prbs_lanes = prbs_lanes_;
  const double temp = cabled_ ? optics::module_temperature_c(module_seed_, pub_power_on_ns_.load(), now) : 0.0;
  r.module_temp = cabled_ ? static_cast<std::uint32_t>(static_cast<std::int32_t>(std::lround(temp * 256.0))) : 0;
  r.module_vcc = static_cast<std::uint32_t>(read_locked(pr::kModuleVcc));
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    auto& o = r.lanes[l];
    const auto& lane = lanes_[l];
    o.codewords = lane.fec.codewords;
    o.corrected = lane.fec.corrected;
    o.uncorrectable = lane.fec.uncorrectable;
    o.symbol_errors = lane.fec.symbol_errors;
    o.prbs_bits = lane.prbs_bits;
    o.prbs_errors = lane.prbs_errors;
    for (unsigned b = 0; b < regs::kFecBins; ++b) o.fec_bins[b] = lane.fec.bins[b];
    o.tx_eq = lane_reg_value(l, ln::kTxEq, now, v, temp);
    if (!cabled_) continue;
    o.snr = lane_reg_value(l, ln::kSnr, now, v, temp);
    o.lane_status = lane_reg_value(l, ln::kLaneStatus, now, v, temp);
    o.rx_power = lane_reg_value(l, ln::kRxPower, now, v, temp);
    o.tx_power = lane_reg_value(l, ln::kTxPower, now, v, temp);
    o.tx_bias = lane_reg_value(l, ln::kTxBias, now, v, temp);
  }
}

}  // namespace npo::emu
