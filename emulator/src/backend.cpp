// SPDX-License-Identifier: Apache-2.0
// The emulator as a backend::Backend: enumerate cards, open them, and expose config space,
// BAR MMIO, the HBM aperture, DMA mapping through the IOMMU model, MSI-X eventfds and FLR.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "npo/emu/register.hpp"
#include "npo/hal/log.hpp"
#include "system.hpp"

namespace npo::emu {

namespace pci = fw::pci;

namespace {

bool aligned(std::uint64_t off, unsigned width) { return off % (width / 8) == 0; }

class BarMmio final : public backend::Mmio {
 public:
  BarMmio(Card& card, unsigned bar) : card_(card), bar_(bar) {}
  std::uint32_t read32(std::uint64_t off) noexcept override { return static_cast<std::uint32_t>(read(off, 32)); }
  std::uint64_t read64(std::uint64_t off) noexcept override { return read(off, 64); }
  void write32(std::uint64_t off, std::uint32_t v) noexcept override { write(off, 32, v); }
  void write64(std::uint64_t off, std::uint64_t v) noexcept override { write(off, 64, v); }
  std::uint64_t size() const noexcept override { return card_.bar_size(bar_); }

 private:
  bool check(std::uint64_t off, unsigned width) {
    if (aligned(off, width) && off + width / 8 <= size()) return true;
    if (!warned_.exchange(true)) {
      npo::log::get(npo::log::Subsystem::kEmulator)
          .warn(
              "card {} BAR{}: {}-bit access at 0x{:x} is misaligned or outside the BAR (size 0x{:x}); "
              "reads return all-ones, writes are dropped",
              card_.index(), bar_, width, off, size());
    }
    return false;
  }
  std::uint64_t read(std::uint64_t off, unsigned width) {
    if (!check(off, width)) return width == 64 ? ~0ULL : 0xffffffffULL;
    return bar_ == pci::kBarRegs ? card_.bar0_read(off, width) : card_.bar4_read(off, width);
  }
  void write(std::uint64_t off, unsigned width, std::uint64_t v) {
    if (!check(off, width)) return;
    if (bar_ == pci::kBarRegs) {
      card_.bar0_write(off, width, v);
    } else {
      card_.bar4_write(off, width, v);
    }
  }
  Card& card_;
  unsigned bar_;
  std::atomic<bool> warned_{false};
};

class EmuDevice;

/// The emulator's time base: its virtual clock (sleep_until advances it) or, in realtime
/// mode, emulated time since creation (sleep_until sleeps).
class EmuClock final : public backend::Clock {
 public:
  /// Longest wall time sleep_until waits for the firmwares' mailbox requests.
  static constexpr std::uint64_t kMailboxIdleCapNs = 10'000'000'000;
  explicit EmuClock(Emulator& emu) : emu_(emu) {}
  std::uint64_t now_ns() noexcept override { return emu_.now_ns(); }
  void sleep_until(std::uint64_t t_ns) noexcept override {
    if (is_virtual()) {
      // Emulated time does not pass while a firmware is still handling a mailbox request
      // (EmulatorImpl::mailbox_inflight): its reply takes no emulated time, however long its
      // thread waits for a CPU. A swallowed request is handled (dropped) at once, so a lost
      // reply still times out in emulated time. Capped, so a firmware that never finishes
      // cannot stop the clock. Also for a time already reached: sleep_until(now_ns()) lets
      // the requests in flight finish without moving time (card/deadline.hpp uses that).
      emu_.impl().wait_mailboxes_idle(kMailboxIdleCapNs);
      const std::uint64_t now = emu_.now_ns();
      if (t_ns > now) (void)emu_.advance(t_ns - now);
      return;
    }
    const std::uint64_t now = emu_.now_ns();
    if (t_ns > now) std::this_thread::sleep_for(std::chrono::nanoseconds(t_ns - now));
  }
  bool is_virtual() const noexcept override { return emu_.config().clock == ClockMode::kVirtual; }

 private:
  Emulator& emu_;
};

class EmuBackend final : public backend::Backend {
 public:
  EmuBackend(std::shared_ptr<Emulator> emu, std::string uri)
      : emu_(std::move(emu)), uri_(std::move(uri)), clock_(*emu_) {}
  backend::Clock& clock() noexcept override { return clock_; }
  std::string_view name() const noexcept override { return "emulator"; }
  const std::string& uri() const noexcept override { return uri_; }
  Result<std::vector<backend::FunctionInfo>> enumerate() override {
    std::vector<backend::FunctionInfo> out;
    out.reserve(emu_->card_count());
    for (std::size_t i = 0; i < emu_->card_count(); ++i) {
      if (!emu_->card(i).removed()) out.push_back(emu_->card(i).function_info());
    }
    return out;
  }
  Result<std::unique_ptr<backend::Device>> open(const backend::PciAddress& address) override;
  void release(std::uint32_t index) {
    std::lock_guard lock(mu_);
    open_.erase(index);
  }
  Emulator& emulator() { return *emu_; }

