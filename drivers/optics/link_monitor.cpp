// SPDX-License-Identifier: Apache-2.0
// drivers/optics: LinkMonitor -- one batched snapshot of every port and lane of every card
// through the statistics DMA block (fw/stats.hpp), register reads as the fallback, and
// health verdicts / port states across snapshots.
#include "npo/hal/link_monitor.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "card/access.hpp"
#include "card/deadline.hpp"
#include "npo/fw/regs.hpp"
#include "npo/fw/stats.hpp"
#include "npo/hal/backend/backend.hpp"
#include "npo/hal/log.hpp"
#include "npo/hal/memory.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/xcvr_decode.hpp"
#include "optics/port_record.hpp"

namespace npo {

namespace regs = fw::regs;
namespace g = fw::regs::global;
namespace pr = fw::regs::port;
namespace st = fw::stats;

struct PortTrack {
  bool have_prev = false;
  std::vector<LaneCounters> prev;
  std::vector<LaneHealthTracker> lanes;
  FlapDamper damper;
  std::uint32_t last_flap = 0;
  std::deque<std::uint64_t> flap_times;  // downs this monitor saw, within flap_degrade_window_ns
  std::uint32_t new_flaps = 0;           // FLAP_COUNT increments in this snapshot's interval
  std::optional<PortTraining> training;
  bool had_module = false;  // a module was seen here
  bool seen = false;        // the fields below hold the previous snapshot's verdicts
  PortState state = PortState::kDisabled;
  LinkState link = LinkState::kDisabled;  // the card's STATUS.STATE
  bool module_present = false;
  std::vector<LaneHealth> lane_verdicts;  // per physical lane; kGood when not assessed
};

struct CardTrack {
  std::unique_ptr<MemoryRegion> buf;
  bool dma_failed = false;  // never answered: registers from now on
  bool dma_seen = false;    // answered at least once
  bool dma_last = false;
  bool removed = false;  // surprise removal seen
  std::uint32_t seq = 0;
  std::vector<PortTrack> ports;
};

struct LinkMonitor::State {
  std::vector<CardTrack> cards;
  std::unordered_map<std::uint32_t, std::uint32_t> by_fabric_id;  // fabric ID -> card index
  std::uint64_t last_ns = 0;
  bool first = true;
  bool seed = false;  // this snapshot reads the lane counters as history (sample())
};

LinkMonitor::LinkMonitor(System& system, LinkMonitorOptions options)
    : system_(&system), options_(options), state_(std::make_unique<State>()) {
  state_->cards.resize(system.device_count());
  for (std::size_t c = 0; c < system.device_count(); ++c) {
    auto& ct = state_->cards[c];
    ct.ports.resize(system.device(c).port_count());
    state_->by_fabric_id.emplace(system.device(c).info().fabric_id, static_cast<std::uint32_t>(c));
    for (auto& pt : ct.ports) pt.damper = FlapDamper(options_.flap);
    // An observer cannot map a stats buffer, and the card's one STATS_ADDR is the owner's:
    // it reads registers.
    if (system.device(c).info().read_only) ct.dma_failed = true;
  }
}

LinkMonitor::~LinkMonitor() {
  // Stop the card from writing into the buffers before they are unmapped.
  for (std::size_t c = 0; c < state_->cards.size(); ++c) {
    if (state_->cards[c].buf) card::access(system_->device(c)).bar0->write64(g::kStatsAddr, 0);
  }
}

bool LinkMonitor::uses_stats_dma(std::uint32_t card) const noexcept {
  return card < state_->cards.size() && state_->cards[card].dma_last;
}

std::uint64_t LinkMonitor::now_ns() const noexcept { return card::clock_of(*system_).now_ns(); }

void LinkMonitor::sleep_ns(std::uint64_t ns) const noexcept {
  auto& clock = card::clock_of(*system_);
  clock.sleep_until(clock.now_ns() + ns);
}

void LinkMonitor::note_training(std::span<const PortTraining> results) {
  for (const auto& r : results) {
    if (r.card < state_->cards.size() && r.port < state_->cards[r.card].ports.size()) {
      state_->cards[r.card].ports[r.port].training = r;
    }
  }
}

Result<void> LinkMonitor::enable_port(std::uint32_t card, unsigned port) {
  if (card >= system_->device_count()) {
    return fail(Code::kOutOfRange, fmt::format("card {} outside 0..{}", card, system_->device_count() - 1),
                {.card = card});
  }
  auto r = npo::enable_port(system_->device(card), port, true);
  if (!r) return r;
  auto& pt = state_->cards[card].ports[port];
  pt.damper.release();
  pt.flap_times.clear();  // the host acted on the flaps: as the damper, forget them
  return {};
}

namespace {
std::uint32_t load_seq(const std::byte* base) {
  // The card writes `seq` last with a release store (stats.hpp).
  auto* p = reinterpret_cast<std::uint32_t*>(const_cast<std::byte*>(base) + offsetof(st::StatsHeader, seq));
  return std::atomic_ref<std::uint32_t>(*p).load(std::memory_order_acquire);
}
}  // namespace

void LinkMonitor::check_far_ends(LinkSnapshot& s) const {
  // A link is up only when both ends are: an Up port whose far end (in this system) is not
  // carries nothing, whatever its own registers say.
  for (auto& cp : s.cards) {
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      auto& h = cp.health[i];
      const auto& ps = cp.ports[i];
      if (!h.link_up || !ps.neighbor_fabric_id || !ps.neighbor_port) continue;
      const auto far = state_->by_fabric_id.find(*ps.neighbor_fabric_id);
      if (far == state_->by_fabric_id.end()) continue;
      const std::uint32_t fc = far->second;
      if (fc >= s.cards.size() || s.cards[fc].card != fc) continue;  // cards are in index order
      const auto it = s.cards.begin() + fc;
      std::string why;
      if (it->removed) {
        why = "card removed";
      } else if (*ps.neighbor_port < it->ports.size()) {
        const auto& fh = it->health[*ps.neighbor_port];
        const auto& fps = it->ports[*ps.neighbor_port];
        // The far end is down by its own registers (the cross-check is one level deep, so
        // two ends never blame each other).
        if (fps.state != LinkState::kUp || fps.neighbor_fabric_id != system_->device(cp.card).info().fabric_id) {
          why = fh.reason;
        } else if ((lanes_in_use(fps) & fps.lanes_up) == 0) {
          why = "no CDR lock";
        }
      }
      if (why.empty()) continue;
      h.state = PortState::kFailed;
      h.link_up = false;
      h.lane_count = 0;
      h.reason = fmt::format("down: far end {}:{} is not up ({})", fc, *ps.neighbor_port, why);
    }
  }
}

