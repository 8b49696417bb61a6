// SPDX-License-Identifier: Apache-2.0
// The card model: config space, BAR0 decode, BAR4 MSI-X, reset, ports.
#include "card.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "npo/hal/log.hpp"
#include "system.hpp"

namespace npo::emu {

namespace regs = fw::regs;
namespace pci = fw::pci;
namespace cfgsp = fw::pci::cfg;
using regs::port::LinkState;

namespace {

// ---- Which BAR0 offsets start a 64-bit register (from the firmware-iface register list) --
struct Reg64Map {
  std::array<bool, 0x1000 / 4> global{};
  std::array<bool, regs::kQueueStride / 4> queue{};
  std::array<bool, regs::kWindowStride / 4> window{};
  std::array<bool, regs::kPortStride / 4> port{};  // port block incl. lanes (lane 0 pattern repeated)
  Reg64Map() {
    for (const auto& r : regs::kRegisters) {
      if (r.width != 64) continue;
      if (r.block == "GLOBAL") global[r.offset / 4] = true;
      if (r.block == "QUEUE") queue[r.offset / 4] = true;
      if (r.block == "WINDOW") window[r.offset / 4] = true;
      if (r.block == "PORT") port[r.offset / 4] = true;
      if (r.block == "LANE") {
        for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
          const unsigned base = regs::kLaneBase + l * regs::kLaneStride;
          if (r.name == "FEC_BIN0") {
            for (unsigned b = 0; b < regs::kFecBins; ++b) port[(base + r.offset + b * 8) / 4] = true;
          } else {
            port[(base + r.offset) / 4] = true;
          }
        }
      }
    }
  }
};
const Reg64Map& reg64_map() {
  static const Reg64Map m;
  return m;
}

bool is_reg64(std::uint32_t off) {
  const auto& m = reg64_map();
  if (off < 0x1000) return m.global[off / 4];
  if (off >= regs::kQueueBase && off < regs::kQueueBase + regs::kNumQueues * regs::kQueueStride)
    return m.queue[((off - regs::kQueueBase) % regs::kQueueStride) / 4];
  if (off >= regs::kWindowBase && off < regs::kWindowBase + regs::kWindowEntries * regs::kWindowStride)
    return m.window[((off - regs::kWindowBase) % regs::kWindowStride) / 4];
  if (off >= regs::kPortBase && off < regs::kPortBase + regs::kMaxPorts * regs::kPortStride)
    return m.port[((off - regs::kPortBase) % regs::kPortStride) / 4];
  return false;
}

std::uint64_t merge_half(std::uint64_t old, bool high, std::uint64_t v32) {
  return high ? ((old & 0xffffffffULL) | (v32 << 32)) : ((old & ~0xffffffffULL) | (v32 & 0xffffffffULL));
}

constexpr std::uint8_t kCmisIdentifierQsfpDd = 0x18;  // SFF-8024 Table 4-1

}  // namespace

// ==== Construction ==========================================================================

Card::Card(EmulatorImpl& sys, std::uint32_t index, const CardConfig& cfg, std::uint64_t serial, std::byte* hbm,
           std::uint64_t hbm_memfd_offset)
    : sys_(sys),
      index_(index),
      cfg_(cfg),
      serial_(serial),
      hbm_(hbm),
      hbm_memfd_offset_(hbm_memfd_offset),
      windows_(new WindowEntry[regs::kWindowEntries]),
      routes_(new std::atomic<std::uint32_t>[regs::kRouteEntries]),
      ports_(cfg.num_ports),
      firmware_(*this) {
  queues_.reserve(regs::kNumQueues);
  for (unsigned q = 0; q < regs::kNumQueues; ++q) queues_.push_back(std::make_unique<QueueModel>(*this, q));
  for (auto& fd : msix_fd_) fd.store(-1);
  for (unsigned i = 0; i < regs::kRouteEntries; ++i) routes_[i].store(0);
  bar2_size_ = std::max<std::uint64_t>(pci::kBar2MinSize, std::bit_ceil(cfg_.hbm_bytes));
  build_config_space();
  for (unsigned p = 0; p < ports_.size(); ++p) build_cmis(p);
}

Card::~Card() = default;

backend::FunctionInfo Card::function_info() const {
  backend::FunctionInfo fi;
  const std::uint32_t n = index_ + 1;
  fi.address = backend::PciAddress{static_cast<std::uint16_t>(n / 256), static_cast<std::uint8_t>(n % 256), 0, 0};
  fi.vendor_id = pci::kVendorId;
  fi.device_id = pci::kDeviceId;
  fi.subsystem_vendor_id = pci::kVendorId;
  fi.subsystem_id = 0x0001;
  fi.class_code = pci::kClassCode;
  // Cards are spread evenly over the emulated sockets: first half node 0, second half node 1.
  const auto ncards = static_cast<std::uint32_t>(sys_.cards.size() == 0 ? 1 : sys_.cards.size());
  fi.numa_node = ncards >= 2 ? static_cast<int>(index_ * 2 / ncards) : 0;
  fi.iommu_group = static_cast<int>(index_);
  fi.driver = "emulator";
  return fi;
}

