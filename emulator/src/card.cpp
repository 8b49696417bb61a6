// SPDX-License-Identifier: Apache-2.0
// The card: composition of its parts (card.hpp), BAR0 decode and dispatch, global
// registers, IOMMU fault records, route table, BAR4 MSI-X, reset and removal.
#include "card.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "npo/hal/log.hpp"
#include "system.hpp"

namespace npo::emu {

namespace regs = fw::regs;
namespace pci = fw::pci;
namespace cfgsp = fw::pci::cfg;

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
      state_(sys.fabric_state->card(index)),
      config_(cfg.hbm_bytes),
      windows_(cfg.hbm_bytes, *sys.fabric_state, index, sys.hbm_windows.get()),
      ports_(*this, cfg.num_ports),
      stats_(*this),
      firmware_(*this, mailbox_, cfg.firmware_version),
      power_(*this) {
  state_.num_ports.store(cfg.num_ports);
  state_.hbm_bytes.store(cfg.hbm_bytes);
  queues_.reserve(regs::kNumQueues);
  for (unsigned q = 0; q < regs::kNumQueues; ++q) {
    queues_.push_back(std::make_unique<QueueModel>(*this, state_.queues[q], q));
  }
  for (auto& fd : msix_fd_) fd.store(-1);
  sync_bus_master();
}

FabricState& Card::fabric() noexcept { return *sys_.fabric_state; }

std::uint32_t Card::lock_tag() const noexcept {
  static const auto pid = static_cast<std::uint32_t>(::getpid());
  return pid;
}

Card::WindowAccess Card::window_hbm(unsigned /*queue*/, std::uint32_t index, unsigned /*w*/,
                                    std::uint16_t /*generation*/, std::uint64_t /*key*/, std::uint64_t wbase,
                                    std::uint64_t wsize, std::span<std::byte>* out) noexcept {
  // One process holds every card: the window is where the entry says (the engine checked it).
  const auto hbm = index < sys_.cards.size() ? sys_.cards[index]->hbm() : std::span<std::byte>{};
  if (wbase > hbm.size() || wsize > hbm.size() - wbase) return WindowAccess::kRefused;
  *out = hbm.subspan(wbase, wsize);
  return WindowAccess::kMapped;
}

void Card::kick(QueueModel& q, bool doorbell) {
  if (doorbell) {
    sys_.workers.ring(q);
  } else {
    sys_.workers.post(q);
  }
}

void Card::queue_halted(unsigned queue, std::uint64_t iova) {
  log_event(fmt::format("queue={} halted: descriptor fetch fault iova=0x{:x}", queue, iova));
}

void Card::sync_bus_master() noexcept { state_.set(CardState::kBusMaster, config_.bus_master()); }

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

void Card::log_event(const std::string& text) { sys_.log(index_, text); }

// ==== Config space ==========================================================================

std::uint32_t Card::cfg_read(std::uint32_t off, unsigned size) {
  if (removed()) return size == 4 ? 0xffffffffu : (1u << (size * 8)) - 1;
  return config_.read(off, size);
}

void Card::cfg_write(std::uint32_t off, unsigned size, std::uint32_t value) {
  if (removed()) return;
  if (config_.write(off, size, value)) reset("flr", true);
  sync_bus_master();
}

std::uint64_t Card::bar_size(unsigned bar) const noexcept {
  switch (bar) {
    case pci::kBarRegs: return pci::kBar0Size;
    case pci::kBarHbm: return config_.bar2_size();
    case pci::kBarMsix: return pci::kBar4Size;
    default: return 0;
  }
}

// ==== Ports (fabric wiring) ==================================================================

void Card::attach_cable(unsigned port, std::uint32_t /*peer_card*/, unsigned /*peer_port*/) {
  ports_[port].attach_cable();  // the port resolves its far end per use (resolve_peer)
}

void Card::light_path_changed(unsigned port) {
  if (port < ports_.size()) ports_[port].schedule_link_check(0);
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
    v = global_read(base);
  } else if (base >= regs::kMailboxBase && base < regs::kMailboxBase + 0x1000) {
    v = mailbox_.read(base - regs::kMailboxBase, width);
  } else if (base >= regs::kQueueBase && base < regs::kQueueBase + regs::kNumQueues * regs::kQueueStride) {
    v = queues_[(base - regs::kQueueBase) / regs::kQueueStride]->read((base - regs::kQueueBase) % regs::kQueueStride,
                                                                      width);
  } else if (base >= regs::kWindowBase && base < regs::kWindowBase + regs::kWindowEntries * regs::kWindowStride) {
    v = windows_.read((base - regs::kWindowBase) / regs::kWindowStride,
                      (base - regs::kWindowBase) % regs::kWindowStride);
  } else if (base >= regs::kRouteBase && base < regs::kRouteBase + regs::kRouteEntries * 4) {
    v = state_.routes[(base - regs::kRouteBase) / 4].load(std::memory_order_acquire);
  } else if (base >= regs::kPortBase && base < regs::kPortBase + ports_.size() * regs::kPortStride) {
    v = ports_[(base - regs::kPortBase) / regs::kPortStride].read((base - regs::kPortBase) % regs::kPortStride);
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
    global_write(base, full([&] { return global_read(base); }));
  } else if (base >= regs::kMailboxBase && base < regs::kMailboxBase + 0x1000) {
    if (mailbox_.write(base - regs::kMailboxBase, width, value)) firmware_.doorbell();
  } else if (base >= regs::kQueueBase && base < regs::kQueueBase + regs::kNumQueues * regs::kQueueStride) {
    auto& q = *queues_[(base - regs::kQueueBase) / regs::kQueueStride];
    const std::uint32_t r = (base - regs::kQueueBase) % regs::kQueueStride;
    q.write(r, half ? 64 : width, full([&] { return q.read(r, 64); }));
  } else if (base >= regs::kWindowBase && base < regs::kWindowBase + regs::kWindowEntries * regs::kWindowStride) {
    const unsigned w = (base - regs::kWindowBase) / regs::kWindowStride;
    const std::uint32_t r = (base - regs::kWindowBase) % regs::kWindowStride;
    windows_.write(w, r, full([&] { return windows_.read(w, r); }));
  } else if (base >= regs::kRouteBase && base < regs::kRouteBase + regs::kRouteEntries * 4) {
    const unsigned fid = (base - regs::kRouteBase) / 4;
    const auto v32 = static_cast<std::uint32_t>(value) & (regs::route::kPortMask.mask() | regs::route::kValid.mask());
    if (fid != 0) state_.routes[fid].store(v32, std::memory_order_release);  // entry 0 (no fabric ID 0) is RO 0
  } else if (base >= regs::kPortBase && base < regs::kPortBase + ports_.size() * regs::kPortStride) {
    const unsigned p = (base - regs::kPortBase) / regs::kPortStride;
    ports_[p].write((base - regs::kPortBase) % regs::kPortStride, value);
  }
  // Reserved space: writes ignored.
}

