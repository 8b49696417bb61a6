// SPDX-License-Identifier: Apache-2.0
// The card's PCI configuration space: type 0 header, PCI Express, MSI-X, ACS, ATS and
// Resizable BAR capabilities, with per-byte write masks.
#include "config_space.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "npo/fw/pci.hpp"

namespace npo::emu {

namespace pci = fw::pci;
namespace cfgsp = fw::pci::cfg;

ConfigSpace::ConfigSpace(std::uint64_t hbm_bytes) : hbm_bytes_(hbm_bytes) {
  bar2_size_ = std::max<std::uint64_t>(pci::kBar2MinSize, std::bit_ceil(hbm_bytes_));
  build();
}

void ConfigSpace::rebuild() {
  std::lock_guard lock(mu_);
  bar2_size_ = std::max<std::uint64_t>(pci::kBar2MinSize, std::bit_ceil(hbm_bytes_));
  build();
}

void ConfigSpace::build() {
  space_.fill(0);
  wmask_.fill(0);
  auto put8 = [this](std::uint32_t o, std::uint8_t v, std::uint8_t wm = 0) {
    space_[o] = v;
    wmask_[o] = wm;
  };
  auto put16 = [&](std::uint32_t o, std::uint16_t v, std::uint16_t wm = 0) {
    put8(o, v & 0xff, wm & 0xff);
    put8(o + 1, v >> 8, wm >> 8);
  };
  auto put32 = [&](std::uint32_t o, std::uint32_t v, std::uint32_t wm = 0) {
    put16(o, v & 0xffff, wm & 0xffff);
    put16(o + 2, v >> 16, wm >> 16);
  };
  put16(cfgsp::kVendorId, pci::kVendorId);
  put16(cfgsp::kDeviceId, pci::kDeviceId);
  put16(cfgsp::kCommand, 0, cfgsp::kCommandMemory | cfgsp::kCommandBusMaster | cfgsp::kCommandIntxDisable);
  put16(cfgsp::kStatus, cfgsp::kStatusCapList);
  put8(cfgsp::kRevisionId, pci::kRevisionId);
  put8(cfgsp::kClassCode, pci::kClassCode & 0xff);
  put8(cfgsp::kClassCode + 1, (pci::kClassCode >> 8) & 0xff);
  put8(cfgsp::kClassCode + 2, (pci::kClassCode >> 16) & 0xff);
  put8(cfgsp::kHeaderType, 0x00);
  // BARs: writable bits are the address bits above the BAR size (PCI 3.0 §6.2.5.1).
  auto put_bar = [&](unsigned bar, std::uint64_t size, bool prefetch) {
    const std::uint64_t addr_mask = ~(size - 1);
    const std::uint32_t flags = cfgsp::kBarMemType64 | (prefetch ? cfgsp::kBarPrefetchable : 0);
    put32(cfgsp::kBar0 + bar * 4, flags, static_cast<std::uint32_t>(addr_mask) & ~0xfu);
    put32(cfgsp::kBar0 + bar * 4 + 4, 0, static_cast<std::uint32_t>(addr_mask >> 32));
  };
  put_bar(pci::kBarRegs, pci::kBar0Size, false);
  put_bar(pci::kBarHbm, bar2_size_.load(), true);
  put_bar(pci::kBarMsix, pci::kBar4Size, false);
  put16(cfgsp::kSubsysVendor, pci::kVendorId);
  put16(cfgsp::kSubsysId, 0x0001);
  put8(cfgsp::kCapPtr, cfgsp::kCardPcieCap);
  put8(cfgsp::kIntLine, 0xff, 0xff);
  put8(cfgsp::kIntPin, 0x00);

  // PCI Express capability v2, endpoint (PCIe 6.0 §7.5.3).
  namespace pe = cfgsp::pcie;
  const std::uint32_t pc = cfgsp::kCardPcieCap;
  put8(pc, cfgsp::kCapIdPcie);
  put8(pc + 1, cfgsp::kCardMsixCap);
  put16(pc + pe::kCapReg, 0x0002);  // version 2, type 0 = PCI Express Endpoint
  put32(pc + pe::kDevCap, pe::kDevCapMaxPayload.make(2) | pe::kDevCapFlr.make(1));  // 512 B MPS, FLR
  put16(pc + pe::kDevCtl, 0x2810, 0x7fff | pe::kDevCtlInitiateFlr);  // MRRS 512, MPS 128, relaxed ordering
  put16(pc + pe::kDevSta, 0);
  put32(pc + pe::kLnkCap, pe::kLnkCapSpeed.make(5) | pe::kLnkCapWidth.make(16));  // 32 GT/s x16
  put16(pc + pe::kLnkCtl, 0, 0x0fff);
  put16(pc + pe::kLnkSta, static_cast<std::uint16_t>(pe::kLnkStaSpeed.make(5) | pe::kLnkStaWidth.make(16)));
  put32(pc + pe::kDevCap2, 0x00000010);  // completion timeout disable supported

  // MSI-X (PCIe 6.0 §7.7.2): 64 vectors, table and PBA in BAR4.
  namespace mx = cfgsp::msix;
  const std::uint32_t mc = cfgsp::kCardMsixCap;
  put8(mc, cfgsp::kCapIdMsix);
  put8(mc + 1, 0);
  put16(mc + mx::kMsgCtl, pci::kMsixVectors - 1, mx::kMsgCtlEnable | mx::kMsgCtlFunctionMask);
  put32(mc + mx::kTable, pci::kMsixTableOffset | pci::kBarMsix);
  put32(mc + mx::kPba, pci::kMsixPbaOffset | pci::kBarMsix);

  // Extended capabilities: ACS -> ATS -> Resizable BAR.
  auto ext_hdr = [](std::uint16_t id, std::uint32_t next) {
    return cfgsp::kExtCapId.make(id) | cfgsp::kExtCapVersion.make(1) | cfgsp::kExtCapNext.make(next);
  };
  put32(cfgsp::kCardAcsCap, ext_hdr(cfgsp::kExtCapIdAcs, cfgsp::kCardAtsCap));
  put16(cfgsp::kCardAcsCap + cfgsp::acs::kCap, cfgsp::acs::kCardCaps);
  put16(cfgsp::kCardAcsCap + cfgsp::acs::kCtl, 0, cfgsp::acs::kCardCaps & 0x7f);
  put32(cfgsp::kCardAtsCap, ext_hdr(cfgsp::kExtCapIdAts, cfgsp::kCardRebarCap));
  put16(cfgsp::kCardAtsCap + cfgsp::ats::kCap, 0x0020);  // page aligned request, queue depth 0 (=32)
  put16(cfgsp::kCardAtsCap + cfgsp::ats::kCtl, 0, cfgsp::ats::kCtlEnable | 0x1f);
  put32(cfgsp::kCardRebarCap, ext_hdr(cfgsp::kExtCapIdRebar, 0));
  // Supported sizes: 1 MiB (bit 4) .. 64 GiB (bit 20), but never below the HBM size.
  std::uint32_t sizes = 0;
  for (unsigned n = 0; n <= 16; ++n) {
    if ((std::uint64_t{1} << (n + 20)) >= hbm_bytes_) sizes |= 1u << (n + 4);
  }
  put32(cfgsp::kCardRebarCap + cfgsp::rebar::kCap0, sizes);
  const auto enc = static_cast<std::uint32_t>(std::countr_zero(bar2_size_.load()) - 20);
  put32(cfgsp::kCardRebarCap + cfgsp::rebar::kCtl0,
        cfgsp::rebar::kCtlBarIndex.make(pci::kBarHbm) | cfgsp::rebar::kCtlNumBars.make(1) |
            cfgsp::rebar::kCtlBarSize.make(enc),
        cfgsp::rebar::kCtlBarSize.mask());
  bus_master_.store(false, std::memory_order_release);  // COMMAND = 0 after power-on / FLR
}

std::uint32_t ConfigSpace::read(std::uint32_t off, unsigned size) {
  std::lock_guard lock(mu_);
  std::uint32_t v = 0;
  for (unsigned i = 0; i < size; ++i) v |= static_cast<std::uint32_t>(space_[off + i]) << (8 * i);
  return v;
}

bool ConfigSpace::write(std::uint32_t off, unsigned size, std::uint32_t value) {
  namespace pe = cfgsp::pcie;
  bool flr = false;
  {
    std::lock_guard lock(mu_);
    const std::uint32_t rebar_ctl = cfgsp::kCardRebarCap + cfgsp::rebar::kCtl0;
    const std::uint32_t old_rebar = space_[rebar_ctl + 1];
    for (unsigned i = 0; i < size; ++i) {
      const auto b = static_cast<std::uint8_t>(value >> (8 * i));
      space_[off + i] = static_cast<std::uint8_t>((space_[off + i] & ~wmask_[off + i]) | (b & wmask_[off + i]));
    }
    bus_master_.store((space_[cfgsp::kCommand] & cfgsp::kCommandBusMaster) != 0, std::memory_order_release);
    // Function level reset: DevCtl bit 15 is write-only, reads 0.
    const std::uint32_t devctl_hi = cfgsp::kCardPcieCap + pe::kDevCtl + 1;
    if (off <= devctl_hi && devctl_hi < off + size && (space_[devctl_hi] & 0x80)) {
      space_[devctl_hi] &= 0x7f;
      flr = true;
    }
    // Resizable BAR: a new size must be one the capability advertises, else keep the old one.
    if (space_[rebar_ctl + 1] != old_rebar) {
      const unsigned enc = space_[rebar_ctl + 1] & 0x3f;
      std::uint32_t sizes = 0;
      std::memcpy(&sizes, &space_[cfgsp::kCardRebarCap + cfgsp::rebar::kCap0], 4);
      if (enc > 16 || (sizes & (1u << (enc + 4))) == 0) {
        space_[rebar_ctl + 1] = static_cast<std::uint8_t>(old_rebar);
      } else {
        bar2_size_ = std::uint64_t{1} << (enc + 20);
        const std::uint64_t addr_mask = ~(bar2_size_.load() - 1);
        const std::uint32_t bo = cfgsp::kBar0 + pci::kBarHbm * 4;
        const std::uint32_t lo_mask = static_cast<std::uint32_t>(addr_mask) & ~0xfu;
        const auto hi_mask = static_cast<std::uint32_t>(addr_mask >> 32);
        for (unsigned i = 0; i < 4; ++i) {
          wmask_[bo + i] = static_cast<std::uint8_t>(lo_mask >> (8 * i));
          wmask_[bo + 4 + i] = static_cast<std::uint8_t>(hi_mask >> (8 * i));
          space_[bo + i] &= static_cast<std::uint8_t>((lo_mask >> (8 * i)) | (i == 0 ? 0xf : 0));
          space_[bo + 4 + i] &= static_cast<std::uint8_t>(hi_mask >> (8 * i));
        }
      }
    }
  }
  return flr;
}

}  // namespace npo::emu
