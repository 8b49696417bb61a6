// SPDX-License-Identifier: Apache-2.0
// The DMA engine model: fetches descriptors from the host submission ring through the
// IOMMU, executes them, and writes 16-byte completions with the phase bit into the host
// completion ring (docs/spec/dma.md, docs/spec/registers.md §5).
#include <poll.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "npo/fw/pci.hpp"
#include "npo/hal/topology_plan.hpp"
#include "queue.hpp"

namespace npo::emu {

namespace regs = fw::regs;
namespace dma = fw::dma;
namespace qr = fw::regs::queue;
using dma::Status;

namespace {
constexpr unsigned kBatch = 64;                     // descriptors per run_once
constexpr std::uint64_t kBounceBytes = 256u << 10;  // process-to-process copies go through this much at a time
constexpr std::uint32_t kPrefetchAhead = 4;         // descriptors fetched ahead of the one executing
constexpr std::uint64_t kCacheLine = 64;
constexpr unsigned kCplPerLine = kCacheLine / dma::cpl::kSize;  // completions held at most
constexpr std::uint32_t kHoldMaxBytes = 4096;                   // longer ops publish their completion at once

/// Adds `n` to a 64-bit activity counter that saturates (registers.md §1, §9): one relaxed
/// add; the rare wrap is pinned at the maximum.
void saturating_add(std::atomic<std::uint64_t>& c, std::uint64_t n) noexcept {
  if (n == 0) return;
  const std::uint64_t old = c.fetch_add(n, std::memory_order_relaxed);
  if (old + n < old) c.store(~std::uint64_t{0}, std::memory_order_relaxed);
}
}  // namespace

bool QueueModel::pending() const noexcept {
  // seq_cst (a plain load on x86): run_inline's check after its unlock pairs with a ringer's
  // SQ_TAIL store and lock attempt.
  return st_.sq_tail.load(std::memory_order_seq_cst) != st_.sq_head.load(std::memory_order_acquire);
}

bool QueueModel::has_work() const noexcept {
  if (st_.enabled.load(std::memory_order_acquire) == 0 || st_.hung.load(std::memory_order_acquire) != 0) return false;
  if (st_.status.load() & qr::kStatusHalted.mask()) return false;
  if (!pending()) return false;
  if (host_.state().dma_stalled()) return false;  // throttled, budget spent: the power controller kicks it
  if (import_blocked_.load(std::memory_order_seq_cst)) return false;  // its host imports a window first
  // Paused on a full completion ring until the host frees entries (CQ_HEAD doorbell).
  const std::uint32_t depth = 1u << qr::kConfigDepthLog2.get(st_.config.load());
  return st_.cq_tail.load() - st_.cq_head.load() < depth;
}

void QueueModel::run_inline() {
  // Dekker with a ringer on another thread or process: it stores SQ_TAIL, then tries the lock;
  // we release the lock, then look at the work again -- all seq_cst operations, so one of the
  // two sees the other's store and no doorbell is left without an engine.
  while (has_work()) {
    if (!st_.lock.try_lock(host_.lock_tag())) return;  // its holder runs it (see above)
    bool more = true;
    while (more) more = run_batch_locked();
    st_.lock.unlock_seq_cst();
  }
}

bool QueueModel::run_once() {
  st_.lock.lock(host_.lock_tag());
  const bool more = run_batch_locked();
  st_.lock.unlock();
  return more;
}

std::uint64_t QueueModel::read(std::uint32_t reg, unsigned /*width*/) {
  switch (reg) {
    case qr::kSqBase: return st_.sq_base.load();
    case qr::kCqBase: return st_.cq_base.load();
    case qr::kConfig: return st_.config.load();
    case qr::kCtrl: return st_.enabled.load() != 0 ? qr::kCtrlEnable.mask() : 0;
    case qr::kStatus: {
      std::uint32_t s = st_.status.load() & (qr::kStatusHalted.mask() | qr::kStatusConfigError.mask());
      if (st_.enabled.load() != 0) s |= qr::kStatusEnabled.mask();
      if (!pending())
        s |= qr::kStatusIdle.mask();
      else if (host_.state().dma_throttled.load(std::memory_order_relaxed) != 0)
        s |= qr::kStatusThrottled.mask();
      return s;
    }
    case qr::kSqTail: return st_.sq_tail.load();
    case qr::kSqHead: return st_.sq_head.load();
    case qr::kCqHead: return st_.cq_head.load();
    case qr::kCqTail: return st_.cq_tail.load();
    case qr::kErr: return st_.err.load();
    case qr::kCompleted: return st_.completed.load();
    case qr::kOpsOk: return st_.ops_ok.load(std::memory_order_relaxed);
    case qr::kOpsError: return st_.ops_error.load(std::memory_order_relaxed);
    case qr::kBytes: return st_.bytes.load(std::memory_order_relaxed);
    default: return 0;
  }
}

void QueueModel::write(std::uint32_t reg, unsigned /*width*/, std::uint64_t value) {
  const auto v32 = static_cast<std::uint32_t>(value);
  switch (reg) {
    case qr::kSqTail:  // doorbell: the hot path, no lock
      // Dekker with the worker (sched.cpp): it clears `scheduled` then re-checks the tail;
      // we store the tail then read `scheduled`. One of the two sees the other's write.
      {
        // registers.md §5.3: a value that moves backwards or overruns unfetched descriptors,
        // or a doorbell to a disabled queue, is ignored.
        const std::uint32_t depth = 1u << qr::kConfigDepthLog2.get(st_.config.load(std::memory_order_relaxed));
        if (!st_.enabled.load(std::memory_order_relaxed) || v32 - st_.sq_head.load(std::memory_order_acquire) > depth ||
            v32 - st_.sq_tail.load(std::memory_order_relaxed) > depth) {
          return;
        }
      }
      st_.sq_tail.store(v32, std::memory_order_seq_cst);
      if (!scheduled.load(std::memory_order_seq_cst)) host_.kick(*this, true);
      return;
    case qr::kCqHead: {
      // registers.md §5.4: accepted if it neither passes CQ_TAIL nor moves backwards.
      // Modular: the new head must lie in [old head, CQ_TAIL].
      const std::uint32_t old_head = st_.cq_head.load(std::memory_order_relaxed);
      if (v32 - old_head > st_.cq_tail.load(std::memory_order_acquire) - old_head) return;
    }
      st_.cq_head.store(v32, std::memory_order_seq_cst);
      // Only a queue paused on a full CQ needs waking (run_once sets CQ_OVERFLOW before it
      // gives up; same Dekker pairing as above).
      if ((st_.err.load(std::memory_order_seq_cst) & qr::kErrCqOverflow.mask()) != 0) {
        st_.err.fetch_and(~qr::kErrCqOverflow.mask());
        host_.kick(*this, false);
      }
      return;
    case qr::kErr: st_.err.fetch_and(~v32); return;
    default: break;
  }
  // Configuration changes take turns with the batches (of any process running this queue).
  st_.lock.lock(host_.lock_tag());
  struct Unlock {
    QueueLock& l;
    ~Unlock() { l.unlock(); }
  } unlock{st_.lock};
  switch (reg) {
    case qr::kSqBase:
      if (st_.enabled.load() == 0) st_.sq_base.store(value);
      break;
    case qr::kCqBase:
      if (st_.enabled.load() == 0) st_.cq_base.store(value);
      break;
    case qr::kConfig:
      if (st_.enabled.load() == 0) {
        st_.config.store(v32 &
                         (qr::kConfigDepthLog2.mask() | qr::kConfigPriority.mask() | qr::kConfigIrqEnable.mask()));
      }
      break;
    case qr::kCtrl: {
      const bool en = qr::kCtrlEnable.get(v32) != 0;
      if (en && st_.enabled.load() == 0) {
        const std::uint32_t cfg = st_.config.load();
        const unsigned log2 = qr::kConfigDepthLog2.get(cfg);
        const std::uint64_t sq = st_.sq_base.load(), cq = st_.cq_base.load();
        const bool ok = log2 >= regs::kMinQueueDepthLog2 && log2 <= regs::kMaxQueueDepthLog2 && sq != 0 && cq != 0 &&
                        sq % 64 == 0 && cq % 16 == 0;
        if (!ok) {
          st_.status.fetch_or(qr::kStatusConfigError.mask());
          host_.log_event(fmt::format("queue={} enable refused: config error", index_));
          break;
        }
        // registers.md §5.2: enabling starts the rings from index 0 with nothing pending.
        restart_rings();
        st_.status.fetch_and(~(qr::kStatusConfigError.mask() | qr::kStatusHalted.mask()));
        st_.failed_since_fence.store(0);
        st_.enabled.store(1);
        host_.log_event(fmt::format("queue={} enabled depth={}", index_, 1u << log2));
      } else if (!en && st_.enabled.load() != 0) {
        st_.enabled.store(0);
        host_.log_event(fmt::format("queue={} disabled", index_));
      }
      break;
    }
    case qr::kReset:
      if (qr::kResetQueue.get(v32)) {
        queue_reset_locked();
        host_.log_event(fmt::format("queue={} reset", index_));
      }
      break;
    default: break;
  }
}

void QueueModel::restart_rings() noexcept {
  st_.sq_tail.store(0);
  st_.sq_head.store(0);
  st_.cq_head.store(0);
  st_.cq_tail.store(0);
  st_.completed.store(0);
  st_.err.store(0);
}

void QueueModel::queue_reset_locked() {
  // Abort everything pending: the ring indexes return to 0, the queue is disabled, a hang
  // injected on it is cleared. The driver completes aborted ops itself (status kAborted /
  // kTimeout, which only software writes).
  st_.enabled.store(0);
  st_.hung.store(0);
  restart_rings();
  st_.status.store(0);
  st_.inject_errors.store(0);
  st_.failed_since_fence.store(0);
}

void QueueModel::reset_state() {
  st_.lock.lock(host_.lock_tag());
  queue_reset_locked();
  st_.sq_base.store(0);
  st_.cq_base.store(0);
  st_.config.store(0);
  st_.remote_window.store(0);  // an engine that died mid-op (a client gone) counts no more
  st_.lock.unlock();
}

void QueueModel::reset_counters() noexcept {
  st_.ops_ok.store(0, std::memory_order_relaxed);
  st_.ops_error.store(0, std::memory_order_relaxed);
  st_.bytes.store(0, std::memory_order_relaxed);
  st_.active.store(0, std::memory_order_relaxed);
}

void QueueModel::inject_hang(std::uint64_t now) {
  st_.hung_since.store(now);
  st_.hung.store(1);
}

namespace {

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/// Whether madvise(MADV_POPULATE_READ/WRITE) works here (Linux 5.14+): tried once on a page of
/// our own.
bool populate_works() {
  static const bool works = [] {
    static std::array<std::byte, 8192> probe{};
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const std::uintptr_t a = (reinterpret_cast<std::uintptr_t>(probe.data()) + page - 1) & ~(page - 1);
    return ::madvise(reinterpret_cast<void*>(a), page, MADV_POPULATE_READ) == 0;
  }();
  return works;
}

/// Bytes from `addr` on, up to `len`, that a device could reach in this process right now for
/// a read (`write` false) or a write: every page mapped, with that right, and neither secret
/// (memfd_secret) nor a device mapping -- the pages the kernel would let process_vm_readv /
/// process_vm_writev reach (MADV_POPULATE_READ/WRITE answer it without pinning or copying).
/// `len` when all are.
std::uint64_t own_reachable(std::uint64_t addr, std::uint64_t len, bool write) {
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t first = addr & ~(page - 1);
  const int advice = write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  if (::madvise(reinterpret_cast<void*>(first), addr + len - first, advice) == 0) return len;
  // Find the first page that is not (rare: a fault): page by page.
  for (std::uint64_t p = first; p < addr + len; p += page) {
    if (::madvise(reinterpret_cast<void*>(p), page, advice) != 0) return p > addr ? p - addr : 0;
  }
  return len;  // it changed between the two looks: all reachable now
}

// Copies `len` bytes between the engine's `local` and address `addr` of process `pid` (a
// mapping made by Iommu::map_process): process_vm_writev when `to_process`, else readv.
// `pidfd` (-1: none) is that process as it was when the mapping was made: once it has exited
// nothing is copied, so a pid the kernel gave to another process since is never touched.
// The kernel checks the address page by page: returns the bytes copied, `len` on success;
// fewer when a page is not mapped (or not writable) there or the process is gone.
// `pid` is this process (an in-process emulator's process map, or a client that runs its own
// card's engines, emud-protocol.md §5.12): the same pages are reachable, checked by
// own_reachable, and the CPU copies them, at memory speed instead of the kernel's pinned copy
// (about 3.5x faster for 256 KiB on the project's VM). Memory unmapped by another thread between
// that check and the copy -- while an op on it is in flight, which no API allows -- would fault
// in the copy instead of failing the op.
std::uint64_t process_copy(int pid, int pidfd, std::uint64_t addr, std::byte* local, std::uint64_t len,
                           bool to_process) {
  // Not cached: a forked child is another process (its copy of a mapping of the parent's pid
  // reaches the parent).
  if (pid == static_cast<int>(::getpid()) && populate_works()) {
    const std::uint64_t n = own_reachable(addr, len, to_process);
    if (to_process) {
      std::memcpy(reinterpret_cast<void*>(addr), local, n);
    } else {
      std::memcpy(local, reinterpret_cast<const void*>(addr), n);
    }
    return n;
  }
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) return 0;  // readable: the process has exited (or poll failed)
  }
  std::uint64_t done = 0;
  while (done < len) {
    iovec l{local + done, len - done};
    iovec r{reinterpret_cast<void*>(addr + done), len - done};
    const ssize_t n = to_process ? ::process_vm_writev(pid, &l, 1, &r, 1, 0) : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n <= 0) break;
    done += static_cast<std::uint64_t>(n);
  }
  return done;
}

}  // namespace

