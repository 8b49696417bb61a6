// SPDX-License-Identifier: Apache-2.0
// The emu-remote backend's local engines: an owner of a card of npo-emud runs that card's DMA
// engines in its own process (protocol 1.5, ENGINE_SHARE; docs/spec/emud-protocol.md §5.12).
// The engine code is the emulator's own (QueueModel, engine.cpp) over the shared engine state
// the daemon hands out (FabricState): the same queue registers and locks, routes, link words and
// window tables the daemon's engines use. A doorbell then runs the queue on the ringing thread,
// so a DMA op costs no message to npo-emud and no wake-up of its session thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine_host.hpp"
#include "iommu.hpp"
#include "npo/hal/backend/backend.hpp"
#include "queue.hpp"
#include "shared_state.hpp"

namespace npo::emu::remote {

/// What local engines need of their connection to npo-emud.
class EngineLink {
 public:
  virtual ~EngineLink() = default;
  /// A card's HBM as HBM_FD answers it: the memfd (the caller closes it), the offset of the
  /// card's first byte in it and the card's HBM bytes.
  struct Hbm {
    int fd = -1;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
  };
  /// HBM_FD round trip for this connection's own card (spec §5.12; other cards are refused,
  /// §5.13). Never called while a queue lock is held.
  virtual Result<Hbm> hbm_fd(std::uint32_t card) = 0;
  /// The own card's engine pages as ENGINE_FD answers them: the memfd (the caller closes it)
  /// and its offset in the shared state.
  struct EngineFd {
    int fd = -1;
    std::uint64_t offset = 0;
  };
  /// ENGINE_FD round trip (spec §5.12, §5.13). Never called while a queue lock is held.
  virtual Result<EngineFd> engine_fd() = 0;
  /// An imported window (WINDOW_FD, spec §5.13): its memfd (the caller closes it), HBM offset
  /// and bytes on its card, and whether the fd maps read-write.
  struct WindowFd {
    int fd = -1;
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
    bool writable = false;
  };
  /// WINDOW_FD round trip. Errors: the daemon's (kPermissionDenied: another partition or a wrong
  /// key; kFailedPrecondition: another generation; kNotFound: not open). Never called while a
  /// queue lock is held.
  virtual Result<WindowFd> window_fd(std::uint32_t card, unsigned window, std::uint16_t generation,
                                     std::uint64_t key) = 0;
  /// ENGINE_EVENT (posted) with kind fw::emud::engine::kEvent*. Never called while a queue lock
  /// is held (the daemon may be waiting for that lock while this thread waits for the socket).
  virtual void post_event(std::uint32_t kind, std::uint32_t queue, std::uint64_t value, std::uint64_t flags) = 0;
};

/// The DMA engines of one card, run by its owner. Thread-safety: every method may be called
/// from any thread; one queue's doorbells are expected from one thread at a time (a queue has
/// one producer), and batches of one queue take turns with any other process's (QueueLock).
class ClientEngine final : public EngineHost {
 public:
  /// Maps the shared engine state `state_fd` (ENGINE_SHARE's reply) read-only, the card's own
  /// engine pages (ENGINE_FD) read-write over it, and the card's own HBM (HBM_FD), for card
  /// `card` whose engines lock queues with `lock_tag`. Other cards' windows
  /// are imported when a remote op first targets them (WINDOW_FD, spec §5.13).
  /// Errors: kInvalidArgument (a state of another layout, a card past it), those of HBM_FD and
  /// mmap.
  static Result<std::unique_ptr<ClientEngine>> create(EngineLink& link, int state_fd, std::uint32_t card,
                                                      std::uint32_t lock_tag);
  ~ClientEngine() override;
  ClientEngine(const ClientEngine&) = delete;
  ClientEngine& operator=(const ClientEngine&) = delete;

  /// Whether the queues run here: until hand_to_daemon(). Lock-free.
  [[nodiscard]] bool runs_here() const noexcept { return !daemon_runs_.load(std::memory_order_acquire); }
  /// From now on npo-emud runs the card's engines (doorbells go to it again). For memory this
  /// process could not touch safely itself: a memfd it cannot seal, which the daemon maps
  /// SIGBUS-guarded (spec §5.2 "Unsealed memory") -- an engine here would take the SIGBUS.
  void hand_to_daemon() noexcept { daemon_runs_.store(true, std::memory_order_release); }
  /// Whether BAR0 offset `off` is a doorbell these engines take (SQ_TAIL or CQ_HEAD of a queue).
  [[nodiscard]] static bool is_doorbell(std::uint64_t off) noexcept;
  /// Writes doorbell register `off` (is_doorbell) with `v` and runs the queue on this thread if
  /// it has work (registers.md §5.3, §5.4: the card's own checks apply), then sends the events
  /// its batches left for the daemon.
  void doorbell(std::uint64_t off, std::uint32_t v);

