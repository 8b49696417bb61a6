// SPDX-License-Identifier: Apache-2.0
// The backend conformance suite: what every backend::Device must do, checked against the
// concrete values of the card contract (firmware-iface) and the backend interface
// (hal/include/npo/hal/backend). Uses nothing backend-specific; see backend_conformance.hpp.
#include "backend_conformance.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "npo/fw/dma.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/pci.hpp"

namespace npo::conformance {

namespace be = npo::backend;
namespace pci = npo::fw::pci;
namespace cfgsp = npo::fw::pci::cfg;
namespace regs = npo::fw::regs;
namespace g = npo::fw::regs::global;
namespace qr = npo::fw::regs::queue;
namespace mb = npo::fw::mbox;
namespace dma = npo::fw::dma;

namespace {

constexpr std::uint64_t kPage = 4096;
constexpr auto kWait = std::chrono::seconds(5);  // generous bound for sanitizer builds

template <typename Pred>
bool wait_until(Pred&& pred, std::chrono::steady_clock::duration timeout = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (unsigned i = 0;; ++i) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (i < 100) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

std::uint64_t bar_size_from_mask(std::uint32_t lo, std::uint32_t hi) {
  const std::uint64_t mask = (std::uint64_t{hi} << 32) | (lo & ~0xfu);
  return ~mask + 1;
}

/// Phase-bit-aware read of one completion slot: the flags word is read with acquire
/// semantics first (the card writes it last), then the body.
std::optional<dma::Completion> read_completion(const std::byte* slot, bool expected_phase) {
  const auto flags = __atomic_load_n(reinterpret_cast<const std::uint16_t*>(slot + dma::cpl::kFlags), __ATOMIC_ACQUIRE);
  if (((flags & dma::cpl::kPhase) != 0) != expected_phase) return std::nullopt;
  dma::Completion c;
  std::memcpy(c.raw.data(), slot, dma::cpl::kSize);
  return c;
}

}  // namespace

// ==== Fixture ================================================================================

void PrintTo(const ConformanceTarget& target, std::ostream* os) {
  *os << "ConformanceTarget{" << target.name;
  if (target.address) *os << " @" << target.address->to_string();
  *os << "}";
}

std::string target_name(const ::testing::TestParamInfo<ConformanceTarget>& info) { return info.param.name; }

HostPages::HostPages(std::size_t bytes) : size_((bytes + kPage - 1) / kPage * kPage) {
  data_ = static_cast<std::byte*>(std::aligned_alloc(kPage, size_));
  if (data_ != nullptr) std::memset(data_, 0, size_);
}

HostPages::~HostPages() { std::free(data_); }

void BackendConformance::SetUp() {
  const auto& target = GetParam();
  ASSERT_TRUE(target.make_backend) << target.name << ": no backend factory";
  backend_ = target.make_backend();
  ASSERT_NE(backend_, nullptr) << target.name << ": backend factory returned null";
  auto fns = backend_->enumerate();
  ASSERT_TRUE(fns.has_value()) << fns.error().to_string();
  std::optional<be::PciAddress> addr = target.address;
  if (!addr) {
    for (const auto& f : *fns) {
      if (f.vendor_id == pci::kVendorId && f.device_id == pci::kDeviceId) {
        addr = f.address;
        break;
      }
    }
  }
  ASSERT_TRUE(addr.has_value()) << target.name << ": no function with IDs " << std::hex << pci::kVendorId << ":"
                                << pci::kDeviceId;
  auto d = backend_->open(*addr);
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  device_ = std::move(*d);
  auto m = device_->mmio(pci::kBarRegs);
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  bar0_ = *m;
  // What a driver does first: enable memory decoding and bus mastering.
  const std::uint16_t cmd = cfg16(cfgsp::kCommand);
  cfg_write16(cfgsp::kCommand, cmd | cfgsp::kCommandMemory | cfgsp::kCommandBusMaster);
}

void BackendConformance::TearDown() {
  device_.reset();
  backend_.reset();  // with the emulator, also stops its worker threads
  pages_.clear();
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}

int BackendConformance::make_eventfd() {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  EXPECT_GE(fd, 0) << "eventfd: " << std::strerror(errno);
  if (fd >= 0) fds_.push_back(fd);
  return fd;
}

HostPages& BackendConformance::host_pages(std::size_t bytes) {
  pages_.push_back(std::make_unique<HostPages>(bytes));
  EXPECT_NE(pages_.back()->data(), nullptr);
  return *pages_.back();
}

std::optional<std::uint64_t> BackendConformance::pick_iova(std::uint64_t bytes) const {
  constexpr std::uint64_t kAlign = 2u << 20;
  for (const auto& r : device_->iova_ranges()) {
    // Leave one page below the pick free, so a test can map "just before" it.
    const std::uint64_t lo = r.first + kPage;
    std::uint64_t base = (lo + kAlign - 1) / kAlign * kAlign;
    if (base < lo || base > r.last || r.last - base + 1 < bytes + kPage) {
      base = (lo + kPage - 1) / kPage * kPage;
      if (base < lo || base > r.last || r.last - base + 1 < bytes + kPage) continue;
    }
    return base;
  }
  return std::nullopt;
}

std::uint8_t BackendConformance::cfg8(std::uint32_t off) {
  auto r = be::config_read8(*device_, off);
  EXPECT_TRUE(r.has_value()) << "config_read8 0x" << std::hex << off << ": " << r.error().to_string();
  return r.value_or(0);
}
std::uint16_t BackendConformance::cfg16(std::uint32_t off) {
  auto r = be::config_read16(*device_, off);
  EXPECT_TRUE(r.has_value()) << "config_read16 0x" << std::hex << off << ": " << r.error().to_string();
  return r.value_or(0);
}
std::uint32_t BackendConformance::cfg32(std::uint32_t off) {
  auto r = be::config_read32(*device_, off);
  EXPECT_TRUE(r.has_value()) << "config_read32 0x" << std::hex << off << ": " << r.error().to_string();
  return r.value_or(0);
}
void BackendConformance::cfg_write16(std::uint32_t off, std::uint16_t v) {
  auto r = be::config_write16(*device_, off, v);
  EXPECT_TRUE(r.has_value()) << "config_write16 0x" << std::hex << off << ": " << r.error().to_string();
}
void BackendConformance::cfg_write32(std::uint32_t off, std::uint32_t v) {
  auto r = be::config_write32(*device_, off, v);
  EXPECT_TRUE(r.has_value()) << "config_write32 0x" << std::hex << off << ": " << r.error().to_string();
}

std::pair<std::uint32_t, std::uint32_t> BackendConformance::size_bar(unsigned bar) {
  const std::uint32_t lo_off = cfgsp::kBar0 + bar * 4;
  const std::uint32_t hi_off = lo_off + 4;
  const std::uint32_t lo0 = cfg32(lo_off);
  const std::uint32_t hi0 = cfg32(hi_off);
  cfg_write32(lo_off, 0xffffffffu);
  cfg_write32(hi_off, 0xffffffffu);
  const std::uint32_t lo = cfg32(lo_off);
  const std::uint32_t hi = cfg32(hi_off);
  cfg_write32(lo_off, lo0);
  cfg_write32(hi_off, hi0);
  EXPECT_EQ(cfg32(lo_off), lo0) << "BAR" << bar << " low dword not restored";
  EXPECT_EQ(cfg32(hi_off), hi0) << "BAR" << bar << " high dword not restored";
  return {lo, hi};
}

std::optional<std::vector<std::byte>> BackendConformance::raw_heartbeat(std::uint64_t cookie, std::uint32_t seq) {
  namespace m = regs::mbox;
  std::array<std::byte, mb::hdr::kSize + mb::heartbeat::kReqSize> req{};
  fw::store_le<std::uint8_t>(req.data(), mb::hdr::kVersion, mb::kProtocolVersion);
  fw::store_le<std::uint16_t>(req.data(), mb::hdr::kOpcode, static_cast<std::uint16_t>(mb::Command::kHeartbeat));
  fw::store_le<std::uint32_t>(req.data(), mb::hdr::kSequence, seq);
  fw::store_le<std::uint16_t>(req.data(), mb::hdr::kPayloadLen, mb::heartbeat::kReqSize);
  fw::store_le<std::uint64_t>(req.data(), mb::hdr::kSize + mb::heartbeat::kCookie, cookie);
  fw::store_le<std::uint32_t>(req.data(), mb::hdr::kCrc, mb::message_crc(req));

  auto& b = bar0();
  if (!wait_until([&] { return !m::kStatusBusy.get(b.read32(regs::mbox_reg(m::kStatus))); })) {
    ADD_FAILURE() << "mailbox stays BUSY";
    return std::nullopt;
  }
  for (std::uint32_t o = 0; o < req.size(); o += 4) {
    b.write32(regs::mbox_reg(m::kReqBuf + o), fw::load_le<std::uint32_t>(req.data(), o));
  }
  b.write32(regs::mbox_reg(m::kReqLen), static_cast<std::uint32_t>(req.size()));
  b.write32(regs::mbox_reg(m::kStatus), m::kStatusDone.mask() | m::kStatusError.mask());  // RW1C: clear stale
  EXPECT_EQ(b.read32(regs::mbox_reg(m::kStatus)) & m::kStatusDone.mask(), 0u) << "STATUS.DONE is not RW1C";
  b.write32(regs::mbox_reg(m::kCtrl), m::kCtrlSend.mask());
  std::uint32_t st = 0;
  if (!wait_until([&] { return m::kStatusDone.get(st = b.read32(regs::mbox_reg(m::kStatus))) != 0; })) {
    ADD_FAILURE() << "no mailbox reply (STATUS 0x" << std::hex << st << ")";
    return std::nullopt;
  }
  EXPECT_EQ(m::kStatusError.get(st), 0u);
  EXPECT_EQ(m::kStatusBusy.get(st), 0u);
  const std::uint32_t rlen = b.read32(regs::mbox_reg(m::kRspLen));
  EXPECT_EQ(rlen, mb::hdr::kSize + mb::heartbeat::kRspSize);
  if (rlen < mb::hdr::kSize || rlen > m::kBufSize) return std::nullopt;
  std::vector<std::byte> rsp((rlen + 3) / 4 * 4);
  for (std::uint32_t o = 0; o < rsp.size(); o += 4)
    fw::store_le<std::uint32_t>(rsp.data(), o, b.read32(regs::mbox_reg(m::kRspBuf + o)));
  rsp.resize(rlen);
  b.write32(regs::mbox_reg(m::kStatus), m::kStatusDone.mask());
  EXPECT_EQ(fw::load_le<std::uint8_t>(rsp.data(), mb::hdr::kVersion), mb::kProtocolVersion);
  EXPECT_EQ(fw::load_le<std::uint8_t>(rsp.data(), mb::hdr::kFlags) & mb::hdr::kFlagResponse, mb::hdr::kFlagResponse);
  EXPECT_EQ(fw::load_le<std::uint16_t>(rsp.data(), mb::hdr::kOpcode),
            static_cast<std::uint16_t>(mb::Command::kHeartbeat));
  EXPECT_EQ(fw::load_le<std::uint32_t>(rsp.data(), mb::hdr::kSequence), seq);
  EXPECT_EQ(fw::load_le<std::uint16_t>(rsp.data(), mb::hdr::kPayloadLen), rlen - mb::hdr::kSize);
  EXPECT_EQ(fw::load_le<std::uint16_t>(rsp.data(), mb::hdr::kStatus), static_cast<std::uint16_t>(mb::Status::kOk));
  EXPECT_EQ(fw::load_le<std::uint32_t>(rsp.data(), mb::hdr::kCrc), mb::message_crc(rsp)) << "reply CRC32C";
  std::vector<std::byte> payload(rsp.begin() + mb::hdr::kSize, rsp.end());
  if (payload.size() >= mb::heartbeat::kRspSize) {
    EXPECT_EQ(fw::load_le<std::uint64_t>(payload.data(), mb::heartbeat::kCookie), cookie);
    EXPECT_GE(fw::load_le<std::uint32_t>(payload.data(), mb::heartbeat::kCount), 1u);
  }
  return payload;
}

std::uint64_t BackendConformance::wait_eventfd(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  const int n = ::poll(&p, 1, timeout_ms);
  if (n != 1) return 0;
  std::uint64_t v = 0;
  if (::read(fd, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) return 0;
  return v;
}

// ==== Configuration space ====================================================================

TEST_P(BackendConformance, ConfigIdentity) {
  EXPECT_EQ(cfg16(cfgsp::kVendorId), pci::kVendorId);
  EXPECT_EQ(cfg16(cfgsp::kDeviceId), pci::kDeviceId);
  EXPECT_EQ(cfg32(cfgsp::kRevisionId) >> 8, pci::kClassCode);  // class code is the top 24 bits of dword 2
  EXPECT_EQ(cfg8(cfgsp::kRevisionId), pci::kRevisionId);
  EXPECT_EQ(cfg8(cfgsp::kHeaderType) & 0x7f, 0x00) << "header type 0 (endpoint)";
  EXPECT_NE(cfg16(cfgsp::kStatus) & cfgsp::kStatusCapList, 0) << "Status.CapList";
  EXPECT_EQ(cfg16(cfgsp::kSubsysVendor), pci::kVendorId);

  const auto& fi = dev().info();
  EXPECT_EQ(fi.vendor_id, pci::kVendorId);
  EXPECT_EQ(fi.device_id, pci::kDeviceId);
  EXPECT_EQ(fi.class_code, pci::kClassCode);
  EXPECT_FALSE(fi.driver.empty());
  // Enumeration lists the open function; a second open of it is refused (exclusive use).
  auto fns = backend().enumerate();
  ASSERT_TRUE(fns.has_value());
  EXPECT_TRUE(
      std::any_of(fns->begin(), fns->end(), [&](const be::FunctionInfo& f) { return f.address == fi.address; }));
  auto second = backend().open(fi.address);
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code(), Code::kAlreadyExists);
}

TEST_P(BackendConformance, ConfigAccessWidthsAgree) {
  std::array<std::byte, 0x140> all{};
  ASSERT_TRUE(dev().config_read(0, all).has_value());
  for (std::uint32_t off = 0; off < all.size(); off += 4) {
    const std::uint32_t d = cfg32(off);
    const std::uint32_t w = cfg16(off) | (std::uint32_t{cfg16(off + 2)} << 16);
    const std::uint32_t b = cfg8(off) | (std::uint32_t{cfg8(off + 1)} << 8) | (std::uint32_t{cfg8(off + 2)} << 16) |
                            (std::uint32_t{cfg8(off + 3)} << 24);
    EXPECT_EQ(d, w) << "dword vs words at 0x" << std::hex << off;
    EXPECT_EQ(d, b) << "dword vs bytes at 0x" << std::hex << off;
    EXPECT_EQ(d, fw::load_le<std::uint32_t>(all.data(), off)) << "dword vs bulk read at 0x" << std::hex << off;
  }
  // An unaligned multi-byte read straddling dwords agrees too.
  std::array<std::byte, 6> odd{};
  ASSERT_TRUE(dev().config_read(1, odd).has_value());
  for (std::size_t i = 0; i < odd.size(); ++i) EXPECT_EQ(odd[i], all[1 + i]) << "byte " << 1 + i;
}

TEST_P(BackendConformance, ConfigReadOnlyFieldsIgnoreWrites) {
  const std::uint32_t class_dword = cfg32(cfgsp::kRevisionId);
  const std::uint8_t capptr = cfg8(cfgsp::kCapPtr);
  cfg_write16(cfgsp::kVendorId, 0xdead);
  cfg_write16(cfgsp::kDeviceId, 0xbeef);
  cfg_write32(cfgsp::kRevisionId, 0xffffffffu);
  cfg_write16(cfgsp::kCapPtr, 0x0000);
  EXPECT_EQ(cfg16(cfgsp::kVendorId), pci::kVendorId);
  EXPECT_EQ(cfg16(cfgsp::kDeviceId), pci::kDeviceId);
  EXPECT_EQ(cfg32(cfgsp::kRevisionId), class_dword);
  EXPECT_EQ(cfg8(cfgsp::kCapPtr), capptr);
  EXPECT_EQ(cfg8(cfgsp::kHeaderType) & 0x7f, 0x00);
}

TEST_P(BackendConformance, ConfigCommandMemoryAndBusMasterWritable) {
  const std::uint16_t both = cfgsp::kCommandMemory | cfgsp::kCommandBusMaster;
  EXPECT_EQ(cfg16(cfgsp::kCommand) & both, both) << "set by SetUp";
  cfg_write16(cfgsp::kCommand, cfg16(cfgsp::kCommand) & ~cfgsp::kCommandBusMaster);
  EXPECT_EQ(cfg16(cfgsp::kCommand) & both, cfgsp::kCommandMemory);
  cfg_write16(cfgsp::kCommand, cfg16(cfgsp::kCommand) | cfgsp::kCommandBusMaster);
  EXPECT_EQ(cfg16(cfgsp::kCommand) & both, both);
  // Still decoding BAR0 with memory space enabled.
  EXPECT_EQ(bar0().read32(g::kMagic), regs::kMagic);
}

TEST_P(BackendConformance, ConfigOutOfRangeFails) {
  std::array<std::byte, 2> two{};
  auto r = dev().config_read(4095, two);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kOutOfRange);
  std::array<std::byte, 1> one{};
  r = dev().config_read(cfgsp::kConfigSize, one);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kOutOfRange);
  auto w = dev().config_write(4095, two);
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.error().code(), Code::kOutOfRange);
  // The last byte and the last dword are in range.
  EXPECT_TRUE(dev().config_read(4095, one).has_value());
  std::array<std::byte, 4> four{};
  EXPECT_TRUE(dev().config_read(4092, four).has_value());
}

