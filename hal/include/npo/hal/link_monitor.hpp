// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: LinkMonitor -- one batched snapshot of every port and lane of every
// card (registers.md §7), and across successive snapshots per-lane health verdicts and port
// states (link_health.hpp) with the flap policy (link_training.hpp FlapDamper).
//
// A snapshot uses the card's statistics DMA (fw/stats.hpp, registers.md §7.5): the monitor
// registers one host buffer per card, rings GLOBAL.STATS_CTRL on every card first, then
// waits for every block's sequence -- no per-port register round trips. A card whose
// sequence never advances is read register by register instead (fallback).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "npo/hal/error.hpp"
#include "npo/hal/link_health.hpp"
#include "npo/hal/link_training.hpp"
#include "npo/hal/port.hpp"

namespace npo {

class System;

/// A change LinkMonitor saw from one snapshot to the next: a port's state, a lane's
/// verdict, a module removed or inserted, a card removed. The monitor also logs each at
/// level info (logger npo.optics).
struct LinkEvent {
  std::uint64_t timestamp_ns = 0;  ///< platform clock of the snapshot that saw the change
  std::uint32_t card = 0;
  std::optional<unsigned> port;  ///< nullopt: the whole card
  std::optional<unsigned> lane;  ///< set for a lane verdict change
  /// "port" (state), "link" (the card's STATUS.STATE entering or leaving up or fault),
  /// "lane" (verdict), "module" (present/removed), "card" (present/removed), "flap" (the
  /// link went down and retrained between two snapshots: from/to are the port's FLAP_COUNT
  /// before and after; on the first snapshot from "-": the flaps since the card's reset, whose
  /// times the card does not keep).
  std::string what;
  std::string from;    ///< old state ("-" on the first snapshot), e.g. "HEALTHY", "GOOD", "present"
  std::string to;      ///< new state
  std::string reason;  ///< the port's reason or the lane's verdict reason
};

/// One snapshot of all ports of all cards.
struct LinkSnapshot {
  std::uint64_t timestamp_ns = 0;  ///< platform clock when the snapshot was taken
  std::uint64_t interval_ns = 0;   ///< since the previous snapshot of this monitor (0: first)
  struct CardPorts {
    std::uint32_t card = 0;
    /// The card is gone (surprise removal, BAR reads all ones): ports and health are empty.
    /// The other cards are still read.
    bool removed = false;
    bool via_stats_dma = false;  ///< read from the card's stats block (else register reads)
    std::vector<PortStatus> ports;
    /// Per port (same order as ports): state, reason, lane verdicts. From the second snapshot
    /// on the lane verdicts cover the interval since the previous one; on the first, lanes
    /// report their cumulative counters (since the last clear).
    std::vector<PortHealth> health;
  };
  std::vector<CardPorts> cards;
  /// Changes since the previous snapshot of this monitor, in card, port, lane order. On the
  /// first snapshot: the ports that are neither HEALTHY nor DISABLED (from "-"), removed cards
  /// and the ports that flapped since the card's reset ("flap", from "-").
  std::vector<LinkEvent> events;
};

/// Options of a LinkMonitor.
struct LinkMonitorOptions {
  HealthLimits limits;  ///< lane verdict limits and hysteresis
  FlapPolicy flap;      ///< downs within a window -> port held DISABLED
  /// Take ports that trip the flap policy down (CTRL.ENABLE = 0) until enable_port(), and
  /// report them DISABLED "held down: ...". false (a reader that must not change a link, like
  /// `npo-link show`): such ports are reported FAILED "flapping: ..." and left alone.
  bool enforce_flap_policy = true;
  bool use_stats_dma = true;  ///< false: always read registers
  /// Also judge each Up port's module DDM: thresholds (CMIS page 02h) against the card's
  /// DDM mirrors, and the latched Rx LOS / Tx fault flags (page 11h). Costs ~6 mailbox reads
  /// per port per snapshot, so it is off by default (a 1024-card snapshot stays mailbox-free).
  bool check_module_ddm = false;
  /// Bound for the stats blocks of one snapshot to arrive, ns of platform time
  /// (System::clock()); on a virtual clock of wall time, as the stats DMA needs no emulated time.
  std::uint64_t stats_timeout_ns = 20'000'000;
  /// A port whose link went down (FLAP_COUNT advanced) at least `flap_degrade_count` times
  /// within `flap_degrade_window_ns` is DEGRADED "N flaps in the last 300 s" while its link
  /// is up (a port that is down or has a failing lane stays FAILED). Defaults: 2 in 300 s --
  /// one flap is an event (a fibre re-seated, the far end rebooted), a second within five
  /// minutes is a link to look at; the state clears once fewer than 2 downs are left in the
  /// window. The hold-down (`flap`, 5 in 60 s) is above it. 0: no flap degrade.
  /// Only downs seen by this monitor count (the card keeps a count, not the times).
  unsigned flap_degrade_count = 2;
  std::uint64_t flap_degrade_window_ns = 300'000'000'000;  ///< see flap_degrade_count
};

/// Batched link monitoring. Thread-safety: one thread per LinkMonitor.
class LinkMonitor {
 public:
  explicit LinkMonitor(System& system, LinkMonitorOptions options = {});
  ~LinkMonitor();
  LinkMonitor(const LinkMonitor&) = delete;
  LinkMonitor& operator=(const LinkMonitor&) = delete;