 private:
  std::shared_ptr<Emulator> emu_;
  std::string uri_;
  EmuClock clock_;
  std::mutex mu_;
  std::set<std::uint32_t> open_;
};

class EmuDevice final : public backend::Device {
 public:
  EmuDevice(EmuBackend& be, std::shared_ptr<Emulator> emu, Card& card)
      : be_(be),
        emu_(std::move(emu)),
        card_(card),
        info_(card.function_info()),
        bar0_(card, pci::kBarRegs),
        bar4_(card, pci::kBarMsix) {}
  ~EmuDevice() override {
    for (unsigned v = 0; v < pci::kMsixVectors; ++v) card_.set_msix_eventfd(v, -1);
    card_.iommu().clear();
    be_.release(card_.index());
  }
  const backend::FunctionInfo& info() const noexcept override { return info_; }

  Result<void> config_read(std::uint32_t offset, std::span<std::byte> out) override {
    if (offset > pci::cfg::kConfigSize || out.size() > pci::cfg::kConfigSize - offset) {
      return fail(Code::kOutOfRange, fmt::format("config read of {} bytes at 0x{:x} past 4 KiB", out.size(), offset));
    }
    std::size_t i = 0;
    while (i < out.size()) {
      const std::uint32_t o = offset + static_cast<std::uint32_t>(i);
      const unsigned n = (o % 4 == 0 && out.size() - i >= 4) ? 4 : (o % 2 == 0 && out.size() - i >= 2) ? 2 : 1;
      const std::uint32_t v = card_.cfg_read(o, n);
      for (unsigned b = 0; b < n; ++b) out[i + b] = static_cast<std::byte>(v >> (8 * b));
      i += n;
    }
    if (card_.removed())
      return fail(Code::kUnavailable, "card removed: config space reads as all-ones", {.card = card_.index()});
    return {};
  }
  Result<void> config_write(std::uint32_t offset, std::span<const std::byte> data) override {
    if (offset > pci::cfg::kConfigSize || data.size() > pci::cfg::kConfigSize - offset) {
      return fail(Code::kOutOfRange, fmt::format("config write of {} bytes at 0x{:x} past 4 KiB", data.size(), offset));
    }
    if (card_.removed()) return fail(Code::kUnavailable, "card removed", {.card = card_.index()});
    std::size_t i = 0;
    while (i < data.size()) {
      const std::uint32_t o = offset + static_cast<std::uint32_t>(i);
      const unsigned n = (o % 4 == 0 && data.size() - i >= 4) ? 4 : (o % 2 == 0 && data.size() - i >= 2) ? 2 : 1;
      std::uint32_t v = 0;
      for (unsigned b = 0; b < n; ++b) v |= static_cast<std::uint32_t>(data[i + b]) << (8 * b);
      card_.cfg_write(o, n, v);
      i += n;
    }
    return {};
  }
  Result<backend::RegionInfo> region_info(unsigned index) override {
    if (index > 5) return fail(Code::kInvalidArgument, fmt::format("BAR index {} > 5", index));
    backend::RegionInfo r;
    r.index = index;
    r.size = card_.bar_size(index);
    r.is_64bit = r.size != 0;
    r.prefetchable = index == pci::kBarHbm;
    r.mappable = index == pci::kBarHbm;
    return r;
  }
  Result<backend::Mmio*> mmio(unsigned index) override {
    if (index == pci::kBarRegs) return &bar0_;
    if (index == pci::kBarMsix) return &bar4_;
    if (index == pci::kBarHbm) {
      return fail(Code::kUnimplemented, "BAR2 is the HBM aperture: use map_aperture()", {.card = card_.index()});
    }
    return fail(Code::kNotFound, fmt::format("BAR{} is not implemented by the card", index), {.card = card_.index()});
  }
  Result<std::span<std::byte>> map_aperture(unsigned index) override {
    if (index != pci::kBarHbm) {
      return fail(Code::kUnimplemented, fmt::format("BAR{} cannot be mapped directly", index), {.card = card_.index()});
    }
    return card_.hbm();
  }
  Result<ApertureFd> aperture_fd(unsigned index) override {
    if (index != pci::kBarHbm) {
      return fail(Code::kUnimplemented, fmt::format("BAR{} cannot be shared", index), {.card = card_.index()});
    }
    const auto [fd, offset] = card_.system().hbm_fd(card_.index());
    return ApertureFd{fd, offset, card_.config().hbm_bytes};
  }
  std::vector<backend::IovaRange> iova_ranges() const override { return {{Iommu::kIovaFirst, Iommu::kIovaLast}}; }
  Result<void> dma_map(const void* vaddr, std::uint64_t iova, std::uint64_t length,
                       backend::DmaAccess access) override {
    if (card_.removed()) return fail(Code::kUnavailable, "card removed", {.card = card_.index()});
    auto r = card_.iommu().map(vaddr, iova, length, access);
    if (!r) r.error().with({.card = card_.index()});
    return r;
  }
  Result<void> dma_map_process(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length,
                               backend::DmaAccess access) override {
    if (card_.removed()) return fail(Code::kUnavailable, "card removed", {.card = card_.index()});
    auto r = card_.iommu().map_process(static_cast<int>(::getpid()), -1, vaddr, iova, length, access);
    if (!r) r.error().with({.card = card_.index()});
    return r;
  }
  Result<void> dma_unmap(std::uint64_t iova, std::uint64_t length) override {
    auto r = card_.iommu().unmap(iova, length);
    if (!r) r.error().with({.card = card_.index()});
    return r;
  }
  unsigned msix_vectors() const noexcept override { return pci::kMsixVectors; }
  // The emulated card has no MSI capability, only MSI-X.
  Result<void> set_msi_eventfd(int) override {
    return fail(Code::kUnimplemented, "the emulated card has no MSI capability (it signals MSI-X)");
  }
  Result<void> set_msix_eventfds(unsigned first, std::span<const int> fds) override {
    if (first > pci::kMsixVectors || fds.size() > pci::kMsixVectors - first) {
      return fail(Code::kOutOfRange,
                  fmt::format("MSI-X vectors {}..{} past {} vectors", first, first + fds.size(), pci::kMsixVectors));
    }
    for (int fd : fds) {
      if (fd < -1 || (fd >= 0 && ::fcntl(fd, F_GETFD) < 0)) {
        return fail(Code::kInvalidArgument, fmt::format("MSI-X: fd {} is not an open file descriptor", fd));
      }
    }
    for (std::size_t i = 0; i < fds.size(); ++i) card_.set_msix_eventfd(first + static_cast<unsigned>(i), fds[i]);
    return {};
  }
  Result<void> reset() override {
    if (card_.removed()) return fail(Code::kUnavailable, "card removed", {.card = card_.index()});
    // VFIO_DEVICE_RESET semantics: the kernel saves config space, resets the function and
    // restores it (pci_save_state / pci_restore_state), capabilities included. Writable bits
    // come back; read-only ones are the card's own. The FLR trigger bit is never restored.
    std::array<std::byte, pci::cfg::kConfigSize> saved{};
    (void)config_read(0, saved);
    card_.reset("flr", true);
    const std::uint32_t devctl_hi = pci::cfg::kCardPcieCap + pci::cfg::pcie::kDevCtl + 1;
    saved[devctl_hi] &= std::byte{0x7f};
    (void)config_write(pci::cfg::kCommand, std::span(saved).subspan(pci::cfg::kCommand, 2));
    (void)config_write(pci::cfg::kBar0 - 4,
                       std::span(saved).subspan(pci::cfg::kBar0 - 4, pci::cfg::kConfigSize - (pci::cfg::kBar0 - 4)));
    return {};
  }