Status QueueModel::check_range(std::uint64_t iova, std::uint64_t len, bool write, std::uint64_t* info, bool data) {
  // Every page of [iova, iova+len) must be mapped with the access right; the first hole or
  // missing right is recorded as the fault (registers.md §3.4) and nothing is accessed.
  // Another process's memory (Iommu::map_process) is reachable for data only.
  auto& mmu = host_.iommu();
  Iommu::Foreign pid;
  for (std::uint64_t done = 0; done < len;) {
    std::byte* host = nullptr;
    std::uint64_t contig = 0, fault = 0;
    const auto r = xlate_.translate(mmu, iova + done, len - done, write, &host, &contig, &fault, data ? &pid : nullptr);
    if (r != XlateResult::kOk) {
      *info = fault;
      host_.record_iommu_fault(fault, index_, write, r == XlateResult::kPermission);
      return r == XlateResult::kPermission ? Status::kIommuPermission : Status::kIommuFault;
    }
    done += contig;
  }
  return Status::kOk;
}

Status QueueModel::host_access(std::uint64_t iova, std::uint64_t len, bool write, bool ring, std::byte* local,
                               std::uint64_t* info) {
  // Copies between host memory at `iova` and `local` (device-side buffer), through the IOMMU,
  // split at mapping boundaries. Nothing is touched past the first fault.
  auto& mmu = host_.iommu();
  // Injected faults hit data accesses, not ring fetches: the op completes with IOMMU_FAULT.
  if (!ring && host_.state().take_injected_iommu_fault()) {
    *info = iova;
    host_.record_iommu_fault(iova, index_, write, false);
    return Status::kIommuFault;
  }
  // Pre-check the whole range so a fault in the middle leaves memory untouched (the IOMMU's
  // part; process memory is checked page by page by the kernel as it is copied).
  if (const auto st = check_range(iova, len, write, info, !ring); st != Status::kOk) return st;
  for (std::uint64_t done = 0; done < len;) {
    std::byte* host = nullptr;
    std::uint64_t contig = 0, fault = 0;
    Iommu::Foreign pf;
    (void)xlate_.translate(mmu, iova + done, len - done, write, &host, &contig, &fault, ring ? nullptr : &pf);
    if (pf.pid != 0) {
      const std::uint64_t n =
          process_copy(pf.pid, pf.pidfd, reinterpret_cast<std::uint64_t>(host), local + done, contig, write);
      if (n != contig) {  // the first byte the process could not give or take
        *info = iova + done + n;
        host_.record_iommu_fault(iova + done + n, index_, write, false);
        return Status::kIommuFault;
      }
    } else if (write) {
      std::memcpy(host, local + done, contig);
    } else {
      std::memcpy(local + done, host, contig);
    }
    done += contig;
  }
  return Status::kOk;
}

