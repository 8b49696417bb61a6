// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the state a DMA engine reads and writes, of its own card and of the cards
// its remote ops cross or reach, kept in one region of shared memory (FabricState, a memfd):
// every queue's registers and lock, every card's route table, link words, window table, flags
// and DMA totals. The card model keeps this state nowhere else, so an engine can run in any
// process that maps the region: the one holding the emulator, or -- npo-emud protocol 1.5,
// ENGINE_SHARE (docs/spec/emud-protocol.md §5.12) -- the process that owns the card, which
// then rings its queues without waking the daemon. The engine code is the same in both
// (engine.cpp); what differs is its EngineHost (engine_host.hpp). An owner maps the region
// read-only and only its own card's engine pages read-write (protocol 1.7, ENGINE_FD, §5.13).
//
// Layout rules: standard-layout structs of lock-free std::atomic integers (address-free, so
// they work across processes), no pointers; each process maps the region where it likes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "npo/fw/regs.hpp"
#include "npo/hal/error.hpp"

namespace npo::emu {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free,
              "shared engine state needs address-free (lock-free) atomics");

/// The lock of one DMA queue's engine, taken for every batch and for register writes that
/// change the queue's configuration. It works across processes (a word in shared memory, no
/// futex): the holder is a tag, the holder process's pid, so that npo-emud can release the lock
/// of an owner that died holding it (break_if_held_by). Not recursive.
class QueueLock {
 public:
  /// Takes the lock, spinning, then yielding, then sleeping 50 us per try. `holder` != 0.
  void lock(std::uint32_t holder) noexcept;
  /// Takes the lock if it is free. `holder` != 0.
  [[nodiscard]] bool try_lock(std::uint32_t holder) noexcept {
    std::uint32_t free = 0;
    return word_.compare_exchange_strong(free, holder, std::memory_order_seq_cst, std::memory_order_seq_cst);
  }
  void unlock() noexcept { word_.store(0, std::memory_order_release); }
  /// Unlock as a seq_cst read-modify-write: a load of another location after it is ordered after
  /// it (QueueModel::run_inline's look for work a ringer left while the lock was held).
  void unlock_seq_cst() noexcept { (void)word_.exchange(0, std::memory_order_seq_cst); }
  /// Frees the lock if `holder` holds it (a process that is gone): true if it did.
  bool break_if_held_by(std::uint32_t holder) noexcept {
    std::uint32_t h = holder;
    return holder != 0 && word_.compare_exchange_strong(h, 0, std::memory_order_acq_rel);
  }
  [[nodiscard]] std::uint32_t holder() const noexcept { return word_.load(std::memory_order_acquire); }

 private:
  std::atomic<std::uint32_t> word_{0};
};

/// One DMA queue's registers and engine state (registers.md §5, §9). Grouped by who writes them,
/// one cache line per group, so the host's doorbell (SQ_TAIL) and the engine's per-op stores do
/// not pull each other's lines back and forth more than the handshake itself needs.
struct QueueState {
  // Configuration and state, written rarely (enable, reset, faults); read on every doorbell.
  alignas(64) std::atomic<std::uint64_t> sq_base{0};
  std::atomic<std::uint64_t> cq_base{0};
  std::atomic<std::uint64_t> hung_since{0};
  std::atomic<std::uint32_t> config{0};  ///< CONFIG as committed (depth, priority, IRQ enable)
  std::atomic<std::uint32_t> status{fw::regs::queue::kStatusIdle.mask()};
  std::atomic<std::uint32_t> enabled{0};
  std::atomic<std::uint32_t> hung{0};
  std::atomic<std::uint32_t> inject_errors{0};  ///< completion errors still to inject
  std::atomic<std::uint32_t> active{0};         ///< this queue's GLOBAL.QUEUES_ACTIVE bit is set
  // Written by the host (doorbells).
  alignas(64) std::atomic<std::uint32_t> sq_tail{0};
  std::atomic<std::uint32_t> cq_head{0};
  // Written by the engine as it completes ops.
  alignas(64) std::atomic<std::uint32_t> sq_head{0};
  std::atomic<std::uint32_t> cq_tail{0};
  std::atomic<std::uint32_t> err{0};
  std::atomic<std::uint64_t> completed{0};
  // Activity counters (registers.md §9): monotonic from card reset, saturating, added once per batch.
  std::atomic<std::uint64_t> ops_ok{0};
  std::atomic<std::uint64_t> ops_error{0};
  std::atomic<std::uint64_t> bytes{0};
  // The engine's own.
  alignas(64) QueueLock lock;
  /// The failure latch of registers.md §5.7 (under `lock`).
  std::atomic<std::uint32_t> failed_since_fence{0};
  /// The window a remote op of this queue is using now: 0 none, else (target card index + 1)
  /// << 32 | window. A window's STATUS.INFLIGHT counts these (FabricState::window_inflight),
  /// so an engine that dies mid-op leaves no count behind once its queue is reset.
  std::atomic<std::uint64_t> remote_window{0};
};

