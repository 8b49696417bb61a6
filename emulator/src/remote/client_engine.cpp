// SPDX-License-Identifier: Apache-2.0
// An owner's local engines (client_engine.hpp; docs/spec/emud-protocol.md §5.12).
#include "remote/client_engine.hpp"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "npo/fw/emud.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/log.hpp"

namespace npo::emu::remote {

namespace regs = fw::regs;
namespace ev = fw::emud::engine;

ClientEngine::ClientEngine(EngineLink& link, std::unique_ptr<FabricState> fabric, std::uint32_t card, std::uint32_t tag)
    : link_(link), fabric_(std::move(fabric)), card_(card), tag_(tag) {
  queues_.reserve(regs::kNumQueues);
  for (unsigned q = 0; q < regs::kNumQueues; ++q) {
    queues_.push_back(std::make_unique<QueueModel>(*this, fabric_->card(card_).queues[q], q));
  }
}

ClientEngine::~ClientEngine() {
  if (own_.data() != nullptr) ::munmap(own_.data(), own_.size());
  for (auto& [id, im] : imports_) {
    if (im.bytes != nullptr) ::munmap(im.bytes, im.size);
  }
  for (auto& [id, im] : stale_) {
    if (im.bytes != nullptr) ::munmap(im.bytes, im.size);
  }
  if (self_pidfd_ >= 0) ::close(self_pidfd_);
}

Result<std::unique_ptr<ClientEngine>> ClientEngine::create(EngineLink& link, int state_fd, std::uint32_t card,
                                                           std::uint32_t lock_tag) {
  auto efd = link.engine_fd();
  if (!efd) return std::unexpected(efd.error());
  const std::uint64_t want = FabricState::engine_offset(card);
  if (efd->offset != want) {
    ::close(efd->fd);
    return fail(Code::kInvalidArgument,
                fmt::format("ENGINE_FD: card {}'s engine pages at {:#x}, not {:#x}", card, efd->offset, want));
  }
  auto fs = FabricState::attach(state_fd, efd->fd, card);
  ::close(efd->fd);
  if (!fs) return std::unexpected(fs.error());
  if (lock_tag == 0) return fail(Code::kInvalidArgument, "ENGINE_SHARE: lock tag 0");
  std::unique_ptr<ClientEngine> e(new ClientEngine(link, std::move(*fs), card, lock_tag));
  e->self_pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  if (e->self_pidfd_ < 0) return fail_errno(errno, "emu-remote: pidfd_open of this process");
  // The card's own HBM only (spec §5.13): another card's bytes come window by window.
  auto h = link.hbm_fd(card);
  if (!h) return std::unexpected(h.error());
  void* p = MAP_FAILED;
  if (h->size != 0) {
    p = ::mmap(nullptr, h->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, h->fd,
               static_cast<off_t>(h->offset));
  }
  const int err = errno;
  ::close(h->fd);
  if (p == MAP_FAILED) {
    return fail_errno(h->size == 0 ? EINVAL : err,
                      fmt::format("emu-remote: mmap of card {}'s HBM ({} bytes)", card, h->size));
  }
  e->own_ = {static_cast<std::byte*>(p), h->size};
  return e;
}

Result<void> ClientEngine::remap_own(std::uint64_t off, std::uint64_t size, int fd, std::uint64_t fd_offset) {
  if (off > own_.size() || size > own_.size() - off) {
    return fail(Code::kOutOfRange, fmt::format("emu-remote: remap [{:#x}, +{:#x}) past the card's HBM", off, size));
  }
  if (::mmap(own_.data() + off, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd,
             static_cast<off_t>(fd_offset)) == MAP_FAILED) {
    return fail_errno(errno, fmt::format("emu-remote: remap [{:#x}, +{:#x}) of card {}'s HBM", off, size, card_));
  }
  return {};
}

std::size_t ClientEngine::imported_windows() const {
  std::shared_lock lock(imports_mu_);
  std::size_t n = 0;
  for (const auto& [id, im] : imports_) n += im.bytes != nullptr ? 1 : 0;
  return n;
}

ClientEngine::WindowAccess ClientEngine::window_hbm(unsigned queue, std::uint32_t index, unsigned w,
                                                    std::uint16_t generation, std::uint64_t key, std::uint64_t wbase,
                                                    std::uint64_t wsize, std::span<std::byte>* out) noexcept {
  if (index == card_) {  // a window of this card: loopback through its own HBM
    if (wbase > own_.size() || wsize > own_.size() - wbase) return WindowAccess::kRefused;
    *out = own_.subspan(wbase, wsize);
    return WindowAccess::kMapped;
  }
  {
    std::shared_lock lock(imports_mu_);
    auto it = imports_.find(import_id(index, w));
    if (it != imports_.end() && it->second.generation == generation) {
      if (it->second.refused) return WindowAccess::kRefused;
      if (it->second.size >= wsize) {
        *out = {it->second.bytes, wsize};
        return WindowAccess::kMapped;
      }
    }
  }
  // Not imported (or of another generation, or grown): import after the batch.
  std::lock_guard lock(pending_mu_);
  pending_.push_back({index, w, generation, key, queue});
  has_pending_.store(true, std::memory_order_release);
  return WindowAccess::kImport;
}

void ClientEngine::sweep_stale() noexcept {
  std::erase_if(stale_, [&](auto& s) {
    const std::uint64_t want = (((s.first >> 16) + 1) << 32) | (s.first & 0xffff);
    for (auto& q : state().queues) {
      if (q.remote_window.load(std::memory_order_seq_cst) == want) return false;  // an op may be inside it
    }
    if (s.second.bytes != nullptr) ::munmap(s.second.bytes, s.second.size);
    return true;
  });
}

void ClientEngine::resolve_imports() {
  std::vector<Pending> todo;
  {
    std::lock_guard lock(pending_mu_);
    todo.swap(pending_);
    has_pending_.store(false, std::memory_order_release);
  }
  std::vector<unsigned> rerun;
  for (const auto& p : todo) {
    Import im{p.generation, nullptr, 0, true};
    if (auto f = link_.window_fd(p.card, p.window, p.generation, p.key); f) {
      void* m =
          ::mmap(nullptr, f->size, PROT_READ | (f->writable ? PROT_WRITE : 0), MAP_SHARED | MAP_NORESERVE, f->fd, 0);
      ::close(f->fd);
      if (m != MAP_FAILED) im = {p.generation, static_cast<std::byte*>(m), f->size, false};
    } else {
      npo::log::get(npo::log::Subsystem::kBackend)
          .debug("emu-remote: card {}: import of card {} window {} refused: {}", card_, p.card, p.window,
                 f.error().message());
    }
    {
      std::unique_lock lock(imports_mu_);
      auto [it, fresh] = imports_.try_emplace(import_id(p.card, p.window), im);
      if (!fresh) {
        if (it->second.generation == p.generation && !it->second.refused && im.bytes != nullptr) {
          ::munmap(im.bytes, im.size);  // two batches asked for the same window: keep the first
        } else {
          stale_.emplace_back(it->first, it->second);
          it->second = im;
        }
      }
      sweep_stale();
    }
    if (std::find(rerun.begin(), rerun.end(), p.queue) == rerun.end()) rerun.push_back(p.queue);
  }
  for (unsigned q : rerun) {
    queues_[q]->import_done();
    queues_[q]->run_inline();
  }
}
bool ClientEngine::is_doorbell(std::uint64_t off) noexcept {
  if (off < regs::kQueueBase || off >= regs::kQueueBase + std::uint64_t{regs::kNumQueues} * regs::kQueueStride) {
    return false;
  }
  const std::uint64_t r = (off - regs::kQueueBase) % regs::kQueueStride;
  return r == regs::queue::kSqTail || r == regs::queue::kCqHead;
}

void ClientEngine::doorbell(std::uint64_t off, std::uint32_t v) {
  const auto q = static_cast<unsigned>((off - regs::kQueueBase) / regs::kQueueStride);
  const auto r = static_cast<std::uint32_t>((off - regs::kQueueBase) % regs::kQueueStride);
  // A removed card reads all-ones and drops writes (registers.md §1), doorbells too.
  if (fabric_->card(card_).has(CardState::kRemoved)) return;
  {
    std::shared_lock views(views_mu_);
    queues_[q]->write(r, 32, v);  // the card's checks; a doorbell with work runs the queue here (kick)
    // A batch stopped at a window not imported yet: import it (no queue lock held) and go on.
    for (unsigned round = 0; round < 64 && has_pending_.load(std::memory_order_acquire); ++round) resolve_imports();
  }
  if (has_events_.load(std::memory_order_acquire)) flush_events();
}

Result<void> ClientEngine::map(const void* vaddr, std::uint64_t iova, std::uint64_t length, backend::DmaAccess access) {
  return iommu_.map(vaddr, iova, length, access);
}

Result<void> ClientEngine::map_process(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length,
                                       backend::DmaAccess access) {
  // Bound to this process, not its pid number, as the daemon binds it (spec §5.2): a forked child
  // that inherited the connection reaches this process's memory only while it lives.
  return iommu_.map_process(static_cast<int>(::getpid()), self_pidfd_, vaddr, iova, length, access);
}

void ClientEngine::unmap(std::uint64_t iova, std::uint64_t length) { (void)iommu_.unmap(iova, length); }

void ClientEngine::defer(const Event& e) {
  std::lock_guard lock(events_mu_);
  events_.push_back(e);
  has_events_.store(true, std::memory_order_release);
}

void ClientEngine::flush_events() {
  std::vector<Event> out;
  {
    std::lock_guard lock(events_mu_);
    out.swap(events_);
    has_events_.store(false, std::memory_order_release);
  }
  for (const auto& e : out) link_.post_event(e.kind, e.queue, e.value, e.flags);
}

void ClientEngine::record_iommu_fault(std::uint64_t iova, unsigned queue, bool write, bool perm) {
  defer({ev::kEventIommuFault, queue, iova, (write ? ev::kEventWrite : 0) | (perm ? ev::kEventPerm : 0)});
}

void ClientEngine::set_error(std::uint32_t bits) { defer({ev::kEventError, 0, bits, 0}); }

void ClientEngine::raise_msix(unsigned vector) { defer({ev::kEventMsix, 0, vector, 0}); }

void ClientEngine::queue_halted(unsigned queue, std::uint64_t iova) { defer({ev::kEventHalted, queue, iova, 0}); }

void ClientEngine::log_event(const std::string& text) {
  // Only the daemon's engine paths log otherwise (queue enable, disable and reset come to it as
  // register writes); kept in this process's log.
  npo::log::get(npo::log::Subsystem::kBackend).debug("emu-remote: card {}: {}", card_, text);
}

void ClientEngine::kick(QueueModel& q, bool /*doorbell*/) { q.run_inline(); }

}  // namespace npo::emu::remote
