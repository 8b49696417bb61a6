// SPDX-License-Identifier: Apache-2.0
#include "server/protocol.hpp"

#include <bit>

#include <fmt/format.h>

namespace npo::emu::server {

namespace emud = fw::emud;
using emud::load;

namespace {
constexpr std::uint64_t kPage = 4096;
std::unexpected<Error> bad(std::string msg) { return fail(Code::kInvalidArgument, std::move(msg)); }
}  // namespace

Result<ParsedCommand> parse_command(std::span<const std::byte> msg, std::size_t fd_count, bool* header_ok,
                                    std::uint16_t* msg_id, std::uint16_t* command) {
  if (header_ok != nullptr) *header_ok = false;
  if (msg.size() < emud::hdr::kBytes)
    return bad(fmt::format("message of {} bytes is shorter than the header", msg.size()));
  if (msg.size() > emud::kMaxMessage)
    return bad(fmt::format("message of {} bytes exceeds {}", msg.size(), emud::kMaxMessage));
  ParsedCommand c;
  c.msg_id = load<std::uint16_t>(msg, emud::hdr::kMsgId);
  const auto cmd = load<std::uint16_t>(msg, emud::hdr::kCommand);
  const auto size = load<std::uint32_t>(msg, emud::hdr::kSize);
  const auto flags = load<std::uint32_t>(msg, emud::hdr::kFlags);
  if (msg_id != nullptr) *msg_id = c.msg_id;
  if (command != nullptr) *command = cmd;
  if (header_ok != nullptr) *header_ok = true;
  if (size != msg.size()) return bad(fmt::format("header size {} but {} bytes received", size, msg.size()));
  if ((flags & emud::kFlagTypeMask) != emud::kTypeCommand) return bad("message is not a command");
  if ((flags & ~(emud::kFlagTypeMask | emud::kFlagNoReply)) != 0)
    return bad(fmt::format("unknown flags 0x{:x}", flags));
  if (load<std::uint32_t>(msg, emud::hdr::kError) != 0) return bad("error field of a command must be 0");
  c.no_reply = (flags & emud::kFlagNoReply) != 0;
  const auto body = msg.subspan(emud::hdr::kBytes);
  const long want = emud::command_body_bytes(cmd);
  c.command = static_cast<emud::Command>(cmd);
  if (want < 0 && c.command != emud::Command::kRegionWrite && c.command != emud::Command::kMailboxObserve)
    return bad(fmt::format("unknown command {}", cmd));
  if (want >= 0 && body.size() != static_cast<std::size_t>(want)) {
    return bad(fmt::format("command {} needs a {}-byte body, got {}", cmd, want, body.size()));
  }
  const std::size_t fds_expected = [&]() -> std::size_t {
    switch (c.command) {
      case emud::Command::kDmaMap:  // process memory crosses as an address, not an fd (§5.2)
        return (load<std::uint32_t>(body, emud::dma_map::kFlags) & emud::dma_map::kFlagProcessMemory) != 0 ? 0 : 1;
      case emud::Command::kSetIrqs:
        return static_cast<std::size_t>(std::popcount(load<std::uint64_t>(body, emud::irqs::kFdMask)));
      case emud::Command::kDoorbellShadow: return 1;  // the eventfd the client rings
      default: return 0;
    }
  }();
  if (fd_count != fds_expected) {
    return bad(fmt::format("command {} carries {} file descriptors, expected {}", cmd, fd_count, fds_expected));
  }
  if (c.no_reply && c.command != emud::Command::kRegionWrite && c.command != emud::Command::kEngineEvent) {
    return bad("only REGION_WRITE and ENGINE_EVENT may ask for no reply");
  }
  switch (c.command) {
    case emud::Command::kVersion:
      c.major = load<std::uint16_t>(body, emud::version::kMajor);
      c.minor = load<std::uint16_t>(body, emud::version::kMinor);
      c.attach_flags = load<std::uint32_t>(body, emud::version::kFlags);
      if ((c.attach_flags & ~emud::version::kAttachReadOnly) != 0)
        return bad(fmt::format("unknown attach flags 0x{:x}", c.attach_flags));
      break;
    case emud::Command::kDmaMap:
      c.iova = load<std::uint64_t>(body, emud::dma_map::kIova);
      c.size = load<std::uint64_t>(body, emud::dma_map::kSize);
      c.fd_offset = load<std::uint64_t>(body, emud::dma_map::kFdOffset);
      c.dma_access = load<std::uint32_t>(body, emud::dma_map::kAccess);
      if (c.dma_access < 1 || c.dma_access > 3) return bad(fmt::format("DMA access {} is not 1, 2 or 3", c.dma_access));
      c.dma_flags = load<std::uint32_t>(body, emud::dma_map::kFlags);
      if ((c.dma_flags & ~emud::dma_map::kFlagsKnown) != 0)
        return bad(fmt::format("DMA_MAP flags 0x{:x} has unknown bits", c.dma_flags));
      if (c.fd_offset % kPage != 0) return bad("DMA_MAP fd offset must be 4 KiB aligned");
      if (c.fd_offset > (1ULL << 47) || c.size > (1ULL << 47)) return bad("DMA_MAP offset or size too large");
      if ((c.dma_flags & emud::dma_map::kFlagProcessMemory) != 0) {
        if ((c.dma_flags & emud::dma_map::kFlagUnsealed) != 0)
          return bad("DMA_MAP flags UNSEALED and PROCESS_MEMORY exclude each other (no fd with process memory)");
        if (c.fd_offset + c.size > (1ULL << 47))
          return bad("DMA_MAP PROCESS_MEMORY range ends past the user address space (2^47)");
      }
      break;
    case emud::Command::kDmaUnmap:
      c.iova = load<std::uint64_t>(body, emud::dma_unmap::kIova);
      c.size = load<std::uint64_t>(body, emud::dma_unmap::kSize);
      break;
    case emud::Command::kDeviceGetInfo:
    case emud::Command::kDeviceReset: break;
    case emud::Command::kRegionInfo:
      c.region = load<std::uint32_t>(body, emud::region_info::kIndex);
      if (load<std::uint32_t>(body, 4) != 0) return bad("REGION_INFO reserved field must be 0");
      break;
    case emud::Command::kSetIrqs:
      c.irq_index = load<std::uint32_t>(body, emud::irqs::kIndex);
      c.irq_start = load<std::uint32_t>(body, emud::irqs::kStart);
      c.count = load<std::uint32_t>(body, emud::irqs::kCount);
      c.fd_mask = load<std::uint64_t>(body, emud::irqs::kFdMask);
      if (c.irq_index > emud::irqs::kIrqMsi)
        return bad(fmt::format("IRQ index {} is not MSI-X (0) or MSI (1)", c.irq_index));
      if (c.count < 1 || c.count > 64) return bad(fmt::format("SET_IRQS count {} not in 1..64", c.count));
      if (c.count < 64 && (c.fd_mask >> c.count) != 0) return bad("SET_IRQS fd mask has bits past count");
      if (load<std::uint32_t>(body, emud::irqs::kReserved) != 0) return bad("SET_IRQS reserved field must be 0");
      break;
    case emud::Command::kInjectFault: {
      namespace f = emud::fault;
      c.delay_ns = load<std::uint64_t>(body, f::kDelayNs);
      c.fault_kind = load<std::uint32_t>(body, f::kKind);
      c.fault_card = load<std::uint32_t>(body, f::kCard);
      c.fault_engine = load<std::uint32_t>(body, f::kEngine);
      c.fault_queue = load<std::uint32_t>(body, f::kQueue);
      c.fault_port = load<std::uint32_t>(body, f::kPort);
      c.fault_lane = load<std::uint32_t>(body, f::kLane);
      c.count = load<std::uint32_t>(body, f::kCount);
      c.fault_value = load<double>(body, f::kValue);
      c.duration_ns = load<std::uint64_t>(body, f::kDurationNs);
      if (c.fault_kind > f::kMaxKind) return bad(fmt::format("fault kind {} is unknown", c.fault_kind));
      if (c.count == 0) return bad("fault count must be >= 1");
      if (load<std::uint32_t>(body, f::kReserved) != 0) return bad("INJECT_FAULT reserved field must be 0");
      if (!(c.fault_value == c.fault_value) || c.fault_value > 1e300 || c.fault_value < -1e300) {
        return bad("fault value must be a finite number");
      }
      if (c.delay_ns > (1ULL << 62) || c.duration_ns > (1ULL << 62)) return bad("fault delay or duration too large");
      break;
    }
    case emud::Command::kDoorbellShadow:
      if (load<std::uint32_t>(body, emud::shadow::kFlags) != 0 ||
          load<std::uint32_t>(body, emud::shadow::kReserved) != 0)
        return bad("DOORBELL_SHADOW flags and reserved field must be 0");
      break;
    case emud::Command::kEngineShare:
    case emud::Command::kEngineFd:
      if (load<std::uint32_t>(body, emud::engine::kFlags) != 0 ||
          load<std::uint32_t>(body, emud::engine::kReserved) != 0)
        return bad(fmt::format("{} flags and reserved field must be 0",
                               c.command == emud::Command::kEngineFd ? "ENGINE_FD" : "ENGINE_SHARE"));
      break;
    case emud::Command::kHbmFd:
      c.target_card = load<std::uint32_t>(body, emud::engine::kHbmCard);
      if (load<std::uint32_t>(body, emud::engine::kHbmReserved) != 0) return bad("HBM_FD reserved field must be 0");
      break;
    case emud::Command::kWindowFd:
      c.target_card = load<std::uint32_t>(body, emud::engine::kWindowCard);
      c.window = load<std::uint16_t>(body, emud::engine::kWindowIndex);
      c.generation = load<std::uint16_t>(body, emud::engine::kWindowGeneration);
      c.key = load<std::uint64_t>(body, emud::engine::kWindowKey);
      if (c.window >= fw::regs::kWindowEntries)
        return bad(fmt::format("WINDOW_FD window {} past the table's {}", c.window, fw::regs::kWindowEntries));
      break;
    case emud::Command::kHbmRangeFd:
      c.offset = load<std::uint64_t>(body, emud::engine::kRangeOffset);
      c.size = load<std::uint64_t>(body, emud::engine::kRangeSize);
      if (c.size == 0 || c.offset % 4096 != 0 || c.size % 4096 != 0)
        return bad("HBM_RANGE_FD offset and size must be 4 KiB aligned, size > 0");
      break;
    case emud::Command::kEngineEvent:
      c.event_kind = load<std::uint32_t>(body, emud::engine::kEventKind);
      c.event_queue = load<std::uint32_t>(body, emud::engine::kEventQueue);
      c.event_value = load<std::uint64_t>(body, emud::engine::kEventValue);
      c.event_flags = load<std::uint64_t>(body, emud::engine::kEventFlags);
      if (c.event_kind == 0 || c.event_kind > emud::engine::kEventMaxKind)
        return bad(fmt::format("ENGINE_EVENT kind {} is unknown", c.event_kind));
      if (c.event_queue >= fw::regs::kNumQueues)
        return bad(fmt::format("ENGINE_EVENT queue {} past the card's {}", c.event_queue, fw::regs::kNumQueues));
      if ((c.event_flags & ~(emud::engine::kEventWrite | emud::engine::kEventPerm)) != 0)
        return bad(fmt::format("ENGINE_EVENT flags 0x{:x} has unknown bits", c.event_flags));
      break;
    case emud::Command::kMailboxObserve:
      if (body.size() < emud::observe::kMinBytes || body.size() > emud::observe::kMaxBytes) {
        return bad(fmt::format("MAILBOX_OBSERVE request of {} bytes not in {}..{}", body.size(),
                               emud::observe::kMinBytes, emud::observe::kMaxBytes));
      }
      c.data = body;
      break;
    case emud::Command::kRegionRead:
    case emud::Command::kRegionWrite: {
      if (body.size() < emud::access::kBytes) return bad("REGION access body shorter than 16 bytes");
      c.offset = load<std::uint64_t>(body, emud::access::kOffset);
      c.region = load<std::uint32_t>(body, emud::access::kRegion);
      c.count = load<std::uint32_t>(body, emud::access::kCount);
      if (c.count == 0 || c.count > emud::kMaxAccess)
        return bad(fmt::format("access of {} bytes not in 1..{}", c.count, emud::kMaxAccess));
      if (c.region != emud::kRegionConfig && c.region > 5)
        return bad(fmt::format("region {} does not exist", c.region));
      if (c.region != emud::kRegionConfig && c.count != 4 && c.count != 8) return bad("BAR accesses are 4 or 8 bytes");
      if (c.command == emud::Command::kRegionWrite) {
        if (body.size() != emud::access::kBytes + c.count)
          return bad(fmt::format("REGION_WRITE of {} bytes carries {}", c.count, body.size() - emud::access::kBytes));
        c.data = body.subspan(emud::access::kBytes);
      }
      break;
    }
  }
  return c;
}

void build_reply(std::vector<std::byte>& out, std::uint16_t msg_id, std::uint16_t command, Code error,
                 std::span<const std::byte> body, std::string_view text) {
  const bool is_err = error != Code::kOk;
  if (is_err) {
    if (text.size() > emud::kMaxErrorText) text = text.substr(0, emud::kMaxErrorText);
    body = std::as_bytes(std::span(text.data(), text.size()));
  }
  out.resize(emud::hdr::kBytes + body.size());
  std::span<std::byte> o(out);
  emud::store<std::uint16_t>(o, emud::hdr::kMsgId, msg_id);
  emud::store<std::uint16_t>(o, emud::hdr::kCommand, command);
  emud::store<std::uint32_t>(o, emud::hdr::kSize, static_cast<std::uint32_t>(out.size()));
  emud::store<std::uint32_t>(o, emud::hdr::kFlags, emud::kTypeReply | (is_err ? emud::kFlagError : 0u));
  emud::store<std::uint32_t>(o, emud::hdr::kError, static_cast<std::uint32_t>(error));
  if (!body.empty()) std::memcpy(out.data() + emud::hdr::kBytes, body.data(), body.size());
}

}  // namespace npo::emu::server
