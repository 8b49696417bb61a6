// SPDX-License-Identifier: Apache-2.0
// Waiting for the links a partition change made: exactly those card ports, read through the
// public port API, kicked when they are stuck (npo/hal/partition.hpp wait_links_up).
#include <fmt/format.h>

#include "npo/hal/partition.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/topology_plan.hpp"

namespace npo {

namespace {
struct End {
  Device* dev = nullptr;
  std::uint32_t card = 0;
  unsigned port = 0;
  std::uint32_t peer_card = 0;
  bool done = false;
  std::uint64_t last_kick_ns = 0;
  bool kicked = false;
};
constexpr std::uint64_t kStaleNeighbourNs = 50'000'000;  // Up with the old neighbour this long: retrain
constexpr std::uint64_t kKickEveryNs = 500'000'000;      // at most one kick per port per 500 ms
}  // namespace

Result<std::uint64_t> wait_links_up(System& system, const std::vector<PartitionLink>& links, std::uint64_t timeout_ns,
                                    std::uint64_t poll_ns) {
  std::vector<End> ends;
  for (const auto& l : links) {
    for (const auto& [c, peer] : {std::pair{l.a, l.b}, std::pair{l.b, l.a}}) {
      auto dev = system.device_by_fabric_id(fabric_id_of(c));
      if (!dev) return std::unexpected(std::move(dev.error()).prefixed(fmt::format("wait for link {}:{}", c, l.port)));
      ends.push_back(End{*dev, c, l.port, peer});
    }
  }
  const Clock clock = system.clock();
  const std::uint64_t t0 = clock.now_ns();
  std::size_t left = ends.size();
  while (true) {
    const std::uint64_t now = clock.now_ns();
    for (auto& e : ends) {
      if (e.done) continue;
      auto st = read_port(*e.dev, e.port);
      if (!st) return std::unexpected(std::move(st.error()));
      const bool right_peer = st->neighbor_fabric_id == fabric_id_of(e.peer_card) && st->neighbor_port == e.port;
      if (st->state == LinkState::kUp && right_peer) {
        e.done = true;
        --left;
        continue;
      }
      const bool may_kick = !e.kicked || now - e.last_kick_ns >= kKickEveryNs;
      Result<void> r{};
      if (st->state == LinkState::kDisabled && may_kick) {
        r = enable_port(*e.dev, e.port, true);
      } else if ((st->state == LinkState::kFault || (st->state == LinkState::kUp && now - t0 >= kStaleNeighbourNs)) &&
                 may_kick) {
        r = retrain_port(*e.dev, e.port);
      } else {
        continue;
      }
      if (!r) return std::unexpected(std::move(r.error()));
      e.kicked = true;
      e.last_kick_ns = now;
    }
    if (left == 0) return clock.now_ns() - t0;
    if (clock.now_ns() - t0 >= timeout_ns) {
      std::string which;
      unsigned shown = 0;
      for (const auto& e : ends) {
        if (e.done || shown++ >= 8) continue;
        which += fmt::format("{}{}:{}", which.empty() ? "" : ", ", e.card, e.port);
      }
      return fail(Code::kDeadlineExceeded,
                  fmt::format("{} of {} link ends not Up with their new neighbour after {} ms: {}{}", left, ends.size(),
                              timeout_ns / 1'000'000, which, left > 8 ? ", ..." : ""));
    }
    clock.sleep_for(poll_ns);
  }
}

}  // namespace npo