std::uint64_t Card::global_read(std::uint32_t off) {
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
    case g::kStatsAddr: return stats_.addr();
    case g::kStatsCtrl: return stats_.ctrl();
    case g::kStatsSeq: return stats_.seq();
    case g::kWindowsValid: return windows_.valid_count();
    case g::kMboxErrors: return mbox_errors_.load(std::memory_order_relaxed);
    case g::kQueuesActive: return state_.queues_active.load(std::memory_order_acquire);
    case g::kPartition: return state_.partition.load(std::memory_order_acquire);
    default: return 0;
  }
}

void Card::global_write(std::uint32_t off, std::uint64_t value) {
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
    case g::kStatsAddr: stats_.set_addr(value); break;  // 64 B aligned
    case g::kStatsCtrl: stats_.write_ctrl(v32); break;  // synchronous DMA (StatsEngine)
    default: break;                                     // RO registers ignore writes
  }
}

void Card::count_mailbox_error() noexcept {
  std::uint32_t c = mbox_errors_.load(std::memory_order_relaxed);
  while (c != 0xffffffffu && !mbox_errors_.compare_exchange_weak(c, c + 1, std::memory_order_relaxed)) {
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

void Card::set_msix_eventfd(unsigned vector, int fd) {
  // Under msix_fd_mu_: once this returns no raise_msix still writes to the old fd, so its owner
  // may close it (npo-emud closes a dead client's eventfds right after).
  std::lock_guard lock(msix_fd_mu_);
  msix_fd_[vector].store(fd);
}

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
  std::lock_guard lock(msix_fd_mu_);
  const int fd = msix_fd_[vector].load();
  if (fd >= 0) {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
  }
}

// ==== Reset and removal ====================================================================

void Card::power_cycle() { reset("power_cycle", false); }

void Card::reset(const char* why, bool rebuild_config) {
  log_event(fmt::format("reset cause={}", why));
  for (auto& q : queues_) q->reset_state();
  firmware_.reset_state();
  mailbox_.reset();
  for (auto& r : state_.routes) r.store(0);
  windows_.reset();
  ports_.reset();
  stats_.reset();
  {
    std::lock_guard lock(fault_mu_);
    faults_.clear();
  }
  err_status_.store(0);
  err_mask_.store(0);
  scratch_.store(0);
  scratch64_.store(0);
  fault_count_.store(0);
  mbox_errors_.store(0);
  for (auto& q : queues_) q->reset_counters();  // the activity counters (registers.md §9)
  state_.queues_active.store(0);
  state_.inject_iommu.store(0);
  {
    // The MSI-X table returns to its power-on state; eventfd routing is platform state (the
    // kernel's, under VFIO) and survives, as VFIO restores MSI-X after a reset.
    std::lock_guard lock(msix_mu_);
    for (auto& e : msix_table_) e = {0, 0, 0, 0};
    for (auto& p : msix_pending_) p.store(false);
  }
  if (rebuild_config) config_.rebuild();
  sync_bus_master();
}

void Card::release_client_state() {
  log_event("client_state_released");
  for (auto& q : queues_) q->reset_state();
  windows_.reset();
}

void Card::remove() {
  log_event("surprise_removal");
  // A removed card writes no more host memory: stop the engines and wait for the batches in
  // progress before the card reads all-ones, so a driver that saw all-ones and reclaims its
  // rings (DmaQueue's recover) never races a completion write.
  state_.set(CardState::kDmaStopped, true);
  for (auto& q : queues_) q->quiesce();
  state_.set(CardState::kRemoved, true);
  err_status_.fetch_or(regs::global::kErrRemoved.mask());
  ports_.remove();
}

}  // namespace npo::emu