void LinkMonitor::record_events(LinkSnapshot& s) {
  auto& log = log::get(log::Subsystem::kOptics);
  const bool first = state_->first;
  for (const auto& cp : s.cards) {
    if (cp.removed) continue;
    auto& ct = state_->cards[cp.card];
    for (std::size_t i = 0; i < cp.ports.size(); ++i) {
      const auto& ps = cp.ports[i];
      const auto& h = cp.health[i];
      auto& pt = ct.ports[i];
      const auto port = static_cast<unsigned>(i);
      if (pt.seen && pt.module_present != ps.module_present) {
        s.events.push_back({.timestamp_ns = s.timestamp_ns,
                            .card = cp.card,
                            .port = port,
                            .lane = std::nullopt,
                            .what = "module",
                            .from = pt.module_present ? "present" : "absent",
                            .to = ps.module_present ? "present" : "removed",
                            .reason = ps.module_present ? "module inserted" : "module removed"});
      }
      const bool report_first = first && h.state != PortState::kHealthy && h.state != PortState::kDisabled;
      if ((pt.seen && pt.state != h.state) || report_first) {
        s.events.push_back({.timestamp_ns = s.timestamp_ns,
                            .card = cp.card,
                            .port = port,
                            .lane = std::nullopt,
                            .what = "port",
                            .from = pt.seen ? std::string(port_state_name(pt.state)) : std::string("-"),
                            .to = std::string(port_state_name(h.state)),
                            .reason = h.reason});
      }
      // The card's own state machine entering or leaving Up or Fault (a fault the port gave up on).
      const bool notable = [](LinkState a) { return a == LinkState::kUp || a == LinkState::kFault; }(ps.state) ||
                           pt.link == LinkState::kUp || pt.link == LinkState::kFault;
      if (pt.seen && pt.link != ps.state && notable) {
        s.events.push_back({.timestamp_ns = s.timestamp_ns,
                            .card = cp.card,
                            .port = port,
                            .lane = std::nullopt,
                            .what = "link",
                            .from = std::string(link_state_name(pt.link)),
                            .to = std::string(link_state_name(ps.state)),
                            .reason = h.reason});
      }
      pt.link = ps.state;
      if (pt.new_flaps != 0 || (first && ps.flap_count != 0)) {
        // The card counts flaps, it does not time them: on the first snapshot the count since
        // its reset is all the history there is.
        const double window_s = static_cast<double>(options_.flap_degrade_window_ns) / 1e9;
        s.events.push_back(
            {.timestamp_ns = s.timestamp_ns,
             .card = cp.card,
             .port = port,
             .lane = std::nullopt,
             .what = "flap",
             .from = first ? std::string("-") : fmt::format("{}", ps.flap_count - pt.new_flaps),
             .to = fmt::format("{}", ps.flap_count),
             .reason = first ? fmt::format("{} flap{} since the card's reset (before this monitor: times unknown)",
                                           ps.flap_count, ps.flap_count == 1 ? "" : "s")
                             : fmt::format("link went down and retrained {} time{} since the last snapshot; {} in "
                                           "the last {:g} s; now {}",
                                           pt.new_flaps, pt.new_flaps == 1 ? "" : "s", pt.flap_times.size(), window_s,
                                           port_state_name(h.state))});
      }
      // Lane verdicts by physical lane (kGood when not assessed); no allocation per port.
      constexpr std::size_t kMaxLanes = 16;
      const std::size_t nl = std::min(ps.lanes.size(), kMaxLanes);
      std::array<LaneHealth, kMaxLanes> verdicts{};
      std::array<const LaneHealthReport*, kMaxLanes> reports{};
      for (const auto& lr : h.lanes) {
        if (lr.lane < nl) {
          verdicts[lr.lane] = lr.verdict;
          reports[lr.lane] = &lr;
        }
      }
      if (pt.seen && pt.lane_verdicts.size() == nl) {
        for (std::size_t l = 0; l < nl; ++l) {
          if (verdicts[l] == pt.lane_verdicts[l] || reports[l] == nullptr) continue;
          s.events.push_back({.timestamp_ns = s.timestamp_ns,
                              .card = cp.card,
                              .port = port,
                              .lane = static_cast<unsigned>(l),
                              .what = "lane",
                              .from = std::string(lane_health_name(pt.lane_verdicts[l])),
                              .to = std::string(lane_health_name(verdicts[l])),
                              .reason = reports[l]->verdict_reason});
        }
      }
      pt.seen = true;
      pt.state = h.state;
      pt.module_present = ps.module_present;
      pt.lane_verdicts.assign(verdicts.begin(), verdicts.begin() + static_cast<std::ptrdiff_t>(nl));
    }
  }
  std::stable_sort(s.events.begin(), s.events.end(), [](const LinkEvent& a, const LinkEvent& b) {
    return std::tuple(a.card, a.port.value_or(0), a.lane.value_or(0)) <
           std::tuple(b.card, b.port.value_or(0), b.lane.value_or(0));
  });
  for (const auto& e : s.events) {
    log.info("link event t={} card={}{}{} {} {} -> {}: {}", e.timestamp_ns, e.card,
             e.port ? fmt::format(" port={}", *e.port) : "", e.lane ? fmt::format(" lane={}", *e.lane) : "", e.what,
             e.from, e.to, e.reason);
  }
}

