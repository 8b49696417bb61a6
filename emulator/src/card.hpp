// SPDX-License-Identifier: Apache-2.0
// Emulator internals: one NPO reference card. Card is the composition of its parts, each in
// its own files with its own state:
//   ConfigSpace  config_space.*  PCI config space, FLR, Resizable BAR
//   QueueModel   queue.hpp, engine.cpp  DMA engines (queues), remote-op routing
//   WindowTable  window_table.*  window translation table
//   PortSet/Port port.hpp, port*.cpp  optical ports: CMIS modules, link state machines, lanes
//   StatsEngine  stats_engine.*  port statistics DMA
//   Mailbox      mailbox.*  mailbox transport registers
//   Firmware     firmware.*  mailbox command processor and error log
//   PowerModel   power.*     power, energy, die temperature, power-limit enforcement
// and owns what ties them together: BAR0 decode and dispatch (registers.md), the global
// registers and IOMMU fault records, the route table, BAR2 HBM, BAR4 MSI-X, the IOMMU,
// reset and surprise removal.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "config_space.hpp"
#include "engine_host.hpp"
#include "firmware.hpp"
#include "iommu.hpp"
#include "mailbox.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/topology_plan.hpp"
#include "port.hpp"
#include "power.hpp"
#include "queue.hpp"
#include "shared_state.hpp"
#include "stats_engine.hpp"
#include "window_table.hpp"

namespace npo::emu {

class EmulatorImpl;

/// The card. Its engine-visible state (queues, routes, link words, windows, flags, DMA totals)
/// lives in the system's FabricState; the card is also its engines' host in this process.
class Card final : public EngineHost {
 public:
  Card(EmulatorImpl& sys, std::uint32_t index, const CardConfig& cfg, std::uint64_t serial, std::byte* hbm,
       std::uint64_t hbm_memfd_offset);
  ~Card() override;

  [[nodiscard]] std::uint32_t index() const noexcept { return index_; }
  [[nodiscard]] std::uint32_t fabric_id() const noexcept { return fabric_id_of(index_); }
  [[nodiscard]] std::uint64_t serial() const noexcept { return serial_; }
  [[nodiscard]] const CardConfig& config() const noexcept { return cfg_; }
  [[nodiscard]] backend::FunctionInfo function_info() const;
  [[nodiscard]] EmulatorImpl& system() noexcept { return sys_; }

  // ---- PCI configuration space -----------------------------------------------------------
  /// Reads 1, 2 or 4 bytes (naturally aligned) of config space. Removed: all-ones.
  std::uint32_t cfg_read(std::uint32_t off, unsigned size);
  /// Writes config space; an FLR (DevCtl bit 15) resets the card. Removed: ignored.
  void cfg_write(std::uint32_t off, unsigned size, std::uint32_t value);

  // ---- BARs -----------------------------------------------------------------------------
  [[nodiscard]] std::uint64_t bar_size(unsigned bar) const noexcept;
  /// BAR0 register access, `width` 32 or 64 bits (registers.md). Removed: all-ones.
  std::uint64_t bar0_read(std::uint64_t off, unsigned width);
  void bar0_write(std::uint64_t off, unsigned width, std::uint64_t value);
  /// BAR4: MSI-X table and PBA (PCIe 6.0 §7.7.2.6).
  std::uint64_t bar4_read(std::uint64_t off, unsigned width);
  void bar4_write(std::uint64_t off, unsigned width, std::uint64_t value);
  [[nodiscard]] std::span<std::byte> hbm() noexcept override { return {hbm_, cfg_.hbm_bytes}; }
  [[nodiscard]] std::uint64_t hbm_memfd_offset() const noexcept { return hbm_memfd_offset_; }

