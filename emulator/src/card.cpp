// SPDX-License-Identifier: Apache-2.0
// The card model: config space, BAR0 decode, BAR4 MSI-X, reset, ports.
#include "card.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "npo/fw/stats.hpp"
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
    case g::kStatsAddr: return stats_addr_.load();
    case g::kStatsCtrl: return stats_ctrl_.load();
    case g::kStatsSeq: return stats_seq_.load(std::memory_order_acquire);
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
    case g::kStatsAddr: stats_addr_.store(value & ~std::uint64_t{63}); break;  // 64 B aligned
    case g::kStatsCtrl:
      stats_ctrl_.store(v32);
      if (v32 != 0) stats_dma(v32);  // synchronous: the block is in memory when the write returns
      break;
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
//
// Port state machine (registers.md §7.2) over a CMIS 5.2 module model (module state machine,
// data path state machine per lane) and the lane channel model of optics.hpp. Everything is
// event driven on the emulated clock: a port schedules its next step; nothing polls in a
// loop. The far end of a link is reached only through sys_.resolve_peer / sys_.channel_of and
// its published state word (PortModel::pub), so no two port mutexes are ever held together.

namespace {
namespace pr = regs::port;
namespace ln = regs::port::lane;

constexpr std::uint64_t kMsNs = 1'000'000;
constexpr std::uint64_t kModulePwrUpNs = 8 * kMsNs;   // page 01h byte 167 advertises 5..10 ms (code 2)
constexpr std::uint64_t kDpInitNs = 8 * kMsNs;        // page 01h byte 144 advertises 5..10 ms (code 2)
constexpr std::uint64_t kFirmwarePollNs = 1 * kMsNs;  // firmware reads the module state
constexpr std::uint64_t kTrainNs = 20 * kMsNs;        // one training exchange round
constexpr std::uint64_t kFecLockNs = 2 * kMsNs;       // alignment-marker lock on a clean lane
constexpr std::uint64_t kFecPollNs = 10 * kMsNs;
constexpr std::uint64_t kTModuleNs = 5000 * kMsNs;         // §7.2 t_module
constexpr std::uint64_t kTDataPathNs = 2000 * kMsNs;       // §7.2 t_datapath
constexpr std::uint64_t kTFecNs = 100 * kMsNs;             // §7.2 t_fec
constexpr std::uint32_t kTrainAttempts = 3;                // §7.2 N_attempts
constexpr std::uint64_t kLinkLossDebounceNs = 10 * kMsNs;  // §7.2 link-loss debounce
constexpr std::uint8_t kAppLanes = 0xff;                   // AppSel 1: 8 host + 8 media lanes
constexpr std::uint64_t kForever = ~std::uint64_t{0};

// Published state word (PortModel::pub).
constexpr std::uint32_t kPubRxReady = 1u << 4;
constexpr unsigned kPubTxShift = 8;
constexpr unsigned kPubEnableShift = 16;
constexpr std::uint32_t kPubPrbsGen = 1u << 24;
constexpr unsigned kPubPatternShift = 25;

// CMIS 5.2 byte addresses used by the model (lower memory / upper page offsets 128..255).
constexpr unsigned kCmisModuleState = 3;  // bits 3:1
constexpr unsigned kCmisModuleFlags = 8;  // bit 0: L-ModuleStateChanged (latched)
constexpr unsigned kCmisTemp = 14;
constexpr unsigned kCmisVcc = 16;
constexpr unsigned kCmisGlobalCtrl = 26;  // bit 4 LowPwrRequestSW, bit 3 SoftwareReset
constexpr std::uint8_t kLowPwrRequestSw = 0x10;
constexpr unsigned kCmisMediaType = 85;
constexpr unsigned kCmisAppDesc = 86;
constexpr std::uint8_t kModLowPwr = 1, kModPwrUp = 2, kModReady = 3;
constexpr std::uint8_t kDpDeactivated = 1, kDpInit = 2, kDpActivated = 4;
// Page 10h.
constexpr unsigned kP10DpDeinit = 128;
constexpr unsigned kP10ApplyDpInit = 143;
constexpr unsigned kP10DpConfig = 145;  // 8 lanes: AppSel 7:4, DataPathID 3:1
// Page 11h.
constexpr unsigned kP11DpState = 128;     // 4 bytes, nibble per lane (lane 1 = low nibble of 128)
constexpr unsigned kP11FlagsFirst = 134;  // latched flags 134..152 clear on read
constexpr unsigned kP11FlagsLast = 152;
constexpr unsigned kP11RxLos = 147;
constexpr unsigned kP11RxLol = 148;
constexpr unsigned kP11TxPower = 154;
constexpr unsigned kP11TxBias = 170;
constexpr unsigned kP11RxPower = 186;
constexpr unsigned kP11ConfigStatus = 202;  // 4 bytes, nibble per lane: 1 = ConfigSuccess
constexpr unsigned kP11ActiveSet = 206;     // 8 lanes: AppSel 7:4, DataPathID 3:1

bool training_like(LinkState s) { return s == LinkState::kTraining || s == LinkState::kFecLock || s == LinkState::kUp; }
std::uint32_t sat_inc(std::uint32_t v) { return v == 0xffffffffu ? v : v + 1; }
void put_be16(std::array<std::uint8_t, 128>& pg, unsigned off, std::uint16_t v) {
  pg[off - 128] = static_cast<std::uint8_t>(v >> 8);
  pg[off - 127] = static_cast<std::uint8_t>(v & 0xff);
}
std::uint16_t clamp_u16(double v) { return static_cast<std::uint16_t>(std::clamp(v + 0.5, 0.0, 65535.0)); }
double lane_tx_offset_db(std::uint64_t module_seed, unsigned l) {
  return (optics::Rng(optics::mix_seed(module_seed, l, 1)).uniform() - 0.5) * 0.3;  // ±0.15 dB
}
double lane_bias_offset_ma(std::uint64_t module_seed, unsigned l) {
  return (optics::Rng(optics::mix_seed(module_seed, l, 2)).uniform() - 0.5) * 0.6;
}
std::uint8_t module_state_of(const PortModel& pm) {
  return static_cast<std::uint8_t>((pm.cmis[0][kCmisModuleState] >> 1) & 7);
}
void set_module_state(PortModel& pm, std::uint8_t s) {
  auto& b = pm.cmis[0][kCmisModuleState];
  b = static_cast<std::uint8_t>((b & ~0x0e) | (s << 1));
  pm.cmis[0][kCmisModuleFlags] |= 0x01;  // L-ModuleStateChanged
}
std::uint8_t page_checksum(const std::array<std::uint8_t, 128>& pg, unsigned first, unsigned last) {
  unsigned sum = 0;
  for (unsigned i = first; i <= last; ++i) sum += pg[i - 128];
  return static_cast<std::uint8_t>(sum & 0xff);
}
}  // namespace

/// What the receivers of a port see (Card::link_view).
struct Card::LinkView {
  bool has_peer = false;
  bool loopback = false;
  std::uint32_t pub = 0;      ///< far end's published word
  std::uint8_t far_tx = 0;    ///< lanes the far transmitter drives
  std::uint8_t far_prbs = 0;  ///< lanes the far end transmits PRBS on
  std::uint32_t peer_fabric_id = 0;
  unsigned peer_port = 0;
  ChannelParams ch{};
  double far_temp_c = 25.0;  ///< far module temperature (its Tx power follows it)
  std::uint64_t far_seed = 0;
};