void Card::build_config_space() {
  space_.fill(0);
  space_wmask_.fill(0);
  auto put8 = [this](std::uint32_t o, std::uint8_t v, std::uint8_t wm = 0) {
    space_[o] = v;
    space_wmask_[o] = wm;
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
    if ((std::uint64_t{1} << (n + 20)) >= cfg_.hbm_bytes) sizes |= 1u << (n + 4);
  }
  put32(cfgsp::kCardRebarCap + cfgsp::rebar::kCap0, sizes);
  const auto enc = static_cast<std::uint32_t>(std::countr_zero(bar2_size_.load()) - 20);
  put32(cfgsp::kCardRebarCap + cfgsp::rebar::kCtl0,
        cfgsp::rebar::kCtlBarIndex.make(pci::kBarHbm) | cfgsp::rebar::kCtlNumBars.make(1) |
            cfgsp::rebar::kCtlBarSize.make(enc),
        cfgsp::rebar::kCtlBarSize.mask());
  bus_master_.store(false, std::memory_order_release);  // COMMAND = 0 after power-on / FLR
}

void Card::build_cmis(unsigned p) {
  // A CMIS 5.2 memory map as the NPO engine's firmware presents it (lower page + page 00h).
  // The optics issue extends this with pages 01h/02h/10h/11h and a physical lane model.
  auto& m = ports_[p].cmis;
  m.fill(0);
  m[0] = kCmisIdentifierQsfpDd;  // SFF-8024 identifier
  m[1] = 0x52;                   // CMIS revision 5.2
  m[2] = 0x00;                   // paged memory, no flat-mem bit
  m[3] = 0x03 << 1;              // ModuleState = ModuleReady (CMIS 5.2 §8.2.2)
  const std::int16_t temp_q8 = static_cast<std::int16_t>((40 + static_cast<int>(index_ % 8)) * 256);
  m[14] = static_cast<std::uint8_t>(static_cast<std::uint16_t>(temp_q8) >> 8);  // big-endian (CMIS)
  m[15] = static_cast<std::uint8_t>(temp_q8 & 0xff);
  const std::uint16_t vcc = 33000;  // 3.3000 V in 100 µV units
  m[16] = vcc >> 8;
  m[17] = vcc & 0xff;
  m[128] = kCmisIdentifierQsfpDd;
  auto put_str = [&m](std::size_t off, std::size_t len, std::string_view s) {
    for (std::size_t i = 0; i < len; ++i) m[off + i] = i < s.size() ? static_cast<std::uint8_t>(s[i]) : ' ';
  };
  put_str(129, 16, "NPO-EMU");  // vendor name
  m[145] = 0x00;
  m[146] = 0x00;
  m[147] = 0x00;                                                 // vendor OUI (none)
  put_str(148, 16, "NPO-ENGINE-800G");                           // part number
  put_str(164, 2, "A1");                                         // revision
  put_str(166, 16, fmt::format("EMU{:04d}P{:02d}", index_, p));  // serial
  put_str(182, 8, "26112900");                                   // date code YYMMDDLL
}

void Card::attach_cable(unsigned port, std::uint32_t peer_card, unsigned peer_port) {
  std::lock_guard lock(port_mu_);
  ports_[port].cabled = true;
  ports_[port].peer_card = peer_card;
  ports_[port].peer_port = peer_port;
}

void Card::log_event(const std::string& text) { sys_.log(index_, text); }

// ==== Config space ==========================================================================

std::uint32_t Card::cfg_read(std::uint32_t off, unsigned size) {
  if (removed()) return size == 4 ? 0xffffffffu : (1u << (size * 8)) - 1;
  std::lock_guard lock(cfg_mu_);
  std::uint32_t v = 0;
  for (unsigned i = 0; i < size; ++i) v |= static_cast<std::uint32_t>(space_[off + i]) << (8 * i);
  return v;
}

