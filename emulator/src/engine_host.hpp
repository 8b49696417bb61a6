// SPDX-License-Identifier: Apache-2.0
// Emulator internals: what a card's DMA engines (QueueModel, engine.cpp) need of the process
// they run in. Two implementations: the card model itself (Card, in the process that holds the
// emulator: in-process backends and npo-emud), and an owner's client of npo-emud that runs its
// own card's engines (remote/client_engine.*, protocol 1.5, docs/spec/emud-protocol.md §5.12).
// Everything the engines share across cards lives in FabricState (shared_state.hpp); this
// interface gives the rest: this process's view of the card's IOMMU and of HBM, and the events
// only the card model can take (fault records, error bits, interrupts, the event log).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "iommu.hpp"
#include "shared_state.hpp"

namespace npo::emu {

class QueueModel;

class EngineHost {
 public:
  virtual ~EngineHost() = default;

  /// The card's index in the supernode (fabric ID - 1) and the shared state of every card.
  [[nodiscard]] virtual std::uint32_t card_index() const noexcept = 0;
  [[nodiscard]] virtual FabricState& fabric() noexcept = 0;
  [[nodiscard]] CardState& state() noexcept { return fabric().card(card_index()); }
  /// Tag of this process for QueueLock (its pid).
  [[nodiscard]] virtual std::uint32_t lock_tag() const noexcept = 0;

  /// The card's IOMMU domain as this process can reach it: every DMA mapping of the card,
  /// translated to addresses this process can use (its own, or another process's through
  /// Iommu::Foreign).
  [[nodiscard]] virtual Iommu& iommu() noexcept = 0;
  /// The card's HBM, mapped in this process.
  [[nodiscard]] virtual std::span<std::byte> hbm() noexcept = 0;
  /// How a remote op reaches its target window's bytes in this process (window_hbm).
  enum class WindowAccess : std::uint8_t {
    kMapped,   ///< `out` is the window's bytes
    kImport,   ///< not imported here yet: the host imports it after this batch and runs the queue
               ///< again, so the engine stops the batch before the op (QueueModel::import_wait_)
    kRefused,  ///< the import was refused (the window changed meanwhile): the op fails as revoked
  };
  /// The bytes of window `w` of card `index` for a remote op of queue `queue` (0..31), [wbase, wbase+wsize) of its HBM
  /// as the entry says, for a remote op carrying `generation` and `key` that the entry admitted. The emulator's own
  /// cards reach every HBM; an owner process of npo-emud only the windows it imported (spec §5.13: WINDOW_FD, checked
  /// by the daemon). On kMapped `*out` spans at least wsize bytes. Thread-safety: any thread.
  [[nodiscard]] virtual WindowAccess window_hbm(unsigned queue, std::uint32_t index, unsigned w,
                                                std::uint16_t generation, std::uint64_t key, std::uint64_t wbase,
                                                std::uint64_t wsize, std::span<std::byte>* out) noexcept = 0;

  /// Records an IOMMU fault (FAULT_IOVA/FAULT_INFO/ERR_STATUS, registers.md §3.4) and raises
  /// MSI-X vector 0. `queue` 0..31.
  virtual void record_iommu_fault(std::uint64_t iova, unsigned queue, bool write, bool perm) = 0;
  /// Sets GLOBAL.ERR_STATUS bits (a newly set unmasked bit raises vector 0).
  virtual void set_error(std::uint32_t bits) = 0;
  /// Raises an MSI-X vector (masked: its PBA bit).
  virtual void raise_msix(unsigned vector) = 0;
  /// Appends to the emulator's event log, tagged with the card.
  virtual void log_event(const std::string& text) = 0;
  /// Queue `queue` halted: its descriptor fetch at `iova` faulted (registers.md §5.5; logged
  /// as the card's event "queue=Q halted: descriptor fetch fault iova=0x...").
  virtual void queue_halted(unsigned queue, std::uint64_t iova) = 0;
  /// Queue `q` has work: a doorbell moved its SQ_TAIL (`doorbell`), or a CQ_HEAD freed room
  /// in a completion queue its engine stopped at. The host runs the engine now or soon.
  virtual void kick(QueueModel& q, bool doorbell) = 0;
  /// The card's engines completed data ops (dma_bytes_total grew): the host's power model
  /// samples the card while it is busy (power.hpp). Called once per batch that moved data;
  /// cheap when the model already samples. A host without a power model ignores it.
  virtual void dma_activity() noexcept {}
};

}  // namespace npo::emu
