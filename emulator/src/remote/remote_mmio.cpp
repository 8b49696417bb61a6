// SPDX-License-Identifier: Apache-2.0
// RemoteMmio: a BAR of an emu-remote card. Reads are round trips, writes are posted, doorbells
// go to the shadow page or the local engines, and an observer's mailbox is a private one.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "npo/emu/register.hpp"
#include "npo/fw/emud.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/host_memory.hpp"
#include "npo/hal/log.hpp"
#include "remote/remote_internal.hpp"

namespace npo::emu::remote {

namespace {

namespace pci = fw::pci;

class RemoteMmio final : public backend::Mmio {
 public:
  /// `observer`: the card is attached read-only (spec §2): register writes are dropped here,
  /// and the BAR0 mailbox block is a private one whose requests go to MAILBOX_OBSERVE (§5.10),
  /// so the owner's mailbox exchange is never touched.
  /// `engine`: this process runs the card's DMA engines (spec §5.12): BAR0 doorbells go to it.
  /// `views`: window CTRL writes go through it (spec §5.13), else posted like the others.
  RemoteMmio(Conn& c, unsigned bar, std::uint64_t size, bool observer, std::uint32_t card, ClientEngine* engine,
             HbmViews* views)
      : c_(c), bar_(bar), size_(size), observer_(observer), card_(card), engine_(engine), views_(views) {}
  std::uint32_t read32(std::uint64_t off) noexcept override {
    if (in_mailbox(off)) return static_cast<std::uint32_t>(mbox_read(off - fw::regs::kMailboxBase, 4));
    return static_cast<std::uint32_t>(read(off, 4));
  }
  std::uint64_t read64(std::uint64_t off) noexcept override {
    if (in_mailbox(off)) return mbox_read(off - fw::regs::kMailboxBase, 8);
    return read(off, 8);
  }
  void write32(std::uint64_t off, std::uint32_t v) noexcept override { write(off, 4, v); }
  void write64(std::uint64_t off, std::uint64_t v) noexcept override { write(off, 8, v); }
  std::uint64_t size() const noexcept override { return size_; }

 private:
  static constexpr std::uint64_t kMboxSpan = fw::regs::mbox::kRspBuf + fw::regs::mbox::kBufSize;
  bool in_mailbox(std::uint64_t off) const noexcept {
    return observer_ && bar_ == pci::kBarRegs && off >= fw::regs::kMailboxBase &&
           off < fw::regs::kMailboxBase + kMboxSpan;
  }
  std::uint64_t read(std::uint64_t off, std::uint32_t n) noexcept {
    const std::uint64_t ones = n == 8 ? ~0ULL : 0xffffffffULL;
    std::array<std::byte, emud::access::kBytes> b{};
    emud::store<std::uint64_t>(b, emud::access::kOffset, off);
    emud::store<std::uint32_t>(b, emud::access::kRegion, bar_);
    emud::store<std::uint32_t>(b, emud::access::kCount, n);
    auto r = c_.call(emud::Command::kRegionRead, b);
    if (!r || r->body.size() != emud::access::kBytes + n) return ones;
    std::uint64_t v = 0;
    std::memcpy(&v, r->body.data() + emud::access::kBytes, n);
    return v;
  }
  void write(std::uint64_t off, std::uint32_t n, std::uint64_t v) noexcept {
    if (observer_) {
      if (in_mailbox(off)) return mbox_write(off - fw::regs::kMailboxBase, n, v);
      if (!warned_.exchange(true)) {
        npo::log::get(npo::log::Subsystem::kBackend)
            .warn(
                "emu-remote: card {} is attached read-only (mode=ro): register write at BAR{}+0x{:x} dropped; "
                "only the card's owner changes it",
                card_, bar_, off);
      }
      return;
    }
    // A queue doorbell with local engines (spec §5.12): the queue runs on this thread, after
    // every posted write before it reached the card.
    if (engine_ != nullptr && bar_ == pci::kBarRegs && engine_->runs_here()) {
      if (n == 8 && (ClientEngine::is_doorbell(off) || ClientEngine::is_doorbell(off + 4))) {
        write(off, 4, v & 0xffffffffULL);
        write(off + 4, 4, v >> 32);
        return;
      }
      if (n == 4 && ClientEngine::is_doorbell(off)) {
        if (c_.sync_posted()) engine_->doorbell(off, static_cast<std::uint32_t>(v));
        return;
      }
    }
    // A queue doorbell: through the shadow page when the connection has one (spec §5.11). An
    // 8-byte write over one goes as the card takes it, two 32-bit writes, low half first.
    if (bar_ == pci::kBarRegs && n == 8 && (c_.shadowed(off) || c_.shadowed(off + 4))) {
      write(off, 4, v & 0xffffffffULL);
      write(off + 4, 4, v >> 32);
      return;
    }
    if (bar_ == pci::kBarRegs && n == 4 && c_.ring_shadow(off, static_cast<std::uint32_t>(v))) return;
    std::array<std::byte, emud::access::kBytes + 8> b{};
    emud::store<std::uint64_t>(b, emud::access::kOffset, off);
    emud::store<std::uint32_t>(b, emud::access::kRegion, bar_);
    emud::store<std::uint32_t>(b, emud::access::kCount, n);
    std::memcpy(b.data() + emud::access::kBytes, &v, n);
    const auto body = std::span(b).first(emud::access::kBytes + n);
    // A window commit (spec §5.13): a round trip, and this process's views of the range follow it.
    if (views_ != nullptr && bar_ == pci::kBarRegs && off >= fw::regs::kWindowBase &&
        off < fw::regs::kWindowBase + std::uint64_t{fw::regs::kWindowEntries} * fw::regs::kWindowStride &&
        (off - fw::regs::kWindowBase) % fw::regs::kWindowStride == fw::regs::window::kCtrl) {
      const auto w = static_cast<unsigned>((off - fw::regs::kWindowBase) / fw::regs::kWindowStride);
      views_->window_ctrl(w, [&] { (void)c_.call(emud::Command::kRegionWrite, body); });
      return;
    }
    // Posted, like a PCIe memory write: one sendmsg, no reply (ordered before later reads).
    (void)c_.call(emud::Command::kRegionWrite, body, {}, true);
  }