void Card::cfg_write(std::uint32_t off, unsigned size, std::uint32_t value) {
  if (removed()) return;
  namespace pe = cfgsp::pcie;
  bool flr = false;
  {
    std::lock_guard lock(cfg_mu_);
    const std::uint32_t rebar_ctl = cfgsp::kCardRebarCap + cfgsp::rebar::kCtl0;
    const std::uint32_t old_rebar = space_[rebar_ctl + 1];
    for (unsigned i = 0; i < size; ++i) {
      const auto b = static_cast<std::uint8_t>(value >> (8 * i));
      space_[off + i] =
          static_cast<std::uint8_t>((space_[off + i] & ~space_wmask_[off + i]) | (b & space_wmask_[off + i]));
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
          space_wmask_[bo + i] = static_cast<std::uint8_t>(lo_mask >> (8 * i));
          space_wmask_[bo + 4 + i] = static_cast<std::uint8_t>(hi_mask >> (8 * i));
          space_[bo + i] &= static_cast<std::uint8_t>((lo_mask >> (8 * i)) | (i == 0 ? 0xf : 0));
          space_[bo + 4 + i] &= static_cast<std::uint8_t>(hi_mask >> (8 * i));
        }
      }
    }
  }
  if (flr) reset("flr", true);
}

bool Card::bus_master() const noexcept { return bus_master_.load(std::memory_order_acquire); }

std::uint64_t Card::bar_size(unsigned bar) const noexcept {
  switch (bar) {
    case pci::kBarRegs: return pci::kBar0Size;
    case pci::kBarHbm: return bar2_size_.load();
    case pci::kBarMsix: return pci::kBar4Size;
    default: return 0;
  }
}

// ==== BAR0 ==================================================================================

std::uint64_t Card::bar0_read(std::uint64_t off64, unsigned width) {
  if (removed()) return width == 64 ? ~0ULL : 0xffffffffULL;
  const auto off = static_cast<std::uint32_t>(off64);
  const bool in64 = is_reg64(off & ~7u) && (off & 4u) != 0;  // upper half of a 64-bit register
  const std::uint32_t base = in64 ? off - 4 : off;
  if (width == 64 && !is_reg64(off)) return bar0_read(off, 32) | (bar0_read(off + 4, 32) << 32);
  std::uint64_t v = 0;
  if (base < 0x1000) {
    v = global_read(base, width);
  } else if (base >= regs::kMailboxBase && base < regs::kMailboxBase + 0x1000) {
    v = mbox_read(base - regs::kMailboxBase, width);
  } else if (base >= regs::kQueueBase && base < regs::kQueueBase + regs::kNumQueues * regs::kQueueStride) {
    v = queues_[(base - regs::kQueueBase) / regs::kQueueStride]->read((base - regs::kQueueBase) % regs::kQueueStride,
                                                                      width);
  } else if (base >= regs::kWindowBase && base < regs::kWindowBase + regs::kWindowEntries * regs::kWindowStride) {
    v = window_read((base - regs::kWindowBase) / regs::kWindowStride, (base - regs::kWindowBase) % regs::kWindowStride,
                    width);
  } else if (base >= regs::kRouteBase && base < regs::kRouteBase + regs::kRouteEntries * 4) {
    v = routes_[(base - regs::kRouteBase) / 4].load(std::memory_order_acquire);
  } else if (base >= regs::kPortBase && base < regs::kPortBase + ports_.size() * regs::kPortStride) {
    v = port_read((base - regs::kPortBase) / regs::kPortStride, (base - regs::kPortBase) % regs::kPortStride, width);
  }
  if (width == 64) return v;
  return in64 ? (v >> 32) : (v & 0xffffffffULL);
}

void Card::bar0_write(std::uint64_t off64, unsigned width, std::uint64_t value) {
  if (removed()) return;
  const auto off = static_cast<std::uint32_t>(off64);
  if (width == 64 && !is_reg64(off)) {
    bar0_write(off, 32, value & 0xffffffffULL);
    bar0_write(off + 4, 32, value >> 32);
    return;
  }
  const bool in64 = is_reg64(off & ~7u) && (off & 4u) != 0;
  const std::uint32_t base = in64 ? off - 4 : off;
  const bool half = width == 32 && is_reg64(base);
  auto full = [&](auto&& reader) { return half ? merge_half(reader(), in64, value & 0xffffffffULL) : value; };
  if (base < 0x1000) {
    global_write(base, 64, full([&] { return global_read(base, 64); }));
  } else if (base >= regs::kMailboxBase && base < regs::kMailboxBase + 0x1000) {
    mbox_write(base - regs::kMailboxBase, width, value);
  } else if (base >= regs::kQueueBase && base < regs::kQueueBase + regs::kNumQueues * regs::kQueueStride) {
    auto& q = *queues_[(base - regs::kQueueBase) / regs::kQueueStride];
    const std::uint32_t r = (base - regs::kQueueBase) % regs::kQueueStride;
    q.write(r, half ? 64 : width, full([&] { return q.read(r, 64); }));
  } else if (base >= regs::kWindowBase && base < regs::kWindowBase + regs::kWindowEntries * regs::kWindowStride) {
    const unsigned w = (base - regs::kWindowBase) / regs::kWindowStride;
    const std::uint32_t r = (base - regs::kWindowBase) % regs::kWindowStride;
    window_write(w, r, half ? 64 : width, full([&] { return window_read(w, r, 64); }));
  } else if (base >= regs::kRouteBase && base < regs::kRouteBase + regs::kRouteEntries * 4) {
    const unsigned fid = (base - regs::kRouteBase) / 4;
    const auto v32 = static_cast<std::uint32_t>(value) & (regs::route::kPortMask.mask() | regs::route::kValid.mask());
    if (fid != 0) routes_[fid].store(v32, std::memory_order_release);  // entry 0 (no fabric ID 0) is RO 0
  } else if (base >= regs::kPortBase && base < regs::kPortBase + ports_.size() * regs::kPortStride) {
    const unsigned p = (base - regs::kPortBase) / regs::kPortStride;
    port_write(p, (base - regs::kPortBase) % regs::kPortStride, width, value);
  }
  // Reserved space: writes ignored.
}