void Card::build_cmis(unsigned p) {
  // A synthetic CMIS 5.2 8-lane 800G near-package-optics module: lower memory, pages 00h,
  // 01h, 02h (advertising and thresholds), 10h (controls), 11h (state, flags, monitors).
  // Identifier 0x18 (QSFP-DD, SFF-8024 Table 4-1): SFF-8024 has no code for a near-package
  // optical engine; the engine uses the QSFP-DD CMIS memory map and that code lets every
  // CMIS tool (ethtool, our decoder) read it.
  auto& pm = ports_[p];
  for (auto& pg : pm.cmis) pg.fill(0);
  auto& lo = pm.cmis[static_cast<unsigned>(CmisPage::kLower)];
  auto& p00 = pm.cmis[static_cast<unsigned>(CmisPage::k00)];
  auto& p01 = pm.cmis[static_cast<unsigned>(CmisPage::k01)];
  auto& p02 = pm.cmis[static_cast<unsigned>(CmisPage::k02)];
  auto& p10 = pm.cmis[static_cast<unsigned>(CmisPage::k10)];
  auto& p11 = pm.cmis[static_cast<unsigned>(CmisPage::k11)];
  lo[0] = kCmisIdentifierQsfpDd;
  lo[1] = 0x52;                                                                // CMIS revision 5.2
  lo[2] = 0x00;                                                                // paged memory
  lo[kCmisModuleState] = static_cast<std::uint8_t>((kModLowPwr << 1) | 0x01);  // LowPwr, IntL deasserted
  lo[kCmisGlobalCtrl] = kLowPwrRequestSw;  // the card holds modules in low power until a port is enabled
  lo[kCmisMediaType] = 0x02;               // SFF-8024 Table 4-2: single-mode fiber
  // Application 1: host 800GAUI-8 S C2M (SFF-8024 Table 4-5 code 51h), media 800GBASE-DR8
  // (Table 4-7 code 56h), 8 host and 8 media lanes, data path may start on host lane 1.
  lo[kCmisAppDesc + 0] = 0x51;
  lo[kCmisAppDesc + 1] = 0x56;
  lo[kCmisAppDesc + 2] = 0x88;
  lo[kCmisAppDesc + 3] = 0x01;
  lo[kCmisAppDesc + 4] = 0xff;  // end of the application list
  auto put_str = [](std::array<std::uint8_t, 128>& pg, unsigned off, unsigned len, std::string_view s) {
    for (unsigned i = 0; i < len; ++i) pg[off - 128 + i] = i < s.size() ? static_cast<std::uint8_t>(s[i]) : ' ';
  };
  p00[0] = kCmisIdentifierQsfpDd;
  put_str(p00, 129, 16, "NPO-EMU");
  put_str(p00, 148, 16, "NPO-800G-DR8-E");
  put_str(p00, 164, 2, "A1");
  put_str(p00, 166, 16, fmt::format("{:010X}P{:02d}", serial_ & 0xffffffffffULL, p));
  put_str(p00, 182, 8, "261129");
  p00[200 - 128] = 0x7 << 5;  // power class 8
  p00[201 - 128] = 64;        // 16 W max, 0.25 W units
  p00[212 - 128] = 0x0d;      // media interface technology: 1310 nm EML
  p00[222 - 128] = page_checksum(p00, 128, 221);
  // Page 01h: advertising.
  p01[142 - 128] = 0x00;                                     // bank 0 only, no page 03h/05h/13h/16h/20h
  p01[144 - 128] = static_cast<std::uint8_t>((1 << 4) | 2);  // MaxDurationDPDeinit 1..5 ms, DPInit 5..10 ms
  p01[151 - 128] = 0x10;                                     // Rx power monitor: average power
  p01[157 - 128] = 0x00;                                     // no Tx flags
  p01[158 - 128] = 0x06;                                     // Rx LOS and Rx CDR LOL flags
  p01[159 - 128] = 0x03;                                     // temperature and Vcc monitors
  p01[160 - 128] = 0x07;                                     // Tx bias (x1: 2 µA LSB), Tx power, Rx power
  p01[167 - 128] = static_cast<std::uint8_t>((1 << 4) | 2);  // MaxDurationModulePwrDn 1..5 ms, PwrUp 5..10 ms
  p01[168 - 128] = 0x00;                                     // DPTxTurnOff/On < 1 ms
  p01[176 - 128] = 0x01;                                     // AppSel 1: media lanes start on lane 1
  p01[255 - 128] = page_checksum(p01, 130, 254);
  // Page 02h: thresholds (high alarm, low alarm, high warning, low warning), big-endian.
  auto thr = [&p02](unsigned off, std::array<std::uint16_t, 4> v) {
    for (unsigned i = 0; i < 4; ++i) put_be16(p02, off + 2 * i, v[i]);
  };
  auto q8 = [](double c) { return static_cast<std::uint16_t>(static_cast<std::int16_t>(c * 256)); };
  thr(128, {q8(75), q8(-5), q8(70), q8(0)});  // °C
  thr(136, {36300, 29700, 34650, 31350});     // Vcc, 100 µV
  thr(176, {31623, 2512, 25119, 3162});       // Tx power, 0.1 µW: +5, -6, +4, -5 dBm
  thr(184, {7500, 1000, 6500, 1500});         // Tx bias, 2 µA: 15, 2, 13, 3 mA
  thr(192, {31623, 1259, 25119, 1585});       // Rx power: +5, -9, +4, -8 dBm
  p02[255 - 128] = page_checksum(p02, 128, 254);
  p10[kP10DpDeinit - 128] = 0xff;
  for (unsigned i = 0; i < 4; ++i) p11[kP11DpState - 128 + i] = (kDpDeactivated << 4) | kDpDeactivated;
  pm.module_ready_ns = 0;
  pm.dp_ready_ns = 0;
  pm.dp_lanes = 0;
  pm.dp_activated = false;
  if (pm.module_seed != 0) return;  // seeds and lane physics are fixed at construction
  // (the far end reads module_seed without a lock: it must never change afterwards).
  pm.module_seed = optics::mix_seed(sys_.cfg.seed, index_, p, 0x4d4f44);
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    auto& lane = pm.lanes[l];
    optics::Rng r(optics::mix_seed(sys_.cfg.seed, index_, p, 0x4c4e00 + l));
    lane.spread_db = (r.uniform() * 2.0 - 1.0) * optics::kLaneSpreadDb;
    lane.optimum = optics::tx_eq_optimum(r.next());
    lane.rng = optics::Rng(r.next());
    lane.ber_valid = false;
    lane.tx_offset_db = lane_tx_offset_db(pm.module_seed, l);
    lane.bias_offset_ma = lane_bias_offset_ma(pm.module_seed, l);
  }
}

void Card::attach_cable(unsigned port, std::uint32_t peer_card, unsigned peer_port) {
  std::lock_guard lock(port_mu_);
  ports_[port].cabled = true;
  ports_[port].peer_card = peer_card;
  ports_[port].peer_port = peer_port;
  publish(port);
}

void Card::publish(unsigned p) {
  auto& pm = ports_[p];
  const bool tx =
      pm.cabled && !removed() && ((pm.state == LinkState::kDataPathInit && pm.dp_activated) || training_like(pm.state));
  const std::uint32_t pat = pr::kCtrlPrbsPattern.get(pm.ctrl);
  const bool gen =
      pr::kCtrlPrbsGen.get(pm.ctrl) != 0 && pat < fw::prbs::kNumPatterns && tx && pm.state == LinkState::kDataPathInit;
  const std::uint32_t w = static_cast<std::uint32_t>(pm.state) | (pm.rx_ready ? kPubRxReady : 0) |
                          (static_cast<std::uint32_t>(tx ? pm.lanes_in_use : 0) << kPubTxShift) |
                          ((pm.lane_enable & 0xff) << kPubEnableShift) | (gen ? kPubPrbsGen : 0) |
                          (pat << kPubPatternShift);
  pm.pub.store(w, std::memory_order_release);
  pm.pub_prbs_lanes.store(gen ? (pm.prbs_lanes & pm.lanes_in_use) : 0, std::memory_order_release);
}

Card::LinkView Card::link_view(unsigned p, std::uint64_t now) {
  auto& pm = ports_[p];
  LinkView v;
  if (pr::kCtrlLoopback.get(pm.ctrl) != 0) {
    // Near-end loopback inside the SerDes: no optics in the path.
    v.has_peer = true;
    v.loopback = true;
    v.pub = pm.pub.load(std::memory_order_acquire);
    v.far_tx = static_cast<std::uint8_t>(v.pub >> kPubTxShift);
    v.far_prbs = static_cast<std::uint8_t>(pm.pub_prbs_lanes.load(std::memory_order_acquire));
    v.peer_fabric_id = fabric_id();
    v.peer_port = p;
    v.ch = ChannelParams{0.0, 0.0, 0};
    v.far_seed = pm.module_seed;
    v.far_temp_c = optics::module_temperature_c(pm.module_seed, pm.pub_power_on_ns.load(), now);
    return v;
  }
  const auto ref = sys_.resolve_peer(index_, p);
  if (!ref || ref->card >= sys_.cards.size()) return v;
  Card* peer = sys_.cards[ref->card].get();
  if (peer == nullptr || ref->port >= peer->ports_.size()) return v;
  const auto& q = peer->ports_[ref->port];
  v.has_peer = true;
  v.pub = q.pub.load(std::memory_order_acquire);
  v.far_tx = peer->removed() ? 0 : static_cast<std::uint8_t>(v.pub >> kPubTxShift);
  v.far_prbs = static_cast<std::uint8_t>(q.pub_prbs_lanes.load(std::memory_order_acquire));
  v.peer_fabric_id = peer->fabric_id();
  v.peer_port = ref->port;
  v.ch = sys_.channel_of(index_, p);
  v.far_seed = q.module_seed;  // fixed at construction
  v.far_temp_c = optics::module_temperature_c(q.module_seed, q.pub_power_on_ns.load(), now);
  return v;
}

bool Card::lane_signal(unsigned p, unsigned l, std::uint64_t now, const LinkView& v) const {
  const auto& pm = ports_[p];
  return pm.cabled && v.has_peer && ((v.far_tx >> l) & 1u) != 0 && ((v.ch.dead_lanes >> l) & 1u) == 0 &&
         now >= pm.lanes[l].dark_until_ns;
}

