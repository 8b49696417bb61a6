// SPDX-License-Identifier: Apache-2.0
// The config-space and capability parser (npo/hal/backend/pci.hpp) against real GPU captures:
// the `lspci -v`/`-vvv` excerpts in tests/data/gpu (copied from ../shared/data/gpu, each with a
// .md sidecar naming its source). For every capture a 4 KiB config-space image is built that
// encodes exactly what the capture shows -- IDs, BAR types and sizes, the capability list at
// the printed offsets, the registers behind the printed fields -- and served by a minimal
// in-test backend::Device with BAR sizing semantics (only the address bits above the BAR size
// are writable). walk_capabilities, read_pcie_link and bar_size must give back the capture's
// values.
//
// Every fact carries the capture line it comes from; the test checks that the line really is
// in the capture file, so no value here is invented. What a capture does not show (all of them
// are partial: none reaches LnkCap/LnkSta) is not asserted; where the image needs something
// the capture lacks (an offset, a BAR slot), the fact says so.
#include <array>
#include <bit>
#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "npo/hal/backend/backend.hpp"
#include "npo/hal/backend/pci.hpp"

// The fixtures name only the fields a capture shows; the rest keep their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace npo::backend {
namespace {

// ---- facts taken from a capture -------------------------------------------------------------

struct BarFact {
  std::string_view line;  ///< capture text the fact comes from (must occur in the file)
  unsigned index = 0;
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  bool is64 = false;
  bool prefetchable = false;
  bool index_inferred = false;  ///< `lspci -v` omits "Region N:"; slot inferred (see fixture)
};

struct CapFact {
  std::string_view line;
  std::uint16_t id = 0;
  std::uint32_t offset = 0;
  bool extended = false;
  bool offset_shown = true;  ///< false: the capture does not show where it sits
  std::uint8_t version = 0;  ///< extended: "[2b0 v1]"; 0 = not shown (`lspci -v`), encoded as 1
};

/// MSI / MSI-X message control as printed ("MSI: Enable- Count=1/16 Maskable+ 64bit+",
/// "MSI-X: Enable- Count=9 Masked-").
struct MsiFact {
  std::string_view line;
  bool msix = false;
  bool enabled = false;
  unsigned enabled_vectors = 1;  ///< MSI: Count=<enabled>/<capable>
  unsigned vectors = 1;          ///< MSI: capable; MSI-X: table size
  bool maskable = false;         ///< MSI: Maskable; MSI-X: Masked (function mask)
  bool is64 = false;             ///< MSI only
};

/// Link and DevCap bits of the PCI Express capability, as far as a capture shows them.
struct ExpressFact {
  std::string_view line;
  std::optional<bool> flr;                                      ///< DevCap "FLReset+/-"
  unsigned max_speed = 0, max_width = 0, speed = 0, width = 0;  ///< LnkCap / LnkSta codes, 0 = not shown
  std::optional<bool> downgraded;                               ///< LnkSta below LnkCap
};

struct Capture {
  std::string_view file;
  std::string_view id_line;  ///< empty: the excerpt shows no header line for this function
  std::uint16_t vendor = 0, device = 0;
  std::uint32_t class_code = 0;  ///< 24-bit; 0 = not shown
  std::uint8_t revision = 0;
  std::vector<BarFact> bars;
  std::vector<CapFact> caps;
  std::vector<MsiFact> msi;
  std::optional<ExpressFact> express;
};

// ---- config-space image builder -------------------------------------------------------------

/// A 4 KiB config space plus a per-byte write mask.
class ConfigImage {
 public:
  ConfigImage() { wmask_[0x04] = 0x07; }  // Command: I/O, memory, bus master

  void put8(std::uint32_t off, std::uint8_t v) { bytes_.at(off) = v; }
  void put16(std::uint32_t off, std::uint16_t v) {
    put8(off, static_cast<std::uint8_t>(v));
    put8(off + 1, static_cast<std::uint8_t>(v >> 8));
  }
  void put32(std::uint32_t off, std::uint32_t v) {
    put16(off, static_cast<std::uint16_t>(v));
    put16(off + 2, static_cast<std::uint16_t>(v >> 16));
  }
  void writable32(std::uint32_t off, std::uint32_t mask) {
    for (unsigned i = 0; i < 4; ++i) wmask_.at(off + i) = static_cast<std::uint8_t>(mask >> (8 * i));
  }

