// SPDX-License-Identifier: Apache-2.0
// The card's power and thermal model and its power-limit controller (power.hpp).
#include "power.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "card.hpp"
#include "npo/fw/mailbox.hpp"
#include "system.hpp"

namespace npo::emu {

namespace {
__extension__ using u128 = unsigned __int128;
constexpr std::uint64_t kPjPerUj = 1'000'000;
constexpr std::uint64_t kCoalesceNs = 1'000'000;  // samples closer than this to the one before merge
}  // namespace

std::uint32_t power::module_draw_mw(bool low_power, unsigned max_power_q, unsigned dp_lanes) noexcept {
  const std::uint32_t max_mw = max_power_q * 250u;
  if (low_power) return std::min(kModuleLowPowerMw, max_mw);
  const unsigned lanes = std::min(dp_lanes, fw::regs::kLanesPerPort);
  return max_mw / 2 + (max_mw / 2) * lanes / fw::regs::kLanesPerPort;
}

PowerModel::PowerModel(Card& card) : card_(card), engine_bytes_(fw::regs::kNumEngines, 0) {
  last_t_ = card_.system().sched.now_ns();
  last_tick_ = last_t_;
  last_bytes_ = card_.shared().dma_bytes_total.load(std::memory_order_relaxed);
  samples_.push_back({last_t_, 0.0L});
}

void PowerModel::sample_ports_locked() {
  const unsigned np = card_.ports().size();
  ports_.resize(np);
  std::uint32_t serdes = 0, modules = 0;
  for (unsigned p = 0; p < np; ++p) {
    const Port::PowerView v = card_.ports()[p].power_view();
    PortPower& pp = ports_[p];
    pp = PortPower{};
    if (v.present) {
      pp.present = true;
      pp.low_power = v.low_power;
      pp.power_class = static_cast<std::uint8_t>(((v.byte200 >> 5) & 7u) + 1);
      pp.max_power_q = v.max_power_q;
      pp.draw_mw = power::module_draw_mw(v.low_power, v.max_power_q, v.dp_lanes);
      pp.temp_q8 = v.temp_q8;
      pp.trained_lanes = static_cast<std::uint8_t>(v.trained_lanes);
    }
    serdes += v.trained_lanes * power::kSerdesMwPerLane;
    modules += pp.draw_mw;
  }
  serdes_mw_ = serdes;
  modules_mw_ = modules;
  static_mw_ = power::kIdleMw + serdes + modules;
}

void PowerModel::update_locked(std::uint64_t now) {
  if (now <= last_t_) {                         // bytes moved meanwhile are counted in the next interval
    if (ports_.empty()) sample_ports_locked();  // the static view, before any interval
    return;
  }
  const std::uint64_t dt = now - last_t_;
  CardState& cs = card_.shared();
  const std::uint64_t bytes = cs.dma_bytes_total.load(std::memory_order_relaxed);
  const std::uint64_t db = bytes - last_bytes_;
  // Engines that moved data: their queues' BYTES changed (a card reset clears them: any change).
  unsigned active = 0;
  for (unsigned e = 0; e < fw::regs::kNumEngines; ++e) {
    std::uint64_t sum = 0;
    for (unsigned q = 0; q < fw::regs::kQueuesPerEngine; ++q) {
      sum += cs.queues[e * fw::regs::kQueuesPerEngine + q].bytes.load(std::memory_order_relaxed);
    }
    if (sum != engine_bytes_[e]) ++active;
    engine_bytes_[e] = sum;
  }
  if (active == 0 && db != 0) active = 1;  // bytes counted before the queue counters (one batch)
  // Module cages and SerDes, taken as constant over the interval.
  sample_ports_locked();
  engines_active_ = active;
  // Energy of the interval: mW x ns = pJ.
  const u128 fixed_pj = u128{static_mw_ + active * power::kEngineActiveMw} * dt;
  const u128 dma_pj = u128{db} * power::kDmaPjPerByte;
  const u128 total = fixed_pj + dma_pj + energy_rem_pj_;
  energy_uj_ += static_cast<std::uint64_t>(total / kPjPerUj);
  energy_rem_pj_ = static_cast<std::uint64_t>(total % kPjPerUj);
  dma_mw_ = static_cast<std::uint32_t>(std::min<u128>((dma_pj / dt) + active * power::kEngineActiveMw, ~0u));
  last_t_ = now;
  last_bytes_ = bytes;
  const Sample s{now, static_cast<long double>(energy_uj_) * kPjPerUj + static_cast<long double>(energy_rem_pj_)};
  if (samples_.size() >= 2 && now - samples_[samples_.size() - 2].t < kCoalesceNs) {
    samples_.back() = s;
  } else {
    samples_.push_back(s);
  }
  // Keep one sample at or before the start of the averaging window.
  while (samples_.size() >= 2 && samples_[1].t + power::kAvgWindowNs <= now) samples_.pop_front();
}

long double PowerModel::energy_at_locked(std::uint64_t t) const {
  if (t <= samples_.front().t) return samples_.front().e_pj;
  if (t >= samples_.back().t) return samples_.back().e_pj;
  auto it = std::upper_bound(samples_.begin(), samples_.end(), t, [](std::uint64_t v, const Sample& s) {
    return v < s.t;
  });  // first sample after t; it - 1 is at or before
  const Sample& b = *it;
  const Sample& a = *(it - 1);
  const long double f = static_cast<long double>(t - a.t) / static_cast<long double>(b.t - a.t);
  return a.e_pj + (b.e_pj - a.e_pj) * f;
}

std::uint32_t PowerModel::window_mw_locked(std::uint64_t now, std::uint64_t window) const {
  const std::uint64_t from = std::max(now > window ? now - window : 0, samples_.front().t);
  if (now <= from) return static_mw_;
  const long double mw = (energy_at_locked(now) - energy_at_locked(from)) / static_cast<long double>(now - from);
  return static_cast<std::uint32_t>(std::clamp(std::llround(mw), 0LL, 0xffffffffLL));
}

PowerModel::Reading PowerModel::read() {
  std::lock_guard lock(mu_);
  const std::uint64_t now = card_.system().sched.now_ns();
  update_locked(now);
  Reading r;
  r.now_ns = now;
  r.power_mw = window_mw_locked(now, power::kTickNs);
  r.power_avg_mw = window_mw_locked(now, power::kAvgWindowNs);
  r.energy_mj = energy_uj_ / 1000;
  r.limit_mw = limit_mw_;
  r.default_limit_mw = power::kDefaultLimitMw;
  r.min_limit_mw = power::kMinLimitMw;
  r.max_limit_mw = power::kMaxLimitMw;
  r.throttle = throttled_ ? fw::mbox::power::kThrottlePowerLimit : 0;
  r.throttled_ns = throttled_ns_ + (throttled_ && now > last_tick_ ? now - last_tick_ : 0);
  const double temp_c = power::kAmbientC + power::kDegCPerW * (r.power_avg_mw / 1000.0);
  r.temp_q8 = static_cast<std::int16_t>(std::lround(std::clamp(temp_c, -127.0, 127.0) * 256.0));
  r.engines_active = engines_active_;
  r.idle_mw = power::kIdleMw;
  r.dma_mw = dma_mw_;
  r.serdes_mw = serdes_mw_;
  r.modules_mw = modules_mw_;
  return r;
}

std::vector<PowerModel::PortPower> PowerModel::ports() {
  std::lock_guard lock(mu_);
  update_locked(card_.system().sched.now_ns());
  return ports_;
}

bool PowerModel::set_limit(std::uint32_t mw) {
  if (mw < power::kMinLimitMw || mw > power::kMaxLimitMw) return false;
  {
    std::lock_guard lock(mu_);
    limit_mw_ = mw;
  }
  card_.log_event(fmt::format("power limit set to {} mW", mw));
  arm();  // the controller looks at the new limit within 10 ms
  return true;
}

void PowerModel::reset_limit() {
  {
    std::lock_guard lock(mu_);
    limit_mw_ = power::kDefaultLimitMw;
  }
  card_.log_event(fmt::format("power limit reset to {} mW", power::kDefaultLimitMw));
  arm();
}

std::uint32_t PowerModel::limit_mw() {
  std::lock_guard lock(mu_);
  return limit_mw_;
}

void PowerModel::dma_activity() noexcept {
  if (armed_.load(std::memory_order_relaxed)) return;
  arm();
}

void PowerModel::arm() {
  if (armed_.exchange(true)) return;
  card_.system().sched.schedule_in(power::kTickNs, [this](std::uint64_t now) { tick(now); });
}

void PowerModel::tick(std::uint64_t now) {
  CardState& cs = card_.shared();
  bool refilled = false;
  bool keep = false;
  std::uint64_t sampled_bytes = 0;
  {
    std::lock_guard lock(mu_);
    update_locked(now);
    const std::uint64_t dt = now - std::min(now, last_tick_);
    last_tick_ = now;
    const std::uint32_t avg = window_mw_locked(now, power::kAvgWindowNs);
    if (cs.dma_budget_hit.exchange(0, std::memory_order_relaxed) != 0) last_hit_ = now;
    if (!throttled_ && avg > limit_mw_) {
      throttled_ = true;
      last_hit_ = now;
      cs.dma_budget.store(0, std::memory_order_relaxed);
      cs.dma_throttled.store(1, std::memory_order_release);
      card_.log_event(fmt::format("power: throttling DMA, 1 s average {} mW above the limit {} mW", avg, limit_mw_));
    } else if (throttled_) {
      throttled_ns_ += dt;
      // Released once the engines have not used up a quantum's budget for 500 ms (the
      // demand fits under the limit) and the average holds.
      if (now - last_hit_ >= power::kReleaseQuietNs && avg <= limit_mw_) {
        throttled_ = false;
        cs.dma_throttled.store(0, std::memory_order_release);
        refilled = true;  // stalled queues run again
        card_.log_event(fmt::format("power: DMA throttle released, 1 s average {} mW, limit {} mW", avg, limit_mw_));
      }
    }
    if (throttled_) {
      // The DMA share that fits: the limit less the static power and the active engines'
      // fixed share, 90% of it while the average is still above the limit, then 98%.
      const std::int64_t headroom = std::int64_t{limit_mw_} - std::int64_t{static_mw_} -
                                    std::int64_t{std::max(1u, engines_active_)} * power::kEngineActiveMw;
      const double frac = avg > limit_mw_ ? 0.90 : 0.98;
      const double mw = headroom > 0 ? static_cast<double>(headroom) * frac : 0.0;
      // Never below the floor: a throttled engine slows down, it does not stop (mailbox.md §3.10).
      const auto allowance =
          std::max(power::kMinBudgetBytes, static_cast<std::int64_t>(mw * static_cast<double>(power::kTickNs) /
                                                                     static_cast<double>(power::kDmaPjPerByte)));
      std::int64_t b = cs.dma_budget.load(std::memory_order_relaxed);
      std::int64_t nb = 0;
      do {
        nb = b < 0 ? b + allowance : allowance;  // an op that overshot is paid back first
      } while (!cs.dma_budget.compare_exchange_weak(b, nb, std::memory_order_relaxed));
      if (b <= 0) last_hit_ = now;  // the last quantum's budget was used up
      refilled = refilled || (b <= 0 && nb > 0);
    }
    keep = throttled_ || engines_active_ > 0;
    sampled_bytes = last_bytes_;
  }
  if (refilled) {
    for (unsigned q = 0; q < fw::regs::kNumQueues; ++q) {
      QueueModel& qm = card_.queue(q);
      if (qm.has_work()) card_.kick(qm, false);
    }
  }
  if (keep) {
    card_.system().sched.schedule_in(power::kTickNs, [this](std::uint64_t t) { tick(t); });
    return;
  }
  armed_.store(false, std::memory_order_seq_cst);
  // Data moved after this tick's sample: sample again (dma_activity may have seen armed_ set).
  if (cs.dma_bytes_total.load(std::memory_order_seq_cst) != sampled_bytes) arm();
}

}  // namespace npo::emu