TEST_P(BackendConformance, BarSizingMasks) {
  const std::uint64_t hbm = bar0().read64(g::kHbmSize);
  ASSERT_GE(hbm, pci::kBar2MinSize);
  const std::uint64_t bar2 = std::max<std::uint64_t>(pci::kBar2MinSize, std::bit_ceil(hbm));

  struct Expect {
    unsigned bar;
    std::uint64_t size;
    bool prefetchable;
  };
  for (const Expect e : {Expect{pci::kBarRegs, pci::kBar0Size, false}, Expect{pci::kBarHbm, bar2, true},
                         Expect{pci::kBarMsix, pci::kBar4Size, false}}) {
    SCOPED_TRACE(testing::Message() << "BAR" << e.bar);
    const auto [lo, hi] = size_bar(e.bar);
    EXPECT_EQ(lo & 0x1u, 0u) << "memory BAR";
    EXPECT_EQ(lo & 0x6u, cfgsp::kBarMemType64) << "64-bit memory type";
    EXPECT_EQ((lo & cfgsp::kBarPrefetchable) != 0, e.prefetchable);
    EXPECT_EQ(bar_size_from_mask(lo, hi), e.size);
    const std::uint64_t mask = ~(e.size - 1);
    EXPECT_EQ(lo & ~0xfu, static_cast<std::uint32_t>(mask) & ~0xfu);
    EXPECT_EQ(hi, static_cast<std::uint32_t>(mask >> 32));
  }
  // BARs 1, 3 and 5 are the upper halves of the 64-bit BARs: the type bits are not there.
  for (unsigned bar : {1u, 3u, 5u}) {
    auto ri = dev().region_info(bar);
    ASSERT_TRUE(ri.has_value());
    EXPECT_EQ(ri->size, 0u) << "BAR" << bar;
  }
}

