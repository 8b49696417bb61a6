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

// The card's FSM is working on the port: leave it alone.
bool in_progress(LinkState s) {
  return s == LinkState::kModuleWait || s == LinkState::kDataPathInit || s == LinkState::kTraining ||
         s == LinkState::kFecLock;
}

}  // namespace

void LinkManager::reroute(std::size_t ports_up) {
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
  say_(fmt::format("routes recomputed over {} ports up: diameter {} hops, {} unreachable pairs", ports_up,
                   routes->diameter(), routes->unreachable_pairs()));
}

void LinkManager::run() {
  LinkMonitorOptions mo;
  mo.enforce_flap_policy = false;  // the manager keeps its own dampers
  mo.use_stats_dma = false;        // no DMA map next to the clients' maps on the cards
  LinkMonitor mon(system_, mo);
  std::set<std::pair<std::uint32_t, unsigned>> seen_down;  // not up in the previous poll
  // Up ports the routes were computed over (the bring-up's, at the first poll), and those
  // of the previous poll: routes are recomputed once a change held for two polls.
  std::optional<std::set<std::pair<std::uint32_t, unsigned>>> routed, last_up;
  const FlapPolicy policy;
  while (!stop_.load(std::memory_order_acquire)) {
    auto snap = mon.snapshot();
    std::vector<PortRef> retrain;
    std::set<std::pair<std::uint32_t, unsigned>> down_now;
    const auto now = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
    std::set<std::pair<std::uint32_t, unsigned>> up_now;
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
    if (snap && retrain.empty()) {
      if (!routed) {
        routed = up_now;  // the bring-up programmed these
      } else if (up_now != *routed && last_up && up_now == *last_up) {
        reroute(up_now.size());
        routed = up_now;
      }
      last_up = std::move(up_now);
    } else {
      last_up.reset();  // a retrain is changing the ports: judge after it
    }
    seen_down = std::move(down_now);
    for (int i = 0; i < 10 && !stop_.load(std::memory_order_acquire); ++i) std::this_thread::sleep_for(period_ / 10);
  }
}

}  // namespace npo::tools