 private:
  EmuBackend& be_;
  std::shared_ptr<Emulator> emu_;
  Card& card_;
  backend::FunctionInfo info_;
  BarMmio bar0_;
  BarMmio bar4_;
};

Result<std::unique_ptr<backend::Device>> EmuBackend::open(const backend::PciAddress& address) {
  for (std::size_t i = 0; i < emu_->card_count(); ++i) {
    Card& c = emu_->card(i);
    if (c.function_info().address != address) continue;
    if (c.removed()) return fail(Code::kNotFound, fmt::format("{}: card removed", address.to_string()));
    std::lock_guard lock(mu_);
    if (!open_.insert(c.index()).second) {
      return fail(Code::kAlreadyExists, fmt::format("{} is already open", address.to_string()), {.card = c.index()});
    }
    return std::unique_ptr<backend::Device>(std::make_unique<EmuDevice>(*this, emu_, c));
  }
  return fail(Code::kNotFound, fmt::format("no emulated card at {}", address.to_string()));
}

}  // namespace

std::unique_ptr<backend::Backend> Emulator::make_backend(std::string uri) {
  return std::make_unique<EmuBackend>(shared_from_this(), std::move(uri));
}

Result<void> register_backend(backend::Registry& registry) {
  return registry.add("emu",
                      {"emu:mesh8", "emu:N (N = 1..1024)", "emu:file=PATH",
                       "emu:...?clock=virtual|realtime&seed=N&hbm=SIZE&ports=N&scenario=PATH"},
                      [](std::string_view rest, std::string_view uri) -> Result<std::unique_ptr<backend::Backend>> {
                        auto cfg = parse_uri(rest);
                        if (!cfg) return std::unexpected(cfg.error());
                        auto emu = Emulator::create(*cfg);
                        if (!emu) return std::unexpected(emu.error());
                        return (*emu)->make_backend(std::string(uri));
                      });
}

}  // namespace npo::emu
