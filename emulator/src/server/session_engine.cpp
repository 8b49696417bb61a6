// SPDX-License-Identifier: Apache-2.0
// npo-emud engine sharing and shadow doorbells (spec §5.11, §5.12): ENGINE_SHARE, HBM_FD,
// ENGINE_EVENT, and the doorbell page a client writes instead of sending REGION_WRITEs.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "card.hpp"
#include "npo/fw/emud.hpp"
#include "npo/fw/pci.hpp"
#include "server/protocol.hpp"
#include "server/session.hpp"
#include "server/sigbus_guard.hpp"
#include "system.hpp"

namespace npo::emu {

namespace emud = fw::emud;
namespace pci = fw::pci;
using server::ParsedCommand;

void Session::engine_share(const ParsedCommand& c) {
  if (engine_tag_ != 0) {
    return reply_error(c, Error(Code::kAlreadyExists, "ENGINE_SHARE: this connection shares the engine state"));
  }
  if (shadow_ == nullptr) {
    return reply_error(c, Error(Code::kFailedPrecondition,
                                "ENGINE_SHARE needs the connection's shadow page (DOORBELL_SHADOW first): its "
                                "handled count orders the owner's doorbells after its posted writes"));
  }
  FabricState& fs = *srv_.emu->impl().fabric_state;
  if (fs.fd() < 0) {
    return reply_error(c, Error(Code::kUnimplemented, "ENGINE_SHARE: this emulator's engine state is not shareable"));
  }
  // A tag no process of the daemon's uses (the daemon's engines lock with its pid), unique per
  // connection, so that a disconnect frees exactly this owner's locks.
  static std::atomic<std::uint32_t> next_tag{0};
  engine_tag_ = 0x80000000u | (next_tag.fetch_add(1) & 0x7fffffffu);
  std::array<std::byte, emud::engine::kShareReplyBytes> b{};
  emud::store<std::uint32_t>(b, emud::engine::kReplyCards, fs.cards());
  emud::store<std::uint32_t>(b, emud::engine::kReplyCard, card_);
  emud::store<std::uint32_t>(b, emud::engine::kReplyLayout, FabricState::kLayout);
  emud::store<std::uint32_t>(b, emud::engine::kReplyLockTag, engine_tag_);
  emud::store<std::uint64_t>(b, emud::engine::kReplyStateBytes, fs.bytes());
  reply_ok(c, b, fs.fd());
  srv_.log(fmt::format("card={} pid={}: the owner runs the card's DMA engines", card_, pid_));
}

void Session::engine_fd(const ParsedCommand& c) {
  if (engine_tag_ == 0) {
    return reply_error(c, Error(Code::kFailedPrecondition, "ENGINE_FD: send ENGINE_SHARE first"));
  }
  // The connection's own card's engine pages only (spec §5.13): every other byte of the state
  // it maps read-only, as ENGINE_SHARE handed it.
  const FabricState& fs = *srv_.emu->impl().fabric_state;
  std::array<std::byte, emud::engine::kEngineReplyBytes> b{};
  emud::store<std::uint64_t>(b, emud::engine::kEngineReplyOffset, FabricState::engine_offset(card_));
  emud::store<std::uint64_t>(b, emud::engine::kEngineReplySize, kEngineBytes);
  reply_ok(c, b, fs.engine_fd(card_));
}

void Session::hbm_fd(const ParsedCommand& c) {
  if (engine_tag_ == 0) {
    return reply_error(c, Error(Code::kFailedPrecondition, "HBM_FD: send ENGINE_SHARE first"));
  }
  auto& impl = srv_.emu->impl();
  if (c.target_card >= impl.cards.size()) {
    return reply_error(c, Error(Code::kOutOfRange, fmt::format("HBM_FD: card {} past the supernode's {} cards",
                                                               c.target_card, impl.cards.size())));
  }
  // Isolation (spec §5.13): an owner maps its own card's HBM; another card's bytes it reaches
  // only through the windows it imports (WINDOW_FD).
  if (c.target_card != card_) {
    return reply_error(c, Error(Code::kPermissionDenied,
                                fmt::format("HBM_FD: card {} is not this connection's card {}; import its windows "
                                            "(WINDOW_FD)",
                                            c.target_card, card_)));
  }
  const auto [fd, off] = impl.hbm_fd(c.target_card);
  std::array<std::byte, emud::engine::kHbmReplyBytes> b{};
  emud::store<std::uint64_t>(b, emud::engine::kHbmReplySize, impl.cards[c.target_card]->hbm().size());
  emud::store<std::uint64_t>(b, emud::engine::kHbmReplyFdOffset, off);
  reply_ok(c, b, fd);
}

void Session::window_fd(const ParsedCommand& c) {
  auto& impl = srv_.emu->impl();
  if (c.target_card >= impl.cards.size()) {
    return reply_error(c, Error(Code::kOutOfRange, fmt::format("WINDOW_FD: card {} past the supernode's {} cards",
                                                               c.target_card, impl.cards.size())));
  }
  namespace wr = fw::regs::window;
  const auto w = impl.cards[c.target_card]->window_committed(c.window);
  const bool own = c.target_card == card_;
  auto refuse = [&](Code code, std::string why) {
    srv_.log(fmt::format("card={} pid={}: WINDOW_FD card={} window={} refused: {}", card_, pid_, c.target_card,
                         c.window, why));
    reply_error(c, Error(code, fmt::format("WINDOW_FD of card {} window {}: {}", c.target_card, c.window, why)));
  };
  // The card's own records, not the shared engine state an owner process can write.
  if (w.size == 0) return refuse(Code::kNotFound, "the window is not open");
  if (!own) {
    const auto mine = impl.partition_of[card_].load(std::memory_order_acquire);
    const auto theirs = impl.partition_of[c.target_card].load(std::memory_order_acquire);
    if (mine != theirs) {
      return refuse(
          Code::kPermissionDenied,
          fmt::format("card {} is in partition {}, the window's card in {} (registers.md §3.8)", card_, mine, theirs));
    }
    if (wr::kCtrlGeneration.get(w.ctrl) != c.generation) {
      return refuse(Code::kFailedPrecondition, fmt::format("generation {} is not the window's {} (revoked)",
                                                           c.generation, wr::kCtrlGeneration.get(w.ctrl)));
    }
    if (w.key != c.key) return refuse(Code::kPermissionDenied, "wrong key");
  }
  const int fd = impl.hbm_windows ? impl.hbm_windows->fd_of(c.target_card, w.off, w.size) : -1;
  if (fd < 0) return refuse(Code::kUnimplemented, "this emulator keeps no window memfds (not npo-emud)");
  // Rights as granted: a window without remote writes goes out read-only (a reopen of the memfd
  // through /proc with O_RDONLY; mmap of it with PROT_WRITE then fails with EACCES).
  const bool writable = own || wr::kCtrlWrite.get(w.ctrl) != 0;
  int out = writable ? ::dup(fd) : ::open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_RDONLY | O_CLOEXEC);
  if (out < 0) {
    const int err = errno;
    return reply_error(c, Error(errno_code(err), fmt::format("WINDOW_FD: {}", std::strerror(err))));
  }
  std::array<std::byte, emud::engine::kWindowReplyBytes> b{};
  emud::store<std::uint64_t>(b, emud::engine::kWindowReplyOffset, w.off);
  emud::store<std::uint64_t>(b, emud::engine::kWindowReplySize, w.size);
  emud::store<std::uint32_t>(b, emud::engine::kWindowReplyFlags, writable ? emud::engine::kWindowWritable : 0u);
  reply_ok(c, b, out);
  ::close(out);
  if (!own) {
    srv_.log(fmt::format("card={} pid={}: imports card {} window {} ({} bytes, {})", card_, pid_, c.target_card,
                         c.window, w.size, writable ? "rw" : "ro"));
  }
}

