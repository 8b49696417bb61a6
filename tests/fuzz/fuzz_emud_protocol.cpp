// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: npo-emud's message parser (emulator/src/server/protocol.cpp), the first
// code that sees a client's bytes (docs/spec/emud-protocol.md). Input: byte 0 = number of
// attached file descriptors (mod 65), the rest = one message. A parsed command must keep the
// protocol's bounds; a refusal must be kInvalidArgument with a message.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_check.hpp"
#include "npo/fw/regs.hpp"
#include "server/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace emud = npo::fw::emud;
  using npo_fuzz::require;
  if (size == 0) return 0;
  const std::size_t fds = data[0] % 65;
  const auto msg = std::as_bytes(std::span(data + 1, size - 1));
  auto r = npo::emu::server::parse_command(msg, fds);
  if (!r) {
    require(r.error().code() == npo::Code::kInvalidArgument);
    require(!r.error().message().empty());
    return 0;
  }
  const auto& c = *r;
  require(msg.size() >= emud::hdr::kBytes && msg.size() <= emud::kMaxMessage);
  switch (c.command) {
    case emud::Command::kRegionRead:
    case emud::Command::kRegionWrite:
      require(c.count >= 1 && c.count <= emud::kMaxAccess);
      require(c.region == emud::kRegionConfig || c.region <= 5);
      require(c.region == emud::kRegionConfig || c.count == 4 || c.count == 8);
      if (c.command == emud::Command::kRegionWrite) {
        require(c.data.size() == c.count);
        require(c.data.data() >= msg.data() && c.data.data() + c.data.size() <= msg.data() + msg.size());
      }
      break;
    case emud::Command::kDmaMap:
      // PROCESS_MEMORY (1.3) carries an address, not an fd, and never with UNSEALED
      require(fds == ((c.dma_flags & emud::dma_map::kFlagProcessMemory) != 0 ? 0u : 1u) && c.dma_access >= 1 &&
              c.dma_access <= 3 && c.fd_offset % 4096 == 0 &&
              (c.dma_flags & emud::dma_map::kFlagProcessMemory & (c.dma_flags << 1)) == 0);
      break;
    case emud::Command::kSetIrqs:
      require(c.count >= 1 && c.count <= 64 && fds == static_cast<std::size_t>(std::popcount(c.fd_mask)));
      break;
    case emud::Command::kInjectFault: require(fds == 0 && c.fault_kind <= emud::fault::kMaxKind && c.count >= 1); break;
    case emud::Command::kDoorbellShadow: require(fds == 1); break;
    case emud::Command::kEngineEvent:
      require(fds == 0 && c.event_kind >= 1 && c.event_kind <= emud::engine::kEventMaxKind &&
              c.event_queue < npo::fw::regs::kNumQueues &&
              (c.event_flags & ~(emud::engine::kEventWrite | emud::engine::kEventPerm)) == 0);
      break;
    default: require(fds == 0); break;
  }
  require(!c.no_reply || c.command == emud::Command::kRegionWrite || c.command == emud::Command::kEngineEvent);
  // The reply builder takes any text and body.
  std::vector<std::byte> out;
  npo::emu::server::build_reply(out, c.msg_id, static_cast<std::uint16_t>(c.command), npo::Code::kOutOfRange, {},
                                std::string_view(reinterpret_cast<const char*>(msg.data()), msg.size()));
  require(out.size() >= emud::hdr::kBytes && out.size() <= emud::hdr::kBytes + emud::kMaxErrorText);
  return 0;
}
