// SPDX-License-Identifier: Apache-2.0
// npo-emud message dispatch: each parsed command to its handler, the read-only attach's
// allowed commands, and the control commands (VERSION, DEVICE_GET_INFO, INJECT_FAULT, MAILBOX_OBSERVE).
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

static_assert(static_cast<unsigned>(FaultKind::kTrainingTimeout) == emud::fault::kMaxKind,
              "INJECT_FAULT's kind range follows FaultKind");

/// How long a new owner waits for the previous one's disconnect to be processed (a client
/// that closes and reopens at once must not see its own old connection as the holder).
constexpr auto kReleaseGrace = std::chrono::milliseconds(250);

void Session::handle(std::span<const std::byte> msg, std::vector<int>& fds) {
  bool header_ok = false;
  std::uint16_t id = 0, cmd = 0;
  auto pc = server::parse_command(msg, fds.size(), &header_ok, &id, &cmd);
  if (!pc) {
    reply_error(id, cmd, pc.error().code(), pc.error().message());
    return;
  }
  const ParsedCommand& c = *pc;
  if (c.command == emud::Command::kVersion) return version(c);
  if (!attached_) {
    return reply_error(c, Error(Code::kFailedPrecondition, "send VERSION first (docs/spec/emud-protocol.md §2)"));
  }
  if (c.command == emud::Command::kInjectFault) return inject_fault(c);
  if (c.command == emud::Command::kMailboxObserve) return mailbox_observe(c);
  if (read_only_) return read_only(c);
  switch (c.command) {
    case emud::Command::kVersion: return;
    case emud::Command::kDeviceGetInfo: return device_info(c);
    case emud::Command::kRegionInfo: return region_info(c);
    case emud::Command::kRegionRead: return region_read(c);
    case emud::Command::kRegionWrite: return region_write(c);
    case emud::Command::kDmaMap: return dma_map(c, fds);
    case emud::Command::kDmaUnmap: return dma_unmap(c);
    case emud::Command::kSetIrqs: return set_irqs(c, fds);
    case emud::Command::kInjectFault:
    case emud::Command::kMailboxObserve: return;
    case emud::Command::kDeviceReset: {
      auto r = dev_->reset();
      // A reset card starts every queue from index 0 (registers.md §5.2): so do its shadows.
      for (std::uint32_t q = 0; q < shadow_queues_; ++q) zero_shadow(q);
      if (!r) return reply_error(c, r.error());
      return reply_ok(c);
    }
    case emud::Command::kDoorbellShadow: return doorbell_shadow(c, fds);
    case emud::Command::kEngineShare: return engine_share(c);
    case emud::Command::kHbmFd: return hbm_fd(c);
    case emud::Command::kEngineFd: return engine_fd(c);
    case emud::Command::kWindowFd: return window_fd(c);
    case emud::Command::kHbmRangeFd: return hbm_range_fd(c);
    case emud::Command::kEngineEvent: return engine_event(c);
  }
}

void Session::version(const ParsedCommand& c) {
  if (attached_) return reply_error(c, Error(Code::kFailedPrecondition, "VERSION sent twice"));
  if (c.major != emud::kVersionMajor) {
    return reply_error(
        c, Error(Code::kFailedPrecondition, fmt::format("protocol version {}.{} not supported: the daemon speaks {}.{}",
                                                        c.major, c.minor, emud::kVersionMajor, emud::kVersionMinor)));
  }
  read_only_ = (c.attach_flags & emud::version::kAttachReadOnly) != 0;
  if (!read_only_) {
    CardSlot& slot = *srv_.slots[card_];
    std::unique_lock lock(slot.mu);
    slot.released.wait_for(lock, kReleaseGrace, [&] { return slot.owner == 0; });
    if (slot.owner != 0 && slot.owner == pid_) {
      return reply_error(
          c, Error(Code::kAlreadyExists, fmt::format("card {} is already open by this process (pid {})", card_, pid_)));
    }
    if (slot.owner != 0) {
      return reply_error(
          c, Error(Code::kUnavailable, fmt::format("card {} is open by pid {} (one client per card; tools attach "
                                                   "read-only with ?mode=ro)",
                                                   card_, slot.owner)));
    }
    const auto addr = card().function_info().address;
    auto d = srv_.backend->open(addr);
    if (!d) return reply_error(c, d.error());
    dev_ = std::move(*d);
    slot.owner = pid_ > 0 ? pid_ : 1;
    owner_ = true;
    dma_at_attach_ = card().dma_totals();
  }
  attached_ = true;
  srv_.log(fmt::format("connect card={} pid={} mode={}", card_, pid_, read_only_ ? "read-only" : "owner"));
  std::array<std::byte, emud::version::kBytes> b{};
  emud::store<std::uint16_t>(b, emud::version::kMajor, emud::kVersionMajor);
  emud::store<std::uint16_t>(b, emud::version::kMinor, emud::kVersionMinor);
  emud::store<std::uint32_t>(b, emud::version::kPid, static_cast<std::uint32_t>(::getpid()));
  emud::store<std::uint32_t>(b, emud::version::kCard, card_);
  reply_ok(c, b);
}