// ==== Capabilities ===========================================================================

TEST_P(BackendConformance, CapabilityWalkFindsEveryCapability) {
  auto caps = be::walk_capabilities(dev());
  ASSERT_TRUE(caps.has_value()) << caps.error().to_string();
  EXPECT_TRUE(be::find_capability(*caps, cfgsp::kCapIdPcie, false).has_value()) << "PCI Express";
  EXPECT_TRUE(be::find_capability(*caps, cfgsp::kCapIdMsix, false).has_value()) << "MSI-X";
  EXPECT_TRUE(be::find_capability(*caps, cfgsp::kExtCapIdAcs, true).has_value()) << "ACS";
  EXPECT_TRUE(be::find_capability(*caps, cfgsp::kExtCapIdAts, true).has_value()) << "ATS";
  EXPECT_TRUE(be::find_capability(*caps, cfgsp::kExtCapIdRebar, true).has_value()) << "Resizable BAR";
  for (const auto& c : *caps) {
    if (c.extended) {
      EXPECT_GE(c.offset, cfgsp::kExtCapStart);
      EXPECT_EQ(c.offset % 4, 0u);
    } else {
      EXPECT_GE(c.offset, 0x40u);
      EXPECT_LT(c.offset, 0x100u);
    }
  }
  auto link = be::read_pcie_link(dev(), *caps);
  ASSERT_TRUE(link.has_value()) << link.error().to_string();
  EXPECT_EQ(link->max_speed_code, 5u);
  EXPECT_DOUBLE_EQ(be::pcie_speed_gts(link->max_speed_code), 32.0);
  EXPECT_EQ(link->max_width, 16u);
  EXPECT_TRUE(link->flr_capable);
  // The negotiated link can be narrower or slower on a real slot, never wider or faster.
  EXPECT_GE(link->speed_code, 1u);
  EXPECT_LE(link->speed_code, link->max_speed_code);
  EXPECT_GE(link->width, 1u);
  EXPECT_LE(link->width, link->max_width);
}

