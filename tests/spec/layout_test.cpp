// SPDX-License-Identifier: Apache-2.0
// Layout checks of the device contract (firmware-iface) on its own: field helpers,
// the exact bytes the descriptor/completion setters write (against the offsets the spec
// publishes, dma.md §2.1 and §3.1), CRC32C check values, and the register list's
// uniqueness, overlap and alignment.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "npo/fw/bits.hpp"
#include "npo/fw/dma.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"

namespace {

namespace fw = npo::fw;
namespace regs = npo::fw::regs;
namespace dma = npo::fw::dma;
namespace mbox = npo::fw::mbox;

std::span<const std::byte> bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

// ---- Field helpers -------------------------------------------------------------------------

TEST(FieldHelpers, MaskGetSetMake) {
  constexpr fw::Field32 f{4, 6};  // bits 9:4
  static_assert(f.mask() == 0x3f0u);
  static_assert(f.get(0xffffffffu) == 0x3fu);
  static_assert(f.set(0, 0x2a) == 0x2a0u);
  static_assert(f.make(0x2a) == 0x2a0u);
  // set keeps the other bits and drops excess high bits of the value.
  EXPECT_EQ(f.set(0xffffffffu, 0), 0xfffffc0fu);
  EXPECT_EQ(f.set(0x0u, 0x7ff), 0x3f0u);
  // edges: bit 0, bit 31, full width, 64-bit top bit
  static_assert(fw::Field32{0, 1}.mask() == 1u);
  static_assert(fw::Field32{31, 1}.mask() == 0x80000000u);
  static_assert(fw::Field32{0, 32}.mask() == 0xffffffffu);
  static_assert(fw::Field32{0, 32}.get(0xdeadbeefu) == 0xdeadbeefu);
  static_assert(fw::Field64{63, 1}.mask() == (std::uint64_t{1} << 63));
  static_assert(fw::Field64{32, 8}.set(0, 0x1ff) == (std::uint64_t{0xff} << 32));
  static_assert(fw::Field64{0, 64}.mask() == ~std::uint64_t{0});
  static_assert(fw::bit(5) == 0x20u);
}

TEST(FieldHelpers, RoundTripEveryDocumentedField) {
  std::map<std::string, unsigned> width;
  for (const auto& r : regs::kRegisters) width[std::string(r.block) + "." + std::string(r.name)] = r.width;
  const std::uint64_t patterns[] = {0, 1, 0x5555555555555555ull, 0xaaaaaaaaaaaaaaaaull, ~0ull, 0x0123456789abcdefull};
  for (const auto& f : regs::kFields) {
    const std::string name = std::string(f.reg) + "." + std::string(f.name);
    ASSERT_TRUE(width.contains(std::string(f.reg))) << name << ": register not in kRegisters";
    ASSERT_GT(f.width, 0u) << name;
    ASSERT_LE(f.shift + f.width, width[std::string(f.reg)]) << name << " exceeds its register";
    const fw::Field64 g{f.shift, f.width};
    const std::uint64_t vmask = f.width >= 64 ? ~0ull : ((std::uint64_t{1} << f.width) - 1);
    EXPECT_EQ(g.mask(), vmask << f.shift) << name;
    for (std::uint64_t reg : patterns) {
      for (std::uint64_t v : patterns) {
        const std::uint64_t out = g.set(reg, v);
        EXPECT_EQ(g.get(out), v & vmask) << name;
        EXPECT_EQ(out & ~g.mask(), reg & ~g.mask()) << name << ": set disturbed other bits";
      }
    }
    if (width[std::string(f.reg)] == 32) {  // the 32-bit flavour used by drivers
      const fw::Field32 h{f.shift, f.width};
      EXPECT_EQ(h.mask(), static_cast<std::uint32_t>(vmask << f.shift)) << name;
      EXPECT_EQ(h.get(h.make(0xffffffffu)), static_cast<std::uint32_t>(vmask)) << name;
    }
  }
}

TEST(FieldHelpers, FieldsOfARegisterDoNotOverlap) {
  std::map<std::string, std::uint64_t> used;
  std::map<std::string, int> names;
  for (const auto& f : regs::kFields) {
    const std::string reg(f.reg);
    const std::string name = reg + "." + std::string(f.name);
    EXPECT_EQ(++names[name], 1) << name << " listed twice";
    const std::uint64_t m = fw::Field64{f.shift, f.width}.mask();
    EXPECT_EQ(used[reg] & m, 0u) << name << " overlaps another field of " << reg;
    used[reg] |= m;
  }
}

TEST(FieldHelpers, SpotChecksMatchThePublishedBits) {
  // A few fields whose positions other parts of the spec rely on.
  EXPECT_EQ(regs::window::kCtrlGeneration.mask(), 0xffff0000u);
  EXPECT_EQ(regs::port::kStatusLinkUp.mask(), 0x80000000u);
  EXPECT_EQ(regs::port::kNeighborValid.mask(), std::uint64_t{1} << 63);
  EXPECT_EQ(regs::global::kErrRemoved.mask(), 0x80000000u);  // all-ones reads show "removed"
  EXPECT_EQ(regs::global::kCap1OpMask.make((1u << dma::kNumOpcodes) - 1), 0x007f0000u);
  EXPECT_GE(std::uint64_t{1} << regs::queue::kConfigDepthLog2.width, std::uint64_t{regs::kMaxQueueDepthLog2} + 1);
  EXPECT_GE(regs::port::kStatusState.width, 3u);  // LinkState 0..6
  EXPECT_EQ(regs::kMagic, 0x314f504eu);
  EXPECT_EQ(regs::global::kMagic, 0x000u);  // the offset of MAGIC, not its value
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(&regs::kMagic), 4), "NPO1");  // little-endian host
}