double Card::lane_ber(unsigned p, unsigned l, std::uint64_t now, const LinkView& v) {
  if (!lane_signal(p, l, now, v)) return 0.5;
  auto& lane = ports_[p].lanes[l];
  if (!lane.ber_valid || now < lane.ber_cache_ns || now - lane.ber_cache_ns > 50 * kMsNs) {
    const double far_tx = optics::tx_power_dbm(v.far_temp_c, lane_tx_offset_db(v.far_seed, l));
    const double eq = lane.trained ? 0.0 : optics::tx_eq_penalty_db(optics::kTxEqPreset, lane.optimum);
    const double snr = optics::snr_db(far_tx - v.ch.loss_db, lane.spread_db, v.ch.snr_penalty_db, eq);
    lane.snr_cache = snr;
    lane.rx_mw_cache = optics::dbm_to_mw(far_tx - v.ch.loss_db);
    lane.ber_cache = optics::ber_from_snr_db(snr);
    lane.ber_cache_ns = now;
    lane.ber_valid = true;
  }
  double ber = lane.ber_cache;
  if (lane.ramp && now >= lane.ramp_start_ns) {
    const double f =
        lane.ramp_dur_ns == 0
            ? 1.0
            : std::min(1.0, static_cast<double>(now - lane.ramp_start_ns) / static_cast<double>(lane.ramp_dur_ns));
    const double from = std::max(lane.ramp_from, 1e-30);
    ber = std::max(ber, from * std::pow(lane.ramp_to / from, f));
  }
  return std::min(ber, 0.5);
}

void Card::sync_lanes(unsigned p, std::uint64_t now, const LinkView* known) {
  auto& pm = ports_[p];
  const bool counting = pm.state == LinkState::kFecLock || pm.state == LinkState::kUp;
  const bool prbs = pm.state == LinkState::kDataPathInit && pm.dp_activated &&
                    (pm.ctrl & (pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask())) != 0;
  std::optional<LinkView> view;
  if (known != nullptr) view = *known;
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    auto& lane = pm.lanes[l];
    std::uint64_t from = lane.synced_ns;
    lane.synced_ns = now;
    if (now <= from || ((pm.lanes_in_use >> l) & 1u) == 0 || (!counting && !prbs)) {
      if (!prbs) lane.prbs_lock = false;
      continue;
    }
    if (!view) view = link_view(p, now);
    if (prbs) {
      sync_prbs(p, l, from, now, *view);
      continue;
    }
    if (lane.dark_until_ns > from) from = std::min(lane.dark_until_ns, now);
    if (from >= now || !lane_signal(p, l, now, *view)) continue;
    // Codewords arrive at exactly 19 531 250 per second per lane (53.125 GBd x 2 / 5440):
    // t_ns x 5 / 256, so whole-interval counts add up exactly.
    const auto cw = [](std::uint64_t t) { return (t >> 8) * 5 + (((t & 0xff) * 5) >> 8); };
    if (lane.ramp && lane.ramp_start_ns < now && lane.ramp_start_ns + lane.ramp_dur_ns > from) {
      // BER moves during the interval: integrate in up to 8 pieces, BER at each midpoint.
      const std::uint64_t span = now - from;
      const unsigned pieces =
          static_cast<unsigned>(std::min<std::uint64_t>(8, std::max<std::uint64_t>(1, span / kMsNs)));
      for (unsigned i = 0; i < pieces; ++i) {
        const std::uint64_t a = from + span * i / pieces, b = from + span * (i + 1) / pieces;
        optics::add_codewords(lane.fec, cw(b) - cw(a), lane_ber(p, l, a + (b - a) / 2, *view), lane.rng);
      }
    } else {
      optics::add_codewords(lane.fec, cw(now) - cw(from), lane_ber(p, l, now, *view), lane.rng);
    }
  }
}

void Card::sync_prbs(unsigned p, unsigned l, std::uint64_t from, std::uint64_t to, const LinkView& v) {
  auto& pm = ports_[p];
  auto& lane = pm.lanes[l];
  const unsigned local = pr::kCtrlPrbsPattern.get(pm.ctrl);
  const bool checking = pr::kCtrlPrbsCheck.get(pm.ctrl) != 0 && ((pm.prbs_lanes >> l) & 1u) != 0;
  if (!checking || local >= fw::prbs::kNumPatterns) {
    lane.prbs_lock = false;
    return;
  }
  // The stream this checker receives: host side = the module loops the card's own pattern
  // back over the electrical path; loopback = own pattern through the SerDes; else the far
  // end's generator over the fibre.
  bool src_on = false;
  unsigned src = 0;
  double ber = 0.5;
  if (pr::kCtrlPrbsSide.get(pm.ctrl) != 0) {
    src_on = pr::kCtrlPrbsGen.get(pm.ctrl) != 0 && ((pm.prbs_lanes >> l) & 1u) != 0 && pm.cabled;
    src = local;
    ber = optics::kHostSideBer;
  } else {
    src_on = (v.pub & kPubPrbsGen) != 0 && ((v.far_prbs >> l) & 1u) != 0 && lane_signal(p, l, to, v);
    src = (v.pub >> kPubPatternShift) & 0xf;
    ber = lane_ber(p, l, to, v);
  }
  if (!src_on) {
    lane.prbs_lock = false;
    return;
  }
  if (!lane.prbs) lane.prbs = std::make_unique<PrbsLaneState>();
  auto& st = *lane.prbs;
  if (st.gen_pattern != src) {
    st.gen =
        fw::prbs::PrbsGenerator(static_cast<fw::prbs::Pattern>(src), static_cast<std::uint32_t>(lane.rng.next()) | 1u);
    st.gen_pattern = static_cast<std::uint8_t>(src);
  }
  if (st.chk_pattern != local) {
    st.chk = fw::prbs::PrbsChecker(static_cast<fw::prbs::Pattern>(local));
    st.chk_pattern = static_cast<std::uint8_t>(local);
  }
  // Bits on the line in the interval; a sample of at most 16 kbit goes bit-exactly through
  // the channel (errors at the lane's BER) into the checker; the rest is extrapolated.
  const std::uint64_t total =
      static_cast<std::uint64_t>(static_cast<double>(to - from) * optics::kLineBitsPerSecond * 1e-9);
  const std::uint64_t sample = std::min<std::uint64_t>(total, 16384);
  const std::uint64_t b0 = st.chk.bits(), e0 = st.chk.errors();
  const double lq = ber > 0 && ber < 1 ? std::log1p(-ber) : -1.0;
  auto gap = [&]() -> std::uint64_t {
    if (ber <= 0) return ~std::uint64_t{0};
    const double g = std::floor(std::log(1.0 - lane.rng.uniform()) / lq);
    return g > 1e18 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(g);
  };
  std::uint64_t next_err = gap();
  for (std::uint64_t done = 0; done < sample;) {
    const unsigned k = static_cast<unsigned>(std::min<std::uint64_t>(64, sample - done));
    std::uint64_t w = st.gen.next_bits(k);
    while (next_err < k) {
      w ^= std::uint64_t{1} << (k - 1 - next_err);
      const std::uint64_t g = gap();
      next_err = g == ~std::uint64_t{0} ? g : next_err + 1 + g;
    }
    if (next_err != ~std::uint64_t{0}) next_err -= k;
    st.chk.feed_bits(w, k);
    done += k;
  }
  std::uint64_t bits = st.chk.bits() - b0, errors = st.chk.errors() - e0;
  if (st.chk.locked() && total > sample) {
    const std::uint64_t extra = total - sample;
    bits += extra;
    errors += lane.rng.poisson(ber * static_cast<double>(extra));
  }
  lane.prbs_bits += bits;
  lane.prbs_errors += errors;
  lane.prbs_lock = st.chk.locked();
}

std::uint32_t Card::lane_status_locked(unsigned p, unsigned l, std::uint64_t now, const LinkView& v) {
  const auto& pm = ports_[p];
  const bool rx_on = (pm.state == LinkState::kDataPathInit && pm.dp_activated) || training_like(pm.state);
  if (!rx_on) return 0;
  const bool sig = lane_signal(p, l, now, v);
  const bool cdr = sig && lane_ber(p, l, now, v) < optics::kCdrLockMaxBer && pm.inject_train_timeouts == 0;
  return ln::kLaneStatusSignal.make(sig ? 1 : 0) | ln::kLaneStatusCdrLock.make(cdr ? 1 : 0) |
         ln::kLaneStatusPrbsLock.make(pm.lanes[l].prbs_lock ? 1 : 0);
}

std::uint32_t Card::port_status_locked(unsigned p) {
  const std::uint64_t now = sys_.sched.now_ns();
  const auto& pm = ports_[p];
  if (pm.state == LinkState::kDisabled || pm.state == LinkState::kModuleWait)
    return port_status_view(p, now, LinkView{});
  return port_status_view(p, now, link_view(p, now));
}

std::uint32_t Card::port_status_view(unsigned p, std::uint64_t now, const LinkView& v) {
  const auto& pm = ports_[p];
  const bool up = pm.state == LinkState::kUp;
  const bool has_dp = pm.state != LinkState::kDisabled && pm.state != LinkState::kModuleWait;
  std::uint32_t lanes_up = 0;
  if (has_dp) {
    for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
      if (ln::kLaneStatusCdrLock.get(lane_status_locked(p, l, now, v)) != 0) lanes_up |= 1u << l;
    }
  }
  return pr::kStatusState.make(static_cast<std::uint32_t>(pm.state)) | pr::kStatusFecLock.make(up ? 1 : 0) |
         pr::kStatusModulePresent.make(pm.cabled ? 1 : 0) | pr::kStatusLanesUp.make(lanes_up) |
         pr::kStatusLaneCount.make(has_dp ? static_cast<std::uint32_t>(std::popcount(pm.lanes_in_use)) : 0) |
         pr::kStatusLinkUp.make(up ? 1 : 0);
}