TEST_P(BackendConformance, MsixCapabilityDescribesBar4Table) {
  auto caps = be::walk_capabilities(dev());
  ASSERT_TRUE(caps.has_value());
  auto mx = be::find_capability(*caps, cfgsp::kCapIdMsix, false);
  ASSERT_TRUE(mx.has_value());
  const std::uint16_t ctl = cfg16(mx->offset + cfgsp::msix::kMsgCtl);
  EXPECT_EQ(ctl & cfgsp::msix::kMsgCtlTableSizeMask, pci::kMsixVectors - 1) << "table size N-1 = 63";
  const std::uint32_t table = cfg32(mx->offset + cfgsp::msix::kTable);
  EXPECT_EQ(table & 0x7u, pci::kBarMsix) << "table BIR";
  EXPECT_EQ(table & ~0x7u, pci::kMsixTableOffset);
  const std::uint32_t pba = cfg32(mx->offset + cfgsp::msix::kPba);
  EXPECT_EQ(pba & 0x7u, pci::kBarMsix) << "PBA BIR";
  EXPECT_EQ(pba & ~0x7u, pci::kMsixPbaOffset);
  EXPECT_EQ(dev().msix_vectors(), pci::kMsixVectors);
}

TEST_P(BackendConformance, ResizableBarChangesBar2Sizing) {
  namespace rb = cfgsp::rebar;
  auto caps = be::walk_capabilities(dev());
  ASSERT_TRUE(caps.has_value());
  auto cap = be::find_capability(*caps, cfgsp::kExtCapIdRebar, true);
  ASSERT_TRUE(cap.has_value());
  const std::uint32_t sizes = cfg32(cap->offset + rb::kCap0);
  const std::uint32_t ctl0 = cfg32(cap->offset + rb::kCtl0);
  EXPECT_EQ(rb::kCtlBarIndex.get(ctl0), pci::kBarHbm);
  EXPECT_EQ(rb::kCtlNumBars.get(ctl0), 1u);
  const unsigned cur = rb::kCtlBarSize.get(ctl0);
  ASSERT_NE(sizes & (1u << (cur + 4)), 0u) << "current size must be a supported one";
  {
    const auto [lo, hi] = size_bar(pci::kBarHbm);
    EXPECT_EQ(bar_size_from_mask(lo, hi), std::uint64_t{1} << (cur + 20));
  }
  // A supported size other than the current one (prefer the next larger) and an unsupported one.
  std::optional<unsigned> other, unsupported;
  for (unsigned n = 0; n <= 27; ++n) {
    const bool ok = (sizes & (1u << (n + 4))) != 0;
    if (ok && n != cur && (!other || (*other < cur && n > cur))) other = n;
    if (!ok && !unsupported && n < 20) unsupported = n;
  }
  ASSERT_TRUE(other.has_value()) << "the card advertises more than one BAR2 size";
  ASSERT_TRUE(unsupported.has_value());

  cfg_write32(cap->offset + rb::kCtl0, rb::kCtlBarSize.set(ctl0, *other));
  EXPECT_EQ(rb::kCtlBarSize.get(cfg32(cap->offset + rb::kCtl0)), *other);
  {
    const auto [lo, hi] = size_bar(pci::kBarHbm);
    EXPECT_EQ(bar_size_from_mask(lo, hi), std::uint64_t{1} << (*other + 20));
    EXPECT_NE(lo & cfgsp::kBarPrefetchable, 0u);
  }
  cfg_write32(cap->offset + rb::kCtl0, rb::kCtlBarSize.set(ctl0, *unsupported));
  EXPECT_EQ(rb::kCtlBarSize.get(cfg32(cap->offset + rb::kCtl0)), *other) << "unsupported size must be refused";
  {
    const auto [lo, hi] = size_bar(pci::kBarHbm);
    EXPECT_EQ(bar_size_from_mask(lo, hi), std::uint64_t{1} << (*other + 20));
  }
  // Restore.
  cfg_write32(cap->offset + rb::kCtl0, rb::kCtlBarSize.set(ctl0, cur));
  EXPECT_EQ(rb::kCtlBarSize.get(cfg32(cap->offset + rb::kCtl0)), cur);
  const auto [lo, hi] = size_bar(pci::kBarHbm);
  EXPECT_EQ(bar_size_from_mask(lo, hi), std::uint64_t{1} << (cur + 20));
}