void Session::hbm_range_fd(const ParsedCommand& c) {
  auto& impl = srv_.emu->impl();
  const std::uint64_t hbm = impl.cards[card_]->hbm().size();
  if (c.offset > hbm || c.size > hbm - c.offset) {
    return reply_error(c, Error(Code::kOutOfRange, fmt::format("HBM_RANGE_FD: [{:#x}, +{:#x}) past the card's {} "
                                                               "bytes of HBM",
                                                               c.offset, c.size, hbm)));
  }
  const int wfd = impl.hbm_windows ? impl.hbm_windows->fd_of(card_, c.offset, c.size) : -1;
  const auto [cfd, coff] = impl.hbm_fd(card_);
  std::array<std::byte, emud::engine::kRangeReplyBytes> b{};
  emud::store<std::uint64_t>(b, emud::engine::kRangeReplyFdOffset, wfd >= 0 ? 0 : coff + c.offset);
  emud::store<std::uint32_t>(b, emud::engine::kRangeReplyFlags, wfd >= 0 ? emud::engine::kRangeWindow : 0u);
  reply_ok(c, b, wfd >= 0 ? wfd : cfd);
}

void Session::engine_event(const ParsedCommand& c) {
  if (engine_tag_ == 0) {
    return reply_error(c, Error(Code::kFailedPrecondition, "ENGINE_EVENT: send ENGINE_SHARE first"));
  }
  namespace e = emud::engine;
  switch (c.event_kind) {
    case e::kEventIommuFault:
      card().record_iommu_fault(c.event_value, c.event_queue, (c.event_flags & e::kEventWrite) != 0,
                                (c.event_flags & e::kEventPerm) != 0);
      break;
    case e::kEventError: card().set_error(static_cast<std::uint32_t>(c.event_value)); break;
    case e::kEventMsix:
      if (c.event_value >= pci::kMsixVectors) {
        return reply_error(c, Error(Code::kOutOfRange, fmt::format("ENGINE_EVENT: MSI-X vector {}", c.event_value)));
      }
      card().raise_msix(static_cast<unsigned>(c.event_value));
      break;
    case e::kEventHalted: card().queue_halted(c.event_queue, c.event_value); break;
    default: break;
  }
  reply_ok(c);
}

