// SPDX-License-Identifier: Apache-2.0
// Public API whose issue has not landed yet. Each returns kUnimplemented naming the issue;
// nothing here pretends to work.
#include "npo/hal/link_monitor.hpp"
#include "npo/hal/topology.hpp"
#include "npo/hal/window.hpp"

namespace npo {

Result<std::unique_ptr<Window>> export_window(Device&, std::uint64_t, std::uint64_t, WindowRights) {
  return fail(Code::kUnimplemented, "windows are not built yet (windows issue)");
}
std::array<std::byte, WindowHandle::kSerializedSize> WindowHandle::serialize() const { return {}; }
Result<WindowHandle> WindowHandle::deserialize(std::span<const std::byte>) {
  return fail(Code::kUnimplemented, "window handles are not built yet (windows issue)");
}
Result<Topology> discover_topology(System&) {
  return fail(Code::kUnimplemented, "topology discovery is not built yet (topology issue)");
}
int Topology::hops(std::uint32_t, std::uint32_t) const { return -1; }
Result<LinkSnapshot> LinkMonitor::snapshot() {
  return fail(Code::kUnimplemented, "LinkMonitor is not built yet (optics issue)");
}

}  // namespace npo