Status QueueModel::fill_host(std::uint64_t dst, std::uint32_t len, std::uint64_t pat, std::uint64_t* info) {
  // Build the pattern in a bounded bounce buffer and stream it through the IOMMU.
  std::array<std::byte, 4096> buf;
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>(pat >> (8 * (i % 8)));
  for (std::uint64_t done = 0; done < len;) {
    const std::uint64_t n = std::min<std::uint64_t>(buf.size(), len - done);
    const auto st = host_access(dst + done, n, true, false, buf.data(), info);
    if (st != Status::kOk) return st;
    done += n;
  }
  return Status::kOk;
}

Status QueueModel::gather(const dma::Descriptor& d, std::uint64_t* info) {
  const std::uint32_t len = d.length();
  const bool dst_hbm = (d.op_flags() & dma::flags::kDstHbm) != 0;
  auto hbm = host_.hbm();
  const unsigned count = d.sg_count();
  if (count == 0 || count > dma::sg::kMaxEntries) return Status::kSgError;
  std::array<std::byte, dma::sg::kMaxEntries * dma::sg::kSize> list;
  if (host_access(d.src(), std::uint64_t{count} * dma::sg::kSize, false, false, list.data(), info) != Status::kOk) {
    return Status::kSgError;
  }
  std::uint64_t total = 0;
  for (unsigned i = 0; i < count; ++i)
    total += fw::load_le<std::uint32_t>(list.data(), i * dma::sg::kSize + dma::sg::kLength);
  if (total != len) return Status::kSgError;
  std::uint64_t out = 0;
  for (unsigned i = 0; i < count; ++i) {
    const auto a = fw::load_le<std::uint64_t>(list.data(), i * dma::sg::kSize + dma::sg::kAddr);
    const auto n = fw::load_le<std::uint32_t>(list.data(), i * dma::sg::kSize + dma::sg::kLength);
    if (dst_hbm) {
      if (d.dst() > hbm.size() || len > hbm.size() - d.dst()) {
        *info = d.dst();
        return Status::kHbmRange;
      }
      const auto st = host_access(a, n, false, false, hbm.data() + d.dst() + out, info);
      if (st != Status::kOk) return st;
    } else {
      // host -> host gather through a bounce buffer
      std::vector<std::byte> tmp(n);
      auto st = host_access(a, n, false, false, tmp.data(), info);
      if (st == Status::kOk) st = host_access(d.dst() + out, n, true, false, tmp.data(), info);
      if (st != Status::kOk) return st;
    }
    out += n;
  }
  *info = len;
  return Status::kOk;
}

