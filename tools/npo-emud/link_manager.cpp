// SPDX-License-Identifier: Apache-2.0
#include "link_manager.hpp"

#include <optional>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "npo/hal/link_monitor.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/topology.hpp"

namespace npo::tools {

LinkManager::LinkManager(System& system, std::function<void(const std::string&)> say, std::chrono::milliseconds period)
    : system_(system), say_(std::move(say)), period_(period), thread_([this] { run(); }) {}

LinkManager::~LinkManager() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

namespace {

using PortSet = std::set<std::pair<std::uint32_t, unsigned>>;

/// "card C port P, ..." of the ports in `a` and not in `b` (at most 8 named).
std::string ports_not_in(const PortSet& a, const PortSet& b) {
  std::string out;
  unsigned n = 0;
  for (const auto& k : a) {
    if (b.contains(k)) continue;
    if (n++ < 8) out += fmt::format("{}card {} port {}", out.empty() ? "" : ", ", k.first, k.second);
  }
  if (n > 8) out += fmt::format(" and {} more", n - 8);
  return out.empty() ? "none" : out;
}

// The card's FSM is working on the port: leave it alone.
bool in_progress(LinkState s) {
  return s == LinkState::kModuleWait || s == LinkState::kDataPathInit || s == LinkState::kTraining ||
         s == LinkState::kFecLock;
}

}  // namespace

void LinkManager::reroute(std::size_t ports_up, const std::string& change) {
  auto topo = discover_topology(system_);
  if (!topo) {
    say_(fmt::format("routes not recomputed: discovery failed: {}", topo.error().to_string()));
    return;
  }
  auto routes = RouteTable::compute(*topo);
  if (!routes) {
    say_(fmt::format("routes not recomputed: {}", routes.error().to_string()));
    return;
  }
  if (auto r = program_routes(system_, *routes); !r) {
    say_(fmt::format("routes not programmed: {}", r.error().to_string()));
    return;
  }
  say_(fmt::format("routes recomputed over {} ports up: diameter {} hops, {} unreachable pairs ({})", ports_up,
                   routes->diameter(), routes->unreachable_pairs(), change));
}

void LinkManager::run() {
  LinkMonitorOptions mo;
  mo.enforce_flap_policy = false;  // the manager keeps its own dampers
  mo.use_stats_dma = false;        // no DMA map next to the clients' maps on the cards
  LinkMonitor mon(system_, mo);
  PortSet seen_down;  // not up in the previous poll
  // Up ports the routes were computed over (the bring-up's, at the first poll) and of the
  // previous poll: the routes follow a change in the poll that first sees it.
  std::optional<PortSet> routed;
  const FlapPolicy policy;
  for (std::uint64_t poll = 1; !stop_.load(std::memory_order_acquire); ++poll) {
    auto snap = mon.snapshot();
    std::vector<PortRef> retrain;
    PortSet down_now;
    PortSet up_now;
    const auto now = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
    if (snap) {
      for (const auto& cp : snap->cards) {
        if (cp.removed) continue;
        for (const auto& ps : cp.ports) {
          if (ps.link_up) up_now.emplace(cp.card, ps.port);
          if (!ps.module_present || !ps.enabled || ps.link_up || in_progress(ps.state)) continue;
          const auto key = std::make_pair(cp.card, ps.port);
          down_now.insert(key);
          if (!seen_down.contains(key)) continue;  // a second poll in a row first
          auto [it, fresh] = dampers_.try_emplace(key, policy);
          if (it->second.held_down()) continue;
          if (it->second.on_down(now)) {
            say_(fmt::format("link card {} port {}: {}; left down (npo-link train re-enables it)", cp.card, ps.port,
                             it->second.reason()));
            continue;
          }
          say_(fmt::format("link card {} port {} down ({}): retraining", cp.card, ps.port, link_state_name(ps.state)));
          retrain.push_back({cp.card, ps.port});
        }
      }
      // Routing first, in the poll that sees the change (registers.md §8): traffic leaves a
      // dead link before any retrain of it starts, and a link back is used at once.
      if (!routed) {
        routed = up_now;  // the bring-up programmed these
      } else if (up_now != *routed) {
        reroute(up_now.size(), fmt::format("poll {}; down since poll {}: {}; up: {}", poll, poll - 1,
                                           ports_not_in(*routed, up_now), ports_not_in(up_now, *routed)));
        routed = up_now;
      }
    }
    if (!retrain.empty()) {
      auto results = train_ports(system_, retrain, {}, 30'000'000'000, /*retrain=*/true);
      if (!results) {
        say_(fmt::format("link retrain failed: {}", results.error().to_string()));
      } else {
        for (const auto& r : *results) {
          say_(fmt::format("link card {} port {} retrained: {} ({})", r.card, r.port, train_code_name(r.code),
                           r.detail));
        }
      }
      down_now.clear();  // judge the retrained ports afresh
    }
    seen_down = std::move(down_now);
    for (int i = 0; i < 10 && !stop_.load(std::memory_order_acquire); ++i) std::this_thread::sleep_for(period_ / 10);
  }
}

}  // namespace npo::tools
