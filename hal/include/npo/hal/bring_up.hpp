// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: bring_up_fabric -- the one call that takes a freshly opened System to a
// working fabric: every optical port trained, the graph discovered, routes programmed.
#pragma once

#include <cstdint>

#include "npo/hal/error.hpp"
#include "npo/hal/link_training.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/topology.hpp"

namespace npo {

class System;

/// Options of bring_up_fabric. The defaults suit every tool and a runtime.
struct BringUpOptions {
  /// Training timeouts, retry budget, lane degrade (link_training.hpp; registers.md §7.2).
  TrainingPolicy policy{};
  /// Cap on the whole training phase, ns of platform clock (System::clock()): ports still
  /// training then end with their stage's timeout code. 10 s covers the published module
  /// ready (5 s) and data path (2 s) timeouts; ports that fail end sooner (retry budget).
  std::uint64_t timeout_ns = 10'000'000'000;
  /// true: write the computed routes into every card (registers.md §8) so remote DMA crosses
  /// several hops. false: discover and compute only (e.g. to inspect a fabric).
  bool program_routes = true;
  /// false: train nothing on any System, as an observer does (below): read the links as they
  /// are, waiting up to `timeout_ns` for ports still training, then discover and compute.
  /// A read that never changes a link (`npo-smi topo` without --train).
  bool train = true;
};

/// What bring_up_fabric brought up.
struct FabricBringUp {
  /// Per-port training outcome: links.up / links.failed / links.degraded count the ports
  /// with a module; links.ports has the detail of every port (link_training.hpp).
  LinkBringUp links;
  /// The graph discovered from the identities training exchanged.
  Topology topology;
  /// Shortest-path (ECMP) routes over the Up links; programmed when options.program_routes.
  RouteTable routes;
  /// Ordered pairs of cards (a != b) with no route between them: 0 on a connected fabric.
  std::uint64_t unreachable_pairs = 0;
  /// Every port with a module is Up and every card reaches every other.
  [[nodiscard]] bool complete() const noexcept { return links.failed == 0 && unreachable_pairs == 0; }
};

/// Brings the fabric of `system` up, in this order:
///  1. enables every port of every card and runs the training supervisor over all of them at
///     once (bring_up_links: module ready -> data path init -> training -> FEC lock -> Up,
///     retries and lane degrade by `options.policy`), then lets the links settle (ports that
///     dropped when their partner retrained are trained again);
///  2. discovers the topology from the trained links (discover_topology);
///  3. computes shortest-path ECMP routes (RouteTable::compute) and, unless
///     `options.program_routes` is false, writes them into every card (program_routes).
/// System::open leaves the links as they are (down on a fresh emulator): call this once
/// after open, before any remote DMA; calling it again retrains nothing that is Up and
/// reprograms routes for the links as they are now.
/// On a System whose every card is attached read-only (an observer, emu-remote mode=ro), or
/// with `options.train` false, step 1 trains nothing: it waits (up to `options.timeout_ns`)
/// for ports still training, then `links` counts the ports as PORT.STATUS has them (failed =
/// cabled and not Up; `links.ports` empty) and steps 2 and 3 compute from them. For an
/// observer `options.program_routes` is then kPermissionDenied.
/// Waits on the platform clock (System::clock()): on the emulator's virtual clock waiting
/// advances emulated time instead of sleeping.
/// Returns the outcome even when some ports failed (they are results: see
/// FabricBringUp::complete()). Errors: kUnavailable (a card was removed), kInvalidArgument
/// (a card reports a fabric ID outside 1..2047). Thread-safety: one bring-up per System at a
/// time, not concurrent with other training, port-enable or routing calls on the System.
Result<FabricBringUp> bring_up_fabric(System& system, const BringUpOptions& options = {});

}  // namespace npo