// ---- Descriptor and completion bytes ------------------------------------------------------

template <std::size_t N>
void expect_bytes(const std::array<std::byte, N>& raw, std::size_t off, std::uint64_t v, std::size_t n,
                  const char* what) {
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_EQ(std::to_integer<unsigned>(raw[off + i]), (v >> (8 * i)) & 0xffu) << what << " byte " << i;
}

TEST(DescriptorLayout, SettersWriteThePublishedOffsets) {
  struct Case {
    const char* name;
    std::size_t off;  // dma.md §2.1, written out independently of desc::k*
    std::size_t size;
    std::uint64_t value;
    void (*set)(dma::Descriptor&, std::uint64_t);
  };
  const Case cases[] = {
      {"opcode", 0x00, 1, 0x05, [](dma::Descriptor& d, std::uint64_t v) { d.set_opcode(static_cast<dma::Opcode>(v)); }},
      {"flags", 0x01, 1, 0x0b, [](dma::Descriptor& d, std::uint64_t v) { d.set_flags(static_cast<std::uint8_t>(v)); }},
      {"sg_count", 0x02, 2, 0xa1b2,
       [](dma::Descriptor& d, std::uint64_t v) { d.set_sg_count(static_cast<std::uint16_t>(v)); }},
      {"length", 0x04, 4, 0xc1c2c3c4,
       [](dma::Descriptor& d, std::uint64_t v) { d.set_length(static_cast<std::uint32_t>(v)); }},
      {"src", 0x08, 8, 0x1112131415161718, [](dma::Descriptor& d, std::uint64_t v) { d.set_src(v); }},
      {"dst", 0x10, 8, 0x2122232425262728, [](dma::Descriptor& d, std::uint64_t v) { d.set_dst(v); }},
      {"remote_card", 0x18, 4, 0x31323334,
       [](dma::Descriptor& d, std::uint64_t v) { d.set_remote_card(static_cast<std::uint32_t>(v)); }},
      {"window", 0x1c, 2, 0x4142,
       [](dma::Descriptor& d, std::uint64_t v) { d.set_window(static_cast<std::uint16_t>(v)); }},
      {"generation", 0x1e, 2, 0x5152,
       [](dma::Descriptor& d, std::uint64_t v) { d.set_generation(static_cast<std::uint16_t>(v)); }},
      {"key", 0x20, 8, 0x6162636465666768, [](dma::Descriptor& d, std::uint64_t v) { d.set_key(v); }},
      {"user", 0x28, 8, 0x7172737475767778, [](dma::Descriptor& d, std::uint64_t v) { d.set_user(v); }},
  };
  for (const Case& c : cases) {
    dma::Descriptor d;
    c.set(d, c.value);
    expect_bytes(d.raw, c.off, c.value, c.size, c.name);
    for (std::size_t i = 0; i < d.raw.size(); ++i)
      if (i < c.off || i >= c.off + c.size) {
        EXPECT_EQ(d.raw[i], std::byte{0}) << c.name << " touched byte " << i;
      }
    EXPECT_TRUE(d.reserved_zero()) << c.name;
  }
  // All setters together, read back through the getters.
  dma::Descriptor d;
  for (const Case& c : cases) c.set(d, c.value);
  EXPECT_EQ(d.opcode(), dma::Opcode::kRemoteWrite);
  EXPECT_EQ(d.op_flags(), 0x0b);
  EXPECT_EQ(d.sg_count(), 0xa1b2);
  EXPECT_EQ(d.length(), 0xc1c2c3c4u);
  EXPECT_EQ(d.src(), 0x1112131415161718u);
  EXPECT_EQ(d.dst(), 0x2122232425262728u);
  EXPECT_EQ(d.remote_card(), 0x31323334u);
  EXPECT_EQ(d.window(), 0x4142);
  EXPECT_EQ(d.generation(), 0x5152);
  EXPECT_EQ(d.key(), 0x6162636465666768u);
  EXPECT_EQ(d.user(), 0x7172737475767778u);
  EXPECT_TRUE(d.reserved_zero());
  for (std::size_t i = 0x30; i < 0x40; ++i) EXPECT_EQ(d.raw[i], std::byte{0});
}