std::uint64_t Card::global_read(std::uint32_t off, unsigned /*width*/) {
  namespace g = regs::global;
  switch (off) {
    case g::kMagic: return regs::kMagic;
    case g::kVersion: return regs::kInterfaceVersion;
    case g::kCap0:
      return g::kCap0NumEngines.make(regs::kNumEngines) | g::kCap0QueuesPerEngine.make(regs::kQueuesPerEngine) |
             g::kCap0NumPorts.make(static_cast<std::uint32_t>(ports_.size())) |
             g::kCap0LanesPerPort.make(regs::kLanesPerPort);
    case g::kCap1: {
      std::uint32_t ops = 0;
      for (unsigned i = 0; i < fw::dma::kNumOpcodes; ++i) ops |= 1u << i;
      return g::kCap1MaxDepthLog2.make(regs::kMaxQueueDepthLog2) |
             g::kCap1WindowEntriesLog2.make(static_cast<std::uint32_t>(std::countr_zero(regs::kWindowEntries))) |
             g::kCap1OpMask.make(ops);
    }
    case g::kHbmSize: return cfg_.hbm_bytes;
    case g::kMaxXfer: return regs::kMaxTransferBytes;
    case g::kFabricId: return fabric_id();
    case g::kSerial: return serial_;
    case g::kStatus:
      return g::kStatusReady.make(1) | g::kStatusMboxReady.make(1) |
             g::kStatusFatal.make((err_status_.load() & g::kErrRemoved.mask()) ? 1 : 0);
    case g::kErrStatus: return err_status_.load();
    case g::kErrMask: return err_mask_.load();
    case g::kFaultCount: return fault_count_.load();
    case g::kFaultIova: {
      std::lock_guard lock(fault_mu_);
      return faults_.empty() ? 0 : faults_.front().first;
    }
    case g::kFaultInfo: {  // RC: reading pops the oldest record
      std::lock_guard lock(fault_mu_);
      if (faults_.empty()) return 0;
      const std::uint32_t info = faults_.front().second;
      faults_.pop_front();
      return info;
    }
    case g::kScratch: return scratch_.load();
    case g::kTimestamp: return sys_.sched.now_ns();
    case g::kScratch64: return scratch64_.load();
    default: return 0;
  }
}

void Card::global_write(std::uint32_t off, unsigned /*width*/, std::uint64_t value) {
  namespace g = regs::global;
  const auto v32 = static_cast<std::uint32_t>(value);
  switch (off) {
    case g::kErrStatus: err_status_.fetch_and(~v32 | g::kErrRemoved.mask()); break;
    case g::kErrMask: err_mask_.store(v32 & 0x8000001fu); break;
    case g::kReset:
      if (v32 == g::kResetKey) {
        reset("reset_register", false);
      }
      break;
    case g::kScratch: scratch_.store(v32); break;
    case g::kScratch64: scratch64_.store(value); break;
    default: break;  // RO registers ignore writes
  }
}

void Card::set_error(std::uint32_t bits) {
  const std::uint32_t before = err_status_.fetch_or(bits);
  if ((bits & ~before & ~err_mask_.load()) != 0) raise_msix(pci::kMsixVectorGlobal);
}

void Card::record_iommu_fault(std::uint64_t iova, unsigned queue, bool write, bool perm) {
  namespace g = regs::global;
  {
    std::lock_guard lock(fault_mu_);
    if (faults_.size() < 16) {
      const std::uint32_t info = g::kFaultInfoEngine.make(queue / regs::kQueuesPerEngine) |
                                 g::kFaultInfoQueue.make(queue % regs::kQueuesPerEngine) |
                                 g::kFaultInfoWrite.make(write ? 1 : 0) | g::kFaultInfoPerm.make(perm ? 1 : 0) |
                                 g::kFaultInfoValid.make(1);
      faults_.emplace_back(iova, info);
    }
  }
  std::uint32_t c = fault_count_.load();
  while (c != 0xffffffffu && !fault_count_.compare_exchange_weak(c, c + 1)) {
  }
  firmware_.log_error({sys_.sched.now_ns(), 0x0201, 2, 2, queue, iova, write ? 1u : 0u});
  log_event(fmt::format("iommu_fault iova=0x{:x} queue={} access={}{}", iova, queue, write ? "write" : "read",
                        perm ? " perm" : ""));
  set_error(g::kErrIommuFault.mask());
}

