// SPDX-License-Identifier: Apache-2.0
#include "link_manager.hpp"

#include <set>
#include <vector>

#include <fmt/format.h>

#include "npo/hal/link_monitor.hpp"
#include "npo/hal/port.hpp"

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

void LinkManager::run() {
  LinkMonitorOptions mo;
  mo.enforce_flap_policy = false;  // the manager keeps its own dampers
  mo.use_stats_dma = false;        // no DMA map next to the clients' maps on the cards
  LinkMonitor mon(system_, mo);
  std::set<std::pair<std::uint32_t, unsigned>> seen_down;  // not up in the previous poll
  const FlapPolicy policy;
  while (!stop_.load(std::memory_order_acquire)) {
    auto snap = mon.snapshot();
    std::vector<PortRef> retrain;
    std::set<std::pair<std::uint32_t, unsigned>> down_now;
    const auto now = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
    if (snap) {
      for (const auto& cp : snap->cards) {
        if (cp.removed) continue;
        for (const auto& ps : cp.ports) {
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
    seen_down = std::move(down_now);
    for (int i = 0; i < 10 && !stop_.load(std::memory_order_acquire); ++i) std::this_thread::sleep_for(period_ / 10);
  }
}

}  // namespace npo::tools