// ==== BARs and MMIO ==========================================================================

TEST_P(BackendConformance, RegionInfoAndMappings) {
  const std::uint64_t hbm = bar0().read64(g::kHbmSize);
  const std::uint64_t bar2 = std::max<std::uint64_t>(pci::kBar2MinSize, std::bit_ceil(hbm));
  auto r0 = dev().region_info(pci::kBarRegs);
  ASSERT_TRUE(r0.has_value());
  EXPECT_EQ(r0->index, pci::kBarRegs);
  EXPECT_EQ(r0->size, pci::kBar0Size);
  EXPECT_TRUE(r0->is_64bit);
  EXPECT_FALSE(r0->prefetchable);
  auto r2 = dev().region_info(pci::kBarHbm);
  ASSERT_TRUE(r2.has_value());
  EXPECT_EQ(r2->size, bar2);
  EXPECT_TRUE(r2->is_64bit);
  EXPECT_TRUE(r2->prefetchable);
  EXPECT_TRUE(r2->mappable);
  auto r4 = dev().region_info(pci::kBarMsix);
  ASSERT_TRUE(r4.has_value());
  EXPECT_EQ(r4->size, pci::kBar4Size);
  EXPECT_TRUE(r4->is_64bit);
  auto r6 = dev().region_info(6);
  ASSERT_FALSE(r6.has_value());
  EXPECT_EQ(r6.error().code(), Code::kInvalidArgument);

  EXPECT_EQ(bar0().size(), pci::kBar0Size);
  auto m4 = dev().mmio(pci::kBarMsix);
  ASSERT_TRUE(m4.has_value());
  EXPECT_EQ((*m4)->size(), pci::kBar4Size);
  auto m1 = dev().mmio(1);
  ASSERT_FALSE(m1.has_value());
  EXPECT_EQ(m1.error().code(), Code::kNotFound);
  auto ap = dev().map_aperture(pci::kBarHbm);
  ASSERT_TRUE(ap.has_value()) << ap.error().to_string();
  EXPECT_GE(ap->size(), hbm);
  EXPECT_LE(ap->size(), bar2);
  // The aperture is memory: a store reads back.
  (*ap)[ap->size() - 1] = std::byte{0x5a};
  EXPECT_EQ((*ap)[ap->size() - 1], std::byte{0x5a});
  auto ap0 = dev().map_aperture(pci::kBarRegs);
  EXPECT_FALSE(ap0.has_value()) << "BAR0 is not mappable";
}

TEST_P(BackendConformance, Mmio32And64BitAccess) {
  auto& b = bar0();
  b.write32(g::kScratch, 0xdeadbeefu);
  EXPECT_EQ(b.read32(g::kScratch), 0xdeadbeefu);
  b.write32(g::kScratch, 0);
  EXPECT_EQ(b.read32(g::kScratch), 0u);

  b.write64(g::kScratch64, 0x0123456789abcdefULL);
  EXPECT_EQ(b.read64(g::kScratch64), 0x0123456789abcdefULL);
  EXPECT_EQ(b.read32(g::kScratch64), 0x89abcdefu) << "low dword";
  EXPECT_EQ(b.read32(g::kScratch64 + 4), 0x01234567u) << "high dword";
  // A 64-bit register written as two 32-bit accesses, low dword first.
  b.write32(g::kScratch64, 0x11111111u);
  b.write32(g::kScratch64 + 4, 0x22222222u);
  EXPECT_EQ(b.read64(g::kScratch64), 0x2222222211111111ULL);
  b.write32(g::kScratch64, 0xaaaaaaaau);
  EXPECT_EQ(b.read64(g::kScratch64), 0x22222222aaaaaaaaULL) << "a low-dword write keeps the high dword";
  EXPECT_EQ(b.read32(g::kScratch), 0u) << "SCRATCH64 writes must not touch SCRATCH";
  // Identity registers read as the contract says.
  EXPECT_EQ(b.read32(g::kVersion), regs::kInterfaceVersion);
  const std::uint32_t cap0 = b.read32(g::kCap0);
  EXPECT_EQ(g::kCap0NumEngines.get(cap0), regs::kNumEngines);
  EXPECT_EQ(g::kCap0QueuesPerEngine.get(cap0), regs::kQueuesPerEngine);
  EXPECT_EQ(g::kCap0LanesPerPort.get(cap0), regs::kLanesPerPort);
  EXPECT_EQ(b.read32(g::kMaxXfer), regs::kMaxTransferBytes);
  EXPECT_EQ(b.read64(g::kHbmSize) % kPage, 0u);
}