std::uint64_t Card::lane_read(unsigned p, unsigned l, std::uint32_t reg) {
  auto& pm = ports_[p];
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(p, now);  // lazy: counters and PRBS lock catch up with emulated time
  const auto& lane = pm.lanes[l];
  if (reg >= ln::kFecBin0 && reg < ln::kFecBin0 + regs::kFecBins * 8) return lane.fec.bins[(reg - ln::kFecBin0) / 8];
  switch (reg) {
    case ln::kCodewords: return lane.fec.codewords;
    case ln::kCorrected: return lane.fec.corrected;
    case ln::kUncorrectable: return lane.fec.uncorrectable;
    case ln::kSymbolErrors: return lane.fec.symbol_errors;
    case ln::kPrbsBits: return lane.prbs_bits;
    case ln::kPrbsErrors: return lane.prbs_errors;
    default: break;
  }
  const LinkView v = link_view(p, now);
  const double own_temp = optics::module_temperature_c(pm.module_seed, pm.pub_power_on_ns.load(), now);
  return lane_reg_value(p, l, reg, now, v, own_temp);
}

std::uint32_t Card::lane_reg_value(unsigned p, unsigned l, std::uint32_t reg, std::uint64_t now, const LinkView& v,
                                   double own_temp_c) {
  auto& pm = ports_[p];
  auto& lane = pm.lanes[l];
  switch (reg) {
    case ln::kTxEq: return (lane.trained ? lane.optimum : optics::kTxEqPreset).encode();
    case ln::kSnr: {
      if (!lane_signal(p, l, now, v)) return 0;
      const double ber = lane_ber(p, l, now, v);
      double snr = lane.snr_cache;
      if (ber > lane.ber_cache * 1.0001) {
        // A BER ramp dominates: report the SNR that gives this BER (bisection).
        double lo = -10, hi = lane.snr_cache;
        for (int i = 0; i < 30; ++i) {
          const double mid = (lo + hi) / 2;
          (optics::ber_from_snr_db(mid) > ber ? lo : hi) = mid;
        }
        snr = lo;
      }
      return static_cast<std::uint32_t>(static_cast<std::int32_t>(std::lround(snr * 256.0)));
    }
    case ln::kLaneStatus: return lane_status_locked(p, l, now, v);
    case ln::kRxPower:
      if (!lane_signal(p, l, now, v)) return 0;
      (void)lane_ber(p, l, now, v);  // refreshes rx_mw_cache
      return clamp_u16(lane.rx_mw_cache * 1e4);
    case ln::kTxPower:
    case ln::kTxBias: {
      const bool tx = ((pm.pub.load() >> kPubTxShift) >> l) & 1u;
      if (!tx) return 0;
      if (reg == ln::kTxBias) return clamp_u16(optics::tx_bias_ma(own_temp_c, lane.bias_offset_ma) * 1e3);
      return clamp_u16(optics::dbm_to_mw(optics::tx_power_dbm(own_temp_c, lane.tx_offset_db)) * 1e4);
    }
    default: return 0;
  }
}

void Card::refresh_cmis(unsigned p, std::uint64_t now) {
  auto& pm = ports_[p];
  auto& lo = pm.cmis[0];
  auto& p11 = pm.cmis[static_cast<unsigned>(CmisPage::k11)];
  if (module_state_of(pm) == kModPwrUp && now >= pm.module_ready_ns) set_module_state(pm, kModReady);
  const double t = optics::module_temperature_c(pm.module_seed, pm.pub_power_on_ns.load(), now);
  const auto tq = static_cast<std::int16_t>(std::lround(std::clamp(t, -127.0, 127.0) * 256.0));
  lo[kCmisTemp] = static_cast<std::uint8_t>(static_cast<std::uint16_t>(tq) >> 8);
  lo[kCmisTemp + 1] = static_cast<std::uint8_t>(static_cast<std::uint16_t>(tq) & 0xff);
  const std::uint16_t vcc = clamp_u16(optics::module_vcc_v(pm.module_seed, now) * 1e4);
  lo[kCmisVcc] = static_cast<std::uint8_t>(vcc >> 8);
  lo[kCmisVcc + 1] = static_cast<std::uint8_t>(vcc & 0xff);
  const LinkView v = link_view(p, now);
  const std::uint8_t tx = static_cast<std::uint8_t>(pm.pub.load() >> kPubTxShift);
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    std::uint8_t dps = kDpDeactivated;
    if ((pm.dp_lanes >> l) & 1u) dps = now >= pm.dp_ready_ns ? kDpActivated : kDpInit;
    auto& b = p11[kP11DpState - 128 + l / 2];
    b = static_cast<std::uint8_t>(l % 2 == 0 ? ((b & 0xf0) | dps) : ((b & 0x0f) | (dps << 4)));
    const bool on = ((tx >> l) & 1u) != 0;
    const auto& lane = pm.lanes[l];
    put_be16(p11, kP11TxPower + 2 * l,
             on ? clamp_u16(optics::dbm_to_mw(optics::tx_power_dbm(t, lane.tx_offset_db)) * 1e4) : 0);
    put_be16(p11, kP11TxBias + 2 * l,
             on ? clamp_u16(optics::tx_bias_ma(t, lane.bias_offset_ma) * 500.0) : 0);  // 2 µA LSB
    const bool sig = lane_signal(p, l, now, v);
    if (sig) (void)lane_ber(p, l, now, v);  // refreshes rx_mw_cache
    put_be16(p11, kP11RxPower + 2 * l, sig ? clamp_u16(lane.rx_mw_cache * 1e4) : 0);
    if (!sig && ((pm.dp_lanes >> l) & 1u) && now >= pm.dp_ready_ns) {
      p11[kP11RxLos - 128] |= static_cast<std::uint8_t>(1u << l);
      p11[kP11RxLol - 128] |= static_cast<std::uint8_t>(1u << l);
    }
  }
}

fw::mbox::Status Card::xcvr_access(unsigned port, unsigned bank, unsigned page, unsigned off, unsigned len, bool write,
                                   const std::byte* in, std::vector<std::byte>& out) {
  namespace mb = fw::mbox;
  std::lock_guard lock(port_mu_);
  auto& pm = ports_[port];
  if (!pm.cabled) return mb::Status::kNoModule;
  int slot = -1;
  switch (page) {
    case 0x00: slot = 1; break;
    case 0x01: slot = 2; break;
    case 0x02: slot = 3; break;
    case 0x10: slot = 4; break;
    case 0x11: slot = 5; break;
    default: break;
  }
  if (off + len > 128 && (slot < 0 || bank != 0)) return mb::Status::kPageNotSupported;
  auto byte = [&](unsigned a) -> std::uint8_t& {
    return a < 128 ? pm.cmis[0][a] : pm.cmis[static_cast<unsigned>(slot)][a - 128];
  };
  const std::uint64_t now = sys_.sched.now_ns();
  if (!write) {
    refresh_cmis(port, now);
    for (unsigned i = 0; i < len; ++i) out.push_back(static_cast<std::byte>(byte(off + i)));
    // Latched flags clear on read (mailbox.md §3.5): lower byte 8 and page 11h 134..152.
    for (unsigned i = 0; i < len; ++i) {
      const unsigned a = off + i;
      if (a == kCmisModuleFlags || (a >= 128 && page == 0x11 && a >= kP11FlagsFirst && a <= kP11FlagsLast)) byte(a) = 0;
    }
    return mb::Status::kOk;
  }
  for (unsigned i = 0; i < len; ++i) {
    const unsigned a = off + i;
    if (a == 126 || a == 127) return mb::Status::kBadArgument;
    const bool writable = (a >= 26 && a < 126) || (a >= 128 && page == 0x10);
    if (!writable) return mb::Status::kReadOnly;
  }
  const std::uint8_t old26 = pm.cmis[0][kCmisGlobalCtrl];
  for (unsigned i = 0; i < len; ++i) byte(off + i) = static_cast<std::uint8_t>(in[i]);
  pm.cmis[0][kCmisGlobalCtrl] &= static_cast<std::uint8_t>(~0x08);  // SoftwareReset self-clears
  const std::uint8_t new26 = pm.cmis[0][kCmisGlobalCtrl];
  if ((old26 ^ new26) & kLowPwrRequestSw) {
    log_event(fmt::format("port={} module LowPwrRequestSW={}", port, (new26 & kLowPwrRequestSw) ? 1 : 0));
    module_power(port, (new26 & kLowPwrRequestSw) != 0, now);
  }
  return mb::Status::kOk;
}

void Card::module_power(unsigned p, bool low_power, std::uint64_t now) {
  auto& pm = ports_[p];
  refresh_cmis(p, now);
  const std::uint8_t ms = module_state_of(pm);
  if (low_power) {
    if (ms == kModLowPwr) return;
    set_module_state(pm, kModLowPwr);
    pm.dp_lanes = 0;
    pm.dp_activated = false;
    pm.module_ready_ns = 0;
    // The port loses its data path: back to ModuleWait (the firmware leaves the host's
    // low-power request alone, so the port waits there, and faults after t_module).
    if (pm.state != LinkState::kDisabled && pm.state != LinkState::kModuleWait && pm.state != LinkState::kFault) {
      pm.train_start_ns = now;
      port_enter(p, LinkState::kModuleWait, kTModuleNs);
    }
    return;
  }
  if (ms == kModLowPwr) {
    set_module_state(pm, kModPwrUp);
    pm.module_ready_ns = now + kModulePwrUpNs;
    if (pm.state == LinkState::kModuleWait) {
      const std::uint64_t epoch = pm.epoch;
      sys_.sched.schedule_in(kModulePwrUpNs + kFirmwarePollNs,
                             [this, p, epoch](std::uint64_t) { port_step(p, epoch); });
    }
  }
}