/// One window translation table entry (registers.md §6). Remote engines read it while the host
/// rewrites it; the ops using it are counted by QueueState::remote_window.
struct WindowEntry {
  std::atomic<std::uint64_t> hbm_offset{0};
  std::atomic<std::uint64_t> size{0};
  std::atomic<std::uint64_t> key{0};
  std::atomic<std::uint32_t> ctrl{0};
  std::atomic<std::uint32_t> status{0};
};

/// What the fabric and every engine see of one card.
struct CardState {
  static constexpr std::uint32_t kRemoved = 1u << 0;     ///< surprise removal: reads all-ones
  static constexpr std::uint32_t kDmaStopped = 1u << 1;  ///< the engines stopped (removal)
  static constexpr std::uint32_t kBusMaster = 1u << 2;   ///< config COMMAND.BME
  /// Link word of a port: kLinkUp when the link is Up with a valid neighbour, whose fabric ID
  /// is in the low 16 bits (registers.md §7 NEIGHBOR).
  static constexpr std::uint64_t kLinkUp = std::uint64_t{1} << 63;

  // ---- Written by npo-emud only (read-only to every owner process, spec §5.13). ----
  alignas(64) std::atomic<std::uint32_t> flags{0};
  std::atomic<std::uint32_t> num_ports{0};
  std::atomic<std::uint64_t> hbm_bytes{0};
  /// Power-limit enforcement (power.hpp): while `dma_throttled` is 1 the engines spend
  /// `dma_budget` bytes and stop at 0 until the power controller refills it (every 10 ms);
  /// an engine that stopped on it sets `dma_budget_hit`.
  std::atomic<std::uint32_t> dma_throttled{0};
  /// GLOBAL.PARTITION (registers.md §3.8): set by fabric management only (Emulator::set_partition).
  std::atomic<std::uint32_t> partition{0};
  alignas(64) std::atomic<std::uint64_t> link[fw::regs::kMaxPorts]{};
  alignas(64) std::atomic<std::uint32_t> routes[fw::regs::kRouteEntries]{};  ///< registers.md §8
  alignas(64) WindowEntry windows[fw::regs::kWindowEntries];
  // ---- Written by the card's engines too: its own pages, the only ones its owner maps
  // read-write (kEngineOffset, ENGINE_FD). ----
  alignas(4096) std::atomic<std::uint32_t> inject_iommu{0};  ///< injected IOMMU faults still to take
  std::atomic<std::uint32_t> queues_active{0};               ///< GLOBAL.QUEUES_ACTIVE (registers.md §9)
  std::atomic<std::uint64_t> dma_ops_total{0};               ///< Card::dma_totals: never reset
  std::atomic<std::uint64_t> dma_bytes_total{0};             ///< Card::dma_totals: never reset
  std::atomic<std::int64_t> dma_budget{0};                   ///< see dma_throttled
  std::atomic<std::uint32_t> dma_budget_hit{0};              ///< see dma_throttled
  QueueState queues[fw::regs::kNumQueues];

  [[nodiscard]] bool has(std::uint32_t flag) const noexcept {
    return (flags.load(std::memory_order_acquire) & flag) != 0;
  }
  /// The engines may not move data now: throttled with the budget spent (power.hpp).
  [[nodiscard]] bool dma_stalled() const noexcept {
    return dma_throttled.load(std::memory_order_relaxed) != 0 && dma_budget.load(std::memory_order_relaxed) <= 0;
  }
  /// Takes one injected IOMMU fault, if any is armed (the next data access faults).
  bool take_injected_iommu_fault() noexcept {
    std::uint32_t v = inject_iommu.load(std::memory_order_relaxed);  // the common case: one load
    while (v > 0) {
      if (inject_iommu.compare_exchange_weak(v, v - 1)) return true;
    }
    return false;
  }
  void set(std::uint32_t flag, bool on) noexcept {
    if (on) {
      flags.fetch_or(flag, std::memory_order_acq_rel);
    } else {
      flags.fetch_and(~flag, std::memory_order_acq_rel);
    }
  }
};
static_assert(std::is_standard_layout_v<CardState> && alignof(CardState) == 4096);
/// Where a card's engine-written pages start in its CardState, and their bytes: what ENGINE_FD
/// hands its owner read-write (page-aligned, so that the rest can be mapped read-only).
inline constexpr std::uint64_t kEngineOffset = offsetof(CardState, inject_iommu);
inline constexpr std::uint64_t kEngineBytes = sizeof(CardState) - kEngineOffset;
static_assert(kEngineOffset % 4096 == 0 && kEngineBytes % 4096 == 0 && kEngineBytes > 0);