  void ids(std::uint16_t vendor, std::uint16_t device, std::uint8_t revision, std::uint32_t class_code) {
    put16(0x00, vendor);
    put16(0x02, device);
    put32(0x08, (class_code << 8) | revision);
  }

  /// A memory BAR: the type bits, its address, and writable address bits above its size.
  void mem_bar(const BarFact& b) {
    const std::uint32_t reg = 0x10 + 4 * b.index;
    const std::uint64_t addr_mask = ~(b.size - 1);
    put32(reg,
          static_cast<std::uint32_t>(b.address & 0xfffffff0u) | (b.is64 ? 0x4u : 0u) | (b.prefetchable ? 0x8u : 0u));
    writable32(reg, static_cast<std::uint32_t>(addr_mask) & 0xfffffff0u);
    if (b.is64) {
      put32(reg + 4, static_cast<std::uint32_t>(b.address >> 32));
      writable32(reg + 4, static_cast<std::uint32_t>(addr_mask >> 32));
    }
  }

  /// Appends a standard capability to the list (PCI 3.0 §6.7): sets Status.CapList and links
  /// it from the previous entry (or from 0x34).
  void cap(std::uint8_t id, std::uint32_t off) {
    put16(0x06, static_cast<std::uint16_t>(get16(0x06) | 0x10));
    put8(last_std_ == 0 ? 0x34 : last_std_ + 1, static_cast<std::uint8_t>(off));
    put8(off, id);
    put8(off + 1, 0);
    last_std_ = off;
  }
  /// Appends an extended capability (PCIe 6.0 §7.6.3); the first must sit at 0x100.
  void ext_cap(std::uint16_t id, std::uint32_t off, std::uint8_t version) {
    if (last_ext_ != 0) put32(last_ext_, get32(last_ext_) | (off << 20));
    put32(off, id | (static_cast<std::uint32_t>(version) << 16));
    last_ext_ = off;
  }

  [[nodiscard]] std::uint16_t get16(std::uint32_t off) const {
    return static_cast<std::uint16_t>(bytes_.at(off) | (bytes_.at(off + 1) << 8));
  }
  [[nodiscard]] std::uint32_t get32(std::uint32_t off) const {
    return get16(off) | (static_cast<std::uint32_t>(get16(off + 2)) << 16);
  }

  std::array<std::uint8_t, 4096> bytes_{};
  std::array<std::uint8_t, 4096> wmask_{};

 private:
  std::uint32_t last_std_ = 0;
  std::uint32_t last_ext_ = 0;
};

/// Only config space is real; everything else is out of scope for this test.
class ImageDevice final : public Device {
 public:
  explicit ImageDevice(ConfigImage img) : img_(std::move(img)) {}

  [[nodiscard]] const FunctionInfo& info() const noexcept override { return info_; }
  Result<void> config_read(std::uint32_t off, std::span<std::byte> out) override {
    if (off + out.size() > 4096) return fail(Code::kOutOfRange, "config read past 4096");
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(img_.bytes_[off + i]);
    return {};
  }
  Result<void> config_write(std::uint32_t off, std::span<const std::byte> data) override {
    if (off + data.size() > 4096) return fail(Code::kOutOfRange, "config write past 4096");
    for (std::size_t i = 0; i < data.size(); ++i) {
      auto& b = img_.bytes_[off + i];
      const auto m = img_.wmask_[off + i];
      b = static_cast<std::uint8_t>((b & ~m) | (static_cast<std::uint8_t>(data[i]) & m));
    }
    ++writes_;
    return {};
  }
  Result<RegionInfo> region_info(unsigned) override { return fail(Code::kUnimplemented, "image device"); }
  Result<Mmio*> mmio(unsigned) override { return fail(Code::kUnimplemented, "image device"); }
  Result<std::span<std::byte>> map_aperture(unsigned) override { return fail(Code::kUnimplemented, "image device"); }
  Result<ApertureFd> aperture_fd(unsigned) override { return fail(Code::kUnimplemented, "image device"); }
  [[nodiscard]] std::vector<IovaRange> iova_ranges() const override { return {}; }
  Result<void> dma_map(const void*, std::uint64_t, std::uint64_t, DmaAccess) override {
    return fail(Code::kUnimplemented, "image device");
  }
  Result<void> dma_unmap(std::uint64_t, std::uint64_t) override { return fail(Code::kUnimplemented, "image device"); }
  [[nodiscard]] unsigned msix_vectors() const noexcept override { return 0; }
  Result<void> set_msix_eventfds(unsigned, std::span<const int>) override {
    return fail(Code::kUnimplemented, "image device");
  }
  Result<void> set_msi_eventfd(int) override { return fail(Code::kUnimplemented, "image device"); }
  Result<void> reset() override { return fail(Code::kUnimplemented, "image device"); }

