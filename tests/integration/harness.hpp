// SPDX-License-Identifier: Apache-2.0
// Integration-test harness: drives emulated cards purely through the backend interface and
// BAR0 registers, as a driver would (no drivers/card DMA code). Host memory comes from
// aligned_alloc and is IOMMU-mapped with Device::dma_map; rings are built by hand from the
// firmware-iface descriptor and completion layouts.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "npo/emu/emulator.hpp"
#include "npo/fw/dma.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/backend.hpp"
#include "npo/hal/backend/pci.hpp"

namespace npo {
/// GoogleTest printer: failures show "out_of_range" instead of a byte dump.
inline void PrintTo(Code c, std::ostream* os) { *os << code_name(c); }
}  // namespace npo

namespace npo::fw::dma {
inline void PrintTo(Status s, std::ostream* os) { *os << status_name(s); }
}  // namespace npo::fw::dma

namespace npo::fw::mbox {
inline void PrintTo(Status s, std::ostream* os) { *os << status_name(s); }
}  // namespace npo::fw::mbox

namespace npo::itest {

namespace be = npo::backend;
namespace regs = npo::fw::regs;
namespace g = npo::fw::regs::global;
namespace qr = npo::fw::regs::queue;
namespace pr = npo::fw::regs::port;
namespace dma = npo::fw::dma;
namespace mb = npo::fw::mbox;
namespace pci = npo::fw::pci;

inline constexpr std::uint64_t kPage = 4096;
inline constexpr std::uint64_t kMs = 1'000'000;
/// Bound for every "this must happen" wait: generous for sanitizer builds on 2 cores.
inline constexpr auto kWait = std::chrono::seconds(10);

/// Polls `pred` until it holds or `timeout` passes (yield, then 50 µs sleeps).
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

/// Page-aligned, zeroed host memory (aligned_alloc), freed on destruction.
class HostBuffer {
 public:
  explicit HostBuffer(std::size_t bytes) : size_((bytes + kPage - 1) / kPage * kPage) {
    data_ = static_cast<std::byte*>(std::aligned_alloc(kPage, size_));
    if (data_ != nullptr) std::memset(data_, 0, size_);
  }
  ~HostBuffer() { std::free(data_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<std::byte> span() const noexcept { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// One emulated system with some of its cards opened. Destruction order is what keeps
/// sanitizers quiet: devices, backend and emulator (joining its workers) go first, then the
/// eventfds are closed and the host memory freed.
class Rig {
 public:
  explicit Rig(const emu::SystemConfig& cfg) {
    auto e = emu::Emulator::create(cfg);
    if (!e) {
      ADD_FAILURE() << "Emulator::create: " << e.error().to_string();
      return;
    }
    emu_ = std::move(*e);
    backend_ = emu_->make_backend("emu:itest");
  }
  ~Rig() {
    devs_.clear();
    backend_.reset();
    emu_.reset();
    for (int fd : fds_) ::close(fd);
    buffers_.clear();
  }
  Rig(const Rig&) = delete;
  Rig& operator=(const Rig&) = delete;

  [[nodiscard]] bool ok() const noexcept { return emu_ != nullptr; }
  [[nodiscard]] emu::Emulator& emulator() { return *emu_; }
  [[nodiscard]] be::Backend& backend() { return *backend_; }

  /// Opens card `index` (enumeration order), enables memory decoding and bus mastering.
  /// Returns null (after a test failure) on error.
  be::Device* open(std::size_t index) {
    auto fns = backend_->enumerate();
    if (!fns || index >= fns->size()) {
      ADD_FAILURE() << "no card " << index;
      return nullptr;
    }
    auto d = backend_->open((*fns)[index].address);
    if (!d) {
      ADD_FAILURE() << "open card " << index << ": " << d.error().to_string();
      return nullptr;
    }
    auto cmd = be::config_read16(**d, pci::cfg::kCommand);
    if (!cmd ||
        !be::config_write16(**d, pci::cfg::kCommand, *cmd | pci::cfg::kCommandMemory | pci::cfg::kCommandBusMaster)) {
      ADD_FAILURE() << "command register";
    }
    devs_.push_back(std::move(*d));
    return devs_.back().get();
  }

  /// BAR0 of an opened device.
  static be::Mmio& bar0(be::Device& d) {
    auto m = d.mmio(pci::kBarRegs);
    EXPECT_TRUE(m.has_value());
    return **m;
  }

  /// Host memory owned by the rig, zeroed.
  HostBuffer& alloc(std::size_t bytes) {
    buffers_.push_back(std::make_unique<HostBuffer>(bytes));
    EXPECT_NE(buffers_.back()->data(), nullptr);
    return *buffers_.back();
  }
  /// Host memory owned by the rig, mapped at `iova` with `access`.
  HostBuffer& alloc_mapped(be::Device& d, std::size_t bytes, std::uint64_t iova,
                           be::DmaAccess access = be::DmaAccess::kReadWrite) {
    HostBuffer& b = alloc(bytes);
    auto r = d.dma_map(b.data(), iova, b.size(), access);
    EXPECT_TRUE(r.has_value()) << "dma_map 0x" << std::hex << iova << ": " << r.error().to_string();
    return b;
  }

  /// An eventfd (non-blocking) owned by the rig, routed to MSI-X `vector` of `d`.
  int route_vector(be::Device& d, unsigned vector) {
    const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    EXPECT_GE(fd, 0);
    if (fd < 0) return fd;
    fds_.push_back(fd);
    const int one[1] = {fd};
    auto r = d.set_msix_eventfds(vector, one);
    EXPECT_TRUE(r.has_value()) << r.error().to_string();
    return fd;
  }

  void advance(std::uint64_t ns) {
    auto r = emu_->advance(ns);
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
  }

 private:
  std::vector<std::unique_ptr<HostBuffer>> buffers_;  // freed last
  std::vector<int> fds_;
  std::shared_ptr<emu::Emulator> emu_;
  std::unique_ptr<be::Backend> backend_;
  std::vector<std::unique_ptr<be::Device>> devs_;
};

/// A system config for tests: `cards` cards, virtual clock, 16 MiB HBM, no cables.
inline emu::SystemConfig test_config(unsigned cards, std::uint64_t seed = 1) {
  emu::SystemConfig c;
  c.name = "itest";
  c.num_cards = cards;
  c.card.hbm_bytes = 16u << 20;
  c.clock = emu::ClockMode::kVirtual;
  c.seed = seed;
  return c;
}

/// Reads the eventfd counter without blocking (0 if not signalled).
inline std::uint64_t eventfd_take(int fd) {
  std::uint64_t v = 0;
  if (::read(fd, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) return 0;
  return v;
}

/// A DMA queue driven through its QUEUE register block: SQ (64 B entries) and CQ (16 B) in
/// one IOMMU-mapped host buffer: SQ at `iova`, CQ at the next page boundary after it.
class RingQueue {
 public:
  RingQueue(Rig& rig, be::Device& dev, unsigned q, std::uint64_t iova, unsigned depth_log2 = 6)
      : bar0_(Rig::bar0(dev)), q_(q), iova_(iova), log2_(depth_log2), depth_(1u << depth_log2) {
    sq_bytes_ = (std::uint64_t{depth_} * dma::desc::kSize + kPage - 1) / kPage * kPage;
    mem_ = &rig.alloc_mapped(dev, sq_bytes_ + std::uint64_t{depth_} * dma::cpl::kSize, iova);
  }

  [[nodiscard]] std::uint32_t reg(std::uint32_t r) const { return regs::queue_reg(q_, r); }
  [[nodiscard]] be::Mmio& bar0() const { return bar0_; }

  /// Zeroes both rings, programs SQ_BASE/CQ_BASE/CONFIG and sets CTRL.ENABLE.
  /// Host indexes restart at 0. Returns STATUS after the enable.
  std::uint32_t enable(std::uint32_t extra_config = 0) {
    std::memset(mem_->data(), 0, mem_->size());
    tail_ = 0;
    head_ = 0;
    bar0_.write64(reg(qr::kSqBase), iova_);
    bar0_.write64(reg(qr::kCqBase), iova_ + sq_bytes_);
    bar0_.write32(reg(qr::kConfig), qr::kConfigDepthLog2.make(log2_) | extra_config);
    bar0_.write32(reg(qr::kCtrl), qr::kCtrlEnable.mask());
    return bar0_.read32(reg(qr::kStatus));
  }

  /// Writes a descriptor into the next SQ slot (no doorbell). Returns its index.
  std::uint32_t put(const dma::Descriptor& d) {
    std::memcpy(mem_->data() + std::uint64_t{tail_ & (depth_ - 1)} * dma::desc::kSize, d.raw.data(), dma::desc::kSize);
    return tail_++;
  }
  /// Rings the SQ_TAIL doorbell once for everything put so far.
  void ring() { bar0_.write32(reg(qr::kSqTail), tail_); }

  /// The completion at the host's head if the card wrote it (phase check, acquire order).
  [[nodiscard]] std::optional<dma::Completion> peek() const {
    const std::byte* slot = mem_->data() + sq_bytes_ + std::uint64_t{head_ & (depth_ - 1)} * dma::cpl::kSize;
    const auto flags =
        __atomic_load_n(reinterpret_cast<const std::uint16_t*>(slot + dma::cpl::kFlags), __ATOMIC_ACQUIRE);
    const bool expected = ((head_ >> log2_) & 1u) == 0;  // 1 on the first pass
    if (((flags & dma::cpl::kPhase) != 0) != expected) return std::nullopt;
    dma::Completion c;
    std::memcpy(c.raw.data(), slot, dma::cpl::kSize);
    return c;
  }
  /// Waits (bounded) for the next completion and consumes it (host head += 1; no doorbell).
  std::optional<dma::Completion> next(std::chrono::steady_clock::duration timeout = kWait) {
    std::optional<dma::Completion> c;
    if (!wait_until([&] { return (c = peek()).has_value(); }, timeout)) return std::nullopt;
    ++head_;
    return c;
  }
  /// CQ_HEAD doorbell with the host's consumer index.
  void ack() { bar0_.write32(reg(qr::kCqHead), head_); }

  [[nodiscard]] std::uint32_t tail() const { return tail_; }
  [[nodiscard]] std::uint32_t head() const { return head_; }

 private:
  be::Mmio& bar0_;
  unsigned q_;
  std::uint64_t iova_;
  unsigned log2_;
  std::uint32_t depth_;
  std::uint64_t sq_bytes_ = 0;
  HostBuffer* mem_ = nullptr;
  std::uint32_t tail_ = 0;
  std::uint32_t head_ = 0;
};

/// Descriptor builders.
inline dma::Descriptor copy_desc(std::uint64_t src, std::uint64_t dst, std::uint32_t len, std::uint8_t flags = 0) {
  dma::Descriptor d;
  d.set_opcode(dma::Opcode::kCopy);
  d.set_flags(flags);
  d.set_length(len);
  d.set_src(src);
  d.set_dst(dst);
  return d;
}

/// Builds a mailbox request (header + payload) with a correct CRC32C.
inline std::vector<std::byte> mbox_request(std::uint16_t opcode, std::uint32_t seq,
                                           std::span<const std::byte> payload = {},
                                           std::uint8_t version = mb::kProtocolVersion) {
  std::vector<std::byte> m(mb::hdr::kSize + payload.size());
  fw::store_le<std::uint8_t>(m.data(), mb::hdr::kVersion, version);
  fw::store_le<std::uint16_t>(m.data(), mb::hdr::kOpcode, opcode);
  fw::store_le<std::uint32_t>(m.data(), mb::hdr::kSequence, seq);
  fw::store_le<std::uint16_t>(m.data(), mb::hdr::kPayloadLen, static_cast<std::uint16_t>(payload.size()));
  if (!payload.empty()) std::memcpy(m.data() + mb::hdr::kSize, payload.data(), payload.size());
  fw::store_le<std::uint32_t>(m.data(), mb::hdr::kCrc, mb::message_crc(m));
  return m;
}

/// What the mailbox registers showed after one exchange.
struct RawReply {
  std::uint32_t status = 0;    ///< MBOX.STATUS when DONE was seen
  std::vector<std::byte> rsp;  ///< RSP_LEN bytes of RSP_BUF
  [[nodiscard]] mb::Status fw_status() const {
    return static_cast<mb::Status>(fw::load_le<std::uint16_t>(rsp.data(), mb::hdr::kStatus));
  }
  [[nodiscard]] std::span<const std::byte> payload() const {
    return std::span<const std::byte>(rsp).subspan(mb::hdr::kSize);
  }
};

/// Writes `msg` into REQ_BUF, `req_len` into REQ_LEN, clears STATUS, rings CTRL.SEND and waits
/// (bounded) for STATUS.DONE. Returns nullopt (after a failure) if no reply came.
inline std::optional<RawReply> mbox_exchange(be::Mmio& b, std::span<const std::byte> msg, std::uint32_t req_len) {
  namespace m = regs::mbox;
  if (!wait_until([&] { return !m::kStatusBusy.get(b.read32(regs::mbox_reg(m::kStatus))); })) {
    ADD_FAILURE() << "mailbox stays BUSY";
    return std::nullopt;
  }
  std::vector<std::byte> padded(msg.begin(), msg.end());
  padded.resize((padded.size() + 3) / 4 * 4);
  for (std::uint32_t o = 0; o < padded.size(); o += 4) {
    b.write32(regs::mbox_reg(m::kReqBuf + o), fw::load_le<std::uint32_t>(padded.data(), o));
  }
  b.write32(regs::mbox_reg(m::kReqLen), req_len);
  b.write32(regs::mbox_reg(m::kStatus), m::kStatusDone.mask() | m::kStatusError.mask());
  b.write32(regs::mbox_reg(m::kCtrl), m::kCtrlSend.mask());
  RawReply r;
  if (!wait_until([&] { return m::kStatusDone.get(r.status = b.read32(regs::mbox_reg(m::kStatus))) != 0; })) {
    ADD_FAILURE() << "no mailbox reply; STATUS=0x" << std::hex << r.status;
    return std::nullopt;
  }
  const std::uint32_t rlen = b.read32(regs::mbox_reg(m::kRspLen));
  if (rlen > m::kBufSize) {
    ADD_FAILURE() << "RSP_LEN " << rlen;
    return std::nullopt;
  }
  std::vector<std::byte> rsp((rlen + 3) / 4 * 4);
  for (std::uint32_t o = 0; o < rsp.size(); o += 4) {
    fw::store_le<std::uint32_t>(rsp.data(), o, b.read32(regs::mbox_reg(m::kRspBuf + o)));
  }
  rsp.resize(rlen);
  r.rsp = std::move(rsp);
  b.write32(regs::mbox_reg(m::kStatus), m::kStatusDone.mask() | m::kStatusError.mask());
  return r;
}

}  // namespace npo::itest