Status QueueModel::execute(const dma::Descriptor& d, std::uint64_t* info) {
  *info = 0;
  const auto op = d.opcode();
  const std::uint8_t fl = d.op_flags();
  if ((fl & ~dma::flags::kValidMask) != 0 || !d.reserved_zero()) return Status::kBadDescriptor;
  if (static_cast<unsigned>(op) >= dma::kNumOpcodes) return Status::kBadOpcode;
  if (op == dma::Opcode::kNop || op == dma::Opcode::kFence) return Status::kOk;
  const std::uint32_t len = d.length();
  if (len == 0 || len > regs::kMaxTransferBytes) return Status::kBadDescriptor;
  if (st_.inject_errors.load() > 0) {
    std::uint32_t n = st_.inject_errors.load();
    while (n > 0 && !st_.inject_errors.compare_exchange_weak(n, n - 1)) {
    }
    if (n > 0) return Status::kEngineError;
  }
  auto hbm = host_.hbm();
  auto hbm_range = [&](std::uint64_t off) -> std::byte* {
    if (off > hbm.size() || len > hbm.size() - off) return nullptr;
    return hbm.data() + off;
  };
  const bool src_hbm = (fl & dma::flags::kSrcHbm) != 0;
  const bool dst_hbm = (fl & dma::flags::kDstHbm) != 0;

  switch (op) {
    case dma::Opcode::kCopy: {
      if (src_hbm && dst_hbm) {
        std::byte* s = hbm_range(d.src());
        std::byte* t = hbm_range(d.dst());
        if (!s || !t) {
          *info = !s ? d.src() : d.dst();
          return Status::kHbmRange;
        }
        std::memmove(t, s, len);
      } else if (src_hbm) {  // HBM -> host
        std::byte* s = hbm_range(d.src());
        if (!s) {
          *info = d.src();
          return Status::kHbmRange;
        }
        const auto st = host_access(d.dst(), len, true, false, s, info);
        if (st != Status::kOk) return st;
      } else if (dst_hbm) {  // host -> HBM
        std::byte* t = hbm_range(d.dst());
        if (!t) {
          *info = d.dst();
          return Status::kHbmRange;
        }
        const auto st = host_access(d.src(), len, false, false, t, info);
        if (st != Status::kOk) return st;
      } else {  // host -> host: check both ranges first, then copy mapping by mapping
        auto& mmu = host_.iommu();
        if (const auto st = check_range(d.src(), len, false, info, true); st != Status::kOk) return st;
        if (const auto st = check_range(d.dst(), len, true, info, true); st != Status::kOk) return st;
        if (host_.state().take_injected_iommu_fault()) {
          *info = d.src();
          host_.record_iommu_fault(d.src(), index_, false, false);
          return Status::kIommuFault;
        }
        for (std::uint64_t done = 0; done < len;) {
          std::byte *hs = nullptr, *hd = nullptr;
          std::uint64_t cs = 0, cd = 0, f = 0;
          Iommu::Foreign ps, pd;
          (void)xlate_.translate(mmu, d.src() + done, len - done, false, &hs, &cs, &f, &ps);
          (void)xlate_.translate(mmu, d.dst() + done, len - done, true, &hd, &cd, &f, &pd);
          std::uint64_t n = std::min(cs, cd);
          // A side in another process that fails: the first byte it could not give (source)
          // or take (destination) is the fault, with its direction.
          std::uint64_t got = n;
          bool dst_failed = false;
          if (ps.pid == 0 && pd.pid == 0) {
            std::memmove(hd, hs, n);
          } else if (pd.pid == 0) {
            got = process_copy(ps.pid, ps.pidfd, reinterpret_cast<std::uint64_t>(hs), hd, n, false);
          } else if (ps.pid == 0) {
            got = process_copy(pd.pid, pd.pidfd, reinterpret_cast<std::uint64_t>(hd), hs, n, true);
            dst_failed = got != n;
          } else {  // both: through a bounce buffer of the engine
            n = std::min<std::uint64_t>(n, kBounceBytes);
            std::vector<std::byte> bounce(n);
            got = process_copy(ps.pid, ps.pidfd, reinterpret_cast<std::uint64_t>(hs), bounce.data(), n, false);
            if (got == n) {
              got = process_copy(pd.pid, pd.pidfd, reinterpret_cast<std::uint64_t>(hd), bounce.data(), n, true);
              dst_failed = got != n;
            }
          }
          if (got != n) {
            const std::uint64_t at = (dst_failed ? d.dst() : d.src()) + done + got;
            *info = at;
            host_.record_iommu_fault(at, index_, dst_failed, false);
            return Status::kIommuFault;
          }
          done += n;
        }
      }
      *info = len;
      return Status::kOk;
    }
    case dma::Opcode::kFill: {
      const std::uint64_t pat = d.src();
      if (dst_hbm) {
        std::byte* t = hbm_range(d.dst());
        if (!t) {
          *info = d.dst();
          return Status::kHbmRange;
        }
        for (std::uint32_t i = 0; i < len; ++i) t[i] = static_cast<std::byte>(pat >> (8 * (i % 8)));
      } else if (const auto st = fill_host(d.dst(), len, pat, info); st != Status::kOk) {
        return st;
      }
      *info = len;
      return Status::kOk;
    }
    case dma::Opcode::kGather: return gather(d, info);
    case dma::Opcode::kRemoteWrite:
    case dma::Opcode::kRemoteRead: return remote(d, info);
    default: return Status::kBadOpcode;
  }
}

