// SPDX-License-Identifier: Apache-2.0
// drivers/optics: bring_up_fabric -- link training, topology discovery and routing in one
// call, over the public API only.
#include "npo/hal/bring_up.hpp"

#include <chrono>

#include "npo/hal/system.hpp"

namespace npo {

namespace {

/// Every card of `system` is attached read-only (emu-remote mode=ro): an observer.
bool observer(System& system) {
  if (system.device_count() == 0) return false;
  for (std::size_t c = 0; c < system.device_count(); ++c) {
    if (!system.device(c).info().read_only) return false;
  }
  return true;
}

/// Whether a port in `s` is on its way up (the owner's or the card's training is running).
bool training(LinkState s) {
  return s == LinkState::kModuleWait || s == LinkState::kDataPathInit || s == LinkState::kTraining ||
         s == LinkState::kFecLock;
}

/// An observer's step 1 (and any System's with BringUpOptions::train false): the links as the
/// cards have them. Nothing is enabled or trained (a
/// read-only attach's writes would be dropped, and the owner's training is not the
/// observer's to drive), but ports with a module that are still training are waited for, up
/// to `timeout_ns` of the platform clock, as the supervisor would follow them. `ports` stays
/// empty.
Result<LinkBringUp> observe_links(System& system, std::uint64_t timeout_ns) {
  const auto w0 = std::chrono::steady_clock::now();
  auto clock = system.clock();
  const std::uint64_t t0 = clock.now_ns();
  constexpr std::uint64_t kPollNs = 10'000'000;
  for (;;) {
    LinkBringUp out;
    bool pending = false;
    for (std::size_t c = 0; c < system.device_count(); ++c) {
      auto& dev = system.device(c);
      if (dev.info().removed) return fail(Code::kUnavailable, "card removed", {.card = static_cast<std::uint32_t>(c)});
      for (unsigned p = 0; p < dev.port_count(); ++p) {
        auto ps = read_port(dev, p);
        if (!ps) return std::unexpected(ps.error());
        if (!ps->module_present) continue;
        ++out.ports_with_module;
        if (ps->state != LinkState::kUp) {
          ++out.failed;
          pending = pending || (ps->enabled && training(ps->state));
          continue;
        }
        ++out.up;
        if (ps->lane_count < dev.info().lanes_per_port) ++out.degraded;
      }
    }
    const std::uint64_t now = clock.now_ns();
    if (!pending || now - t0 >= timeout_ns) {
      out.elapsed_ns = now - t0;
      out.wall_ns = static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w0).count());
      return out;
    }
    clock.sleep_until(now + kPollNs);
  }
}

}  // namespace

Result<FabricBringUp> bring_up_fabric(System& system, const BringUpOptions& options) {
  const bool watch_only = observer(system);
  if (watch_only && options.program_routes) {
    return fail(Code::kPermissionDenied, "a read-only attach (mode=ro) cannot program routes: attach as the owner");
  }
  FabricBringUp out;
  auto links = watch_only || !options.train ? observe_links(system, options.timeout_ns)
                                            : bring_up_links(system, options.policy, options.timeout_ns);
  if (!links) return std::unexpected(links.error());
  out.links = std::move(*links);
  auto topology = discover_topology(system);
  if (!topology) return std::unexpected(topology.error());
  out.topology = std::move(*topology);
  auto routes = RouteTable::compute(out.topology);
  if (!routes) return std::unexpected(routes.error());
  out.routes = std::move(*routes);
  if (options.program_routes) {
    if (auto r = program_routes(system, out.routes); !r) return std::unexpected(r.error());
  }
  out.unreachable_pairs = out.routes.unreachable_pairs();
  return out;
}

}  // namespace npo