  /// Reads every port and lane of every card (stats DMA, else registers), updates the lane
  /// trackers and flap dampers, and returns the snapshot with health and events. A link is
  /// up (PortHealth::link_up) only when both ends are Up with lock: an Up port whose far end
  /// (the neighbour learned in training, when it is in this system) is not is FAILED "far end
  /// C:P down: ...". Ports that trip the flap policy are disabled (if enforce_flap_policy).
  /// A removed card is reported as CardPorts::removed, not as an error.
  /// Errors: kResourceExhausted (stats buffer).
  Result<LinkSnapshot> snapshot();

  /// A verdict of "now" in one call (a one-shot `npo-link show` / `health`): when this
  /// monitor has taken no snapshot yet, a first one that reads the counters as history (the
  /// lanes' counters since the last clear become their baselines, not verdicts: an average
  /// since link-up hides a lane that is bad now; LaneHealthTracker::seed), then `intervals`
  /// snapshots `interval_ns` apart on the platform clock (sleep_ns). 0 intervals: as many as
  /// the hysteresis needs to report a worse verdict (HealthLimits::worsen_intervals, at least
  /// 1). So a lane is DEGRADED (FAILING) when every sampled interval showed it, and lane BERs
  /// are over the last interval. Returns the last snapshot with the events of all of them (in
  /// time order) and interval_ns of the last interval. Errors: as snapshot().
  Result<LinkSnapshot> sample(std::uint64_t interval_ns, unsigned intervals = 0);

  /// Re-enables a port held down by the flap policy (or disabled): releases the damper,
  /// forgets the downs counted for flap_degrade_count and writes CTRL.ENABLE = 1. Errors: kOutOfRange, kUnavailable.
  Result<void> enable_port(std::uint32_t card, unsigned port);

  /// Records training results (e.g. from bring_up_links) so port reasons can name dropped
  /// lanes and failure codes.
  void note_training(std::span<const PortTraining> results);

  /// Now on the platform clock (emulated time on the emulator), ns.
  [[nodiscard]] std::uint64_t now_ns() const noexcept;
  /// Sleeps `ns` on the platform clock: on the emulator's virtual clock this advances
  /// emulated time (the links keep running), elsewhere it sleeps. For `--watch` loops and the
  /// interval between two snapshots. Thread-safety: as the clock's.
  void sleep_ns(std::uint64_t ns) const noexcept;

  /// Whether card `card` answered the stats DMA on the last snapshot.
  [[nodiscard]] bool uses_stats_dma(std::uint32_t card) const noexcept;

  struct State;

 private:
  void check_far_ends(LinkSnapshot& s) const;
  void record_events(LinkSnapshot& s);
  System* system_;
  LinkMonitorOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace npo