  /// Mirrors the connection's DMA mappings (backend::Device::dma_map, dma_map_process,
  /// dma_unmap) into this process's view of the card's IOMMU. map*: after the daemon mapped;
  /// unmap: before it unmaps (it waits for local batches using the range). Errors: Iommu's.
  Result<void> map(const void* vaddr, std::uint64_t iova, std::uint64_t length, backend::DmaAccess access);
  Result<void> map_process(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length, backend::DmaAccess access);
  void unmap(std::uint64_t iova, std::uint64_t length);

  /// Stops this process's engines from touching the card's HBM (every doorbell waits) until
  /// unlock_views(): the owner moves a range of its views to another memfd meanwhile (a window
  /// opens or closes, spec §5.13). Not recursive; never called from a doorbell.
  void lock_views() { views_mu_.lock(); }
  void unlock_views() { views_mu_.unlock(); }
  /// Maps [off, off+size) of the engines' view of the card's HBM from `fd` at `fd_offset`
  /// (under lock_views()). Errors: kOutOfRange (past the HBM), mmap's errno.
  Result<void> remap_own(std::uint64_t off, std::uint64_t size, int fd, std::uint64_t fd_offset);
  /// Windows of other cards this process imported (tests, diagnostics). Thread-safe.
  [[nodiscard]] std::size_t imported_windows() const;

  // EngineHost
  [[nodiscard]] std::uint32_t card_index() const noexcept override { return card_; }
  [[nodiscard]] FabricState& fabric() noexcept override { return *fabric_; }
  [[nodiscard]] std::uint32_t lock_tag() const noexcept override { return tag_; }
  [[nodiscard]] Iommu& iommu() noexcept override { return iommu_; }
  [[nodiscard]] std::span<std::byte> hbm() noexcept override { return own_; }
  [[nodiscard]] WindowAccess window_hbm(unsigned queue, std::uint32_t index, unsigned w, std::uint16_t generation,
                                        std::uint64_t key, std::uint64_t wbase, std::uint64_t wsize,
                                        std::span<std::byte>* out) noexcept override;
  void record_iommu_fault(std::uint64_t iova, unsigned queue, bool write, bool perm) override;
  void set_error(std::uint32_t bits) override;
  void raise_msix(unsigned vector) override;
  void log_event(const std::string& text) override;
  void kick(QueueModel& q, bool doorbell) override;
  void queue_halted(unsigned queue, std::uint64_t iova) override;

 private:
  ClientEngine(EngineLink& link, std::unique_ptr<FabricState> fabric, std::uint32_t card, std::uint32_t tag);
  struct Event {
    std::uint32_t kind;
    std::uint32_t queue;
    std::uint64_t value;
    std::uint64_t flags;
  };
  void defer(const Event& e);
  void flush_events();
  /// An imported window of another card, mapped here.
  struct Import {
    std::uint16_t generation = 0;
    std::byte* bytes = nullptr;  ///< null: the import was refused (refused = true)
    std::uint64_t size = 0;
    bool refused = false;
  };
  struct Pending {
    std::uint32_t card;
    unsigned window;
    std::uint16_t generation;
    std::uint64_t key;
    unsigned queue;
  };
  static std::uint64_t import_id(std::uint32_t card, unsigned w) noexcept { return (std::uint64_t{card} << 16) | w; }
  /// Imports the windows batches asked for (WINDOW_FD, no lock held) and runs their queues again.
  void resolve_imports();
  /// Unmaps replaced imports no queue of this card is inside any more (under imports_mu_).
  void sweep_stale() noexcept;

  EngineLink& link_;
  std::unique_ptr<FabricState> fabric_;
  std::uint32_t card_;
  std::uint32_t tag_;
  Iommu iommu_;
  std::span<std::byte> own_;  ///< the card's HBM, mapped at create()
  /// Held shared by every doorbell, exclusively while the owner remaps own_ (lock_views).
  std::shared_mutex views_mu_;
  mutable std::shared_mutex imports_mu_;
  std::map<std::uint64_t, Import> imports_;  ///< by import_id
  /// Replaced imports: (import_id, mapping) unmapped once no queue's remote op is inside them.
  std::vector<std::pair<std::uint64_t, Import>> stale_;
  std::mutex pending_mu_;
  std::vector<Pending> pending_;
  std::atomic<bool> has_pending_{false};
  std::vector<std::unique_ptr<QueueModel>> queues_;
  std::mutex events_mu_;
  std::vector<Event> events_;  ///< for the daemon, sent after the batch (flush_events)
  std::atomic<bool> has_events_{false};
  std::atomic<bool> daemon_runs_{false};  ///< hand_to_daemon() was called
  int self_pidfd_ = -1;                   ///< this process, for process maps (Iommu::map_process)
};

}  // namespace npo::emu::remote