TEST(DescriptorLayout, ReservedBytesDetected) {
  for (std::size_t i = 0x30; i < 0x40; ++i) {
    dma::Descriptor d;
    d.raw[i] = std::byte{0x80};
    EXPECT_FALSE(d.reserved_zero()) << "reserved byte " << i;
  }
  static_assert(sizeof(dma::Descriptor) == 64 && alignof(dma::Descriptor) == 64);
}

TEST(CompletionLayout, SettersWriteThePublishedOffsets) {
  dma::Completion c;
  c.set_info(0x0102030405060708);
  expect_bytes(c.raw, 0x00, 0x0102030405060708, 8, "info");
  c.set_sq_index(0xa0b0c0d0);
  expect_bytes(c.raw, 0x08, 0xa0b0c0d0, 4, "sq_index");
  c.set_status(dma::Status::kWindowRevoked);
  EXPECT_EQ(std::to_integer<unsigned>(c.raw[0x0c]), 0x0du);
  EXPECT_EQ(c.raw[0x0d], std::byte{0}) << "byte 0x0d is reserved";
  EXPECT_EQ(c.raw[0x0e], std::byte{0});
  c.set_phase(true);
  EXPECT_EQ(std::to_integer<unsigned>(c.raw[0x0e]), 0x01u) << "phase is bit 0 of the flags word at 0x0e";
  EXPECT_EQ(c.raw[0x0f], std::byte{0});
  EXPECT_TRUE(c.phase());
  EXPECT_EQ(c.info(), 0x0102030405060708u);
  EXPECT_EQ(c.sq_index(), 0xa0b0c0d0u);
  EXPECT_EQ(c.status(), dma::Status::kWindowRevoked);
  c.set_phase(false);
  EXPECT_EQ(c.raw[0x0e], std::byte{0});
  EXPECT_FALSE(c.phase());
  // The phase is read from the flags word only.
  dma::Completion p;
  p.raw[0x0e] = std::byte{1};
  EXPECT_TRUE(p.phase());
  p.raw[0x0e] = std::byte{2};
  EXPECT_FALSE(p.phase());
  static_assert(sizeof(dma::Completion) == 16);
}

TEST(DmaLayout, StatusAndOpcodeSpaces) {
  // Card-written statuses are below 0x80, software ones from 0x80 (dma.md §3.2).
  for (unsigned v = 0; v < 256; ++v) {
    const auto n = dma::status_name(static_cast<dma::Status>(v));
    if (n == "unknown") continue;
    if (v >= 0x80) {
      EXPECT_TRUE(n == "timeout" || n == "aborted") << n;
    }
  }
  EXPECT_EQ(dma::flags::kValidMask,
            dma::flags::kInterrupt | dma::flags::kFence | dma::flags::kSrcHbm | dma::flags::kDstHbm);
  EXPECT_LE(dma::kNumOpcodes, regs::global::kCap1OpMask.width);
  EXPECT_EQ(dma::sg::kSize, 16u);
  EXPECT_GE(regs::kMaxTransferBytes, 1u);
}

// ---- CRC32C -----------------------------------------------------------------------------

constexpr std::uint32_t crc_of(std::string_view s) {
  std::array<std::byte, 64> buf{};
  for (std::size_t i = 0; i < s.size(); ++i) buf[i] = static_cast<std::byte>(s[i]);
  return mbox::crc32c(std::span<const std::byte>(buf.data(), s.size()));
}
static_assert(crc_of("123456789") == 0xE3069283u, "CRC32C check value (mailbox.md §2.2)");