std::atomic_ref<std::uint32_t> Session::shadow_word(std::size_t offset) {
  return std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(shadow_ + offset));
}

void Session::zero_shadow(std::uint32_t q) {
  shadow_word(q * emud::shadow::kStride + emud::shadow::kSqTail).store(0, std::memory_order_relaxed);
  shadow_word(q * emud::shadow::kStride + emud::shadow::kCqHead).store(0, std::memory_order_relaxed);
  applied_sq_[q] = applied_cq_[q] = 0;
}

void Session::apply_shadow() {
  if (shadow_ == nullptr || bar0_ == nullptr) return;
  auto apply = [&](std::size_t slot, std::uint32_t reg, auto& applied) {
    for (std::uint32_t q = 0; q < shadow_queues_; ++q) {
      const std::uint32_t v = shadow_word(q * emud::shadow::kStride + slot).load(std::memory_order_acquire);
      if (v == applied[q]) continue;
      applied[q] = v;
      bar0_->write32(fw::regs::queue_reg(q, reg), v);
    }
  };
  apply(emud::shadow::kCqHead, fw::regs::queue::kCqHead, applied_cq_);
  apply(emud::shadow::kSqTail, fw::regs::queue::kSqTail, applied_sq_);
}

void Session::doorbell_shadow(const ParsedCommand& c, std::vector<int>& fds) {
  if (shadow_ != nullptr) {
    return reply_error(c, Error(Code::kAlreadyExists, "DOORBELL_SHADOW: this connection has its shadow page"));
  }
  // Only a counting eventfd: anything else (another fd, or an EFD_SEMAPHORE eventfd, which a
  // read decrements by one) could poll readable for ever and spin this thread.
  const int efd = fds.at(0);
  std::ifstream info(fmt::format("/proc/self/fdinfo/{}", efd));
  const std::string fdinfo((std::istreambuf_iterator<char>(info)), std::istreambuf_iterator<char>());
  if (fdinfo.find("\neventfd-count:") == std::string::npos) {
    return reply_error(c, Error(Code::kInvalidArgument, "DOORBELL_SHADOW: the attached fd is not an eventfd"));
  }
  if (fdinfo.find("\neventfd-semaphore: 1") != std::string::npos) {
    return reply_error(c, Error(Code::kInvalidArgument,
                                "DOORBELL_SHADOW: the eventfd is in semaphore mode (EFD_SEMAPHORE); ring with a "
                                "counting one"));
  }
  auto m = dev_->mmio(pci::kBarRegs);
  if (!m) return reply_error(c, m.error());
  // Watched before anything changes; taken out again on the error below (closing our fd would
  // not do it: the client's copy keeps the open file, and so its registration, alive).
  if (ep_ >= 0 && !watch(efd, kEvBell)) {
    const int err = errno;
    return reply_error(
        c, Error(errno_code(err), fmt::format("DOORBELL_SHADOW: epoll_ctl of the eventfd: {}", std::strerror(err))));
  }
  const auto queues = std::min<std::uint32_t>(fw::regs::kNumQueues, emud::shadow::kMaxQueues);
  const int mfd = ::memfd_create("npo-emud doorbell shadow", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void* p = MAP_FAILED;
  if (mfd >= 0 && ::ftruncate(mfd, emud::shadow::kPageBytes) == 0) {
    p = ::mmap(nullptr, emud::shadow::kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  }
  // Sealed: the client can neither shrink the page under this mapping nor resize it.
  if (p == MAP_FAILED || ::fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    if (p != MAP_FAILED) ::munmap(p, emud::shadow::kPageBytes);
    if (mfd >= 0) ::close(mfd);
    if (ep_ >= 0) (void)::epoll_ctl(ep_, EPOLL_CTL_DEL, efd, nullptr);
    return reply_error(c, Error(errno_code(err), fmt::format("DOORBELL_SHADOW: shadow page: {}", std::strerror(err))));
  }
  shadow_ = static_cast<std::byte*>(p);
  bar0_ = *m;
  shadow_queues_ = queues;
  // The page starts as the card's registers are, so that nothing is applied at once.
  for (std::uint32_t q = 0; q < queues; ++q) {
    applied_sq_[q] = bar0_->read32(fw::regs::queue_reg(q, fw::regs::queue::kSqTail));
    applied_cq_[q] = bar0_->read32(fw::regs::queue_reg(q, fw::regs::queue::kCqHead));
    shadow_word(q * emud::shadow::kStride + emud::shadow::kSqTail).store(applied_sq_[q]);
    shadow_word(q * emud::shadow::kStride + emud::shadow::kCqHead).store(applied_cq_[q]);
  }
  posted_handled_ = 0;
  shadow_word(emud::shadow::kHandled).store(0, std::memory_order_release);
  (void)::fcntl(efd, F_SETFL, ::fcntl(efd, F_GETFL) | O_NONBLOCK);
  bell_fd_ = efd;
  fds.clear();  // the eventfd is ours now
  std::array<std::byte, emud::shadow::kBytes> body{};
  emud::store<std::uint32_t>(body, emud::shadow::kReplyQueues, queues);
  emud::store<std::uint32_t>(body, emud::shadow::kReplyStride, static_cast<std::uint32_t>(emud::shadow::kStride));
  reply_ok(c, body, mfd);
  ::close(mfd);  // the mapping and the client's copy keep the page
  srv_.log(fmt::format("card={} pid={}: shadow doorbells for {} queues", card_, pid_, queues));
}

}  // namespace npo::emu