TEST_P(BackendConformance, MmioReadOnlyAndReservedRegisters) {
  auto& b = bar0();
  EXPECT_EQ(b.read32(g::kMagic), regs::kMagic);
  b.write32(g::kMagic, 0);
  EXPECT_EQ(b.read32(g::kMagic), regs::kMagic) << "MAGIC is RO";
  b.write32(g::kVersion, 0xffffffffu);
  EXPECT_EQ(b.read32(g::kVersion), regs::kInterfaceVersion) << "VERSION is RO";
  const std::uint64_t hbm = b.read64(g::kHbmSize);
  b.write64(g::kHbmSize, 0x1000);
  EXPECT_EQ(b.read64(g::kHbmSize), hbm) << "HBM_SIZE is RO";

  const unsigned ports = g::kCap0NumPorts.get(b.read32(g::kCap0));
  std::vector<std::uint32_t> reserved = {0x088,
                                         0x08c,
                                         0x0fc,
                                         0x800,
                                         0xffc,
                                         regs::kMailboxBase + 0x010,
                                         0x3000,
                                         0xf000,
                                         regs::queue_reg(0, 0x34),
                                         regs::queue_reg(31, 0xfc),
                                         regs::kPortBase - 4};
  if (ports < regs::kMaxPorts) reserved.push_back(regs::port_reg(regs::kMaxPorts - 1, regs::port::kCtrl));
  for (const std::uint32_t off : reserved) {
    b.write32(off, 0xffffffffu);
    EXPECT_EQ(b.read32(off), 0u) << "reserved offset 0x" << std::hex << off;
  }
  EXPECT_EQ(b.read32(g::kMagic), regs::kMagic);
}

TEST_P(BackendConformance, MmioMisalignedAndOutOfBarAccess) {
  auto& b = bar0();
  b.write32(g::kScratch, 0x12345678u);
  b.write64(g::kScratch64, 0x0badc0de0badf00dULL);
  EXPECT_EQ(b.read32(g::kScratch + 1), 0xffffffffu);
  EXPECT_EQ(b.read32(g::kScratch + 2), 0xffffffffu);
  EXPECT_EQ(b.read64(g::kScratch64 + 4), ~0ULL) << "64-bit access must be 8-byte aligned";
  EXPECT_EQ(b.read64(g::kScratch64 + 1), ~0ULL);
  b.write32(g::kScratch + 2, 0);
  b.write32(g::kScratch - 1, 0);
  b.write64(g::kScratch64 + 4, 0);
  EXPECT_EQ(b.read32(g::kScratch), 0x12345678u) << "misaligned writes are dropped";
  EXPECT_EQ(b.read64(g::kScratch64), 0x0badc0de0badf00dULL);
  EXPECT_EQ(b.read32(b.size()), 0xffffffffu) << "past the BAR";
  EXPECT_EQ(b.read64(b.size() - 4), ~0ULL) << "straddles the BAR end";
  b.write32(b.size(), 0);  // must not crash
  EXPECT_EQ(b.read32(g::kMagic), regs::kMagic);
}

TEST_P(BackendConformance, MmioProgramOrderFromOneThread) {
  auto& b = bar0();
  unsigned mismatches = 0;
  for (std::uint32_t i = 1; i <= 1000; ++i) {
    b.write32(g::kScratch, i);
    b.write64(g::kScratch64, (std::uint64_t{i} << 32) | ~i);
    if (b.read32(g::kScratch) != i) ++mismatches;
    if (b.read64(g::kScratch64) != ((std::uint64_t{i} << 32) | ~i)) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(b.read32(g::kScratch), 1000u);
}

// ==== DMA mapping ============================================================================

TEST_P(BackendConformance, DmaMapUnmap) {
  const auto ranges = dev().iova_ranges();
  ASSERT_FALSE(ranges.empty());
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i].first, ranges[i].last);
    if (i > 0) {
      EXPECT_GT(ranges[i].first, ranges[i - 1].last) << "sorted, non-overlapping";
    }
  }
  auto& mem = host_pages(4 * kPage);
  const auto iova = pick_iova(4 * kPage);
  ASSERT_TRUE(iova.has_value());
  const std::byte* p = mem.data();
  const auto code = [](const Result<void>& r) { return r ? Code::kOk : r.error().code(); };

  ASSERT_EQ(code(dev().dma_map(p, *iova, 3 * kPage, be::DmaAccess::kReadWrite)), Code::kOk);
  EXPECT_EQ(code(dev().dma_map(p, *iova, 3 * kPage, be::DmaAccess::kReadWrite)), Code::kAlreadyExists);
  EXPECT_EQ(code(dev().dma_map(p + 3 * kPage, *iova + 2 * kPage, kPage, be::DmaAccess::kRead)), Code::kAlreadyExists);
  EXPECT_EQ(code(dev().dma_map(p + 3 * kPage, *iova - kPage, 2 * kPage, be::DmaAccess::kRead)), Code::kAlreadyExists);
  EXPECT_EQ(code(dev().dma_map(p + 1, *iova + 3 * kPage, kPage, be::DmaAccess::kRead)), Code::kInvalidArgument);
  EXPECT_EQ(code(dev().dma_map(p + 3 * kPage, *iova + 3 * kPage + 8, kPage, be::DmaAccess::kRead)),
            Code::kInvalidArgument);
  EXPECT_EQ(code(dev().dma_map(p + 3 * kPage, *iova + 3 * kPage, 100, be::DmaAccess::kRead)), Code::kInvalidArgument);
  EXPECT_EQ(code(dev().dma_map(p + 3 * kPage, *iova + 3 * kPage, 0, be::DmaAccess::kRead)), Code::kInvalidArgument);
  // Outside every IOVA range: just past the last one, and straddling its end.
  const std::uint64_t end = ranges.back().last;
  if (end < ~std::uint64_t{0} - 2 * kPage) {
    const std::uint64_t past = (end + 1 + kPage - 1) / kPage * kPage;
    EXPECT_EQ(code(dev().dma_map(p + 3 * kPage, past, kPage, be::DmaAccess::kRead)), Code::kOutOfRange);
    const std::uint64_t straddle = (end + 1) / kPage * kPage - kPage;
    EXPECT_EQ(code(dev().dma_map(p + 2 * kPage, straddle, 2 * kPage, be::DmaAccess::kRead)), Code::kOutOfRange);
  }
  // Unmap needs the exact mapping.
  EXPECT_EQ(code(dev().dma_unmap(*iova, 2 * kPage)), Code::kNotFound);
  EXPECT_EQ(code(dev().dma_unmap(*iova + kPage, 2 * kPage)), Code::kNotFound);
  EXPECT_EQ(code(dev().dma_unmap(*iova + 3 * kPage, kPage)), Code::kNotFound) << "failed maps must map nothing";
  EXPECT_EQ(code(dev().dma_unmap(*iova, 3 * kPage)), Code::kOk);
  EXPECT_EQ(code(dev().dma_unmap(*iova, 3 * kPage)), Code::kNotFound);
  // Unmapped: the same range (and the formerly overlapping one) can be mapped again.
  EXPECT_EQ(code(dev().dma_map(p, *iova, 3 * kPage, be::DmaAccess::kRead)), Code::kOk);
  EXPECT_EQ(code(dev().dma_map(p + 3 * kPage, *iova + 3 * kPage, kPage, be::DmaAccess::kWrite)), Code::kOk);
  EXPECT_EQ(code(dev().dma_unmap(*iova + 3 * kPage, kPage)), Code::kOk);
  EXPECT_EQ(code(dev().dma_unmap(*iova, 3 * kPage)), Code::kOk);
}