bool Card::take_injected_iommu_fault() {
  std::uint32_t n = inject_iommu_.load();
  while (n > 0) {
    if (inject_iommu_.compare_exchange_weak(n, n - 1)) return true;
  }
  return false;
}

// ==== Mailbox transport ====================================================================

std::uint64_t Card::mbox_read(std::uint32_t off, unsigned width) {
  namespace m = regs::mbox;
  std::lock_guard lock(mbox_mu_);
  switch (off) {
    case m::kCtrl: return 0;
    case m::kStatus: return mbox_status_.load();
    case m::kReqLen: return mbox_req_len_;
    case m::kRspLen: return mbox_rsp_len_;
    default: break;
  }
  const unsigned bytes = width / 8;
  auto load = [&](const auto& buf, std::uint32_t o) {
    std::uint64_t v = 0;
    std::memcpy(&v, buf.data() + o, bytes);
    return v;
  };
  if (off >= m::kReqBuf && off + bytes <= m::kReqBuf + m::kBufSize) return load(mbox_req_, off - m::kReqBuf);
  if (off >= m::kRspBuf && off + bytes <= m::kRspBuf + m::kBufSize) return load(mbox_rsp_, off - m::kRspBuf);
  return 0;
}

void Card::mbox_write(std::uint32_t off, unsigned width, std::uint64_t value) {
  namespace m = regs::mbox;
  bool send = false;
  {
    std::lock_guard lock(mbox_mu_);
    switch (off) {
      case m::kCtrl:
        if ((value & m::kCtrlSend.mask()) && !(mbox_status_.load() & m::kStatusBusy.mask())) {
          mbox_status_.fetch_or(m::kStatusBusy.mask());
          send = true;
        }
        break;
      case m::kStatus:
        mbox_status_.fetch_and(~(static_cast<std::uint32_t>(value) & (m::kStatusDone.mask() | m::kStatusError.mask())));
        break;
      case m::kReqLen: mbox_req_len_ = static_cast<std::uint32_t>(value); break;
      default: {
        const unsigned bytes = width / 8;
        if (off >= m::kReqBuf && off + bytes <= m::kReqBuf + m::kBufSize &&
            !(mbox_status_.load() & m::kStatusBusy.mask())) {
          std::memcpy(mbox_req_.data() + (off - m::kReqBuf), &value, bytes);
        }
        break;
      }
    }
  }
  if (send) {
    firmware_.pending_.store(true, std::memory_order_seq_cst);
    sys_.workers.post(firmware_);
  }
}

// ==== Window translation table =============================================================

std::uint64_t Card::window_read(unsigned w, std::uint32_t reg, unsigned /*width*/) {
  namespace wr = regs::window;
  auto& e = windows_[w];
  switch (reg) {
    case wr::kHbmOffset: return e.hbm_offset.load();
    case wr::kSize: return e.size.load();
    case wr::kKey: return e.key.load();
    case wr::kCtrl: return e.ctrl.load();
    case wr::kStatus:
      return e.status.load() | wr::kStatusInflight.make(std::min<std::uint32_t>(e.inflight.load(), 0xffff));
    default: return 0;
  }
}

void Card::window_write(unsigned w, std::uint32_t reg, unsigned /*width*/, std::uint64_t value) {
  namespace wr = regs::window;
  auto& e = windows_[w];
  switch (reg) {
    case wr::kHbmOffset: e.hbm_offset.store(value); break;
    case wr::kSize: e.size.store(value); break;
    case wr::kKey: e.key.store(value); break;
    case wr::kCtrl: {
      // Commit: validate the entry; an invalid one is refused (STATUS.BAD_ENTRY) and left inactive.
      const auto ctrl = static_cast<std::uint32_t>(value) & (wr::kCtrlValid.mask() | wr::kCtrlRead.mask() |
                                                             wr::kCtrlWrite.mask() | wr::kCtrlGeneration.mask());
      const std::uint64_t off = e.hbm_offset.load();
      const std::uint64_t size = e.size.load();
      const bool valid = wr::kCtrlValid.get(ctrl) != 0;
      const bool ok = !valid || (size > 0 && off % wr::kAlign == 0 && size % wr::kAlign == 0 && off <= cfg_.hbm_bytes &&
                                 size <= cfg_.hbm_bytes - off);
      if (!ok) {
        e.ctrl.store(ctrl & ~wr::kCtrlValid.mask());
        e.status.store(wr::kStatusBadEntry.mask());
      } else {
        e.ctrl.store(ctrl);
        e.status.store(valid ? wr::kStatusActive.mask() : 0);
      }
      break;
    }
    default: break;
  }
}