  // ---- Platform hooks ------------------------------------------------------------------
  [[nodiscard]] Iommu& iommu() noexcept override { return iommu_; }
  void set_msix_eventfd(unsigned vector, int fd);
  /// Raises an MSI-X vector: signals its eventfd unless masked (then sets the PBA bit).
  void raise_msix(unsigned vector) override;
  /// Device reset: every BAR0 register, queue, engine, window and port to reset state.
  /// `rebuild_config` also returns config space to power-on values (a raw FLR); VFIO-style
  /// resets keep it (the kernel saves and restores config space around the FLR).
  void reset(const char* why, bool rebuild_config);
  /// What a client's death leaves behind (npo-emud): every queue back to its reset state and
  /// every window invalid, while routes, ports and links stay as they are (unlike reset()).
  void release_client_state();
  /// A power cut and power-up (tests): what reset() does, and the firmware flash keeps only
  /// what a flash keeps (FirmwareFlash: the slots, the committed slot, the security version);
  /// an update in progress is lost and an uncommitted trial rolls back. Config space is kept
  /// (as VFIO restores it), so an open Device keeps working.
  void power_cycle();
  void remove();
  [[nodiscard]] bool removed() const noexcept { return state_.has(CardState::kRemoved); }
  /// The engines stop DMA (set by remove() before the card reads all-ones).
  [[nodiscard]] bool dma_stopped() const noexcept { return state_.has(CardState::kDmaStopped); }
  [[nodiscard]] bool bus_master() const noexcept { return config_.bus_master(); }

  // ---- The parts, and services they share ------------------------------------------------
  /// Records an IOMMU fault (FAULT_IOVA/FAULT_INFO/ERR_STATUS) and raises vector 0.
  void record_iommu_fault(std::uint64_t iova, unsigned queue, bool write, bool perm) override;
  /// Sets GLOBAL.ERR_STATUS bits; a newly set unmasked bit raises vector 0.
  void set_error(std::uint32_t bits) override;
  /// Arms `n` injected IOMMU faults: the next data accesses of the card's engines fault.
  void inject_iommu_faults(std::uint32_t n) { state_.inject_iommu.fetch_add(n); }
  [[nodiscard]] QueueModel& queue(unsigned q) { return *queues_[q]; }
  [[nodiscard]] Firmware& firmware() { return firmware_; }
  /// Power and thermal model, power limit (power.hpp, mailbox.md §3.9).
  [[nodiscard]] PowerModel& power() noexcept { return power_; }
  [[nodiscard]] WindowEntry& window(unsigned w) { return windows_.entry(w); }
  /// Entry `w` as the card committed it (window_table.hpp), which no client can rewrite.
  [[nodiscard]] WindowTable::Committed window_committed(unsigned w) const { return windows_.committed(w); }
  /// This card's part of the shared engine state.
  [[nodiscard]] CardState& shared() noexcept { return state_; }
  [[nodiscard]] PortSet& ports() noexcept { return ports_; }
  /// Route table entry for destination fabric ID `fid` (registers.md §8); 0 when out of range.
  [[nodiscard]] std::uint32_t route(std::uint32_t fid) const noexcept {
    return fid < fw::regs::kRouteEntries ? state_.routes[fid].load(std::memory_order_acquire) : 0;
  }
  /// A light path now leads from `port` to (peer_card, peer_port) (fabric wiring): the port
  /// carries a module. The far end is resolved per use (EmulatorImpl::resolve_peer).
  void attach_cable(unsigned port, std::uint32_t peer_card, unsigned peer_port);
  /// The light path of `port` changed (an optical switch was reconfigured): a port that is Up
  /// re-checks its link at once and, if the far end is no longer the neighbour it trained
  /// with (or there is no light), leaves Up for Training like any link loss (registers.md §7.2).
  void light_path_changed(unsigned port);
  /// Applies a link fault (FaultKind kBerRamp .. kTrainingTimeout) to f.port (and f.lane);
  /// physical faults (ber_ramp, lane_loss) reach the receive side of both ends of the link.
  void inject_link_fault(const Fault& f) { ports_.inject_fault(f); }
  /// Appends to the system event log, tagged with this card.
  void log_event(const std::string& text) override;

