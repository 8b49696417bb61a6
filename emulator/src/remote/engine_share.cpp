// SPDX-License-Identifier: Apache-2.0
// Engine sharing for emu-remote (spec §5.12): ENGINE_SHARE builds the card's DMA engines in
// this process (client_engine.*), which reach npo-emud through ConnLink (HBM_FD, ENGINE_EVENT).
#include <unistd.h>

#include <array>

#include <fmt/format.h>

#include "npo/fw/emud.hpp"
#include "remote/remote_internal.hpp"

namespace npo::emu::remote {

namespace {
/// A round trip whose reply must carry an fd and a body of `reply_bytes`; the fd is the
/// caller's. Errors: the daemon's, kInternal (`what`: a malformed reply; no fd is leaked).
Result<Reply> call_fd(Conn& c, emud::Command cmd, std::span<const std::byte> body, std::size_t reply_bytes,
                      std::string_view what) {
  auto r = c.call(cmd, body);
  if (!r) return std::unexpected(r.error());
  if (r->fd < 0 || r->body.size() != reply_bytes) {
    if (r->fd >= 0) ::close(r->fd);
    return fail(Code::kInternal, fmt::format("emu-remote: malformed reply to {}", what));
  }
  return r;
}
}  // namespace

Result<EngineLink::Hbm> ConnLink::hbm_fd(std::uint32_t card) {
  std::array<std::byte, emud::engine::kHbmBytes> b{};
  emud::store<std::uint32_t>(b, emud::engine::kHbmCard, card);
  auto r = call_fd(c_, emud::Command::kHbmFd, b, emud::engine::kHbmReplyBytes, fmt::format("HBM_FD for card {}", card));
  if (!r) return std::unexpected(r.error());
  return Hbm{r->fd, emud::load<std::uint64_t>(r->body, emud::engine::kHbmReplyFdOffset),
             emud::load<std::uint64_t>(r->body, emud::engine::kHbmReplySize)};
}
Result<EngineLink::EngineFd> ConnLink::engine_fd() {
  std::array<std::byte, emud::engine::kShareBytes> b{};
  auto r = call_fd(c_, emud::Command::kEngineFd, b, emud::engine::kEngineReplyBytes, "ENGINE_FD");
  if (!r) return std::unexpected(r.error());
  return EngineFd{r->fd, emud::load<std::uint64_t>(r->body, emud::engine::kEngineReplyOffset)};
}
Result<EngineLink::WindowFd> ConnLink::window_fd(std::uint32_t card, unsigned window, std::uint16_t generation,
                                                 std::uint64_t key) {
  std::array<std::byte, emud::engine::kWindowBytes> b{};
  emud::store<std::uint32_t>(b, emud::engine::kWindowCard, card);
  emud::store<std::uint16_t>(b, emud::engine::kWindowIndex, static_cast<std::uint16_t>(window));
  emud::store<std::uint16_t>(b, emud::engine::kWindowGeneration, generation);
  emud::store<std::uint64_t>(b, emud::engine::kWindowKey, key);
  auto r = call_fd(c_, emud::Command::kWindowFd, b, emud::engine::kWindowReplyBytes,
                   fmt::format("WINDOW_FD for card {} window {}", card, window));
  if (!r) return std::unexpected(r.error());
  return WindowFd{
      r->fd, emud::load<std::uint64_t>(r->body, emud::engine::kWindowReplyOffset),
      emud::load<std::uint64_t>(r->body, emud::engine::kWindowReplySize),
      (emud::load<std::uint32_t>(r->body, emud::engine::kWindowReplyFlags) & emud::engine::kWindowWritable) != 0};
}

Result<RangeFd> hbm_range_fd(Conn& c, std::uint64_t off, std::uint64_t size) {
  std::array<std::byte, emud::engine::kRangeBytes> b{};
  emud::store<std::uint64_t>(b, emud::engine::kRangeOffset, off);
  emud::store<std::uint64_t>(b, emud::engine::kRangeSize, size);
  auto r = call_fd(c, emud::Command::kHbmRangeFd, b, emud::engine::kRangeReplyBytes, "HBM_RANGE_FD");
  if (!r) return std::unexpected(r.error());
  return RangeFd{
      r->fd, emud::load<std::uint64_t>(r->body, emud::engine::kRangeReplyFdOffset),
      (emud::load<std::uint32_t>(r->body, emud::engine::kRangeReplyFlags) & emud::engine::kRangeWindow) != 0};
}

void ConnLink::post_event(std::uint32_t kind, std::uint32_t queue, std::uint64_t value, std::uint64_t flags) {
  std::array<std::byte, emud::engine::kEventBytes> b{};
  emud::store<std::uint32_t>(b, emud::engine::kEventKind, kind);
  emud::store<std::uint32_t>(b, emud::engine::kEventQueue, queue);
  emud::store<std::uint64_t>(b, emud::engine::kEventValue, value);
  emud::store<std::uint64_t>(b, emud::engine::kEventFlags, flags);
  (void)c_.call(emud::Command::kEngineEvent, b, {}, true);
}

Result<std::unique_ptr<ClientEngine>> share_engines(Conn& c, EngineLink& link) {
  std::array<std::byte, emud::engine::kShareBytes> b{};
  auto r = c.call(emud::Command::kEngineShare, b);
  if (!r) return std::unexpected(r.error());
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{r->fd};
  if (r->fd < 0 || r->body.size() != emud::engine::kShareReplyBytes) {
    return fail(Code::kInternal, "emu-remote: malformed ENGINE_SHARE reply (no state fd, or a short body)");
  }
  if (emud::load<std::uint32_t>(r->body, emud::engine::kReplyLayout) != FabricState::kLayout) {
    return fail(Code::kFailedPrecondition,
                fmt::format("emu-remote: npo-emud's engine state has layout {}, this library {}",
                            emud::load<std::uint32_t>(r->body, emud::engine::kReplyLayout), FabricState::kLayout));
  }
  return ClientEngine::create(link, r->fd, emud::load<std::uint32_t>(r->body, emud::engine::kReplyCard),
                              emud::load<std::uint32_t>(r->body, emud::engine::kReplyLockTag));
}

}  // namespace npo::emu::remote
