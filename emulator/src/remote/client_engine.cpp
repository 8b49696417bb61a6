// SPDX-License-Identifier: Apache-2.0
// An owner's local engines (client_engine.hpp; docs/spec/emud-protocol.md §5.12).
#include "remote/client_engine.hpp"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

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
  for (auto& h : hbm_) {
    if (h.data() != nullptr) ::munmap(h.data(), h.size());
  }
  if (self_pidfd_ >= 0) ::close(self_pidfd_);
}

Result<std::unique_ptr<ClientEngine>> ClientEngine::create(EngineLink& link, int state_fd, std::uint32_t card,
                                                           std::uint32_t lock_tag) {
  auto fs = FabricState::attach(state_fd);
  if (!fs) return std::unexpected(fs.error());
  if (card >= (*fs)->cards()) {
    return fail(Code::kInvalidArgument,
                fmt::format("ENGINE_SHARE: card {} past the {} cards of the shared state", card, (*fs)->cards()));
  }
  if (lock_tag == 0) return fail(Code::kInvalidArgument, "ENGINE_SHARE: lock tag 0");
  const std::uint32_t cards = (*fs)->cards();
  std::unique_ptr<ClientEngine> e(new ClientEngine(link, std::move(*fs), card, lock_tag));
  e->self_pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  if (e->self_pidfd_ < 0) return fail_errno(errno, "emu-remote: pidfd_open of this process");
  // Every card's HBM now: an engine never asks the daemon for anything inside a batch.
  e->hbm_.resize(cards);
  for (std::uint32_t i = 0; i < cards; ++i) {
    auto h = link.hbm_fd(i);
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
                        fmt::format("emu-remote: mmap of card {}'s HBM ({} bytes)", i, h->size));
    }
    e->hbm_[i] = {static_cast<std::byte*>(p), h->size};
  }
  return e;
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
  queues_[q]->write(r, 32, v);  // the card's checks; a doorbell with work runs the queue here (kick)
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