std::uint64_t Card::port_read(unsigned p, std::uint32_t reg, unsigned /*width*/) {
  std::lock_guard lock(port_mu_);
  if (reg >= regs::kLaneBase) {
    const unsigned l = (reg - regs::kLaneBase) / regs::kLaneStride;
    if (l >= regs::kLanesPerPort) return 0;
    return lane_read(p, l, (reg - regs::kLaneBase) % regs::kLaneStride);
  }
  return port_read_locked(p, reg);
}

std::uint64_t Card::port_read_locked(unsigned p, std::uint32_t reg) {
  const auto& pm = ports_[p];
  const std::uint64_t now = sys_.sched.now_ns();
  switch (reg) {
    case pr::kCtrl: return pm.ctrl;
    case pr::kStatus: return port_status_locked(p);
    case pr::kLaneMap: {
      if (pm.state == LinkState::kDisabled || pm.state == LinkState::kModuleWait) return 0xffffffffu;
      std::uint32_t map = 0xffffffffu;
      unsigned n = 0;
      for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
        if ((pm.lanes_in_use >> l) & 1u) {
          map = (map & ~(0xfu << (4 * n))) | (l << (4 * n));
          ++n;
        }
      }
      return map;
    }
    case pr::kSpeed:
      return pm.state == LinkState::kDisabled || pm.state == LinkState::kModuleWait
                 ? 0
                 : (pr::kSpeedMbdPerLane.make(53125) | pr::kSpeedModulation.make(1));
    case pr::kNeighbor: return pm.neighbor;
    case pr::kTrainCount: return pm.train_count;
    case pr::kFlapCount: return pm.flap_count;
    case pr::kTrainTimeout: return pm.train_timeout_ms;
    case pr::kEventStatus: return pm.events;
    case pr::kLaneEnable: return pm.lane_enable;
    case pr::kTrainResult: return pm.train_result;
    case pr::kUpCount: return pm.up_count;
    case pr::kCoeffUpdates: return pm.coeff_updates;
    case pr::kPrbsLanes: return pm.prbs_lanes;
    case pr::kModuleTemp:
      if (!pm.cabled) return 0;
      return static_cast<std::uint32_t>(static_cast<std::int32_t>(
          std::lround(optics::module_temperature_c(pm.module_seed, pm.pub_power_on_ns.load(), now) * 256.0)));
    case pr::kModuleVcc: return pm.cabled ? clamp_u16(optics::module_vcc_v(pm.module_seed, now) * 1e4) : 0;
    default: return 0;
  }
}

void Card::port_write(unsigned p, std::uint32_t reg, unsigned /*width*/, std::uint64_t value) {
  const auto v32 = static_cast<std::uint32_t>(value);
  if (reg == pr::kCtrl) {
    port_set_ctrl(p, v32);
    return;
  }
  std::lock_guard lock(port_mu_);
  auto& pm = ports_[p];
  if (reg >= regs::kLaneBase) {
    const unsigned l = (reg - regs::kLaneBase) / regs::kLaneStride;
    if (l < regs::kLanesPerPort && (reg - regs::kLaneBase) % regs::kLaneStride == ln::kClear && (v32 & 1u)) {
      sync_lanes(p, sys_.sched.now_ns());
      auto& lane = pm.lanes[l];
      lane.fec = {};
      lane.prbs_bits = lane.prbs_errors = 0;
      if (lane.prbs) lane.prbs->chk.clear_counters();
    }
    return;
  }
  switch (reg) {
    case pr::kTrainTimeout: pm.train_timeout_ms = std::clamp<std::uint32_t>(v32, 10, 60'000); break;
    case pr::kEventStatus: pm.events &= ~v32; break;
    case pr::kLaneEnable:
      pm.lane_enable = v32 & pr::kLaneEnableMask.mask();
      publish(p);
      break;
    case pr::kPrbsLanes:
      sync_lanes(p, sys_.sched.now_ns());
      pm.prbs_lanes = v32 & 0xffu;
      publish(p);
      break;
    default: break;
  }
}

void Card::latch_port_events(unsigned p, std::uint32_t bits) {
  auto& pm = ports_[p];
  const std::uint32_t rising = bits & ~pm.events;
  pm.events |= bits;
  if (rising != 0) raise_msix(pci::kMsixVectorGlobal);
}

void Card::port_enter(unsigned p, LinkState s, std::uint64_t delay_ns) {
  auto& pm = ports_[p];
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(p, now);
  const bool was_up = pm.state == LinkState::kUp;
  pm.state = s;
  if (s == LinkState::kDisabled || s == LinkState::kModuleWait || s == LinkState::kTraining) pm.neighbor = 0;
  if (s != LinkState::kFecLock && s != LinkState::kUp) pm.rx_ready = false;
  if (s == LinkState::kUp) pm.rx_ready = true;
  if (was_up && s != LinkState::kUp) {
    pm.flap_count = sat_inc(pm.flap_count);
    latch_port_events(p, pr::kEventLinkDown.mask());
    // The far end loses lock too: after the link-loss debounce it leaves Up for Training
    // (a flap, spec §7.2). Scheduled on the far card, which takes its own lock.
    if (const auto ref = sys_.resolve_peer(index_, p); ref && pr::kCtrlLoopback.get(pm.ctrl) == 0) {
      if (ref->card < sys_.cards.size()) sys_.cards[ref->card]->schedule_link_check(ref->port, kLinkLossDebounceNs);
    }
  }
  for (auto& lane : pm.lanes) lane.ber_valid = false;
  publish(p);
  const std::uint64_t epoch = ++pm.epoch;
  if (delay_ns != 0) {
    sys_.sched.schedule_in(delay_ns, [this, p, epoch](std::uint64_t) { port_step(p, epoch); });
  }
}

void Card::schedule_link_check(unsigned p, std::uint64_t delay_ns) {
  sys_.sched.schedule_in(delay_ns, [this, p](std::uint64_t) { link_check(p); });
}

void Card::light_path_changed(unsigned p) {
  if (p < ports_.size()) schedule_link_check(p, 0);
}

void Card::link_check(unsigned p) {
  std::lock_guard lock(port_mu_);
  auto& pm = ports_[p];
  if (pm.state != LinkState::kUp || removed()) return;
  const std::uint64_t now = sys_.sched.now_ns();
  const LinkView v = link_view(p, now);
  const auto far_state = static_cast<LinkState>(v.pub & 0xf);
  // Light from a transmitter other than the trained neighbour (a switch reconfiguration)
  // breaks the alignment markers at once: a loss like any other.
  const bool same_far_end = pr::kNeighborValid.get(pm.neighbor) != 0 &&
                            pr::kNeighborFabricId.get(pm.neighbor) == v.peer_fabric_id &&
                            pr::kNeighborPort.get(pm.neighbor) == v.peer_port;
  bool lost = !v.has_peer || !same_far_end || (far_state != LinkState::kUp && far_state != LinkState::kFecLock);
  for (unsigned l = 0; l < regs::kLanesPerPort && !lost; ++l) {
    if (((pm.lanes_in_use >> l) & 1u) == 0) continue;
    if (!lane_signal(p, l, now, v) || lane_ber(p, l, now, v) > optics::kFecLockMaxBer) lost = true;
  }
  if (lost) leave_up_for_training(p, now, "link lost");
}

void Card::leave_up_for_training(unsigned p, std::uint64_t now, const char* why) {
  log_event(fmt::format("port={} {}", p, why));
  start_training(p, now, true);
}

void Card::start_training(unsigned p, std::uint64_t now, bool fresh) {
  auto& pm = ports_[p];
  if (fresh) pm.attempts = 0;
  ++pm.attempts;
  pm.train_count = sat_inc(pm.train_count);
  pm.train_start_ns = now;
  pm.lanes_in_use = static_cast<std::uint8_t>(pm.dp_lanes & pm.lane_enable);
  if (pm.lanes_in_use == 0) pm.lanes_in_use = pm.dp_lanes;
  for (auto& lane : pm.lanes) lane.trained = false;
  // TRAIN_RESULT keeps the outcome of the last finished attempt while this one runs.
  port_enter(p, LinkState::kTraining, kTrainNs);
}

void Card::train_fail(unsigned p, std::uint8_t code, std::uint8_t lanes, std::uint64_t now) {
  auto& pm = ports_[p];
  pm.train_result = pr::kTrainResultCode.make(code) | pr::kTrainResultState.make(static_cast<std::uint32_t>(pm.state)) |
                    pr::kTrainResultLanes.make(lanes) | pr::kTrainResultAttempt.make(std::min(pm.attempts, 255u));
  latch_port_events(p, pr::kEventTrainFail.mask());
  log_event(fmt::format("port={} training attempt {} failed code={} lanes=0x{:02x}", p, pm.attempts, code, lanes));
  if (code == static_cast<std::uint8_t>(pr::TrainResult::kModuleNotReady) ||
      code == static_cast<std::uint8_t>(pr::TrainResult::kDataPathTimeout) || pm.attempts >= kTrainAttempts) {
    if (pm.attempts >= kTrainAttempts)
      log_event(fmt::format("port={} training failed after {} attempts", p, pm.attempts));
    port_enter(p, LinkState::kFault, 0);
    return;
  }
  start_training(p, now, false);
}

void Card::enter_module_wait(unsigned p, std::uint64_t now, bool release_low_power) {
  auto& pm = ports_[p];
  pm.attempts = 0;
  pm.train_start_ns = now;
  pm.dp_lanes = 0;
  pm.dp_activated = false;
  pm.lanes_in_use = 0;
  auto& p10 = pm.cmis[static_cast<unsigned>(CmisPage::k10)];
  p10[kP10DpDeinit - 128] = 0xff;
  std::uint64_t delay = kFirmwarePollNs;
  if (pm.cabled) {
    refresh_cmis(p, now);
    if (release_low_power) pm.cmis[0][kCmisGlobalCtrl] &= static_cast<std::uint8_t>(~kLowPwrRequestSw);
    if ((pm.cmis[0][kCmisGlobalCtrl] & kLowPwrRequestSw) == 0 && module_state_of(pm) == kModLowPwr) {
      set_module_state(pm, kModPwrUp);
      pm.module_ready_ns = now + kModulePwrUpNs;
    }
    if (module_state_of(pm) == kModPwrUp) delay = pm.module_ready_ns - now + kFirmwarePollNs;
    if (module_state_of(pm) == kModLowPwr) delay = kTModuleNs;
  }
  port_enter(p, LinkState::kModuleWait, pm.cabled ? delay : 0);
}

void Card::enter_datapath_init(unsigned p, std::uint64_t now) {
  auto& pm = ports_[p];
  const std::uint8_t lanes = static_cast<std::uint8_t>(kAppLanes & pm.lane_enable);
  pm.train_start_ns = now;
  pm.lanes_in_use = lanes;
  for (auto& lane : pm.lanes) lane.trained = false;
  // Firmware: stage AppSel 1 on the lanes in use (DataPathID = first lane), deinitialise the
  // others, apply (CMIS ApplyDPInit); the module copies the staged set to the active set.
  auto& p10 = pm.cmis[static_cast<unsigned>(CmisPage::k10)];
  auto& p11 = pm.cmis[static_cast<unsigned>(CmisPage::k11)];
  const unsigned first = lanes == 0 ? 0 : static_cast<unsigned>(std::countr_zero(lanes));
  p10[kP10DpDeinit - 128] = static_cast<std::uint8_t>(~lanes);
  p10[kP10ApplyDpInit - 128] = lanes;
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    const std::uint8_t cfg = ((lanes >> l) & 1u) ? static_cast<std::uint8_t>((1u << 4) | (first << 1)) : 0;
    p10[kP10DpConfig - 128 + l] = cfg;
    p11[kP11ActiveSet - 128 + l] = cfg;
    auto& cs = p11[kP11ConfigStatus - 128 + l / 2];
    const std::uint8_t st = ((lanes >> l) & 1u) ? 1 : 0;
    cs = static_cast<std::uint8_t>(l % 2 == 0 ? ((cs & 0xf0) | st) : ((cs & 0x0f) | (st << 4)));
  }
  p10[kP10ApplyDpInit - 128] = 0;  // trigger self-clears
  pm.dp_lanes = lanes;
  pm.dp_ready_ns = now + kDpInitNs;
  pm.dp_activated = false;
  if (lanes == 0) {
    port_enter(p, LinkState::kDataPathInit, 0);
    train_fail(p, static_cast<std::uint8_t>(pr::TrainResult::kDataPathTimeout), 0, now);
    return;
  }
  port_enter(p, LinkState::kDataPathInit, kDpInitNs + kFirmwarePollNs);
}