  [[nodiscard]] const ConfigImage& image() const { return img_; }
  [[nodiscard]] int writes() const { return writes_; }

 private:
  ConfigImage img_;
  FunctionInfo info_;
  int writes_ = 0;
};

// Capability IDs (PCI Code and ID Assignment Specification 1.16 §2, §3).
constexpr std::uint8_t kCapNull = 0x00, kCapPm = 0x01, kCapMsi = 0x05, kCapVendor = 0x09, kCapExp = 0x10,
                       kCapMsix = 0x11;
constexpr std::uint16_t kExtNull = 0x0000, kExtAer = 0x0001, kExtDsn = 0x0003, kExtPowerBudget = 0x0004,
                        kExtVendor = 0x000b, kExtAcs = 0x000d, kExtAts = 0x000f, kExtPri = 0x0013, kExtRebar = 0x0015,
                        kExtLtr = 0x0018, kExtPasid = 0x001b, kExtDlf = 0x0025, kExtPl16 = 0x0026,
                        kExtLaneMargin = 0x0027;

std::uint32_t find_if_offset(const Capture& c, std::uint16_t id) {
  for (const auto& cap : c.caps) {
    if (!cap.extended && cap.id == id) return cap.offset;
  }
  ADD_FAILURE() << "capture has no capability " << id;
  return 0x40;
}

/// Builds the image a capture describes. Capability bodies carry what the capture prints of
/// them (Express flags/DevCap/LnkCap/LnkSta, MSI and MSI-X message control).
ConfigImage build(const Capture& c, const std::function<void(ConfigImage&)>& bodies = {}) {
  ConfigImage img;
  img.ids(c.vendor, c.device, c.revision, c.class_code);
  for (const auto& b : c.bars) img.mem_bar(b);
  for (const auto& cap : c.caps) {
    if (cap.extended) {
      img.ext_cap(cap.id, cap.offset, cap.version != 0 ? cap.version : 1);
    } else {
      img.cap(static_cast<std::uint8_t>(cap.id), cap.offset);
    }
  }
  for (const auto& m : c.msi) {
    const auto off = find_if_offset(c, m.msix ? kCapMsix : kCapMsi);
    std::uint16_t ctl = 0;
    if (m.msix) {  // PCI 3.0 §6.8.2.3: table size N-1 in bits 10:0, function mask 14, enable 15
      ctl = static_cast<std::uint16_t>((m.vectors - 1) | (m.maskable ? 1u << 14 : 0u) | (m.enabled ? 1u << 15 : 0u));
    } else {  // §6.8.1.3: enable 0, multiple message capable 3:1, enable 6:4, 64-bit 7, masking 8
      ctl = static_cast<std::uint16_t>((m.enabled ? 1u : 0u) | (std::countr_zero(m.vectors) << 1) |
                                       (std::countr_zero(m.enabled_vectors) << 4) | (m.is64 ? 1u << 7 : 0u) |
                                       (m.maskable ? 1u << 8 : 0u));
    }
    img.put16(off + 0x02, ctl);
  }
  if (c.express) {
    const auto off = find_if_offset(c, kCapExp);
    img.put16(off + 0x02, 0x0002);  // Capabilities: version 2, Endpoint (type 0), MSI 00
    img.put32(off + 0x04, c.express->flr.value_or(false) ? (1u << 28) : 0u);
    img.put32(off + 0x0c, c.express->max_speed | (c.express->max_width << 4));
    // A LnkSta speed the capture does not state is encoded as the capability's.
    const unsigned sta_speed = c.express->speed != 0 ? c.express->speed : c.express->max_speed;
    img.put16(off + 0x12, static_cast<std::uint16_t>(sta_speed | (c.express->width << 4)));
  }
  if (bodies) bodies(img);
  return img;
}

std::string read_capture(std::string_view file) {
  std::ifstream in(std::string(NPO_TEST_DATA_DIR) + "/gpu/" + std::string(file));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// lspci's size suffix (pciutils lspci.c show_size): "16M", "64G", "256".
std::string lspci_size(std::uint64_t size) {
  constexpr const char* kSuffix[] = {"", "K", "M", "G", "T"};
  unsigned i = 0;
  while (i < 4 && size >= 1024 && size % 1024 == 0) {
    size /= 1024;
    ++i;
  }
  return fmt::format("{}{}", size, kSuffix[i]);
}
std::string_view sign(bool b) { return b ? "+" : "-"; }

/// The numbers of a fact, printed as lspci prints them: each must occur in the fact's own
/// line, so a value typed into a fixture cannot drift from the capture text.
std::vector<std::string> printed(const BarFact& b) {
  return {fmt::format("Memory at {:x} ({}-bit, {}prefetchable) [size={}]", b.address, b.is64 ? 64 : 32,
                      b.prefetchable ? "" : "non-", lspci_size(b.size))};
}
std::vector<std::string> printed(const CapFact& c) {
  if (!c.offset_shown) return {};
  if (c.version != 0) return {fmt::format("[{:x} v{}]", c.offset, c.version)};
  return {fmt::format("[{:x}]", c.offset)};
}
std::vector<std::string> printed(const MsiFact& m) {
  if (m.msix) {
    return {fmt::format("MSI-X: Enable{} Count={} Masked{}", sign(m.enabled), m.vectors, sign(m.maskable))};
  }
  return {fmt::format("MSI: Enable{} Count={}/{} Maskable{} 64bit{}", sign(m.enabled), m.enabled_vectors, m.vectors,
                      sign(m.maskable), sign(m.is64))};
}

/// Checks that every fact's line is in the capture, then that the parser gives the facts back.
void check(const Capture& c, ImageDevice& dev) {
  SCOPED_TRACE(std::string(c.file));
  const std::string text = read_capture(c.file);
  ASSERT_FALSE(text.empty()) << "missing fixture tests/data/gpu/" << c.file;
  auto cited = [&](std::string_view line, const std::vector<std::string>& values = {}) {
    EXPECT_NE(text.find(line), std::string::npos) << "not in capture: " << line;
    for (const auto& v : values) {
      EXPECT_NE(line.find(v), std::string::npos) << "'" << v << "' not in: " << line;
    }
  };

  if (!c.id_line.empty()) {
    // -nn prints "[10de:20b0]" and "[0302]"; without it only the device ID ("Device 2331").
    const bool ids_shown = c.id_line.find(fmt::format("{:04x}:{:04x}", c.vendor, c.device)) != std::string::npos ||
                           c.id_line.find(fmt::format("Device {:04x}", c.device)) != std::string::npos;
    EXPECT_TRUE(ids_shown) << c.id_line;
    std::vector<std::string> values;
    if (c.revision != 0) values.push_back(fmt::format("(rev {:02x})", c.revision));
    if (c.id_line.find("] [") != std::string::npos) values.push_back(fmt::format("[{:04x}]", c.class_code >> 8));
    cited(c.id_line, values);
    EXPECT_EQ(*config_read16(dev, 0x00), c.vendor);
    EXPECT_EQ(*config_read16(dev, 0x02), c.device);
    EXPECT_EQ(*config_read8(dev, 0x08), c.revision);
    if (c.class_code != 0) {
      EXPECT_EQ(*config_read32(dev, 0x08) >> 8, c.class_code);
    }
  }

  // BARs: type bits, then the size from all-ones sizing; the BAR is restored afterwards.
  for (const auto& b : c.bars) {
    cited(b.line, printed(b));
    SCOPED_TRACE(std::string(b.line));
    const auto before = dev.image().bytes_;
    auto reg = config_read32(dev, 0x10 + 4 * b.index);
    ASSERT_TRUE(reg);
    EXPECT_EQ(*reg & 1u, 0u) << "memory BAR";
    EXPECT_EQ((*reg >> 1) & 3u, b.is64 ? 2u : 0u);
    EXPECT_EQ(((*reg >> 3) & 1u) != 0, b.prefetchable);
    auto size = bar_size(dev, b.index);
    ASSERT_TRUE(size) << size.error().message();
    EXPECT_EQ(*size, b.size);
    EXPECT_EQ(dev.image().bytes_, before) << "bar_size must restore the BAR and Command";
    std::uint64_t addr = *config_read32(dev, 0x10 + 4 * b.index) & 0xfffffff0u;
    if (b.is64) addr |= static_cast<std::uint64_t>(*config_read32(dev, 0x14 + 4 * b.index)) << 32;
    EXPECT_EQ(addr, b.address);
  }

  // Capabilities: the whole walk, in list order, at the printed offsets.
  auto caps = walk_capabilities(dev);
  ASSERT_TRUE(caps) << caps.error().message();
  ASSERT_EQ(caps->size(), c.caps.size());
  for (std::size_t i = 0; i < c.caps.size(); ++i) {
    const auto& want = c.caps[i];
    cited(want.line, printed(want));
    SCOPED_TRACE(std::string(want.line));
    EXPECT_EQ((*caps)[i].id, want.id);
    EXPECT_EQ((*caps)[i].extended, want.extended);
    if (want.offset_shown) {
      EXPECT_EQ((*caps)[i].offset, want.offset);
    }
    if (want.version != 0) {
      EXPECT_EQ((*caps)[i].version, want.version);
    }
  }

  // MSI / MSI-X message control, decoded from the capability the walk found.
  for (const auto& m : c.msi) {
    cited(m.line, printed(m));
    SCOPED_TRACE(std::string(m.line));
    auto cap = find_capability(*caps, m.msix ? kCapMsix : kCapMsi, false);
    ASSERT_TRUE(cap);
    const std::uint16_t ctl = *config_read16(dev, cap->offset + 2);
    if (m.msix) {
      EXPECT_EQ((ctl & 0x7ffu) + 1, m.vectors);
      EXPECT_EQ((ctl >> 14 & 1u) != 0, m.maskable);
      EXPECT_EQ((ctl >> 15 & 1u) != 0, m.enabled);
    } else {
      EXPECT_EQ(1u << (ctl >> 1 & 7u), m.vectors);
      EXPECT_EQ(1u << (ctl >> 4 & 7u), m.enabled_vectors);
      EXPECT_EQ((ctl & 1u) != 0, m.enabled);
      EXPECT_EQ((ctl >> 7 & 1u) != 0, m.is64);
      EXPECT_EQ((ctl >> 8 & 1u) != 0, m.maskable);
    }
  }

  if (c.express) {
    std::vector<std::string> flr;
    if (c.express->flr) flr.push_back(fmt::format("FLReset{}", sign(*c.express->flr)));
    cited(c.express->line, flr);
    auto link = read_pcie_link(dev, *caps);
    ASSERT_TRUE(link) << link.error().message();
    if (c.express->flr) {
      EXPECT_EQ(link->flr_capable, *c.express->flr);
    }
    if (c.express->max_speed != 0) {
      EXPECT_EQ(link->max_speed_code, c.express->max_speed);
    }
    if (c.express->max_width != 0) {
      EXPECT_EQ(link->max_width, c.express->max_width);
    }
    if (c.express->speed != 0) {
      EXPECT_EQ(link->speed_code, c.express->speed);
    }
    if (c.express->width != 0) {
      EXPECT_EQ(link->width, c.express->width);
    }
    if (c.express->downgraded) {
      EXPECT_EQ(link->downgraded(), *c.express->downgraded);
    }
  }
}

constexpr std::uint64_t kM = 1ull << 20, kG = 1ull << 30;

// ---- NVIDIA A100 SXM4 40GB: lspci -vvv -nn, ends inside the Express capability ---------------
TEST(GpuCapture, A100Sxm4) {
  const Capture c{
      .file = "nvidia_a100_sxm4_40gb_lspci_vvv_partial_hwloc653.txt",
      .id_line = "da:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 40GB] [10de:20b0] (rev a1)",
      .vendor = 0x10de,
      .device = 0x20b0,
      .class_code = 0x030200,  // [0302], prog-if 00 (lspci prints "[0302]" only for prog-if 0)
      .revision = 0xa1,
      .bars = {{"Region 0: Memory at c5000000 (32-bit, non-prefetchable) [size=16M]", 0, 0xc5000000, 16 * kM, false,
                false},
               // BAR1 is 64-bit, so it also takes slot 2 -- the capture lists no Region 2.
               {"Region 1: Memory at 52000000000 (64-bit, prefetchable) [size=64G]", 1, 0x52000000000, 64 * kG, true,
                true},
               {"Region 3: Memory at 53420000000 (64-bit, prefetchable) [size=32M]", 3, 0x53420000000, 32 * kM, true,
                true}},
      .caps = {{"Capabilities: [60] Power Management version 3", kCapPm, 0x60},
               // A Null entry (ID 0) in the middle of the list: the walk must go on past it.
               {"Capabilities: [68] Null", kCapNull, 0x68},
               {"Capabilities: [78] Express (v2) Endpoint, MSI 00", kCapExp, 0x78}},
      .express = ExpressFact{.line = "RBE+ FLReset+ SlotPowerLimit 25.000W", .flr = true},
  };
  ImageDevice dev(build(c));
  check(c, dev);
}

// ---- NVIDIA H100 PCIe: lspci -vvv, ends inside the Express capability -------------------------
TEST(GpuCapture, H100Pcie) {
  const Capture c{
      .file = "nvidia_h100_pcie_lspci_vvv_partial_nvtrust51.txt",
      // "NVIDIA Corporation" is vendor 10de; "3D controller" is class 03/02 (pci.ids).
      .id_line = "61:00.0 3D controller: NVIDIA Corporation Device 2331 (rev a1)",
      .vendor = 0x10de,
      .device = 0x2331,
      .class_code = 0x030200,
      .revision = 0xa1,
      .bars = {{"Region 0: Memory at 1e042000000 (64-bit, prefetchable) [size=16M]", 0, 0x1e042000000, 16 * kM, true,
                true},
               {"Region 2: Memory at 1a000000000 (64-bit, prefetchable) [size=128G]", 2, 0x1a000000000, 128 * kG, true,
                true},
               {"Region 4: Memory at 1e040000000 (64-bit, prefetchable) [size=32M]", 4, 0x1e040000000, 32 * kM, true,
                true}},
      .caps = {{"Capabilities: [40] Power Management version 3", kCapPm, 0x40},
               {"Capabilities: [48] MSI: Enable- Count=1/16 Maskable+ 64bit+", kCapMsi, 0x48},
               {"Capabilities: [60] Express (v2) Endpoint, MSI 00", kCapExp, 0x60}},
      .msi = {{.line = "MSI: Enable- Count=1/16 Maskable+ 64bit+",
               .enabled = false,
               .enabled_vectors = 1,
               .vectors = 16,
               .maskable = true,
               .is64 = true}},
      .express = ExpressFact{.line = "RBE+ FLReset+ SlotPowerLimit 75.000W", .flr = true},
  };
  ImageDevice dev(build(c));
  check(c, dev);
}

// ---- NVIDIA H20: lspci -v in an SEV-SNP guest; the excerpt begins mid-device -----------------
// `lspci -v` prints "Memory at ..." without "Region N:". All BARs are 64-bit, so the slots are
// inferred as 0, 2, 4 (the layout the H100 capture shows with Region numbers); of the first
// function only the last two BARs are in the excerpt.
TEST(GpuCapture, H20FirstFunctionTail) {
  const Capture c{
      .file = "nvidia_h20_lspci_v_partial_nvtrust128.txt",
      // No header line in the excerpt; the file's note says the GPUs are 10de:2329.
      .vendor = 0x10de,
      .device = 0x2329,
      .bars = {{"Memory at 14000000000 (64-bit, prefetchable) [size=128G]", 2, 0x14000000000, 128 * kG, true, true,
                true},
               {"Memory at 13000000000 (64-bit, prefetchable) [size=32M]", 4, 0x13000000000, 32 * kM, true, true,
                true}},
      .caps = {{"Capabilities: [40] Power Management version 3", kCapPm, 0x40},
               {"Capabilities: [48] MSI: Enable- Count=1/16 Maskable+ 64bit+", kCapMsi, 0x48},
               {"Capabilities: [60] Express Endpoint, MSI 00", kCapExp, 0x60},
               {"Capabilities: [9c] Vendor Specific Information: Len=14 <?>", kCapVendor, 0x9c},
               {"Capabilities: [b0] MSI-X: Enable- Count=9 Masked-", kCapMsix, 0xb0},
               // An extended Null (ID 0, non-zero header) at 0x100 does not end the list.
               {"Capabilities: [100] Null", kExtNull, 0x100, true},
               {"Capabilities: [12c] Latency Tolerance Reporting", kExtLtr, 0x12c, true},
               {"Capabilities: [134] Physical Resizable BAR", kExtRebar, 0x134, true},
               {"Capabilities: [1b8] Advanced Error Reporting", kExtAer, 0x1b8, true},
               {"Capabilities: [2a4] Vendor Specific Information: ID=0001 Rev=1 Len=014 <?>", kExtVendor, 0x2a4, true},
               {"Capabilities: [2b8] Power Budgeting <?>", kExtPowerBudget, 0x2b8, true},
               {"Capabilities: [2f0] Device Serial Number", kExtDsn, 0x2f0, true}},
      .msi =
          {{.line = "MSI: Enable- Count=1/16 Maskable+ 64bit+",
            .enabled = false,
            .enabled_vectors = 1,
            .vectors = 16,
            .maskable = true,
            .is64 = true},
           {.line = "MSI-X: Enable- Count=9 Masked-", .msix = true, .enabled = false, .vectors = 9, .maskable = false}},
      // `lspci -v` prints no DevCap/LnkCap: only the capability's presence is known.
      .express = ExpressFact{.line = "Capabilities: [60] Express Endpoint, MSI 00"},
  };
  ImageDevice dev(build(c));
  check(c, dev);
}

TEST(GpuCapture, H20SecondFunctionHeader) {
  const Capture c{
      .file = "nvidia_h20_lspci_v_partial_nvtrust128.txt",
      .id_line = "0a:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:2329] (rev a1)",
      .vendor = 0x10de,
      .device = 0x2329,
      .class_code = 0x030200,
      .revision = 0xa1,
      .bars = {{"Memory at 18002000000 (64-bit, prefetchable) [size=16M]", 0, 0x18002000000, 16 * kM, true, true, true},
               {"Memory at 16000000000 (64-bit, prefetchable) [size=128G]", 2, 0x16000000000, 128 * kG, true, true,
                true},
               {"Memory at 18000000000 (64-bit, prefetchable) [size=32M]", 4, 0x18000000000, 32 * kM, true, true,
                true}},
      // The excerpt ends before this function's capabilities.
  };
  ImageDevice dev(build(c));
  check(c, dev);
}

// ---- AMD Instinct MI50: tail of one function's extended list, header of the next --------------
TEST(GpuCapture, Mi50ExtendedCapabilities) {
  const Capture c{
      .file = "amd_instinct_mi50_lspci_vvv_ats_pri_pasid_partial_rocm4793.txt",
      .caps =
          {// The excerpt starts inside ACS's ACSCtl line (all controls off), so its offset is not
           // shown: the image puts it at 0x100, where an extended list must start, and only its
           // place in the list (before ATS) is asserted.
           {"ACSCtl: SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-", kExtAcs, 0x100,
            true, false},
           {"Capabilities: [2b0 v1] Address Translation Service (ATS)", kExtAts, 0x2b0, true, true, 1},
           {"Capabilities: [2c0 v1] Page Request Interface (PRI)", kExtPri, 0x2c0, true, true, 1},
           {"Capabilities: [2d0 v1] Process Address Space ID (PASID)", kExtPasid, 0x2d0, true, true, 1},
           {"Capabilities: [320 v1] Latency Tolerance Reporting", kExtLtr, 0x320, true, true, 1},
           {"Capabilities: [400 v1] Data Link Feature <?>", kExtDlf, 0x400, true, true, 1},
           {"Capabilities: [410 v1] Physical Layer 16.0 GT/s <?>", kExtPl16, 0x410, true, true, 1},
           {"Capabilities: [440 v1] Lane Margining at the Receiver <?>", kExtLaneMargin, 0x440, true, true, 1}},
  };
  ImageDevice dev(build(c));
  check(c, dev);
  // ACSCtl all "-": the control register (ACS + 6) is zero.
  EXPECT_EQ(*config_read16(dev, 0x100 + 6), 0u);
}

TEST(GpuCapture, Mi50NextFunctionHeader) {
  const Capture c{
      .file = "amd_instinct_mi50_lspci_vvv_ats_pri_pasid_partial_rocm4793.txt",
      .id_line =
          "67:00.0 Display controller [0380]: Advanced Micro Devices, Inc. [AMD/ATI] Vega 20 [Radeon Pro "
          "VII/Radeon Instinct MI50 32GB] [1002:66a1] (rev 01)",
      .vendor = 0x1002,
      .device = 0x66a1,
      .class_code = 0x038000,
      .revision = 0x01,
  };
  ImageDevice dev(build(c));
  check(c, dev);
}

// ---- Tenstorrent Blackhole: lspci -vvv, ends inside the Express capability ---------------------
TEST(GpuCapture, BlackholeDowngradedToX8) {
  const Capture c{
      .file = "tenstorrent_blackhole_lspci_vvv_partial_ttsmi67.txt",
      // "Processing accelerators" is class 12/00; no "(rev ..)": lspci omits a zero revision.
      .id_line = "01:00.0 Processing accelerators: Device 1e52:b140",
      .vendor = 0x1e52,
      .device = 0xb140,
      .class_code = 0x120000,
      .revision = 0x00,
      .bars = {{"Region 0: Memory at f800000000 (64-bit, prefetchable) [size=512M]", 0, 0xf800000000, 512 * kM, true,
                true},
               {"Region 2: Memory at f820000000 (64-bit, prefetchable) [size=1M]", 2, 0xf820000000, 1 * kM, true, true},
               {"Region 4: Memory at f000000000 (64-bit, prefetchable) [size=32G]", 4, 0xf000000000, 32 * kG, true,
                true}},
      .caps = {{"Capabilities: [40] Power Management version 3", kCapPm, 0x40},
               {"Capabilities: [50] MSI: Enable+ Count=1/1 Maskable+ 64bit+", kCapMsi, 0x50},
               {"Capabilities: [70] Express (v2) Endpoint, MSI 00", kCapExp, 0x70}},
      .msi = {{.line = "MSI: Enable+ Count=1/1 Maskable+ 64bit+",
               .enabled = true,
               .enabled_vectors = 1,
               .vectors = 1,
               .maskable = true,
               .is64 = true}},
      // The LnkCap/LnkSta lines are past the excerpt; the capture's note (line 2) gives the
      // link: capability PCIe 5.0 x16 (what tt-smi showed, i.e. LnkCap: 32 GT/s = code 5),
      // negotiated width x8. The negotiated speed is not stated and is not asserted.
      .express = ExpressFact{.line = "The issue says tt-smi showed PCIe 5.0 x16 while lspci showed the link "
                                     "downgraded to x8.",
                             .max_speed = 5,
                             .max_width = 16,
                             .width = 8,
                             .downgraded = true},
  };
  ImageDevice dev(build(c));
  check(c, dev);
  auto caps = walk_capabilities(dev);
  ASSERT_TRUE(caps);
  auto link = read_pcie_link(dev, *caps);
  ASSERT_TRUE(link);
  EXPECT_EQ(pcie_speed_gts(link->max_speed_code), 32.0);  // "PCIe 5.0"
}

// ---- downgraded() and bar_size() beyond what the captures show (synthetic) --------------------
TEST(PcieLinkInfo, DowngradedComparesSpeedAndWidth) {
  // lspci's form: "LnkCap: ... Speed 16GT/s, Width x16" / "LnkSta: Speed 8GT/s (downgraded), Width x16"
  EXPECT_TRUE((PcieLinkInfo{.max_speed_code = 4, .max_width = 16, .speed_code = 3, .width = 16}.downgraded()));
  EXPECT_TRUE((PcieLinkInfo{.max_speed_code = 4, .max_width = 16, .speed_code = 4, .width = 8}.downgraded()));
  EXPECT_FALSE((PcieLinkInfo{.max_speed_code = 4, .max_width = 16, .speed_code = 4, .width = 16}.downgraded()));
  // Unknown or link down (0) is not "downgraded".
  EXPECT_FALSE((PcieLinkInfo{.max_speed_code = 4, .max_width = 16, .speed_code = 0, .width = 0}.downgraded()));
  EXPECT_FALSE(PcieLinkInfo{}.downgraded());
  EXPECT_EQ(pcie_speed_gts(4), 16.0);
}

TEST(BarSize, UnimplementedIoAndBadIndex) {
  ConfigImage img;
  img.put16(0x04, 0x0003);      // decode on: bar_size turns it off and back on
  img.put32(0x14, 0x0000e001);  // BAR1: I/O at 0xe000, 256 bytes
  img.writable32(0x14, 0xffffff00u);
  ImageDevice dev(img);
  const auto before = dev.image().bytes_;
  EXPECT_EQ(*bar_size(dev, 0), 0u);  // BAR0 hard-wired to 0: not implemented
  EXPECT_EQ(*bar_size(dev, 1), 256u);
  EXPECT_EQ(dev.image().bytes_, before);
  EXPECT_GT(dev.writes(), 0);
  auto bad = bar_size(dev, 6);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace npo::backend