TEST(Crc32c, PublishedCheckValues) {
  EXPECT_EQ(mbox::crc32c(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(mbox::crc32c({}), 0x00000000u);
  // RFC 3720 §B.4 (iSCSI) vectors; the RFC lists the CRC bytes as transmitted (LSB first).
  std::array<std::byte, 32> buf{};
  EXPECT_EQ(mbox::crc32c(buf), 0x8A9136AAu) << "32 bytes of 0x00";
  buf.fill(std::byte{0xff});
  EXPECT_EQ(mbox::crc32c(buf), 0x62A8AB43u) << "32 bytes of 0xFF";
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>(i);
  EXPECT_EQ(mbox::crc32c(buf), 0x46DD794Eu) << "bytes 0x00..0x1F";
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>(31 - i);
  EXPECT_EQ(mbox::crc32c(buf), 0x113FDB5Cu) << "bytes 0x1F..0x00";
}

TEST(Crc32c, ChainsAcrossBuffers) {
  const std::string_view a = "12345", b = "6789";
  EXPECT_EQ(mbox::crc32c(bytes_of(b), mbox::crc32c(bytes_of(a))), 0xE3069283u);
}

TEST(Crc32c, MessageCrcIgnoresItsOwnField) {
  std::array<std::byte, mbox::hdr::kSize + 8> msg{};
  fw::store_le<std::uint8_t>(msg.data(), mbox::hdr::kVersion, mbox::kProtocolVersion);
  fw::store_le<std::uint16_t>(msg.data(), mbox::hdr::kOpcode, static_cast<std::uint16_t>(mbox::Command::kHeartbeat));
  fw::store_le<std::uint32_t>(msg.data(), mbox::hdr::kSequence, 0x01020304);
  fw::store_le<std::uint16_t>(msg.data(), mbox::hdr::kPayloadLen, 8);
  fw::store_le<std::uint64_t>(msg.data(), mbox::hdr::kSize, 0xfeedfacecafebeefull);

  const std::uint32_t crc = mbox::message_crc(msg);
  EXPECT_EQ(crc, mbox::crc32c(msg)) << "with the CRC field zero, message_crc is the plain CRC";
  fw::store_le<std::uint32_t>(msg.data(), mbox::hdr::kCrc, crc);
  EXPECT_EQ(mbox::message_crc(msg), crc) << "the stored CRC must not feed into the CRC";
  fw::store_le<std::uint32_t>(msg.data(), mbox::hdr::kCrc, 0xdeadbeef);
  EXPECT_EQ(mbox::message_crc(msg), crc);
  // Any other byte changes it.
  for (std::size_t i = 0; i < msg.size(); ++i) {
    if (i >= mbox::hdr::kCrc && i < mbox::hdr::kCrc + 4) continue;
    auto m = msg;
    m[i] ^= std::byte{0x01};
    EXPECT_NE(mbox::message_crc(m), crc) << "byte " << i;
  }
}

TEST(MailboxLayout, Sizes) {
  EXPECT_EQ(mbox::kMaxPayload, 1008u);
  EXPECT_EQ(mbox::errlog::kMaxPerReply, 31u);
  EXPECT_EQ(mbox::hdr::kSize, 16u);
  EXPECT_EQ(regs::mbox::kReqBuf + regs::mbox::kBufSize, regs::mbox::kRspBuf);
  EXPECT_LE(regs::mbox::kRspBuf + regs::mbox::kBufSize, regs::kQueueBase - regs::kMailboxBase);
  EXPECT_EQ(mbox::telemetry::kPorts % 8, 0u);
}

// ---- Register list: unique, non-overlapping, naturally aligned -----------------------------

/// Bytes available to a block's registers (its stride, or the gap to the next block).
std::uint32_t block_span(std::string_view block) {
  if (block == "GLOBAL") return regs::kMailboxBase - regs::kGlobalBase;
  if (block == "MBOX") return regs::mbox::kReqBuf;  // buffers start at 0x400
  if (block == "QUEUE") return regs::kQueueStride;
  if (block == "WINDOW") return regs::kWindowStride;
  if (block == "PORT") return regs::kLaneBase;  // lane blocks start inside the port block
  if (block == "LANE") return regs::kLaneStride;
  if (block == "ROUTE") return 4;
  return 0;
}

TEST(RegisterMap, UniqueNonOverlappingAligned) {
  struct Span {
    std::uint32_t lo, hi;
    std::string name;
  };
  std::map<std::string, std::vector<Span>> blocks;
  std::map<std::string, int> names;
  for (const auto& r : regs::kRegisters) {
    const std::string name = std::string(r.block) + "." + std::string(r.name);
    EXPECT_EQ(++names[name], 1) << name << " listed twice";
    EXPECT_TRUE(r.width == 32 || r.width == 64) << name << ": width " << r.width;
    const std::uint32_t bytes = r.width / 8;
    EXPECT_EQ(r.offset % bytes, 0u) << name << " at " << r.offset << " is not naturally aligned";
    const std::uint32_t span = block_span(r.block);
    EXPECT_NE(span, 0u) << name << ": unknown block";
    EXPECT_LE(r.offset + bytes, span) << name << " runs past its block";
    std::uint32_t hi = r.offset + bytes;
    if (name == "LANE.FEC_BIN0") hi = r.offset + regs::kFecBins * 8;  // array of 16
    blocks[std::string(r.block)].push_back({r.offset, hi, name});
  }
  for (auto& [block, spans] : blocks) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
    for (std::size_t i = 1; i < spans.size(); ++i)
      EXPECT_LE(spans[i - 1].hi, spans[i].lo) << spans[i - 1].name << " overlaps " << spans[i].name;
    EXPECT_LE(spans.back().hi, block_span(block)) << spans.back().name << " runs past block " << block;
  }
}

TEST(RegisterMap, BlocksFitBar0AndAccessNamesAreDistinct) {
  EXPECT_LE(regs::kPortBase + regs::kMaxPorts * regs::kPortStride, npo::fw::pci::kBar0Size);
  EXPECT_EQ(regs::queue_reg(31, regs::queue::kCompleted), 0x10000u + 31 * 0x100 + 0x38);
  EXPECT_EQ(regs::window_reg(1023, regs::window::kStatus), 0x20000u + 1023 * 0x20 + 0x1c);
  EXPECT_EQ(regs::lane_reg(15, 7, regs::port::lane::kFecBin0), 0x40000u + 15 * 0x1000 + 0x100 + 7 * 0x100 + 0x80);
  EXPECT_EQ(regs::mbox_reg(regs::mbox::kRspLen), 0x0100cu);
  std::map<std::string_view, int> seen;
  for (auto a : {regs::Access::kRO, regs::Access::kRW, regs::Access::kRW1C, regs::Access::kWO, regs::Access::kDB,
                 regs::Access::kRC})
    EXPECT_EQ(++seen[regs::access_name(a)], 1) << regs::access_name(a);
  EXPECT_EQ(seen.count("?"), 0u);
}

TEST(RegisterMap, CapabilityFieldsHoldTheGeometry) {
  using namespace regs::global;
  EXPECT_EQ(kCap0NumEngines.get(kCap0NumEngines.make(regs::kNumEngines)), regs::kNumEngines);
  EXPECT_EQ(kCap0QueuesPerEngine.get(kCap0QueuesPerEngine.make(regs::kQueuesPerEngine)), regs::kQueuesPerEngine);
  EXPECT_EQ(kCap0NumPorts.get(kCap0NumPorts.make(regs::kMaxPorts)), regs::kMaxPorts);
  EXPECT_EQ(kCap0LanesPerPort.get(kCap0LanesPerPort.make(regs::kLanesPerPort)), regs::kLanesPerPort);
  EXPECT_EQ(kCap1MaxDepthLog2.get(kCap1MaxDepthLog2.make(regs::kMaxQueueDepthLog2)), regs::kMaxQueueDepthLog2);
  EXPECT_EQ(1u << kCap1WindowEntriesLog2.get(kCap1WindowEntriesLog2.make(10)), regs::kWindowEntries);
  // Window IDs and generations fit the descriptor fields that carry them.
  EXPECT_LE(regs::kWindowEntries, 1u << 16);
  EXPECT_EQ(regs::window::kCtrlGeneration.width, 16u);
  // Lane numbers fit the LANE_MAP nibbles and the LANES_UP bitmap.
  EXPECT_LE(regs::kLanesPerPort * 4, 32u);
  EXPECT_EQ(regs::port::kStatusLanesUp.width, regs::kLanesPerPort);
}

}  // namespace