void Card::port_set_ctrl(unsigned p, std::uint32_t ctrl) {
  std::lock_guard lock(port_mu_);
  auto& pm = ports_[p];
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(p, now);
  const std::uint32_t old = pm.ctrl;
  const std::uint32_t prbs_bits = pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask();
  pm.ctrl = ctrl & (pr::kCtrlEnable.mask() | pr::kCtrlLoopback.mask() | prbs_bits | pr::kCtrlPrbsSide.mask() |
                    pr::kCtrlPrbsPattern.mask());
  if (pr::kCtrlPrbsPattern.get(old) != pr::kCtrlPrbsPattern.get(pm.ctrl) || ((old ^ pm.ctrl) & prbs_bits) != 0) {
    for (auto& lane : pm.lanes) {
      if (lane.prbs) lane.prbs->chk_pattern = 0xff;  // new pattern: the checker hunts again
      lane.prbs_lock = false;
    }
  }
  const bool enable = pr::kCtrlEnable.get(pm.ctrl) != 0;
  const bool train = pr::kCtrlTrain.get(ctrl) != 0;
  const bool prbs_now = (pm.ctrl & prbs_bits) != 0;
  const bool prbs_before = (old & prbs_bits) != 0;
  auto aborted = [&] {
    if (pm.state == LinkState::kTraining || pm.state == LinkState::kFecLock) {
      pm.train_result = pr::kTrainResultCode.make(static_cast<std::uint32_t>(pr::TrainResult::kAborted)) |
                        pr::kTrainResultState.make(static_cast<std::uint32_t>(pm.state)) |
                        pr::kTrainResultAttempt.make(std::min(pm.attempts, 255u));
    }
  };
  if (!enable) {
    if (pm.state != LinkState::kDisabled) {
      aborted();
      log_event(fmt::format("port={} disabled", p));
      pm.dp_lanes = 0;
      pm.dp_activated = false;
      pm.cmis[static_cast<unsigned>(CmisPage::k10)][kP10DpDeinit - 128] = 0xff;
      port_enter(p, LinkState::kDisabled, 0);
    }
    publish(p);
    return;
  }
  if (!pr::kCtrlEnable.get(old) || (train && pm.state == LinkState::kFault)) {
    log_event(fmt::format("port={} {}", p, train ? "retrain" : "enable"));
    enter_module_wait(p, now, true);
  } else if (train && pm.state != LinkState::kDisabled && pm.state != LinkState::kModuleWait) {
    log_event(fmt::format("port={} retrain", p));
    aborted();
    if (pm.state == LinkState::kDataPathInit && !pm.dp_activated) {
      // Still activating the data path: training starts when it is done.
    } else if (prbs_now) {
      port_enter(p, LinkState::kDataPathInit, 0);
    } else {
      start_training(p, now, true);
    }
  } else if (prbs_now && !prbs_before && training_like(pm.state)) {
    log_event(fmt::format("port={} prbs start pattern={}", p, pr::kCtrlPrbsPattern.get(pm.ctrl)));
    aborted();
    port_enter(p, LinkState::kDataPathInit, 0);  // hold with the data path active
  } else if (!prbs_now && prbs_before && pm.state == LinkState::kDataPathInit && pm.dp_activated) {
    log_event(fmt::format("port={} prbs stop", p));
    start_training(p, now, true);
  }
  publish(p);
}