  // ---- The observer's private mailbox (registers.md §4 layout, served locally) ----
  std::uint64_t mbox_read(std::uint64_t off, std::uint32_t n) noexcept {
    namespace m = fw::regs::mbox;
    std::lock_guard lock(mb_mu_);
    const std::uint64_t ones = n == 8 ? ~0ULL : 0xffffffffULL;
    if (c_.dead()) return ones;  // the daemon is gone: reads all-ones, as a removed card
    std::uint64_t v = 0;
    if (off >= m::kRspBuf && off + n <= m::kRspBuf + m::kBufSize) {
      std::memcpy(&v, rsp_.data() + (off - m::kRspBuf), n);
    } else if (off >= m::kReqBuf && off + n <= m::kReqBuf + m::kBufSize) {
      std::memcpy(&v, req_.data() + (off - m::kReqBuf), n);
    } else if (off == m::kStatus) {
      v = status_;
    } else if (off == m::kReqLen) {
      v = req_len_;
    } else if (off == m::kRspLen) {
      v = rsp_len_;
    }
    return v;
  }
  void mbox_write(std::uint64_t off, std::uint32_t n, std::uint64_t v) noexcept {
    namespace m = fw::regs::mbox;
    namespace mb = fw::mbox;
    std::lock_guard lock(mb_mu_);
    if (off >= m::kReqBuf && off + n <= m::kReqBuf + m::kBufSize) {
      std::memcpy(req_.data() + (off - m::kReqBuf), &v, n);
      return;
    }
    if (off == m::kReqLen) {
      req_len_ = static_cast<std::uint32_t>(v);
      return;
    }
    if (off == m::kStatus) {
      status_ &= ~static_cast<std::uint32_t>(v & (m::kStatusDone.mask() | m::kStatusError.mask()));
      return;
    }
    if (off != m::kCtrl || m::kCtrlSend.get(static_cast<std::uint32_t>(v)) == 0) return;
    if (req_len_ < emud::observe::kMinBytes || req_len_ > emud::observe::kMaxBytes) {
      rsp_len_ = 0;
      status_ = m::kStatusDone.mask() | m::kStatusError.mask();
      return;
    }
    auto r = c_.call(emud::Command::kMailboxObserve, std::span<const std::byte>(req_.data(), req_len_));
    if (r && r->body.size() >= mb::hdr::kSize && r->body.size() <= m::kBufSize) {
      std::memcpy(rsp_.data(), r->body.data(), r->body.size());
      rsp_len_ = static_cast<std::uint32_t>(r->body.size());
      status_ = m::kStatusDone.mask();
      return;
    }
    if (!r && r.error().code() == Code::kPermissionDenied) {
      // The command would change the card: answer it as the firmware answers a write to a
      // read-only byte (READ_ONLY -> kPermissionDenied in the mailbox client).
      npo::log::get(npo::log::Subsystem::kBackend).warn("emu-remote: {}", r.error().message());
      std::array<std::byte, mb::hdr::kSize> h{};
      std::memcpy(h.data(), req_.data(), mb::hdr::kSize);
      fw::store_le<std::uint8_t>(h.data(), mb::hdr::kFlags, mb::hdr::kFlagResponse);
      fw::store_le<std::uint16_t>(h.data(), mb::hdr::kPayloadLen, 0);
      fw::store_le<std::uint16_t>(h.data(), mb::hdr::kStatus, static_cast<std::uint16_t>(mb::Status::kReadOnly));
      fw::store_le<std::uint32_t>(h.data(), mb::hdr::kCrc, 0);
      fw::store_le<std::uint32_t>(h.data(), mb::hdr::kCrc, mb::message_crc(std::span<const std::byte>(h)));
      std::memcpy(rsp_.data(), h.data(), h.size());
      rsp_len_ = mb::hdr::kSize;
      status_ = m::kStatusDone.mask();
      return;
    }
    // Daemon gone or a malformed exchange: the request could not be served.
    rsp_len_ = 0;
    status_ = m::kStatusDone.mask() | m::kStatusError.mask();
  }

  Conn& c_;
  unsigned bar_;
  std::uint64_t size_;
  bool observer_;
  std::uint32_t card_;
  ClientEngine* engine_;
  HbmViews* views_;
  std::atomic<bool> warned_{false};
  std::mutex mb_mu_;
  std::array<std::byte, fw::regs::mbox::kBufSize> req_{};
  std::array<std::byte, fw::regs::mbox::kBufSize> rsp_{};
  std::uint32_t req_len_ = 0;
  std::uint32_t rsp_len_ = 0;
  std::uint32_t status_ = 0;
};

}  // namespace

std::unique_ptr<backend::Mmio> make_remote_mmio(Conn& c, unsigned bar, std::uint64_t size, bool observer,
                                                std::uint32_t card, ClientEngine* engine, HbmViews* views) {
  return std::make_unique<RemoteMmio>(c, bar, size, observer, card, engine, views);
}

}  // namespace npo::emu::remote