void Session::inject_fault(const ParsedCommand& c) {
  if (c.fault_card != card_) {
    return reply_error(c, Error(Code::kInvalidArgument,
                                fmt::format("fault for card {} sent to card {}'s socket", c.fault_card, card_)));
  }
  auto opt = [](std::uint32_t v) -> std::optional<unsigned> {
    return v == emud::fault::kNone ? std::nullopt : std::optional<unsigned>(v);
  };
  Fault f;
  f.at_ns = srv_.emu->now_ns() + c.delay_ns;
  f.kind = static_cast<FaultKind>(c.fault_kind);
  f.card = card_;
  f.engine = opt(c.fault_engine);
  f.queue = opt(c.fault_queue);
  f.port = opt(c.fault_port);
  f.lane = opt(c.fault_lane);
  f.count = c.count;
  f.value = c.fault_value;
  f.duration_ns = c.duration_ns;
  if (auto r = srv_.emu->inject(f); !r) return reply_error(c, r.error());
  // Where it lands, as given: an operator reading the log needs the port and lane of a link
  // fault, the queue of a DMA fault.
  std::string where;
  const auto field = [&where](const char* name, std::optional<unsigned> v) {
    if (v) where += fmt::format(" {}={}", name, *v);
  };
  field("engine", f.engine);
  field("queue", f.queue);
  field("port", f.port);
  field("lane", f.lane);
  if (f.count != 1) where += fmt::format(" count={}", f.count);
  if (f.value != 0) where += fmt::format(" value={:g}", f.value);
  if (f.duration_ns != 0) where += fmt::format(" duration_ms={:g}", static_cast<double>(f.duration_ns) / 1e6);
  srv_.log(fmt::format("fault {} card={}{} injected by pid={}", fault_name(f.kind), card_, where, pid_));
  reply_ok(c);
}

void Session::mailbox_observe(const ParsedCommand& c) {
  std::string refused;
  auto rsp = card().firmware().observe(c.data, refused);
  if (!refused.empty()) {
    return reply_error(c, Error(Code::kPermissionDenied,
                                fmt::format("card {}: mailbox command {} changes the card; only the owner's attach "
                                            "may send it (through BAR0)",
                                            card_, refused)));
  }
  reply_ok(c, rsp);
}

void Session::device_info(const ParsedCommand& c) {
  const auto fi = card().function_info();
  std::array<std::byte, emud::info::kBytes> b{};
  emud::store<std::uint16_t>(b, emud::info::kDomain, fi.address.domain);
  emud::store<std::uint8_t>(b, emud::info::kBus, fi.address.bus);
  emud::store<std::uint8_t>(b, emud::info::kDevice, fi.address.device);
  emud::store<std::uint8_t>(b, emud::info::kFunction, fi.address.function);
  emud::store<std::uint16_t>(b, emud::info::kVendorId, fi.vendor_id);
  emud::store<std::uint16_t>(b, emud::info::kDeviceId, fi.device_id);
  emud::store<std::uint16_t>(b, emud::info::kSubVendorId, fi.subsystem_vendor_id);
  emud::store<std::uint16_t>(b, emud::info::kSubsystemId, fi.subsystem_id);
  emud::store<std::uint32_t>(b, emud::info::kClassCode, fi.class_code);
  emud::store<std::int32_t>(b, emud::info::kNumaNode, fi.numa_node);
  emud::store<std::uint32_t>(b, emud::info::kNumRegions, 8);
  emud::store<std::uint32_t>(b, emud::info::kMsixVectors, pci::kMsixVectors);
  emud::store<std::uint64_t>(b, emud::info::kIovaFirst, Iommu::kIovaFirst);
  emud::store<std::uint64_t>(b, emud::info::kIovaLast, Iommu::kIovaLast);
  emud::store<std::uint32_t>(b, emud::info::kCardIndex, card_);
  {
    CardSlot& slot = *srv_.slots[card_];
    std::lock_guard lock(slot.mu);
    emud::store<std::uint32_t>(b, emud::info::kOwnerPid, static_cast<std::uint32_t>(slot.owner));
  }
  reply_ok(c, b);
}

void Session::read_only(const ParsedCommand& c) {
  switch (c.command) {
    case emud::Command::kDeviceGetInfo: return device_info(c);
    case emud::Command::kRegionInfo: return region_info(c);
    case emud::Command::kRegionRead: {
      std::array<std::byte, emud::kMaxAccess> data{};
      auto out = std::span(data).first(c.count);
      if (c.region == emud::kRegionConfig) {
        if (c.offset > pci::cfg::kConfigSize || c.count > pci::cfg::kConfigSize - c.offset) {
          return reply_error(c, Error(Code::kOutOfRange, "config read past 4 KiB"));
        }
        for (std::uint32_t i = 0; i < c.count; ++i) {
          out[i] = static_cast<std::byte>(card().cfg_read(static_cast<std::uint32_t>(c.offset) + i, 1));
        }
        return reply_read(c, out);
      }
      if (c.region != pci::kBarRegs) {
        return reply_error(c, Error(Code::kPermissionDenied, "a read-only attach reads config space and BAR0 only"));
      }
      const unsigned width = c.count * 8;
      std::uint64_t v = c.count == 8 ? ~0ULL : 0xffffffffULL;
      if (c.offset % c.count == 0 && c.offset + c.count <= card().bar_size(pci::kBarRegs)) {
        v = card().bar0_read(c.offset, width);
      }
      std::memcpy(out.data(), &v, c.count);
      return reply_read(c, out);
    }
    default:
      return reply_error(c, Error(Code::kPermissionDenied,
                                  fmt::format("card {} is attached read-only: command {} needs the owner's attach",
                                              card_, static_cast<unsigned>(c.command))));
  }
}

}  // namespace npo::emu