void Card::port_step(unsigned p, std::uint64_t epoch) {
  std::lock_guard lock(port_mu_);
  auto& pm = ports_[p];
  if (pm.epoch != epoch || removed()) return;
  const std::uint64_t now = sys_.sched.now_ns();
  switch (pm.state) {
    case LinkState::kModuleWait: {
      if (!pm.cabled) return;  // no module: wait without timeout (insertion restarts the wait)
      refresh_cmis(p, now);
      const std::uint8_t ms = module_state_of(pm);
      if (ms == kModReady) {
        enter_datapath_init(p, now);
      } else if (now - pm.train_start_ns >= kTModuleNs) {
        train_fail(p, static_cast<std::uint8_t>(pr::TrainResult::kModuleNotReady), 0, now);
      } else {
        const std::uint64_t deadline = pm.train_start_ns + kTModuleNs;
        const std::uint64_t at = ms == kModPwrUp ? std::min(deadline, pm.module_ready_ns + kFirmwarePollNs) : deadline;
        const std::uint64_t ep = pm.epoch;
        sys_.sched.schedule_at(at, [this, p, ep](std::uint64_t) { port_step(p, ep); });
      }
      break;
    }
    case LinkState::kDataPathInit: {
      if (pm.dp_activated) break;  // holding for PRBS
      if (now >= pm.dp_ready_ns) {
        pm.dp_activated = true;
        const bool prbs = (pm.ctrl & (pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask())) != 0;
        if (prbs) {
          for (auto& lane : pm.lanes) lane.synced_ns = now;
          publish(p);
          log_event(fmt::format("port={} data path activated, holding for prbs", p));
        } else {
          start_training(p, now, true);
        }
      } else if (now - pm.train_start_ns >= kTDataPathNs) {
        train_fail(p, static_cast<std::uint8_t>(pr::TrainResult::kDataPathTimeout), 0, now);
      } else {
        const std::uint64_t ep = pm.epoch;
        sys_.sched.schedule_at(pm.dp_ready_ns, [this, p, ep](std::uint64_t) { port_step(p, ep); });
      }
      break;
    }
    case LinkState::kTraining: {
      const LinkView v = link_view(p, now);
      const std::uint8_t need = pm.lanes_in_use;
      std::uint8_t locked = 0;
      for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
        if (((need >> l) & 1u) && lane_signal(p, l, now, v) && lane_ber(p, l, now, v) < optics::kCdrLockMaxBer)
          locked |= static_cast<std::uint8_t>(1u << l);
      }
      if (pm.inject_train_timeouts > 0) locked = 0;  // training_timeout fault: CDR never locks
      const std::uint8_t far_enable =
          v.has_peer ? static_cast<std::uint8_t>(v.pub >> kPubEnableShift) : static_cast<std::uint8_t>(0xff);
      const std::uint8_t required = static_cast<std::uint8_t>(need & far_enable);
      const bool rx_ready = required != 0 && (locked & required) == required;
      if (rx_ready != pm.rx_ready) {
        pm.rx_ready = rx_ready;
        publish(p);
      }
      const auto far_state = static_cast<LinkState>(v.pub & 0xf);
      const bool far_ready =
          v.has_peer && training_like(far_state) && (v.loopback ? rx_ready : (v.pub & kPubRxReady) != 0);
      if (rx_ready && far_ready) {
        // Tx equalisation: the receiver of each lane asks the far transmitter for one tap
        // step per request until its optimum; then the neighbour exchange.
        unsigned requests = 0;
        for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
          if ((required >> l) & 1u) {
            requests += optics::tx_eq_steps(optics::kTxEqPreset, pm.lanes[l].optimum);
            pm.lanes[l].trained = true;
            pm.lanes[l].ber_valid = false;
          }
        }
        pm.coeff_updates = requests;
        pm.lanes_in_use = required;
        port_enter(p, LinkState::kFecLock, kFecLockNs);
        pm.train_start_ns = now;
        pm.neighbor = pr::kNeighborFabricId.make(v.peer_fabric_id) | pr::kNeighborPort.make(v.peer_port) |
                      pr::kNeighborValid.make(1);
      } else if (now - pm.train_start_ns >= std::uint64_t{pm.train_timeout_ms} * kMsNs) {
        const std::uint8_t failed = static_cast<std::uint8_t>((v.has_peer ? required : need) & ~locked);
        if (pm.inject_train_timeouts > 0) --pm.inject_train_timeouts;
        train_fail(p,
                   static_cast<std::uint8_t>(failed != 0 ? pr::TrainResult::kCdrLockTimeout
                                                         : pr::TrainResult::kNeighborTimeout),
                   failed, now);
      } else {
        const std::uint64_t ep = pm.epoch;
        const std::uint64_t deadline = pm.train_start_ns + std::uint64_t{pm.train_timeout_ms} * kMsNs;
        sys_.sched.schedule_at(std::min(now + kTrainNs, deadline), [this, p, ep](std::uint64_t) { port_step(p, ep); });
      }
      break;
    }
    case LinkState::kFecLock: {
      const LinkView v = link_view(p, now);
      std::uint8_t bad = 0, nolock = 0;
      for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
        if (((pm.lanes_in_use >> l) & 1u) == 0) continue;
        const bool sig = lane_signal(p, l, now, v);
        const double ber = lane_ber(p, l, now, v);
        if (!sig || ber > optics::kFecLockMaxBer) bad |= static_cast<std::uint8_t>(1u << l);
        if (!sig || ber >= optics::kCdrLockMaxBer) nolock |= static_cast<std::uint8_t>(1u << l);
      }
      if (bad == 0) {
        const std::uint64_t nb = pm.neighbor;
        port_enter(p, LinkState::kUp, 0);
        pm.neighbor = nb;
        pm.up_count = sat_inc(pm.up_count);
        pm.train_result = pr::kTrainResultCode.make(static_cast<std::uint32_t>(pr::TrainResult::kOk)) |
                          pr::kTrainResultState.make(static_cast<std::uint32_t>(LinkState::kUp)) |
                          pr::kTrainResultAttempt.make(std::min(pm.attempts, 255u));
        latch_port_events(p, pr::kEventLinkUp.mask());
        log_event(fmt::format("port={} up neighbor={}:{} lanes=0x{:02x}", p, pr::kNeighborFabricId.get(nb),
                              pr::kNeighborPort.get(nb), pm.lanes_in_use));
      } else if (now - pm.train_start_ns >= kTFecNs) {
        train_fail(p, static_cast<std::uint8_t>(pr::TrainResult::kFecLockTimeout), nolock, now);
      } else {
        const std::uint64_t ep = pm.epoch;
        sys_.sched.schedule_in(kFecPollNs, [this, p, ep](std::uint64_t) { port_step(p, ep); });
      }
      break;
    }
    default: break;
  }
}

Card::PortTelemetry Card::port_telemetry(unsigned p) {
  std::lock_guard lock(port_mu_);
  auto& pm = ports_[p];
  PortTelemetry t;
  if (!pm.cabled) return t;
  const std::uint64_t now = sys_.sched.now_ns();
  refresh_cmis(p, now);
  t.mod_temp_q8 = static_cast<std::int16_t>((pm.cmis[0][kCmisTemp] << 8) | pm.cmis[0][kCmisTemp + 1]);
  t.mod_vcc = static_cast<std::uint16_t>((pm.cmis[0][kCmisVcc] << 8) | pm.cmis[0][kCmisVcc + 1]);
  // Worst lane's pre-FEC BER over about the last second, from the counters (registers.md
  // §7.3 estimator): each lane keeps two counter snapshots about a second apart.
  sync_lanes(p, now);
  double worst = 0;
  bool measured = false;
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    auto& lane = pm.lanes[l];
    const LaneModel::Snap cur{now, lane.fec.codewords, lane.fec.symbol_errors, lane.fec.uncorrectable};
    if (cur.cw < lane.tel_new.cw) lane.tel_old = lane.tel_new = cur;  // cleared since
    const LaneModel::Snap base = now - lane.tel_new.t >= 1'000'000'000 ? lane.tel_new : lane.tel_old;
    if (now - lane.tel_new.t >= 1'000'000'000) {
      lane.tel_old = lane.tel_new;
      lane.tel_new = cur;
    }
    if (((pm.lanes_in_use >> l) & 1u) == 0 || cur.cw <= base.cw) continue;
    if (pm.state != LinkState::kUp && pm.state != LinkState::kFecLock) continue;
    measured = true;
    const double ber = (static_cast<double>(cur.se - base.se) + 16.0 * static_cast<double>(cur.unc - base.unc)) /
                       (5440.0 * static_cast<double>(cur.cw - base.cw));
    worst = std::max(worst, ber);
  }
  if (measured) {
    t.max_ber = worst <= 0 ? 0xffffffffu : static_cast<std::uint32_t>(std::lround(-std::log10(worst) * 1000.0));
  }
  return t;
}

// ---- Port statistics block (registers.md §7.5, fw/stats.hpp) --------------------------------

void Card::fill_port_record(unsigned p, void* record) {
  auto& r = *static_cast<fw::stats::PortRecord*>(record);
  auto& pm = ports_[p];
  const std::uint64_t now = sys_.sched.now_ns();
  const bool has_dp = pm.state != LinkState::kDisabled && pm.state != LinkState::kModuleWait;
  const LinkView v = has_dp ? link_view(p, now) : LinkView{};
  sync_lanes(p, now, has_dp ? &v : nullptr);
  r.ctrl = pm.ctrl;
  r.status = port_status_view(p, now, v);
  r.lane_map = static_cast<std::uint32_t>(port_read_locked(p, pr::kLaneMap));
  r.speed = static_cast<std::uint32_t>(port_read_locked(p, pr::kSpeed));
  r.neighbor = pm.neighbor;
  r.train_count = pm.train_count;
  r.flap_count = pm.flap_count;
  r.train_timeout = pm.train_timeout_ms;
  r.event_status = pm.events;
  r.lane_enable = pm.lane_enable;
  r.train_result = pm.train_result;
  r.up_count = pm.up_count;
  r.coeff_updates = pm.coeff_updates;
  r.prbs_lanes = pm.prbs_lanes;
  const double temp = pm.cabled ? optics::module_temperature_c(pm.module_seed, pm.pub_power_on_ns.load(), now) : 0.0;
  r.module_temp = pm.cabled ? static_cast<std::uint32_t>(static_cast<std::int32_t>(std::lround(temp * 256.0))) : 0;
  r.module_vcc = static_cast<std::uint32_t>(port_read_locked(p, pr::kModuleVcc));
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    auto& o = r.lanes[l];
    const auto& lane = pm.lanes[l];
    o.codewords = lane.fec.codewords;
    o.corrected = lane.fec.corrected;
    o.uncorrectable = lane.fec.uncorrectable;
    o.symbol_errors = lane.fec.symbol_errors;
    o.prbs_bits = lane.prbs_bits;
    o.prbs_errors = lane.prbs_errors;
    for (unsigned b = 0; b < regs::kFecBins; ++b) o.fec_bins[b] = lane.fec.bins[b];
    o.tx_eq = lane_reg_value(p, l, ln::kTxEq, now, v, temp);
    if (!pm.cabled) continue;
    o.snr = lane_reg_value(p, l, ln::kSnr, now, v, temp);
    o.lane_status = lane_reg_value(p, l, ln::kLaneStatus, now, v, temp);
    o.rx_power = lane_reg_value(p, l, ln::kRxPower, now, v, temp);
    o.tx_power = lane_reg_value(p, l, ln::kTxPower, now, v, temp);
    o.tx_bias = lane_reg_value(p, l, ln::kTxBias, now, v, temp);
  }
}