/// The shared region: a header, then one CardState per card. Created by the process that holds
/// the emulator (create), mapped by an owner client of npo-emud (attach). Shareable, it is one
/// memfd sealed against writes through any later mapping (F_SEAL_FUTURE_WRITE: a client maps
/// it read-only), with each card's engine pages (kEngineOffset, kEngineBytes) backed by a
/// memfd of their own, mapped over it: the one ENGINE_FD hands that card's owner read-write
/// (docs/spec/emud-protocol.md §5.12, §5.13).
class FabricState {
 public:
  static constexpr std::uint64_t kMagic = 0x3145544154534546ULL;  ///< "FESTATE1"
  /// Layout version: attach refuses another (the two ends are one build of npo-hal).
  static constexpr std::uint32_t kLayout = 4;
  struct Header {
    std::uint64_t magic;
    std::uint32_t layout;
    std::uint32_t cards;
    std::uint64_t card_bytes;  ///< sizeof(CardState) of the creator
    std::uint64_t total_bytes;
  };
  static constexpr std::uint64_t kHeaderBytes = 4096;
  /// Byte offset of card `card`'s engine pages in the region (what ENGINE_FD's reply names).
  static constexpr std::uint64_t engine_offset(std::uint32_t card) noexcept {
    return kHeaderBytes + std::uint64_t{card} * sizeof(CardState) + kEngineOffset;
  }

  /// A region for `cards` cards (1..2047), zeroed and constructed: in memfds when `shareable`
  /// (npo-emud hands them to clients: 1 + `cards` fds), else in private anonymous memory (an
  /// in-process emulator: a forked child gets its own copy, as of the rest of the emulator).
  /// Errors: kInvalidArgument (card count), errno codes of memfd_create, ftruncate, mmap, fcntl.
  static Result<std::unique_ptr<FabricState>> create(std::uint32_t cards, bool shareable);
  /// Maps the region in `fd` read-only (a duplicate is kept), then card `card`'s engine pages
  /// read-write from `engine_fd` (kEngineBytes, ENGINE_FD's reply; not kept). Errors:
  /// kInvalidArgument when `fd` is not such a region (size, magic, layout, card size) or
  /// `engine_fd` not of kEngineBytes, kOutOfRange (card), errno codes of fstat and mmap.
  static Result<std::unique_ptr<FabricState>> attach(int fd, int engine_fd, std::uint32_t card);
  ~FabricState();
  FabricState(const FabricState&) = delete;
  FabricState& operator=(const FabricState&) = delete;

  [[nodiscard]] std::uint32_t cards() const noexcept { return cards_; }
  /// Card `i` (< cards()).
  [[nodiscard]] CardState& card(std::uint32_t i) noexcept { return cards_base_[i]; }
  /// The memfd behind the region (owned), to send to a client; -1 when not shareable.
  [[nodiscard]] int fd() const noexcept { return fd_; }
  /// The memfd behind card `i`'s engine pages (owned), to send to its owner; -1 when not
  /// shareable or attached.
  [[nodiscard]] int engine_fd(std::uint32_t i) const noexcept { return i < engine_fds_.size() ? engine_fds_[i] : -1; }
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }

  /// Remote ops using window `w` of card `card` now: the queues of every card whose
  /// remote_window names it (registers.md §6 STATUS.INFLIGHT). Thread-safe; one pass over
  /// cards() x 32 queues.
  [[nodiscard]] std::uint32_t window_inflight(std::uint32_t card, unsigned w) noexcept;

  /// Remote-op routing (registers.md §8): walks from card `src` towards fabric ID `dst_fid`
  /// over Up links, following each card's route table (ECMP member chosen by a flow hash of
  /// source, destination and `queue`), or a direct link where a card has no entry. False when
  /// no Up path exists within kMaxHops (a missing entry, a down link, a removed card, a
  /// routing loop). Thread-safe (reads atomics; an answer can change right after).
  [[nodiscard]] bool route_reachable(std::uint32_t src, std::uint32_t dst_fid, unsigned queue) noexcept;

 private:
  FabricState(int fd, void* base, std::uint64_t bytes, std::uint32_t cards);
  /// Constructs the header and every CardState in place (create).
  void construct() noexcept;
  int fd_;
  std::vector<int> engine_fds_;
  void* base_;
  std::uint64_t bytes_;
  std::uint32_t cards_;
  CardState* cards_base_;
};

}  // namespace npo::emu
