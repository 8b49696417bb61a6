// SPDX-License-Identifier: Apache-2.0
// Public API whose issue has not landed yet. Each returns kUnimplemented naming the issue;
// nothing here pretends to work.
#include "npo/hal/link_monitor.hpp"
#include "npo/hal/topology.hpp"

namespace npo {

Result<Topology> discover_topology(System&) {
  return fail(Code::kUnimplemented, "topology discovery is not built yet (topology issue)");
}
int Topology::hops(std::uint32_t, std::uint32_t) const { return -1; }
Result<LinkSnapshot> LinkMonitor::snapshot() {
  return fail(Code::kUnimplemented, "LinkMonitor is not built yet (optics issue)");
}

}  // namespace npo