// ==== Optical ports ========================================================================

std::uint32_t Card::port_status_locked(unsigned p) const {
  namespace pr = regs::port;
  const auto& pm = ports_[p];
  const bool up = pm.state == LinkState::kUp;
  return pr::kStatusState.make(static_cast<std::uint32_t>(pm.state)) | pr::kStatusFecLock.make(up ? 1 : 0) |
         pr::kStatusModulePresent.make(pm.cabled ? 1 : 0) | pr::kStatusLanesUp.make(up ? 0xff : 0) |
         pr::kStatusLaneCount.make(pm.cabled ? regs::kLanesPerPort : 0) | pr::kStatusLinkUp.make(up ? 1 : 0);
}

std::uint64_t Card::port_read(unsigned p, std::uint32_t reg, unsigned /*width*/) {
  namespace pr = regs::port;
  std::lock_guard lock(port_mu_);
  const auto& pm = ports_[p];
  switch (reg) {
    case pr::kCtrl: return pm.ctrl;
    case pr::kStatus: return port_status_locked(p);
    case pr::kLaneMap: return 0x76543210u;  // identity map, 4 bits per lane
    case pr::kSpeed:
      return pm.state == LinkState::kUp ? (pr::kSpeedMbdPerLane.make(53125) | pr::kSpeedModulation.make(1)) : 0;
    case pr::kNeighbor: return pm.neighbor;
    case pr::kTrainCount: return pm.train_count;
    case pr::kFlapCount: return pm.flap_count;
    case pr::kTrainTimeout: return pm.train_timeout_ms;
    case pr::kEventStatus: return pm.events;
    default: return 0;  // lane counters: no traffic model yet (optics issue)
  }
}

