// SPDX-License-Identifier: Apache-2.0
#include "npo/hal/backend/pci.hpp"

#include <array>
#include <set>

#include <fmt/format.h>

namespace npo::backend {

namespace {
// Standard numbers (PCI Local Bus 3.0 §6.1, PCIe 6.0 §7.5.3, §7.6.3).
constexpr std::uint32_t kStatus = 0x06;
constexpr std::uint16_t kStatusCapList = 1u << 4;
constexpr std::uint32_t kCapPtr = 0x34;
constexpr std::uint32_t kExtStart = 0x100;
constexpr std::uint32_t kConfigSize = 4096;
constexpr std::uint8_t kCapIdPcie = 0x10;

template <typename T>
Result<T> read_n(Device& dev, std::uint32_t off) {
  std::array<std::byte, sizeof(T)> b{};
  if (auto r = dev.config_read(off, b); !r) return std::unexpected(r.error());
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(b[i]) << (8 * i));
  return v;
}
template <typename T>
Result<void> write_n(Device& dev, std::uint32_t off, T v) {
  std::array<std::byte, sizeof(T)> b{};
  for (std::size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<std::byte>(v >> (8 * i));
  return dev.config_write(off, b);
}
}  // namespace

Result<std::uint8_t> config_read8(Device& dev, std::uint32_t off) { return read_n<std::uint8_t>(dev, off); }
Result<std::uint16_t> config_read16(Device& dev, std::uint32_t off) { return read_n<std::uint16_t>(dev, off); }
Result<std::uint32_t> config_read32(Device& dev, std::uint32_t off) { return read_n<std::uint32_t>(dev, off); }
Result<void> config_write16(Device& dev, std::uint32_t off, std::uint16_t v) { return write_n(dev, off, v); }
Result<void> config_write32(Device& dev, std::uint32_t off, std::uint32_t v) { return write_n(dev, off, v); }

Result<std::vector<Capability>> walk_capabilities(Device& dev) {
  std::vector<Capability> out;
  auto status = config_read16(dev, kStatus);
  if (!status) return std::unexpected(status.error());
  if (*status & kStatusCapList) {
    auto ptr = config_read8(dev, kCapPtr);
    if (!ptr) return std::unexpected(ptr.error());
    std::uint32_t off = *ptr & 0xfc;
    std::set<std::uint32_t> seen;
    for (int n = 0; off != 0; ++n) {
      if (off < 0x40 || off > 0xfc || n >= 48 || !seen.insert(off).second) {
        return fail(Code::kDataLoss, fmt::format("capability list corrupt at 0x{:02x} (entry {})", off, n));
      }
      auto hdr = config_read16(dev, off);
      if (!hdr) return std::unexpected(hdr.error());
      out.push_back(Capability{static_cast<std::uint16_t>(*hdr & 0xff), off, false, 0});
      off = (*hdr >> 8) & 0xfc;
    }
  }
  // Extended list: a header of 0 or all-ones at 0x100 means there is none.
  std::uint32_t off = kExtStart;
  std::set<std::uint32_t> seen;
  for (int n = 0; off != 0; ++n) {
    if (off < kExtStart || off > kConfigSize - 4 || n >= 480 || !seen.insert(off).second) {
      return fail(Code::kDataLoss, fmt::format("extended capability list corrupt at 0x{:03x} (entry {})", off, n));
    }
    auto hdr = config_read32(dev, off);
    if (!hdr) return std::unexpected(hdr.error());
    if (*hdr == 0 || *hdr == 0xffffffffu) break;
    out.push_back(Capability{static_cast<std::uint16_t>(*hdr & 0xffff), off, true,
                             static_cast<std::uint8_t>((*hdr >> 16) & 0xf)});
    off = (*hdr >> 20) & 0xffc;
  }
  return out;
}

std::optional<Capability> find_capability(const std::vector<Capability>& caps, std::uint16_t id, bool extended) {
  for (const auto& c : caps) {
    if (c.id == id && c.extended == extended) return c;
  }
  return std::nullopt;
}

Result<PcieLinkInfo> read_pcie_link(Device& dev, const std::vector<Capability>& caps) {
  auto cap = find_capability(caps, kCapIdPcie, false);
  if (!cap) return fail(Code::kNotFound, "no PCI Express capability");
  auto devcap = config_read32(dev, cap->offset + 0x04);
  auto lnkcap = config_read32(dev, cap->offset + 0x0c);
  auto lnksta = config_read16(dev, cap->offset + 0x12);
  if (!devcap) return std::unexpected(devcap.error());
  if (!lnkcap) return std::unexpected(lnkcap.error());
  if (!lnksta) return std::unexpected(lnksta.error());
  PcieLinkInfo li;
  li.max_speed_code = *lnkcap & 0xf;
  li.max_width = (*lnkcap >> 4) & 0x3f;
  li.speed_code = *lnksta & 0xf;
  li.width = (*lnksta >> 4) & 0x3f;
  li.flr_capable = ((*devcap >> 28) & 1u) != 0;
  return li;
}

Result<std::uint64_t> bar_size(Device& dev, unsigned index) {
  constexpr std::uint32_t kCommand = 0x04;
  constexpr std::uint16_t kCommandDecode = 0x3;  // I/O space, memory space
  if (index > 5) return fail(Code::kInvalidArgument, fmt::format("BAR index {} (0..5)", index));
  const std::uint32_t reg = 0x10 + 4 * index;
  auto lo = config_read32(dev, reg);
  if (!lo) return std::unexpected(lo.error());
  const bool io = (*lo & 1u) != 0;
  const bool is64 = !io && ((*lo >> 1) & 3u) == 2;
  if (is64 && index == 5) return fail(Code::kDataLoss, "64-bit BAR in slot 5 has no upper half");
  std::uint32_t hi = 0;
  if (is64) {
    auto h = config_read32(dev, reg + 4);
    if (!h) return std::unexpected(h.error());
    hi = *h;
  }
  auto cmd = config_read16(dev, kCommand);
  if (!cmd) return std::unexpected(cmd.error());

  // Size with decode off, then restore BAR and Command even if a step failed.
  Result<void> step = config_write16(dev, kCommand, static_cast<std::uint16_t>(*cmd & ~kCommandDecode));
  std::uint32_t lo_mask = 0, hi_mask = 0;
  if (step) step = config_write32(dev, reg, 0xffffffffu);
  if (step) {
    auto r = config_read32(dev, reg);
    if (r)
      lo_mask = *r;
    else
      step = std::unexpected(r.error());
  }
  if (step && is64) step = config_write32(dev, reg + 4, 0xffffffffu);
  if (step && is64) {
    auto r = config_read32(dev, reg + 4);
    if (r)
      hi_mask = *r;
    else
      step = std::unexpected(r.error());
  }
  auto restore_lo = config_write32(dev, reg, *lo);
  auto restore_hi = is64 ? config_write32(dev, reg + 4, hi) : Result<void>{};
  auto restore_cmd = config_write16(dev, kCommand, *cmd);
  if (!step) return std::unexpected(step.error());
  if (!restore_lo) return std::unexpected(restore_lo.error());
  if (!restore_hi) return std::unexpected(restore_hi.error());
  if (!restore_cmd) return std::unexpected(restore_cmd.error());

  // The size is the lowest writable address bit (as Linux's pci_size does).
  std::uint64_t mask = 0;
  if (io) {
    mask = lo_mask & 0xfffffffcu;
  } else {
    mask = (static_cast<std::uint64_t>(is64 ? hi_mask : 0u) << 32) | (lo_mask & 0xfffffff0u);
  }
  if (mask == 0) return std::uint64_t{0};
  return mask & (~mask + 1);
}

double pcie_speed_gts(unsigned code) noexcept {
  switch (code) {
    case 1: return 2.5;
    case 2: return 5.0;
    case 3: return 8.0;
    case 4: return 16.0;
    case 5: return 32.0;
    case 6: return 64.0;
    default: return 0.0;
  }
}

std::string PciAddress::to_string() const {
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, device, function);
}

Result<PciAddress> PciAddress::parse(std::string_view text) {
  auto bad = [&] {
    return fail(Code::kInvalidArgument,
                fmt::format("bad PCI address '{}' (accepted: dddd:bb:dd.f or bb:dd.f, hex)", text));
  };
  unsigned d = 0, b = 0, dev = 0, f = 0;
  char tail = 0;
  const std::string s(text);
  int n = std::sscanf(s.c_str(), "%x:%x:%x.%x%c", &d, &b, &dev, &f, &tail);
  if (n != 4) {
    d = 0;
    n = std::sscanf(s.c_str(), "%x:%x.%x%c", &b, &dev, &f, &tail);
    if (n != 3) return bad();
  }
  // Reject signs, spaces and other oddities sscanf tolerates.
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return bad();
  }
  if (d > 0xffff || b > 0xff || dev > 0x1f || f > 7) return bad();
  return PciAddress{static_cast<std::uint16_t>(d), static_cast<std::uint8_t>(b), static_cast<std::uint8_t>(dev),
                    static_cast<std::uint8_t>(f)};
}

}  // namespace npo::backend