  // ---- EngineHost: the card's engines run in this process -------------------------------
  [[nodiscard]] std::uint32_t card_index() const noexcept override { return index_; }
  [[nodiscard]] FabricState& fabric() noexcept override;
  [[nodiscard]] std::uint32_t lock_tag() const noexcept override;
  [[nodiscard]] WindowAccess window_hbm(unsigned queue, std::uint32_t index, unsigned w, std::uint16_t generation,
                                        std::uint64_t key, std::uint64_t wbase, std::uint64_t wsize,
                                        std::span<std::byte>* out) noexcept override;
  void kick(QueueModel& q, bool doorbell) override;
  void queue_halted(unsigned queue, std::uint64_t iova) override;
  void dma_activity() noexcept override { power_.dma_activity(); }
  /// Cumulative data ops (copies, local and remote) this card's engines completed with status
  /// OK, and their bytes, since the card was created: never reset (not by a queue or card
  /// reset, nor a client's disconnect), so npo-emud can report what one owner's session moved.
  struct DmaTotals {
    std::uint64_t ops = 0;
    std::uint64_t bytes = 0;
  };
  /// Counts one BAR0 mailbox request that ended in an error (GLOBAL.MBOX_ERRORS, registers.md
  /// §9), saturating. Thread-safe.
  void count_mailbox_error() noexcept;
  /// The totals now (an engine adds each batch's once, in CardState). Thread-safe; the two
  /// values are read one after the other.
  [[nodiscard]] DmaTotals dma_totals() const noexcept {
    return {state_.dma_ops_total.load(std::memory_order_relaxed),
            state_.dma_bytes_total.load(std::memory_order_relaxed)};
  }

 private:
  std::uint64_t global_read(std::uint32_t off);
  /// CardState::kBusMaster follows config COMMAND.BME (after every config write and reset).
  void sync_bus_master() noexcept;
  void global_write(std::uint32_t off, std::uint64_t value);

  EmulatorImpl& sys_;
  std::uint32_t index_;
  CardConfig cfg_;
  std::uint64_t serial_;
  std::byte* hbm_;
  std::uint64_t hbm_memfd_offset_;
  CardState& state_;  ///< in sys_.fabric_state (shared_state.hpp)

  ConfigSpace config_;

  // Global registers.
  std::atomic<std::uint32_t> err_status_{0};
  std::atomic<std::uint32_t> err_mask_{0};
  std::atomic<std::uint32_t> scratch_{0};
  std::atomic<std::uint64_t> scratch64_{0};
  std::atomic<std::uint32_t> fault_count_{0};
  std::atomic<std::uint32_t> mbox_errors_{0};  ///< GLOBAL.MBOX_ERRORS (registers.md §9)
  std::mutex fault_mu_;
  std::deque<std::pair<std::uint64_t, std::uint32_t>> faults_;  // (iova, info), oldest first; max 16

  Iommu iommu_;
  std::vector<std::unique_ptr<QueueModel>> queues_;
  WindowTable windows_;
  PortSet ports_;
  StatsEngine stats_;
  Mailbox mailbox_;
  Firmware firmware_;
  PowerModel power_;  ///< after ports_ and state_: it samples them

  // MSI-X (BAR4) and eventfds.
  std::mutex msix_mu_;
  std::mutex msix_fd_mu_;  ///< orders raise_msix's eventfd write against set_msix_eventfd
  std::array<std::array<std::uint32_t, 4>, fw::pci::kMsixVectors> msix_table_{};
  std::array<std::atomic<int>, fw::pci::kMsixVectors> msix_fd_{};
  std::array<std::atomic<bool>, fw::pci::kMsixVectors> msix_pending_{};
};

}  // namespace npo::emu
