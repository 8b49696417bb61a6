// SPDX-License-Identifier: Apache-2.0
// drivers/optics: port register snapshots and raw transceiver access.
#include "npo/hal/port.hpp"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "gpu/device_impl.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/transceiver.hpp"

namespace npo {

namespace regs = fw::regs;
namespace pr = fw::regs::port;
namespace mb = fw::mbox;

std::string_view link_state_name(LinkState s) noexcept {
  switch (s) {
    case LinkState::kDisabled: return "disabled";
    case LinkState::kModuleWait: return "module_wait";
    case LinkState::kDataPathInit: return "datapath_init";
    case LinkState::kTraining: return "training";
    case LinkState::kFecLock: return "fec_lock";
    case LinkState::kUp: return "up";
    case LinkState::kFault: return "fault";
  }
  return "unknown";
}

Result<PortStatus> read_port(Device& device, unsigned port) {
  auto& impl = device.impl();
  const auto& info = impl.info;
  if (port >= info.num_ports) {
    return fail(Code::kOutOfRange, fmt::format("port {} outside 0..{}", port, info.num_ports - 1),
                {.card = info.index, .port = port});
  }
  backend::Mmio& m = *impl.bar0;
  PortStatus ps;
  ps.port = port;
  const std::uint32_t st = m.read32(regs::port_reg(port, pr::kStatus));
  if (st == 0xffffffffu) return fail(Code::kUnavailable, "card removed", {.card = info.index, .port = port});
  const unsigned state = pr::kStatusState.get(st);
  ps.state = state <= static_cast<unsigned>(LinkState::kFault) ? static_cast<LinkState>(state) : LinkState::kFault;
  ps.link_up = pr::kStatusLinkUp.get(st) != 0;
  ps.fec_lock = pr::kStatusFecLock.get(st) != 0;
  ps.module_present = pr::kStatusModulePresent.get(st) != 0;
  ps.lane_count = pr::kStatusLaneCount.get(st);
  ps.lanes_up = static_cast<std::uint8_t>(pr::kStatusLanesUp.get(st));
  const std::uint32_t speed = m.read32(regs::port_reg(port, pr::kSpeed));
  ps.lane_rate_mbd = pr::kSpeedMbdPerLane.get(speed);
  ps.pam4 = pr::kSpeedModulation.get(speed) == 1;
  const std::uint64_t nb = m.read64(regs::port_reg(port, pr::kNeighbor));
  if (pr::kNeighborValid.get(nb)) {
    ps.neighbor_fabric_id = static_cast<std::uint32_t>(pr::kNeighborFabricId.get(nb));
    ps.neighbor_port = static_cast<unsigned>(pr::kNeighborPort.get(nb));
  }
  ps.train_count = m.read32(regs::port_reg(port, pr::kTrainCount));
  ps.flap_count = m.read32(regs::port_reg(port, pr::kFlapCount));
  ps.lanes.resize(info.lanes_per_port);
  for (unsigned l = 0; l < info.lanes_per_port; ++l) {
    auto& lc = ps.lanes[l];
    lc.codewords = m.read64(regs::lane_reg(port, l, pr::lane::kCodewords));
    lc.corrected = m.read64(regs::lane_reg(port, l, pr::lane::kCorrected));
    lc.uncorrectable = m.read64(regs::lane_reg(port, l, pr::lane::kUncorrectable));
    lc.symbol_errors = m.read64(regs::lane_reg(port, l, pr::lane::kSymbolErrors));
    for (unsigned b = 0; b < regs::kFecBins; ++b) {
      lc.fec_bins[b] = m.read64(regs::lane_reg(port, l, pr::lane::kFecBin0 + b * 8));
    }
    lc.snr_db = static_cast<double>(m.read32(regs::lane_reg(port, l, pr::lane::kSnr))) / 256.0;
    // RS(544,514) over 10-bit symbols: 5440 bits per codeword (IEEE 802.3 clause 91).
    if (lc.codewords > 0) {
      lc.pre_fec_ber = static_cast<double>(lc.symbol_errors) * 10.0 / (static_cast<double>(lc.codewords) * 5440.0);
    }
  }
  return ps;
}

Result<void> enable_port(Device& device, unsigned port, bool enable) {
  auto& impl = device.impl();
  const auto& info = impl.info;
  if (port >= info.num_ports) {
    return fail(Code::kOutOfRange, fmt::format("port {} outside 0..{}", port, info.num_ports - 1),
                {.card = info.index, .port = port});
  }
  backend::Mmio& m = *impl.bar0;
  const std::uint32_t ctrl = m.read32(regs::port_reg(port, pr::kCtrl));
  if (ctrl == 0xffffffffu) return fail(Code::kUnavailable, "card removed", {.card = info.index, .port = port});
  m.write32(regs::port_reg(port, pr::kCtrl), pr::kCtrlEnable.set(ctrl, enable ? 1 : 0));
  return {};
}

Result<LinkBringUp> bring_up_links(System& system, std::uint64_t timeout_ns) {
  const auto t0 = std::chrono::steady_clock::now();
  LinkBringUp out;
  std::vector<std::pair<std::size_t, unsigned>> pending;
  for (std::size_t c = 0; c < system.device_count(); ++c) {
    auto& dev = system.device(c);
    for (unsigned p = 0; p < dev.info().num_ports; ++p) {
      const std::uint32_t st = dev.impl().bar0->read32(regs::port_reg(p, pr::kStatus));
      if (st == 0xffffffffu) return fail(Code::kUnavailable, "card removed", {.card = dev.info().index});
      if (!pr::kStatusModulePresent.get(st)) continue;
      ++out.ports_with_module;
      if (auto r = enable_port(dev, p, true); !r) return std::unexpected(r.error());
      pending.emplace_back(c, p);
    }
  }
  while (!pending.empty()) {
    std::erase_if(pending, [&](const auto& cp) {
      const std::uint32_t st = system.device(cp.first).impl().bar0->read32(regs::port_reg(cp.second, pr::kStatus));
      const auto state = static_cast<LinkState>(pr::kStatusState.get(st));
      if (state == LinkState::kUp) {
        ++out.up;
        return true;
      }
      if (state == LinkState::kFault || st == 0xffffffffu) {
        ++out.failed;
        return true;
      }
      return false;
    });
    const auto el = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    if (el >= timeout_ns) {
      out.failed += static_cast<unsigned>(pending.size());
      break;
    }
    if (!pending.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  out.elapsed_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

namespace {
Result<void> check_xcvr_args(const DeviceInfo& info, unsigned port, std::uint8_t offset, std::size_t len) {
  if (port >= info.num_ports) {
    return fail(Code::kOutOfRange, fmt::format("port {} outside 0..{}", port, info.num_ports - 1),
                {.card = info.index, .port = port});
  }
  if (len == 0 || len > mb::xcvr::kMaxLength || offset + len > 256) {
    return fail(
        Code::kOutOfRange,
        fmt::format("transceiver access of {} bytes at offset {}: need 1..128 bytes within 0..255", len, offset),
        {.card = info.index, .port = port});
  }
  return {};
}
}  // namespace

Result<void> read_transceiver(Device& device, unsigned port, std::uint8_t bank, std::uint8_t page, std::uint8_t offset,
                              std::span<std::byte> out) {
  auto& impl = device.impl();
  if (auto r = check_xcvr_args(impl.info, port, offset, out.size()); !r) return r;
  std::array<std::byte, mb::xcvr::kHdrSize> req{};
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kPort, static_cast<std::uint8_t>(port));
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kBank, bank);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kPage, page);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kOffset, offset);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kLength, static_cast<std::uint8_t>(out.size()));
  auto r = impl.mailbox->call(mb::Command::kXcvrRead, req);
  if (!r) return std::unexpected(Error(r.error()).with({.port = port}));
  if (r->size() != out.size()) {
    return fail(Code::kInternal, fmt::format("XCVR_READ returned {} bytes, asked {}", r->size(), out.size()),
                {.card = impl.info.index, .port = port});
  }
  std::copy(r->begin(), r->end(), out.begin());
  return {};
}

Result<void> write_transceiver(Device& device, unsigned port, std::uint8_t bank, std::uint8_t page, std::uint8_t offset,
                               std::span<const std::byte> data) {
  auto& impl = device.impl();
  if (auto r = check_xcvr_args(impl.info, port, offset, data.size()); !r) return r;
  std::vector<std::byte> req(mb::xcvr::kHdrSize + data.size());
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kPort, static_cast<std::uint8_t>(port));
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kBank, bank);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kPage, page);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kOffset, offset);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kLength, static_cast<std::uint8_t>(data.size()));
  std::copy(data.begin(), data.end(), req.begin() + mb::xcvr::kData);
  auto r = impl.mailbox->call(mb::Command::kXcvrWrite, req);
  if (!r) return std::unexpected(Error(r.error()).with({.port = port}));
  return {};
}

}  // namespace npo