void Card::port_write(unsigned p, std::uint32_t reg, unsigned /*width*/, std::uint64_t value) {
  namespace pr = regs::port;
  const auto v32 = static_cast<std::uint32_t>(value);
  switch (reg) {
    case pr::kCtrl: port_set_ctrl(p, v32); break;
    case pr::kTrainTimeout: {
      std::lock_guard lock(port_mu_);
      ports_[p].train_timeout_ms = std::clamp<std::uint32_t>(v32, 1, 60'000);
      break;
    }
    case pr::kEventStatus: {
      std::lock_guard lock(port_mu_);
      ports_[p].events &= ~v32;
      break;
    }
    default: break;
  }
}

// Link bring-up (docs/spec/registers.md §7.2): ModuleWait 5 ms -> DataPathInit 10 ms ->
// Training (until the peer also trains, at most TRAIN_TIMEOUT) -> FecLock 2 ms -> Up.
namespace {
constexpr std::uint64_t kModuleWaitNs = 5'000'000;
constexpr std::uint64_t kDataPathInitNs = 10'000'000;
constexpr std::uint64_t kTrainNs = 20'000'000;
constexpr std::uint64_t kFecLockNs = 2'000'000;
constexpr std::uint32_t kTrainAttempts = 3;  // retry budget before STATE = Fault
// Up -> Training after losing the peer (spec §7.2 link-loss debounce).
constexpr std::uint64_t kLinkLossDebounceNs = 10'000'000;
}  // namespace

void Card::port_enter(unsigned p, LinkState s, std::uint64_t delay_ns) {
  auto& pm = ports_[p];
  const bool was_up = pm.state == LinkState::kUp;
  pm.state = s;
  if (was_up && s != LinkState::kUp) {
    ++pm.flap_count;
    pm.events |= regs::port::kEventLinkDown.mask();
    pm.neighbor = 0;
    // The far end loses lock too: after the link-loss debounce it leaves Up for Training
    // (a flap, spec §7.2). Scheduled, not done here: we hold our port_mu_, not the peer's.
    if (pm.cabled) {
      Card* peer = sys_.cards[pm.peer_card].get();
      const unsigned pp = pm.peer_port;
      sys_.sched.schedule_in(kLinkLossDebounceNs, [peer, pp](std::uint64_t now) {
        std::lock_guard lock(peer->port_mu_);
        auto& q = peer->ports_[pp];
        if (q.state != LinkState::kUp || peer->removed()) return;
        peer->log_event(fmt::format("port={} link lost", pp));
        ++q.train_count;
        q.attempts = 1;
        q.train_start_ns = now;
        peer->port_enter(pp, LinkState::kTraining, kTrainNs);
      });
    }
  }
  const std::uint64_t epoch = ++pm.epoch;
  if (delay_ns != 0) {
    sys_.sched.schedule_in(delay_ns, [this, p, epoch](std::uint64_t) { port_step(p, epoch); });
  }
}

void Card::port_set_ctrl(unsigned p, std::uint32_t ctrl) {
  namespace pr = regs::port;
  std::lock_guard lock(port_mu_);
  auto& pm = ports_[p];
  const std::uint32_t old = pm.ctrl;
  pm.ctrl = ctrl & (pr::kCtrlEnable.mask() | pr::kCtrlLoopback.mask() | pr::kCtrlPrbsGen.mask() |
                    pr::kCtrlPrbsCheck.mask() | pr::kCtrlPrbsPattern.mask());
  const bool enable = pr::kCtrlEnable.get(pm.ctrl) != 0;
  const bool train = pr::kCtrlTrain.get(ctrl) != 0;
  if (!enable) {
    if (pm.state != LinkState::kDisabled) {
      log_event(fmt::format("port={} disabled", p));
      port_enter(p, LinkState::kDisabled, 0);
    }
    return;
  }
  if ((!pr::kCtrlEnable.get(old) || train) && pm.cabled) {
    log_event(fmt::format("port={} {}", p, train ? "retrain" : "enable"));
    port_enter(p, LinkState::kModuleWait, kModuleWaitNs);
  } else if (!pm.cabled && pm.state == LinkState::kDisabled) {
    port_enter(p, LinkState::kModuleWait, 0);  // waits for a module that is not there
  }
}

void Card::port_step(unsigned p, std::uint64_t epoch) {
  std::unique_lock lock(port_mu_);
  auto& pm = ports_[p];
  if (pm.epoch != epoch || removed()) return;
  const std::uint64_t now = sys_.sched.now_ns();
  switch (pm.state) {
    case LinkState::kModuleWait: port_enter(p, LinkState::kDataPathInit, kDataPathInitNs); break;
    case LinkState::kDataPathInit:
      ++pm.train_count;
      pm.attempts = 1;
      pm.train_start_ns = now;
      port_enter(p, LinkState::kTraining, kTrainNs);
      break;
    case LinkState::kTraining: {
      Card* peer = sys_.cards[pm.peer_card].get();
      const unsigned peer_port = pm.peer_port;
      lock.unlock();
      bool peer_ready = false;
      if (peer != this) {
        std::lock_guard plock(peer->port_mu_);
        const auto ps = peer->ports_[peer_port].state;
        peer_ready =
            !peer->removed() && (ps == LinkState::kTraining || ps == LinkState::kFecLock || ps == LinkState::kUp);
      }
      lock.lock();
      if (pm.epoch != epoch) return;
      if (peer_ready) {
        port_enter(p, LinkState::kFecLock, kFecLockNs);
      } else if (now - pm.train_start_ns >= std::uint64_t{pm.train_timeout_ms} * 1'000'000) {
        pm.events |= regs::port::kEventTrainFail.mask();
        if (pm.attempts >= kTrainAttempts) {
          log_event(fmt::format("port={} training failed after {} attempts", p, kTrainAttempts));
          port_enter(p, LinkState::kFault, 0);
        } else {
          ++pm.train_count;
          ++pm.attempts;
          pm.train_start_ns = now;
          port_enter(p, LinkState::kTraining, kTrainNs);
        }
      } else {
        port_enter(p, LinkState::kTraining, kTrainNs);  // poll the peer again
      }
      break;
    }
    case LinkState::kFecLock: {
      pm.state = LinkState::kUp;
      ++pm.epoch;
      Card* peer = sys_.cards[pm.peer_card].get();
      pm.neighbor = regs::port::kNeighborFabricId.make(peer->fabric_id()) |
                    regs::port::kNeighborPort.make(pm.peer_port) | regs::port::kNeighborValid.make(1);
      pm.events |= regs::port::kEventLinkUp.mask();
      log_event(fmt::format("port={} up neighbor={}:{}", p, peer->fabric_id(), pm.peer_port));
      break;
    }
    default: break;
  }
}

// ==== BAR4: MSI-X table and PBA (PCIe 6.0 §7.7.2.6) ==========================================

std::uint64_t Card::bar4_read(std::uint64_t off, unsigned width) {
  if (removed()) return width == 64 ? ~0ULL : 0xffffffffULL;
  if (width == 64) return bar4_read(off, 32) | (bar4_read(off + 4, 32) << 32);
  std::lock_guard lock(msix_mu_);
  if (off < pci::kMsixVectors * pci::kMsixEntrySize) return msix_table_[off / 16][(off % 16) / 4];
  if (off >= pci::kMsixPbaOffset && off < pci::kMsixPbaOffset + pci::kMsixVectors / 8) {
    std::uint32_t v = 0;
    const unsigned first = static_cast<unsigned>((off - pci::kMsixPbaOffset) * 8);
    for (unsigned i = 0; i < 32 && first + i < pci::kMsixVectors; ++i) {
      if (msix_pending_[first + i].load()) v |= 1u << i;
    }
    return v;
  }
  return 0;
}

void Card::bar4_write(std::uint64_t off, unsigned width, std::uint64_t value) {
  if (removed()) return;
  if (width == 64) {
    bar4_write(off, 32, value & 0xffffffffULL);
    bar4_write(off + 4, 32, value >> 32);
    return;
  }
  bool unmasked_pending = false;
  unsigned vec = 0;
  {
    std::lock_guard lock(msix_mu_);
    if (off < pci::kMsixVectors * pci::kMsixEntrySize) {
      vec = static_cast<unsigned>(off / 16);
      const unsigned word = static_cast<unsigned>((off % 16) / 4);
      msix_table_[vec][word] = static_cast<std::uint32_t>(word == 3 ? (value & 1u) : value);
      unmasked_pending = word == 3 && (value & 1u) == 0 && msix_pending_[vec].exchange(false);
    }
  }
  if (unmasked_pending) raise_msix(vec);
}

void Card::set_msix_eventfd(unsigned vector, int fd) { msix_fd_[vector].store(fd); }

void Card::raise_msix(unsigned vector) {
  if (vector >= pci::kMsixVectors || removed()) return;
  bool masked;
  {
    std::lock_guard lock(msix_mu_);
    masked = (msix_table_[vector][3] & 1u) != 0;
  }
  if (masked) {
    msix_pending_[vector].store(true);
    return;
  }
  const int fd = msix_fd_[vector].load();
  if (fd >= 0) {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
  }
}

// ==== Reset and removal ====================================================================

void Card::reset(const char* why, bool rebuild_config) {
  log_event(fmt::format("reset cause={}", why));
  for (auto& q : queues_) q->reset_state();
  firmware_.reset_state();
  {
    std::lock_guard lock(mbox_mu_);
    mbox_req_.fill(std::byte{0});
    mbox_rsp_.fill(std::byte{0});
    mbox_req_len_ = 0;
    mbox_rsp_len_ = 0;
    mbox_status_.store(0);
  }
  for (unsigned i = 0; i < regs::kRouteEntries; ++i) routes_[i].store(0);
  for (unsigned w = 0; w < regs::kWindowEntries; ++w) {
    auto& e = windows_[w];
    e.hbm_offset.store(0);
    e.size.store(0);
    e.key.store(0);
    e.ctrl.store(0);
    e.status.store(0);
  }
  {
    std::lock_guard lock(port_mu_);
    for (unsigned p = 0; p < ports_.size(); ++p) {
      auto& pm = ports_[p];
      if (pm.state != LinkState::kDisabled) port_enter(p, LinkState::kDisabled, 0);
      pm.ctrl = 0;
      pm.train_count = 0;
      pm.flap_count = 0;
      pm.train_timeout_ms = 500;
      pm.events = 0;
      pm.neighbor = 0;
    }
  }
  {
    std::lock_guard lock(fault_mu_);
    faults_.clear();
  }
  err_status_.store(0);
  err_mask_.store(0);
  scratch_.store(0);
  scratch64_.store(0);
  fault_count_.store(0);
  inject_iommu_.store(0);
  {
    // The MSI-X table returns to its power-on state; eventfd routing is platform state (the
    // kernel's, under VFIO) and survives, as VFIO restores MSI-X after a reset.
    std::lock_guard lock(msix_mu_);
    for (auto& e : msix_table_) e = {0, 0, 0, 0};
    for (auto& p : msix_pending_) p.store(false);
  }
  if (rebuild_config) {
    std::lock_guard lock(cfg_mu_);
    bar2_size_ = std::max<std::uint64_t>(pci::kBar2MinSize, std::bit_ceil(cfg_.hbm_bytes));
    build_config_space();
  }
}

void Card::remove() {
  log_event("surprise_removal");
  removed_.store(true, std::memory_order_release);
  err_status_.fetch_or(regs::global::kErrRemoved.mask());
  std::lock_guard lock(port_mu_);
  for (unsigned p = 0; p < ports_.size(); ++p) {
    if (ports_[p].state != LinkState::kDisabled) port_enter(p, LinkState::kDisabled, 0);
  }
}

}  // namespace npo::emu

namespace npo::emu {
// Link faults: the optics model implements them (issue 5). Until then they are logged only.
void Card::inject_link_fault(const Fault& f) {
  log_event(fmt::format("link fault {} on port {} not modelled yet", fault_name(f.kind), f.port.value_or(0)));
}
}  // namespace npo::emu
