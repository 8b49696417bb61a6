// SPDX-License-Identifier: Apache-2.0
// drivers/card: windows -- export through the card's window translation table (registers.md §6),
// revoke with in-flight drain, handles, CPU mapping through BAR2, cross-process sharing.
#include "npo/hal/window.hpp"

#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "card/deadline.hpp"
#include "card/device_impl.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/log.hpp"
#include "npo/hal/system.hpp"

namespace npo {

namespace regs = fw::regs;
namespace wr = fw::regs::window;

// ==== Handle serialisation ===================================================================

namespace {
constexpr std::uint16_t kHandleMagic = 0x4e57;  // "WN"
constexpr std::uint8_t kHandleVersion = 1;
}  // namespace

std::array<std::byte, WindowHandle::kSerializedSize> WindowHandle::serialize() const {
  std::array<std::byte, kSerializedSize> b{};
  fw::store_le<std::uint16_t>(b.data(), 0, kHandleMagic);
  fw::store_le<std::uint8_t>(b.data(), 2, kHandleVersion);
  fw::store_le<std::uint8_t>(b.data(), 3, static_cast<std::uint8_t>((rights.read ? 1 : 0) | (rights.write ? 2 : 0)));
  fw::store_le<std::uint32_t>(b.data(), 4, fabric_id);
  fw::store_le<std::uint16_t>(b.data(), 8, window_id);
  fw::store_le<std::uint16_t>(b.data(), 10, generation);
  fw::store_le<std::uint64_t>(b.data(), 12, offset);
  fw::store_le<std::uint64_t>(b.data(), 20, size);
  fw::store_le<std::uint64_t>(b.data(), 28, key);
  fw::store_le<std::uint32_t>(b.data(), 36, fw::mbox::crc32c(std::span<const std::byte>(b.data(), 36)));
  return b;
}

Result<WindowHandle> WindowHandle::deserialize(std::span<const std::byte> b) {
  if (b.size() != kSerializedSize) {
    return fail(Code::kInvalidArgument,
                fmt::format("window handle is {} bytes, expected {}", b.size(), kSerializedSize));
  }
  if (fw::load_le<std::uint16_t>(b.data(), 0) != kHandleMagic ||
      fw::load_le<std::uint8_t>(b.data(), 2) != kHandleVersion) {
    return fail(Code::kInvalidArgument, "not a window handle (magic/version)");
  }
  if (fw::load_le<std::uint32_t>(b.data(), 36) != fw::mbox::crc32c(b.first(36))) {
    return fail(Code::kDataLoss, "window handle CRC32C mismatch");
  }
  WindowHandle h;
  const auto r = fw::load_le<std::uint8_t>(b.data(), 3);
  h.rights = {(r & 1) != 0, (r & 2) != 0};
  h.fabric_id = fw::load_le<std::uint32_t>(b.data(), 4);
  h.window_id = fw::load_le<std::uint16_t>(b.data(), 8);
  h.generation = fw::load_le<std::uint16_t>(b.data(), 10);
  h.offset = fw::load_le<std::uint64_t>(b.data(), 12);
  h.size = fw::load_le<std::uint64_t>(b.data(), 20);
  h.key = fw::load_le<std::uint64_t>(b.data(), 28);
  return h;
}

Result<WindowHandle> import_window(System& system, std::span<const std::byte> serialized) {
  auto h = WindowHandle::deserialize(serialized);
  if (!h) return h;
  if (auto d = system.device_by_fabric_id(h->fabric_id); d) return h;
  // Not opened by this process: accept an owner the fabric reaches (a valid route to it).
  if (h->fabric_id < regs::kRouteEntries) {
    for (std::size_t i = 0; i < system.device_count(); ++i) {
      auto& d = impl_of(system.device(i));
      const std::uint32_t v = d.bar0->read32(regs::route_reg(h->fabric_id));
      if (v != 0xffffffffu && regs::route::kValid.get(v) != 0) return h;
    }
  }
  return fail(Code::kNotFound, fmt::format("window owner fabric ID {} is not in system '{}' and no card of it has a "
                                           "route to it",
                                           h->fabric_id, system.uri()));
}

// ==== Export / revoke ===========================================================================

namespace {

class WindowImpl final : public Window {
 public:
  WindowImpl(DeviceImpl& d, WindowHandle h) : d_(d), h_(h) {}
  ~WindowImpl() override {
    if (auto r = revoke(); !r) {
      npo::log::get(npo::log::Subsystem::kDma)
          .error("window {} revoke on destruction: {}", h_.window_id, r.error().to_string());
    }
    std::lock_guard lock(d_.windows_mu);
    d_.window_used[h_.window_id] = false;
  }
  const WindowHandle& handle() const noexcept override { return h_; }
  bool revoked() const noexcept override { return revoked_; }

