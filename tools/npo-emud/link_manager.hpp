// SPDX-License-Identifier: Apache-2.0
// npo-emud --manage-links: the subnet manager's link duty while the daemon serves.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "npo/hal/link_training.hpp"
#include "npo/hal/system.hpp"

namespace npo::tools {

/// Retrains links that go down while the supernode is served, as a fabric's subnet manager
/// does (registers.md §7.2): every `period` it reads every port's registers (LinkMonitor,
/// no stats DMA, no flap enforcement of its own) and retrains (train_ports, retrain = true)
/// the ports that have a module, are enabled by the host, and were seen not up and not
/// training in two polls in a row -- so a card's own retry is never raced. A lane that no
/// longer locks is dropped from LANE_ENABLE by the supervisor, and the link comes back
/// narrower (DEGRADED, e.g. 7/8 lanes). A port that went down FlapPolicy::max_downs times within
/// FlapPolicy::window_ns (5 in 60 s) is left down and logged once ("held down"), so a
/// flapping link is not retrained for ever. Removed cards are skipped. When the set of Up
/// ports differs from the one the routes were last computed over, it discovers the fabric
/// again and programs every card's routes (registers.md §8: discover_topology,
/// RouteTable::compute, program_routes) in that same poll, before any retrain: a link that
/// goes down is routed around over the cards that remain within one poll (a subnet manager's
/// sweep; since links join members of one partition only, routes stay inside it), and one
/// that comes back is used again. Every decision is one line through `say` (a reroute names
/// the poll and the ports lost and back). Thread-safety: owns one thread; the System must
/// outlive the manager.
class LinkManager {
 public:
  LinkManager(System& system, std::function<void(const std::string&)> say,
              std::chrono::milliseconds period = std::chrono::milliseconds(200));
  ~LinkManager();
  LinkManager(const LinkManager&) = delete;
  LinkManager& operator=(const LinkManager&) = delete;

 private:
  void run();
  /// Discovers the fabric, recomputes and programs the routes; says what it did and `change`.
  void reroute(std::size_t ports_up, const std::string& change);

  System& system_;
  std::function<void(const std::string&)> say_;
  std::chrono::milliseconds period_;
  std::atomic<bool> stop_{false};
  std::map<std::pair<std::uint32_t, unsigned>, FlapDamper> dampers_;
  std::thread thread_;
};

}  // namespace npo::tools