bool QueueModel::run_batch_locked() {
  CardState& cs = host_.state();
  if (st_.enabled.load() == 0 || st_.hung.load() != 0 || cs.has(CardState::kDmaStopped) ||
      !cs.has(CardState::kBusMaster)) {
    return false;
  }
  if (st_.status.load() & qr::kStatusHalted.mask()) return false;
  const std::uint32_t cfg = st_.config.load();
  const unsigned log2 = qr::kConfigDepthLog2.get(cfg);
  const std::uint32_t depth = 1u << log2;
  const std::uint32_t mask = depth - 1;
  std::uint32_t head = st_.sq_head.load();
  const std::uint32_t tail = st_.sq_tail.load(std::memory_order_acquire);
  std::uint32_t ctail = st_.cq_tail.load();
  unsigned done = 0;
  bool irq = false;
  // Activity counters of this batch (registers.md §9), added once after it.
  std::uint64_t n_ok = 0;
  std::uint64_t n_bytes = 0;
  std::uint64_t n_data = 0;
  auto& mmu = host_.iommu();
  auto mmu_guard = mmu.guard();  // unmap waits for this batch
  xlate_.clear();                // translations are cached for this batch only
  // Completions of short ops are held until their CQ cache line is full (or the batch ends,
  // a longer or fenced op comes, or the queue stops) and then written together: a host
  // polling the CQ would otherwise pull the line back between two completions, one
  // cross-core transfer per op. Each op's data movement is done before its completion is
  // held, completions stay in index order, and SQ_HEAD/CQ_TAIL advance before the phase bits
  // (registers.md §5.6; the engine may overlap consecutive ops).
  struct Held {
    std::byte* host;
    dma::Completion c;
    bool phase;
  };
  std::array<Held, kCplPerLine> held;
  unsigned n_held = 0;
  auto publish = [&] {
    if (n_held == 0) return;
    for (unsigned i = 0; i < n_held; ++i) std::memcpy(held[i].host, held[i].c.raw.data(), dma::cpl::kFlags);
    // Release stores: the bodies above are visible before the phase bits flip. CQ_TAIL and
    // SQ_HEAD advance before the phase bits make the completions visible: a host that
    // consumed one may write CQ_HEAD up to the new tail at once (§5.4 accepts a CQ_HEAD only
    // up to CQ_TAIL).
    st_.sq_head.store(head, std::memory_order_release);
    st_.cq_tail.store(ctail, std::memory_order_release);
    for (unsigned i = 0; i < n_held; ++i) {
      __atomic_store_n(reinterpret_cast<std::uint16_t*>(held[i].host + dma::cpl::kFlags),
                       held[i].phase ? dma::cpl::kPhase : std::uint16_t{0}, __ATOMIC_RELEASE);
    }
    n_held = 0;
  };
  // Power-limit enforcement (power.hpp): a throttled card's engines spend a byte budget the
  // power controller refills every 10 ms, and stop when it is spent.
  const bool throttled = cs.dma_throttled.load(std::memory_order_relaxed) != 0;
  bool stalled = false;
  while (head != tail && done < kBatch) {
    if (st_.hung.load() != 0 || cs.has(CardState::kDmaStopped)) break;
    if (throttled && cs.dma_budget.load(std::memory_order_relaxed) <= 0) {
      cs.dma_budget_hit.store(1, std::memory_order_relaxed);
      stalled = true;
      break;  // resumes when the controller refills the budget (it kicks the queue)
    }
    if (ctail - st_.cq_head.load(std::memory_order_acquire) >= depth) {
      publish();
      st_.err.fetch_or(qr::kErrCqOverflow.mask());
      break;  // resumes on the CQ_HEAD doorbell
    }
    // Fetch the descriptor through the IOMMU. The ring is 64-byte aligned and mappings are
    // page-granular, so a slot never spans two mappings; host_access covers the general case.
    dma::Descriptor d;
    std::uint64_t finfo = 0;
    const std::uint64_t diova = st_.sq_base + std::uint64_t{head & mask} * dma::desc::kSize;
    std::byte* dhost = nullptr;
    std::uint64_t dcontig = 0;
    const auto dr = xlate_.translate(mmu, diova, std::uint64_t{depth - (head & mask)} * dma::desc::kSize, false, &dhost,
                                     &dcontig, &finfo);
    Status fetched = Status::kOk;
    if (dr == XlateResult::kOk && dcontig >= dma::desc::kSize) {
      std::memcpy(d.raw.data(), dhost, dma::desc::kSize);
      // Start loading the next descriptors of this doorbell while this one executes (the host
      // wrote them from another core, so each is a cache miss otherwise taken one at a time).
      const std::uint32_t ahead = std::min<std::uint32_t>(tail - head - 1, kPrefetchAhead);
      for (std::uint32_t j = done == 0 ? 1 : ahead; j <= ahead && j != 0; ++j) {
        if (std::uint64_t{j} * dma::desc::kSize < dcontig)
          __builtin_prefetch(dhost + std::size_t{j} * dma::desc::kSize);
      }
    } else if (dr != XlateResult::kOk) {
      publish();
      host_.record_iommu_fault(finfo, index_, false, dr == XlateResult::kPermission);
      fetched = dr == XlateResult::kPermission ? Status::kIommuPermission : Status::kIommuFault;
    } else {
      publish();
      fetched = host_access(diova, dma::desc::kSize, false, true, d.raw.data(), &finfo);
    }
    if (fetched != Status::kOk) {
      st_.status.fetch_or(qr::kStatusHalted.mask());
      st_.err.fetch_or(qr::kErrFetch.mask());  // the IOMMU fault itself was recorded above
      host_.queue_halted(index_, finfo);
      break;
    }
    std::uint64_t info = 0;
    Status st;
    bool data_op = false;
    // Fenced op (FENCE flag, or the FENCE opcode): skipped if the queue's failure latch is set;
    // either way the latch clears. FENCE_SKIPPED does not set it (registers.md §5.7).
    const bool fenced = (d.op_flags() & dma::flags::kFence) != 0 || d.opcode() == dma::Opcode::kFence;
    // A fenced op starts only after every earlier completion is written (§5.6); a long op
    // does not hold back the completions before it.
    const bool short_op = !fenced && d.length() <= kHoldMaxBytes;
    if (!short_op) publish();
    if (fenced && st_.failed_since_fence.load(std::memory_order_relaxed) != 0) {
      st = Status::kFenceSkipped;
    } else {
      st = execute(d, &info);
      if (import_wait_) {
        // The op's window is not imported in this process yet (EngineHost::WindowAccess::kImport):
        // the descriptor stays, the host imports the window and runs the queue again.
        import_wait_ = false;
        import_blocked_.store(true, std::memory_order_seq_cst);
        stalled = true;
        break;
      }
      data_op = st == Status::kOk && d.opcode() != dma::Opcode::kNop && d.opcode() != dma::Opcode::kFence;
      if (data_op) ++n_data;
      if (data_op && throttled) cs.dma_budget.fetch_sub(d.length(), std::memory_order_relaxed);
    }
    if (fenced) st_.failed_since_fence.store(0);
    if (st != Status::kOk && st != Status::kFenceSkipped) st_.failed_since_fence.store(1, std::memory_order_relaxed);
    if (st != Status::kOk) {
      st_.err.fetch_or(qr::kErrOpFailed.mask());
      // Global summary bits (registers.md §5.7).
      if (st == Status::kBadOpcode || st == Status::kBadDescriptor)
        host_.set_error(regs::global::kErrDescriptor.mask());
      if (st == Status::kRemoteUnreachable) host_.set_error(regs::global::kErrFabric.mask());
    }
    // The completion: body, then the flags word carrying the phase bit (publish()).
    Held& h = held[n_held];
    h.c = dma::Completion{};
    h.c.set_info(info);
    h.c.set_sq_index(head);
    h.c.set_status(st);
    h.phase = ((ctail >> log2) & 1u) == 0;  // first pass writes phase 1
    h.c.set_phase(h.phase);
    std::uint64_t contig = 0, fault = 0;
    const std::uint64_t ciova = st_.cq_base + std::uint64_t{ctail & mask} * dma::cpl::kSize;
    const auto r = xlate_.translate(mmu, ciova, dma::cpl::kSize, true, &h.host, &contig, &fault);
    if (r != XlateResult::kOk || contig < dma::cpl::kSize) {
      publish();
      st_.status.fetch_or(qr::kStatusHalted.mask());
      st_.err.fetch_or(qr::kErrFetch.mask());
      host_.record_iommu_fault(fault, index_, true, r == XlateResult::kPermission);
      break;
    }
    ++n_held;
    ++head;
    ++ctail;
    ++done;
    // The line is full (the next slot starts a new one), or this op was not a short one.
    if (!short_op || n_held == kCplPerLine || (ciova + dma::cpl::kSize) % kCacheLine == 0) publish();
    irq = irq || (d.op_flags() & dma::flags::kInterrupt) != 0;
    if (st == Status::kOk) ++n_ok;
    if (data_op) n_bytes += d.length();
  }
  publish();
  st_.completed.fetch_add(done, std::memory_order_relaxed);
  if (n_data != 0) {  // Card::dma_totals (never reset)
    host_.state().dma_ops_total.fetch_add(n_data, std::memory_order_relaxed);
    host_.state().dma_bytes_total.fetch_add(n_bytes, std::memory_order_relaxed);
  }
  // GLOBAL.QUEUES_ACTIVE before the counters (registers.md §9): one relaxed load per batch.
  if (done > 0 && st_.active.load(std::memory_order_relaxed) == 0) {
    st_.active.store(1, std::memory_order_relaxed);
    host_.state().queues_active.fetch_or(1u << index_, std::memory_order_release);
  }
  saturating_add(st_.ops_ok, n_ok);
  saturating_add(st_.ops_error, done - n_ok);
  saturating_add(st_.bytes, n_bytes);
  if (done > 0 && (irq || qr::kConfigIrqEnable.get(cfg))) host_.raise_msix(fw::pci::kMsixVectorQueueBase + index_);
  // Last, after the counters: the power model samples the card while its engines move data.
  if (n_data != 0) host_.dma_activity();
  return !stalled && head != st_.sq_tail.load(std::memory_order_acquire) && st_.hung.load() == 0 &&
         !(st_.status.load() & qr::kStatusHalted.mask()) && ctail - st_.cq_head.load() < depth;
}

}  // namespace npo::emu