  Result<void> revoke() override {
    if (revoked_) return {};
    backend::Mmio& m = *d_.bar0;
    std::uint16_t next_gen;
    {
      std::lock_guard lock(d_.windows_mu);
      next_gen = ++d_.window_gen[h_.window_id];
      if (next_gen == 0) next_gen = ++d_.window_gen[h_.window_id];  // 0 is never issued
    }
    // Entry invalid with a new generation: every check after this write fails.
    m.write32(regs::window_reg(h_.window_id, wr::kCtrl), wr::kCtrlGeneration.make(next_gen));
    revoked_ = true;
    // In-flight remote ops drain as fast as the engines go: a kCardWork deadline (1 s of
    // platform time; card/deadline.hpp) that does not move emulated time.
    const card::Deadline deadline(*d_.clock, 1'000'000'000, card::WaitFor::kCardWork);
    for (unsigned i = 0;; ++i) {
      const std::uint32_t st = m.read32(regs::window_reg(h_.window_id, wr::kStatus));
      if (st == 0xffffffffu) return fail(Code::kUnavailable, "card removed", {.card = d_.info.index});
      if (wr::kStatusInflight.get(st) == 0) break;
      if (deadline.expired()) {
        return fail(Code::kDeadlineExceeded,
                    fmt::format("window {}: {} remote ops still inside 1 s after revoke", h_.window_id,
                                wr::kStatusInflight.get(st)),
                    {.card = d_.info.index});
      }
      deadline.pause(0, 0);  // attempt 0: a yield, as a drain takes microseconds
    }
    m.write64(regs::window_reg(h_.window_id, wr::kKey), 0);
    return {};
  }

 private:
  DeviceImpl& d_;
  WindowHandle h_;
  bool revoked_ = false;
};

std::uint64_t random_key() {
  std::uint64_t k = 0;
  while (k == 0) {
    if (::getrandom(&k, sizeof k, 0) != static_cast<ssize_t>(sizeof k)) {
      k = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) *
          0x9e3779b97f4a7c15ULL;
    }
  }
  return k;
}

}  // namespace

Result<std::unique_ptr<Window>> export_window(Device& device, std::uint64_t offset, std::uint64_t size,
                                              WindowRights rights) {
  auto& d = impl_of(device);
  const ErrorContext ctx{.card = d.info.index};
  if (d.info.read_only) return read_only_refusal(d.info, "exporting a window");
  if (size == 0 || offset % wr::kAlign != 0 || size % wr::kAlign != 0) {
    return fail(Code::kInvalidArgument,
                fmt::format("window [0x{:x}, +{}): offset and size must be multiples of 4 KiB, size > 0", offset, size),
                ctx);
  }
  if (offset > d.info.hbm_bytes || size > d.info.hbm_bytes - offset) {
    return fail(Code::kOutOfRange,
                fmt::format("window [0x{:x}, +{}) past HBM ({} bytes)", offset, size, d.info.hbm_bytes), ctx);
  }
  unsigned slot = 0;
  std::uint16_t gen = 0;
  {
    std::lock_guard lock(d.windows_mu);
    while (slot < d.window_used.size() && d.window_used[slot]) ++slot;
    if (slot == d.window_used.size()) {
      return fail(
          Code::kResourceExhausted,
          fmt::format("window translation table of card {} full ({} slots)", d.info.index, d.window_used.size()), ctx);
    }
    d.window_used[slot] = true;
    gen = d.window_gen[slot];
  }
  WindowHandle h;
  h.fabric_id = d.info.fabric_id;
  h.window_id = static_cast<std::uint16_t>(slot);
  h.generation = gen;
  h.offset = offset;
  h.size = size;
  h.key = random_key();
  h.rights = rights;
  backend::Mmio& m = *d.bar0;
  m.write64(regs::window_reg(slot, wr::kHbmOffset), offset);
  m.write64(regs::window_reg(slot, wr::kSize), size);
  m.write64(regs::window_reg(slot, wr::kKey), h.key);
  m.write32(regs::window_reg(slot, wr::kCtrl), wr::kCtrlValid.make(1) | wr::kCtrlRead.make(rights.read ? 1 : 0) |
                                                   wr::kCtrlWrite.make(rights.write ? 1 : 0) |
                                                   wr::kCtrlGeneration.make(gen));
  const std::uint32_t st = m.read32(regs::window_reg(slot, wr::kStatus));
  // A removed card reads all-ones, ACTIVE included: test for that first.
  if (st == 0xffffffffu || !wr::kStatusActive.get(st)) {
    std::lock_guard lock(d.windows_mu);
    d.window_used[slot] = false;
    if (st == 0xffffffffu) return fail(Code::kUnavailable, "card removed", ctx);
    return fail(Code::kInternal, fmt::format("card refused window entry {} (STATUS 0x{:x})", slot, st), ctx);
  }
  return std::unique_ptr<Window>(std::make_unique<WindowImpl>(d, h));
}

WindowBudget window_budget(Device& device) {
  auto& d = impl_of(device);
  std::lock_guard lock(d.windows_mu);
  WindowBudget b;
  b.slots_total = static_cast<unsigned>(d.window_used.size());
  for (bool u : d.window_used) b.slots_used += u ? 1 : 0;
  b.aperture_bytes = d.aperture_bytes;
  b.aperture_used = d.aperture_used.load();
  return b;
}

// ==== CPU mapping ===================================================================================

Result<void> WindowMapping::write(std::uint64_t offset, std::span<const std::byte> src) {
  auto b = bytes();
  if (offset > b.size() || src.size() > b.size() - offset) {
    return fail(Code::kOutOfRange,
                fmt::format("window write of {} bytes at {} past {} bytes", src.size(), offset, b.size()));
  }
  std::memcpy(b.data() + offset, src.data(), src.size());
  return {};
}

Result<void> WindowMapping::read(std::uint64_t offset, std::span<std::byte> dst) {
  auto b = bytes();
  if (offset > b.size() || dst.size() > b.size() - offset) {
    return fail(Code::kOutOfRange,
                fmt::format("window read of {} bytes at {} past {} bytes", dst.size(), offset, b.size()));
  }
  std::memcpy(dst.data(), b.data() + offset, dst.size());
  return {};
}

namespace {

class ApertureMapping final : public WindowMapping {
 public:
  ApertureMapping(DeviceImpl& d, WindowHandle h, std::span<std::byte> b) : d_(&d), h_(h), b_(b) {}
  ApertureMapping(WindowHandle h, void* base, std::size_t len, std::size_t skip)
      : h_(h), b_(static_cast<std::byte*>(base) + skip, h.size), owned_(base), owned_len_(len) {}
  ~ApertureMapping() override {
    if (d_ != nullptr) d_->aperture_used.fetch_sub(h_.size);
    if (owned_ != nullptr) ::munmap(owned_, owned_len_);
  }
  std::span<std::byte> bytes() noexcept override { return b_; }
  const WindowHandle& handle() const noexcept override { return h_; }