void Card::stats_dma(std::uint32_t seq) {
  namespace st = fw::stats;
  std::lock_guard slock(stats_mu_);
  const auto np = static_cast<unsigned>(ports_.size());
  std::vector<std::byte> block(st::block_bytes(np));
  st::StatsHeader h{};
  h.magic = st::kMagic;
  h.version = st::kVersion;
  h.num_ports = np;
  h.lanes_per_port = regs::kLanesPerPort;
  h.fabric_id = fabric_id();
  {
    std::lock_guard lock(port_mu_);
    h.timestamp_ns = sys_.sched.now_ns();
    for (unsigned p = 0; p < np; ++p) {
      st::PortRecord r{};
      fill_port_record(p, &r);
      std::memcpy(block.data() + st::kHeaderBytes + p * st::kPortRecordBytes, &r, sizeof r);
    }
  }
  h.seq = 0;  // written last, below
  std::memcpy(block.data(), &h, sizeof h);
  const std::uint64_t iova = stats_addr_.load();
  // The stats engine is a card-internal DMA requester: faults report engine 4 (one past
  // the DMA engines), queue 0.
  constexpr unsigned kStatsRequester = regs::kNumQueues;
  if (!bus_master()) return;
  if (take_injected_iommu_fault()) {
    record_iommu_fault(iova, kStatsRequester, true, false);
    return;
  }
  auto guard = iommu_.guard();
  std::byte* seq_host = nullptr;
  for (std::uint64_t done = 0; done < block.size();) {
    std::byte* host = nullptr;
    std::uint64_t contig = 0, fault = 0;
    const auto r = iommu_.translate(iova + done, block.size() - done, true, &host, &contig, &fault);
    if (r != XlateResult::kOk) {
      guard.unlock();
      record_iommu_fault(fault, kStatsRequester, true, r == XlateResult::kPermission);
      return;
    }
    done += contig;
  }
  for (std::uint64_t done = 0; done < block.size();) {
    std::byte* host = nullptr;
    std::uint64_t contig = 0, fault = 0;
    (void)iommu_.translate(iova + done, block.size() - done, true, &host, &contig, &fault);
    const std::uint64_t seq_off = offsetof(st::StatsHeader, seq);
    if (done <= seq_off && seq_off < done + contig) seq_host = host + (seq_off - done);
    std::memcpy(host, block.data() + done, contig);
    done += contig;
  }
  // The release store orders every record byte above before `seq` (as the card's final
  // posted write would be ordered on PCIe).
  if (seq_host != nullptr && reinterpret_cast<std::uintptr_t>(seq_host) % 4 == 0) {
    std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(seq_host)).store(seq, std::memory_order_release);
  }
  stats_seq_.store(seq, std::memory_order_release);
}

// ---- Link faults (emulator.hpp FaultKind kBerRamp .. kTrainingTimeout) ----------------------

void Card::lane_dark(unsigned p, unsigned lane, std::uint64_t until) {
  std::lock_guard lock(port_mu_);
  auto& pm = ports_[p];
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(p, now);
  pm.lanes[lane].dark_until_ns = until;
  pm.lanes[lane].ber_valid = false;
  auto& p11 = pm.cmis[static_cast<unsigned>(CmisPage::k11)];
  p11[kP11RxLos - 128] |= static_cast<std::uint8_t>(1u << lane);
  p11[kP11RxLol - 128] |= static_cast<std::uint8_t>(1u << lane);
  if (pm.state == LinkState::kUp && ((pm.lanes_in_use >> lane) & 1u)) schedule_link_check(p, kLinkLossDebounceNs);
}

void Card::lane_ramp(unsigned p, std::optional<unsigned> lane, double to, std::uint64_t dur) {
  std::lock_guard lock(port_mu_);
  auto& pm = ports_[p];
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(p, now);
  const LinkView v = link_view(p, now);
  std::uint64_t first_cross = kForever;
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    if (lane && *lane != l) continue;
    auto& ln_ = pm.lanes[l];
    const double from = std::max(1e-20, std::min(lane_ber(p, l, now, v) == 0.5 ? 1e-12 : lane_ber(p, l, now, v), to));
    ln_.ramp = true;
    ln_.ramp_start_ns = now;
    ln_.ramp_dur_ns = dur;
    ln_.ramp_from = from;
    ln_.ramp_to = to;
    if (to > optics::kFecLockMaxBer) {
      const double f = dur == 0 ? 0.0 : std::log(optics::kFecLockMaxBer / from) / std::log(to / from);
      first_cross = std::min(first_cross, static_cast<std::uint64_t>(f * static_cast<double>(dur)));
    }
  }
  // A lane that crosses the FEC lock limit takes the link down after the debounce.
  if (first_cross != kForever) schedule_link_check(p, first_cross + kLinkLossDebounceNs + 1);
}

void Card::module_presence(unsigned p, bool present) {
  std::lock_guard lock(port_mu_);
  auto& pm = ports_[p];
  if (pm.cabled == present) return;
  const std::uint64_t now = sys_.sched.now_ns();
  sync_lanes(p, now);
  log_event(fmt::format("port={} module {}", p, present ? "inserted" : "removed"));
  latch_port_events(p, pr::kEventModuleChange.mask());
  if (!present) {
    pm.cabled = false;
    pm.dp_lanes = 0;
    pm.dp_activated = false;
    if (pm.state != LinkState::kDisabled) {
      pm.train_result = pr::kTrainResultCode.make(static_cast<std::uint32_t>(pr::TrainResult::kNoModule)) |
                        pr::kTrainResultState.make(static_cast<std::uint32_t>(pm.state)) |
                        pr::kTrainResultAttempt.make(std::min(pm.attempts, 255u));
      pm.lanes_in_use = 0;
      port_enter(p, LinkState::kModuleWait, 0);
    }
    publish(p);
    return;
  }
  pm.cabled = true;
  build_cmis(p);
  pm.pub_power_on_ns.store(now);
  if (pm.state == LinkState::kModuleWait) enter_module_wait(p, now, true);
  publish(p);
}

void Card::inject_link_fault(const Fault& f) {
  if (!f.port || *f.port >= ports_.size()) return;
  const unsigned p = *f.port;
  const std::uint64_t now = sys_.sched.now_ns();
  const auto peer = sys_.resolve_peer(index_, p);
  Card* far = peer && peer->card < sys_.cards.size() ? sys_.cards[peer->card].get() : nullptr;
  switch (f.kind) {
    case FaultKind::kBerRamp:
      lane_ramp(p, f.lane, f.value, f.duration_ns);
      if (far != nullptr) far->lane_ramp(peer->port, f.lane, f.value, f.duration_ns);
      break;
    case FaultKind::kLaneLoss: {
      const std::uint64_t until = f.duration_ns == 0 ? kForever : now + f.duration_ns;
      lane_dark(p, f.lane.value_or(0), until);
      if (far != nullptr) far->lane_dark(peer->port, f.lane.value_or(0), until);
      break;
    }
    case FaultKind::kFlapStorm: {
      const std::uint64_t every = f.duration_ns == 0 ? 50 * kMsNs : f.duration_ns;
      for (std::uint32_t i = 0; i < f.count; ++i) {
        sys_.sched.schedule_in(i * every, [this, p](std::uint64_t t) {
          std::lock_guard lock(port_mu_);
          if (ports_[p].state == LinkState::kUp && !removed()) leave_up_for_training(p, t, "link drop (flap_storm)");
        });
      }
      break;
    }
    case FaultKind::kModuleRemoval:
      module_presence(p, false);
      if (f.duration_ns != 0) {
        sys_.sched.schedule_in(f.duration_ns, [this, p](std::uint64_t) { module_presence(p, true); });
      }
      break;
    case FaultKind::kTrainingTimeout: {
      std::lock_guard lock(port_mu_);
      ports_[p].inject_train_timeouts += f.count;
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
      pm.lane_enable = 0xff;
      pm.lanes_in_use = 0;
      pm.train_result = 0;
      pm.up_count = 0;
      pm.coeff_updates = 0;
      pm.prbs_lanes = 0xff;
      pm.inject_train_timeouts = 0;
      pm.attempts = 0;
      // The firmware re-initialises the modules: back to low power, fresh CMIS memory.
      // Physical faults (dark lanes, BER ramps) belong to the fibre and persist.
      const auto power_on = pm.pub_power_on_ns.load();
      build_cmis(p);
      pm.pub_power_on_ns.store(power_on);
      const std::uint64_t now = sys_.sched.now_ns();
      for (auto& lane : pm.lanes) {
        lane.fec = {};
        lane.prbs_bits = lane.prbs_errors = 0;
        lane.prbs_lock = false;
        lane.prbs.reset();
        lane.trained = false;
        lane.synced_ns = now;
      }
      publish(p);
    }
  }
  stats_addr_.store(0);
  stats_ctrl_.store(0);
  stats_seq_.store(0);
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
    publish(p);  // transmitters go dark: the far ends lose light
  }
}

}  // namespace npo::emu
