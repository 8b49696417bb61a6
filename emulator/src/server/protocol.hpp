// SPDX-License-Identifier: Apache-2.0
// npo-emud: the parser of client messages (docs/spec/emud-protocol.md). parse_command is a
// pure function over untrusted bytes: it checks the header, the body size of each command,
// the fields' ranges and the number of attached fds, and returns what the session executes.
// It never touches the emulator (tests/fuzz/fuzz_emud_protocol.cpp fuzzes it alone).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "npo/fw/emud.hpp"
#include "npo/hal/error.hpp"

namespace npo::emu::server {

/// One checked command. Fields not used by `command` are zero.
struct ParsedCommand {
  fw::emud::Command command = fw::emud::Command::kVersion;
  std::uint16_t msg_id = 0;
  bool no_reply = false;
  // VERSION
  std::uint16_t major = 0;
  std::uint16_t minor = 0;
  std::uint32_t attach_flags = 0;
  // DMA_MAP / DMA_UNMAP
  std::uint64_t iova = 0;
  std::uint64_t size = 0;
  std::uint64_t fd_offset = 0;
  std::uint32_t dma_access = 0;
  std::uint32_t dma_flags = 0;  ///< DMA_MAP: fw::emud::dma_map::kFlag* bits
  // REGION_INFO / REGION_READ / REGION_WRITE
  std::uint32_t region = 0;
  std::uint64_t offset = 0;
  std::uint32_t count = 0;
  std::span<const std::byte> data;  ///< REGION_WRITE payload (points into the message)
  // SET_IRQS
  std::uint32_t irq_index = 0;
  std::uint32_t irq_start = 0;
  std::uint64_t fd_mask = 0;
  // INJECT_FAULT (optional fields: fw::emud::fault::kNone when not given)
  std::uint64_t delay_ns = 0;
  std::uint32_t fault_kind = 0;
  std::uint32_t fault_card = 0;
  std::uint32_t fault_engine = 0;
  std::uint32_t fault_queue = 0;
  std::uint32_t fault_port = 0;
  std::uint32_t fault_lane = 0;
  double fault_value = 0;
  std::uint64_t duration_ns = 0;
  // HBM_FD (card), ENGINE_EVENT (kind, queue, value, flags)
  std::uint32_t target_card = 0;
  std::uint32_t window = 0;      ///< WINDOW_FD
  std::uint32_t generation = 0;  ///< WINDOW_FD
  std::uint64_t key = 0;         ///< WINDOW_FD
  std::uint32_t event_kind = 0;
  std::uint32_t event_queue = 0;
  std::uint64_t event_value = 0;
  std::uint64_t event_flags = 0;
};

/// Checks one message received with `fd_count` attached descriptors. Errors: kInvalidArgument
/// (short or oversized message, size field disagreeing with the bytes received, a reply where
/// a command is expected, unknown command, wrong body size, bad field, wrong number of fds)
/// with msg_id/command filled where the header was readable (`*header_ok` tells).
Result<ParsedCommand> parse_command(std::span<const std::byte> msg, std::size_t fd_count, bool* header_ok = nullptr,
                                    std::uint16_t* msg_id = nullptr, std::uint16_t* command = nullptr);

/// Builds a reply header + body into `out` (resized). `error` != kOk sets the error flag and
/// carries `text` (truncated to kMaxErrorText) as the body instead of `body`.
void build_reply(std::vector<std::byte>& out, std::uint16_t msg_id, std::uint16_t command, Code error,
                 std::span<const std::byte> body, std::string_view text = {});

}  // namespace npo::emu::server