 private:
  DeviceImpl* d_ = nullptr;
  WindowHandle h_;
  std::span<std::byte> b_;
  void* owned_ = nullptr;
  std::size_t owned_len_ = 0;
};

}  // namespace

Result<std::unique_ptr<WindowMapping>> map_window(Device& device, const Window& window) {
  auto& d = impl_of(device);
  const auto& h = window.handle();
  const ErrorContext ctx{.card = d.info.index};
  if (h.fabric_id != d.info.fabric_id) {
    return fail(Code::kInvalidArgument,
                fmt::format("window of fabric ID {} mapped through card {}", h.fabric_id, d.info.fabric_id), ctx);
  }
  if (window.revoked()) return fail(Code::kFailedPrecondition, "window revoked", ctx);
  // A removed card reads all-ones: no new view of memory that is gone.
  if (d.bar0->read32(regs::global::kMagic) == 0xffffffffu) return fail(Code::kUnavailable, "card removed", ctx);
  auto ap = d.dev->map_aperture(fw::pci::kBarHbm);
  if (!ap) return std::unexpected(Error(ap.error()).with(ctx));
  if (h.offset + h.size > ap->size()) {
    return fail(Code::kOutOfRange, "window lies beyond the BAR2 aperture (resize BAR2)", ctx);
  }
  std::uint64_t used = d.aperture_used.load();
  do {
    if (used + h.size > d.aperture_bytes) {
      return fail(Code::kResourceExhausted,
                  fmt::format("BAR aperture budget of card {} exhausted: {} of {} bytes mapped, asked {}", d.info.index,
                              used, d.aperture_bytes, h.size),
                  ctx);
    }
  } while (!d.aperture_used.compare_exchange_weak(used, used + h.size));
  return std::unique_ptr<WindowMapping>(std::make_unique<ApertureMapping>(d, h, ap->subspan(h.offset, h.size)));
}

// ==== Cross-process sharing (SCM_RIGHTS) ===============================================================

Result<void> send_window(int socket_fd, Device& device, const Window& window) {
  auto& d = impl_of(device);
  // The window's bytes alone where the backend can (npo-emud: the window's own memfd).
  const auto& h = window.handle();
  auto ap = d.dev->aperture_range_fd(fw::pci::kBarHbm, h.offset, h.size);
  if (!ap) return std::unexpected(ap.error());
  // Payload: the handle, then the mmap offset of HBM byte 0 in the fd (u64, modulo 2^64: the
  // receiver maps base + handle offset, the window's first byte).
  std::array<std::byte, WindowHandle::kSerializedSize + 8> payload{};
  const auto hb = h.serialize();
  std::memcpy(payload.data(), hb.data(), hb.size());
  fw::store_le<std::uint64_t>(payload.data(), WindowHandle::kSerializedSize, ap->offset - h.offset);
  iovec iov{payload.data(), payload.size()};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> ctrl{};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl.data();
  msg.msg_controllen = ctrl.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &ap->fd, sizeof(int));
  ssize_t n;
  do {
    n = ::sendmsg(socket_fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return fail_errno(errno, "send_window: sendmsg");
  if (static_cast<std::size_t>(n) != payload.size()) return fail(Code::kDataLoss, "send_window: short sendmsg");
  return {};
}

Result<std::unique_ptr<WindowMapping>> receive_window(int socket_fd) {
  std::array<std::byte, WindowHandle::kSerializedSize + 8> payload{};
  iovec iov{payload.data(), payload.size()};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> ctrl{};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl.data();
  msg.msg_controllen = ctrl.size();
  ssize_t n;
  do {
    n = ::recvmsg(socket_fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return fail_errno(errno, "receive_window: recvmsg");
  int fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  }
  if (static_cast<std::size_t>(n) != payload.size() || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    if (fd >= 0) ::close(fd);
    return fail(Code::kDataLoss, fmt::format("receive_window: {} bytes, expected {}", n, payload.size()));
  }
  if (fd < 0) return fail(Code::kInvalidArgument, "receive_window: no file descriptor attached");
  auto h = WindowHandle::deserialize(std::span<const std::byte>(payload.data(), WindowHandle::kSerializedSize));
  if (!h) {
    ::close(fd);
    return std::unexpected(h.error());
  }
  const auto base = fw::load_le<std::uint64_t>(payload.data(), WindowHandle::kSerializedSize);
  const std::uint64_t start = base + h->offset;
  const std::uint64_t page_off = start % 4096;
  const std::size_t len = static_cast<std::size_t>(page_off + h->size);
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start - page_off));
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return fail_errno(err, "receive_window: mmap of the window");
  return std::unique_ptr<WindowMapping>(std::make_unique<ApertureMapping>(*h, p, len, page_off));
}

}  // namespace npo