// ==== MSI-X ==================================================================================

TEST_P(BackendConformance, MsixEventfdSignalledByMailboxCompletion) {
  const int fd0 = make_eventfd();
  const int fd1 = make_eventfd();
  ASSERT_GE(fd0, 0);
  ASSERT_GE(fd1, 0);
  const std::array<int, 2> fds{fd0, fd1};
  auto r = dev().set_msix_eventfds(pci::kMsixVectorGlobal, fds);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();

  auto rsp = raw_heartbeat(0x1122334455667788ULL, 7);
  ASSERT_TRUE(rsp.has_value());
  EXPECT_GE(wait_eventfd(fd0, 5000), 1u) << "vector 0 (global: mailbox) eventfd not signalled";
  EXPECT_EQ(wait_eventfd(fd1, 0), 0u) << "vector 1 belongs to DMA queue 0, not to the mailbox";

  // Disconnected (-1): a second request signals nothing.
  const std::array<int, 1> none{-1};
  ASSERT_TRUE(dev().set_msix_eventfds(pci::kMsixVectorGlobal, none).has_value());
  ASSERT_TRUE(raw_heartbeat(42, 8).has_value());
  EXPECT_EQ(wait_eventfd(fd0, 20), 0u);
}

TEST_P(BackendConformance, MsixEventfdArgumentErrors) {
  const int fd = make_eventfd();
  ASSERT_GE(fd, 0);
  int closed = 12345;
  while (::fcntl(closed, F_GETFD) != -1) ++closed;  // an fd number that is not open
  const auto code = [](const Result<void>& r) { return r ? Code::kOk : r.error().code(); };
  const std::array<int, 1> bad{closed};
  EXPECT_EQ(code(dev().set_msix_eventfds(0, bad)), Code::kInvalidArgument);
  const std::array<int, 1> negative{-2};
  EXPECT_EQ(code(dev().set_msix_eventfds(0, negative)), Code::kInvalidArgument);
  const std::array<int, 1> one{fd};
  const std::array<int, 2> two{fd, fd};
  EXPECT_EQ(code(dev().set_msix_eventfds(pci::kMsixVectors, one)), Code::kOutOfRange);
  EXPECT_EQ(code(dev().set_msix_eventfds(pci::kMsixVectors + 1, one)), Code::kOutOfRange);
  EXPECT_EQ(code(dev().set_msix_eventfds(pci::kMsixVectors - 1, two)), Code::kOutOfRange);
  EXPECT_EQ(code(dev().set_msix_eventfds(pci::kMsixVectors - 1, one)), Code::kOk) << "the last vector";
  const std::array<int, 1> off{-1};
  EXPECT_EQ(code(dev().set_msix_eventfds(pci::kMsixVectors - 1, off)), Code::kOk);
}

// ==== Reset ==================================================================================

namespace {
/// Programs queue `q` with its SQ at `iova` and CQ at `iova + 4 KiB`, depth 2^log2.
void program_queue(be::Mmio& b, unsigned q, std::uint64_t iova, unsigned log2) {
  b.write64(regs::queue_reg(q, qr::kSqBase), iova);
  b.write64(regs::queue_reg(q, qr::kCqBase), iova + kPage);
  b.write32(regs::queue_reg(q, qr::kConfig), qr::kConfigDepthLog2.make(log2));
  b.write32(regs::queue_reg(q, qr::kCtrl), qr::kCtrlEnable.mask());
}
}  // namespace