Result<LinkSnapshot> LinkMonitor::sample(std::uint64_t interval_ns, unsigned intervals) {
  std::vector<LinkEvent> events;
  if (state_->first) {
    state_->seed = true;
    auto s0 = snapshot();
    state_->seed = false;
    if (!s0) return s0;
    events = std::move(s0->events);
  }
  const unsigned n = intervals != 0 ? intervals : std::max(options_.limits.worsen_intervals, 1u);
  for (unsigned i = 0;; ++i) {
    sleep_ns(interval_ns);
    auto s = snapshot();
    if (!s) return s;
    events.insert(events.end(), s->events.begin(), s->events.end());
    if (i + 1 >= n) {
      s->events = std::move(events);
      return s;
    }
  }
}

Result<LinkSnapshot> LinkMonitor::snapshot() {
  auto& clock = card::clock_of(*system_);
  const std::size_t n = system_->device_count();
  auto& cards = state_->cards;
  // 1. Ring STATS_CTRL on every card that supports the stats block.
  if (options_.use_stats_dma) {
    for (std::size_t c = 0; c < n; ++c) {
      auto& ct = cards[c];
      if (ct.dma_failed || ct.removed) continue;
      auto& dev = system_->device(c);
      if (card::access(dev).bar0->read32(g::kMagic) == 0xffffffffu) continue;  // removed: seen below
      if (!ct.buf) {
        auto b = allocate_host_memory(dev, st::block_bytes(dev.port_count()));
        if (!b) return std::unexpected(b.error());
        ct.buf = std::move(*b);
        card::access(dev).bar0->write64(g::kStatsAddr, ct.buf->iova());
      }
      ++ct.seq;
      if (ct.seq == 0) ct.seq = 1;
      card::access(dev).bar0->write32(g::kStatsCtrl, ct.seq);
    }
  }
  // 2. Wait for every block. The card DMAs them as fast as it can: a kCardWork deadline on
  // the platform clock, which never moves emulated time (card/deadline.hpp).
  const card::Deadline deadline(clock, options_.stats_timeout_ns, card::WaitFor::kCardWork);
  std::vector<std::uint8_t> arrived(n, 0);
  if (options_.use_stats_dma) {
    for (unsigned spin = 0;; ++spin) {
      bool all = true;
      for (std::size_t c = 0; c < n; ++c) {
        auto& ct = cards[c];
        if (ct.dma_failed || ct.removed || arrived[c]) continue;
        if (card::access(system_->device(c)).bar0->read32(g::kMagic) == 0xffffffffu) {
          arrived[c] = 1;  // removed meanwhile: nothing will arrive
          continue;
        }
        if (load_seq(ct.buf->bytes().data()) == ct.seq) {
          arrived[c] = 1;
        } else {
          all = false;
        }
      }
      if (all || deadline.expired()) break;
      if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  LinkSnapshot s;
  s.timestamp_ns = clock.now_ns();
  s.interval_ns = state_->last_ns == 0 ? 0 : s.timestamp_ns - state_->last_ns;
  state_->last_ns = s.timestamp_ns;
  s.cards.reserve(n);
  st::PortRecord rec{};
  for (std::size_t c = 0; c < n; ++c) {
    auto& dev = system_->device(c);
    auto& ct = cards[c];
    auto& m = *card::access(dev).bar0;
    const unsigned lanes = dev.info().lanes_per_port;
    LinkSnapshot::CardPorts cp;
    cp.card = static_cast<std::uint32_t>(c);
    const bool dma = options_.use_stats_dma && !ct.dma_failed && arrived[c];
    const unsigned nports = dev.port_count();
    // Without the stats block the port records are register reads: read them all first and
    // check the card is still there after them, so a card that vanished midway is reported
    // removed rather than decoded from all-ones registers.
    std::vector<st::PortRecord> regs_read;
    bool gone = ct.removed || m.read32(g::kMagic) == 0xffffffffu;
    if (!gone && !dma) {
      regs_read.resize(nports);
      for (unsigned p = 0; p < nports; ++p) {
        optics::read_port_record(m, p, lanes, regs_read[p], false);
        // An empty cage has no lane data worth 200 register reads.
        if (pr::kStatusModulePresent.get(regs_read[p].status) != 0)
          optics::read_port_record(m, p, lanes, regs_read[p], true);
      }
      gone = m.read32(g::kMagic) == 0xffffffffu;
    }
    if (gone) {
      // All-ones registers: the card was removed -- unless the path to it is what broke (an
      // emu-remote client whose npo-emud died), which is an error of the whole view.
      if (auto conn = card::access(dev).function->check_connection(); !conn) return std::unexpected(conn.error());
      // Surprise removal: report the card as gone and keep reading the others.
      if (!ct.removed) {
        ct.removed = true;
        s.events.push_back({.timestamp_ns = s.timestamp_ns,
                            .card = cp.card,
                            .port = std::nullopt,
                            .lane = std::nullopt,
                            .what = "card",
                            .from = state_->first ? "-" : "present",
                            .to = "removed",
                            .reason = "card removed (BAR reads all ones)"});
      }
      cp.removed = true;
      s.cards.push_back(std::move(cp));
      continue;
    }
    if (options_.use_stats_dma && !ct.dma_failed && !arrived[c] && !ct.dma_seen) {
      ct.dma_failed = true;  // STATS_SEQ never advanced: this card does not support it
      m.write64(g::kStatsAddr, 0);
    }
    ct.dma_seen = ct.dma_seen || dma;
    ct.dma_last = dma;
    cp.via_stats_dma = dma;
    const std::byte* block = dma ? ct.buf->bytes().data() : nullptr;
    cp.ports.reserve(nports);
    cp.health.reserve(nports);
    for (unsigned p = 0; p < nports; ++p) {
      if (dma) {
        std::memcpy(&rec, block + st::kHeaderBytes + p * st::kPortRecordBytes, sizeof rec);
      } else {
        rec = regs_read[p];
      }
      PortStatus ps = optics::decode_port_record(rec, p, lanes);
      auto& pt = ct.ports[p];
      if (pt.lanes.size() != lanes) {
        pt.lanes.assign(lanes, LaneHealthTracker(options_.limits));
        pt.prev.assign(lanes, LaneCounters{});
      }
      // Flap policy: FLAP_COUNT increments since the last snapshot are downs now.
      pt.new_flaps = 0;
      if (pt.have_prev && ps.flap_count > pt.last_flap) {
        pt.new_flaps = ps.flap_count - pt.last_flap;
        for (std::uint32_t i = 0; i < std::min<std::uint32_t>(pt.new_flaps, 64); ++i) {
          pt.flap_times.push_back(s.timestamp_ns);
        }
        if (pt.damper.on_down(s.timestamp_ns, ps.flap_count - pt.last_flap) && options_.enforce_flap_policy) {
          m.write32(regs::port_reg(p, pr::kCtrl), pr::kCtrlEnable.set(rec.ctrl, 0));
          ps.enabled = false;
        }
      }
      while (!pt.flap_times.empty() && s.timestamp_ns - pt.flap_times.front() >= options_.flap_degrade_window_ns) {
        pt.flap_times.pop_front();
      }
      pt.last_flap = ps.flap_count;
      std::vector<LaneHealthReport> reports;
      std::optional<xcvr::DecodedModule> module;
      if (ps.state == LinkState::kUp && options_.check_module_ddm) {
        if (auto img = read_module_image(dev, p)) {
          if (auto dm = xcvr::decode_module(*img)) module = std::move(*dm);
        }
      }
      if (ps.state == LinkState::kUp) {
        for (unsigned l = 0; l < lanes; ++l) {
          if (((ps.lane_enable >> l) & 1u) == 0) continue;
          const bool locked = ((ps.lanes_up >> l) & 1u) != 0;
          // Module LOS / Tx-fault flags and DDM thresholds live in CMIS pages 02h/11h (mailbox):
          // judged only with check_module_ddm. Media lane l+1 carries physical lane l here.
          LaneDdmFlags flags;
          const xcvr::Thresholds* thr = nullptr;
          if (module) {
            thr = &module->thresholds;
            if (module->lane_flags) {
              flags.rx_los = module->lane_flags->test(xcvr::LaneFlag::kRxLos, l + 1);
              flags.tx_fault = module->lane_flags->test(xcvr::LaneFlag::kTxFault, l + 1);
            }
          }
          if (state_->seed && !pt.have_prev) {
            // sample()'s first snapshot: counters since the clear are history, not a verdict.
            pt.lanes[l].seed(ps.lanes[l], locked);
            continue;
          }
          auto r = pt.lanes[l].update(pt.prev[l], ps.lanes[l], locked, flags, thr);
          r.lane = l;
          reports.push_back(std::move(r));
        }
      }
      for (unsigned l = 0; l < lanes; ++l) pt.prev[l] = ps.lanes[l];
      pt.have_prev = true;
      pt.had_module = pt.had_module || ps.module_present;
      PortContext ctx;
      ctx.had_module = pt.had_module;
      // A damper that tripped holds the port down only when the policy is enforced; a reader
      // that does not enforce it (e.g. npo-link show) reports the port as flapping instead.
      const std::string held = pt.damper.reason();
      const bool enforced = options_.enforce_flap_policy;
      auto ph =
          assess_port(ps, reports, lanes, enforced ? held : std::string(), pt.training ? &*pt.training : nullptr, ctx);
      if (!enforced && !held.empty() && ph.state != PortState::kDisabled) {
        constexpr std::string_view kHeld = "held down: ";
        const std::string what = held.starts_with(kHeld) ? held.substr(kHeld.size()) : held;
        ph.state = PortState::kFailed;
        ph.reason = fmt::format("flapping: {} (the flap policy is not enforced by this reader); {}", what, ph.reason);
      }
      // A link that keeps going down and retraining: up now, but not one to trust.
      const std::size_t recent = pt.flap_times.size();
      if (options_.flap_degrade_count > 0 && recent >= options_.flap_degrade_count && ph.link_up &&
          (ph.state == PortState::kHealthy || ph.state == PortState::kDegraded)) {
        ph.state = PortState::kDegraded;
        const bool has_details = ph.reason.find(": ") != std::string::npos;
        ph.reason += fmt::format("{}{} flaps in the last {:g} s", has_details ? "; " : ": ", recent,
                                 static_cast<double>(options_.flap_degrade_window_ns) / 1e9);
      }
      cp.health.push_back(std::move(ph));
      cp.ports.push_back(std::move(ps));
    }
    s.cards.push_back(std::move(cp));
  }
  check_far_ends(s);
  record_events(s);
  state_->first = false;
  return s;
}

}  // namespace npo