TEST_P(BackendConformance, DeviceResetRestoresRegistersKeepsMappingsAndInterrupts) {
  auto& b = bar0();
  constexpr unsigned kQ = 1;  // engine 0, queue 1
  auto& mem = host_pages(4 * kPage);
  const auto iova = pick_iova(4 * kPage);
  ASSERT_TRUE(iova.has_value());
  ASSERT_TRUE(dev().dma_map(mem.data(), *iova, 4 * kPage, be::DmaAccess::kReadWrite).has_value());
  const int fd = make_eventfd();
  const std::array<int, 1> fds{fd};
  ASSERT_TRUE(dev().set_msix_eventfds(pci::kMsixVectorGlobal, fds).has_value());

  b.write32(g::kScratch, 0x5a5a5a5au);
  b.write64(g::kScratch64, 0x1234567812345678ULL);
  program_queue(b, kQ, *iova, 2);
  ASSERT_NE(b.read32(regs::queue_reg(kQ, qr::kStatus)) & qr::kStatusEnabled.mask(), 0u) << "queue enable";
  ASSERT_EQ(b.read64(regs::queue_reg(kQ, qr::kSqBase)), *iova);

  auto r = dev().reset();
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_TRUE(wait_until([&] {
    const std::uint32_t st = b.read32(g::kStatus);
    return g::kStatusReady.get(st) == 1 && g::kStatusResetting.get(st) == 0;
  })) << "READY after reset";
  EXPECT_EQ(b.read32(g::kMagic), regs::kMagic);
  EXPECT_EQ(b.read32(g::kScratch), 0u);
  EXPECT_EQ(b.read64(g::kScratch64), 0u);
  EXPECT_EQ(b.read32(regs::queue_reg(kQ, qr::kStatus)) & qr::kStatusEnabled.mask(), 0u);
  EXPECT_EQ(b.read32(regs::queue_reg(kQ, qr::kCtrl)), 0u);
  EXPECT_EQ(b.read64(regs::queue_reg(kQ, qr::kSqBase)), 0u);
  EXPECT_EQ(b.read32(regs::queue_reg(kQ, qr::kSqTail)), 0u);
  // VFIO restores config space around the FLR: identity and command register survive.
  EXPECT_EQ(cfg16(cfgsp::kVendorId), pci::kVendorId);
  const std::uint16_t both = cfgsp::kCommandMemory | cfgsp::kCommandBusMaster;
  EXPECT_EQ(cfg16(cfgsp::kCommand) & both, both);

  // DMA mappings are kept: the same range is still taken, and the card can use it.
  auto again = dev().dma_map(mem.data(), *iova, 4 * kPage, be::DmaAccess::kReadWrite);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code(), Code::kAlreadyExists);
  std::memset(mem.data(), 0, 4 * kPage);
  program_queue(b, kQ, *iova, 2);
  ASSERT_NE(b.read32(regs::queue_reg(kQ, qr::kStatus)) & qr::kStatusEnabled.mask(), 0u);
  dma::Descriptor d;
  d.set_opcode(dma::Opcode::kFill);
  d.set_length(2 * kPage);
  d.set_src(0x0123456789abcdefULL);
  d.set_dst(*iova + 2 * kPage);
  std::memcpy(mem.data(), d.raw.data(), dma::desc::kSize);
  b.write32(regs::queue_reg(kQ, qr::kSqTail), 1);
  std::optional<dma::Completion> c;
  EXPECT_TRUE(wait_until([&] { return (c = read_completion(mem.data() + kPage, true)).has_value(); }))
      << "no completion after reset";
  if (c) {
    EXPECT_EQ(c->status(), dma::Status::kOk) << dma::status_name(c->status());
    EXPECT_EQ(c->info(), 2 * kPage);
    EXPECT_EQ(c->sq_index(), 0u);
    for (std::size_t i = 0; i < 2 * kPage; ++i) {
      const auto want = static_cast<std::byte>(0x0123456789abcdefULL >> (8 * (i % 8)));
      if (mem.data()[2 * kPage + i] != want) {
        ADD_FAILURE() << "fill byte " << i;
        break;
      }
    }
  }
  b.write32(regs::queue_reg(kQ, qr::kCqHead), 1);

  // MSI-X routing survives the reset.
  (void)wait_eventfd(fd, 0);
  ASSERT_TRUE(raw_heartbeat(99, 1).has_value());
  EXPECT_GE(wait_eventfd(fd, 5000), 1u);

  b.write32(regs::queue_reg(kQ, qr::kCtrl), 0);
  EXPECT_TRUE(dev().dma_unmap(*iova, 4 * kPage).has_value()) << "the pre-reset mapping is still there";
}

TEST_P(BackendConformance, GlobalResetRegisterNeedsKey) {
  auto& b = bar0();
  b.write32(g::kScratch, 0x1234u);
  b.write64(g::kScratch64, 0xfeedULL);
  b.write32(g::kErrMask, g::kErrIommuFault.mask() | g::kErrEngineHang.mask());
  b.write64(regs::queue_reg(3, qr::kSqBase), 0x10000);
  ASSERT_EQ(b.read64(regs::queue_reg(3, qr::kSqBase)), 0x10000u);

  for (const std::uint32_t wrong : {0u, 0x12345678u, g::kResetKey - 1, ~g::kResetKey}) {
    b.write32(g::kReset, wrong);
    EXPECT_EQ(b.read32(g::kScratch), 0x1234u) << "wrong key 0x" << std::hex << wrong << " reset the card";
  }
  EXPECT_EQ(b.read32(g::kErrMask), g::kErrIommuFault.mask() | g::kErrEngineHang.mask());

  b.write32(g::kReset, g::kResetKey);
  EXPECT_TRUE(wait_until([&] {
    const std::uint32_t st = b.read32(g::kStatus);
    return g::kStatusReady.get(st) == 1 && g::kStatusResetting.get(st) == 0;
  }));
  EXPECT_EQ(b.read32(g::kScratch), 0u);
  EXPECT_EQ(b.read64(g::kScratch64), 0u);
  EXPECT_EQ(b.read32(g::kErrMask), 0u);
  EXPECT_EQ(b.read64(regs::queue_reg(3, qr::kSqBase)), 0u);
  EXPECT_EQ(b.read32(g::kMagic), regs::kMagic);
  // The register reset leaves PCI config space alone.
  const std::uint16_t both = cfgsp::kCommandMemory | cfgsp::kCommandBusMaster;
  EXPECT_EQ(cfg16(cfgsp::kCommand) & both, both);
}

}  // namespace npo::conformance
