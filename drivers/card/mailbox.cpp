// SPDX-License-Identifier: Apache-2.0
#include "card/mailbox.hpp"

#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "card/deadline.hpp"
#include "npo/hal/log.hpp"

namespace npo::card {

namespace mb = fw::mbox;
namespace m = fw::regs::mbox;
using fw::load_le;
using fw::store_le;

namespace {
Code map_status(mb::Status s) {
  switch (s) {
    case mb::Status::kBadVersion: return Code::kUnimplemented;
    case mb::Status::kBadArgument: return Code::kInvalidArgument;
    case mb::Status::kBusy: return Code::kUnavailable;
    case mb::Status::kNoModule: return Code::kNotFound;
    case mb::Status::kPageNotSupported:
    case mb::Status::kUnknownCommand: return Code::kUnimplemented;
    case mb::Status::kReadOnly: return Code::kPermissionDenied;
    case mb::Status::kBadCrc: return Code::kDataLoss;
    case mb::Status::kBadState: return Code::kFailedPrecondition;
    case mb::Status::kImageInvalid: return Code::kInvalidArgument;
    case mb::Status::kImageCorrupt: return Code::kDataLoss;
    case mb::Status::kImageSignature: return Code::kPermissionDenied;
    case mb::Status::kRollbackRefused: return Code::kFailedPrecondition;
    default: return Code::kInternal;
  }
}
}  // namespace

bool is_idempotent(mb::Command cmd) noexcept {
  switch (cmd) {
    case mb::Command::kIdentify:
    case mb::Command::kGetVersions:
    case mb::Command::kHeartbeat:
    case mb::Command::kTelemetry:
    case mb::Command::kPowerRead:
    case mb::Command::kErrorLogRead:
    case mb::Command::kFwQuery: return true;
    default: return false;
  }
}

Result<std::vector<std::byte>> MailboxClient::call(mb::Command cmd, std::span<const std::byte> payload) {
  // mailbox.md §2.5 retry budget: a BUSY reply is retried after 10 ms, doubling, at most 5
  // times; a BAD_CRC reply (the request was damaged on the way in, nothing executed) at most
  // 2 times; a reply failing our CRC check (kDataLoss) at most 2 times for idempotent
  // commands only (another may have executed). A timeout is never retried here.
  int busy_retries = kBusyRetries, crc_retries = kBadCrcRetries, reply_retries = kReplyCrcRetries;
  std::uint64_t busy_delay_ns = kBusyFirstDelayNs;
  for (;;) {
    auto r = call_once(cmd, payload);
    if (r || r.error().sys_errno() != 0) return r;
    const auto st = last_status_;
    if (st == mb::Status::kBadCrc && crc_retries-- > 0) continue;
    if (st == mb::Status::kBusy && busy_retries-- > 0) {
      // Firmware busy with card work (a module operation): wait on the platform clock.
      clock_.sleep_until(clock_.now_ns() + busy_delay_ns);
      busy_delay_ns *= 2;
      continue;
    }
    if (st == mb::Status::kOk && r.error().code() == Code::kDataLoss && is_idempotent(cmd) && reply_retries-- > 0) {
      npo::log::get(npo::log::Subsystem::kCore)
          .warn("card {}: {}; retrying the idempotent command", card_, r.error().message());
      continue;
    }
    return r;
  }
}

Result<std::vector<std::byte>> MailboxClient::call_once(mb::Command cmd, std::span<const std::byte> payload) {
  last_status_ = mb::Status::kOk;
  const ErrorContext ctx{.card = card_};
  if (payload.size() > mb::kMaxPayload) {
    return fail(Code::kInvalidArgument,
                fmt::format("mailbox payload of {} bytes exceeds {}", payload.size(), mb::kMaxPayload), ctx);
  }
  std::lock_guard lock(mu_);
  // One deadline on the platform clock for the whole exchange. The firmware answers as fast
  // as it can: a kCardWork wait, which on a virtual clock moves emulated time toward the
  // deadline once the firmware had its wall-time grace (a lost request then fails fast).
  const card::Deadline deadline(clock_, timeout_ns_, card::WaitFor::kCardWork, /*advance=*/true);
  const auto reg = [](std::uint32_t r) { return fw::regs::kMailboxBase + r; };
  // Polls `done(status)` with a short spin then 20 µs pauses until the deadline.
  auto poll = [&](auto&& done) -> Result<std::uint32_t> {
    for (unsigned i = 0;; ++i) {
      const std::uint32_t st = bar0_.read32(reg(m::kStatus));
      if (st == 0xffffffffu) return fail(Code::kUnavailable, "card removed (mailbox reads all-ones)", ctx);
      if (done(st)) return st;
      if (deadline.expired()) return fail(Code::kDeadlineExceeded, "", ctx);
      deadline.pause(i, 20'000);
    }
  };
  if (auto r = poll([](std::uint32_t st) { return !m::kStatusBusy.get(st); }); !r) {
    if (r.error().code() == Code::kDeadlineExceeded) {
      return fail(Code::kUnavailable,
                  fmt::format("mailbox still busy with an earlier request after {} ms; reset the card",
                              timeout_ns_ / 1'000'000),
                  ctx);
    }
    return std::unexpected(r.error());
  }
  const std::uint32_t seq = ++seq_;
  std::array<std::byte, m::kBufSize> buf{};
  store_le<std::uint8_t>(buf.data(), mb::hdr::kVersion, mb::kProtocolVersion);
  store_le<std::uint8_t>(buf.data(), mb::hdr::kFlags, 0);
  store_le<std::uint16_t>(buf.data(), mb::hdr::kOpcode, static_cast<std::uint16_t>(cmd));
  store_le<std::uint32_t>(buf.data(), mb::hdr::kSequence, seq);
  store_le<std::uint16_t>(buf.data(), mb::hdr::kPayloadLen, static_cast<std::uint16_t>(payload.size()));
  if (!payload.empty()) std::memcpy(buf.data() + mb::hdr::kSize, payload.data(), payload.size());  // data() may be null
  const std::size_t len = mb::hdr::kSize + payload.size();
  store_le<std::uint32_t>(buf.data(), mb::hdr::kCrc, mb::message_crc(std::span<const std::byte>(buf.data(), len)));
  for (std::size_t o = 0; o < len; o += 4)
    bar0_.write32(reg(m::kReqBuf + static_cast<std::uint32_t>(o)), load_le<std::uint32_t>(buf.data(), o));
  bar0_.write32(reg(m::kReqLen), static_cast<std::uint32_t>(len));
  bar0_.write32(reg(m::kStatus), m::kStatusDone.mask() | m::kStatusError.mask());  // RW1C: clear stale
  bar0_.write32(reg(m::kCtrl), m::kCtrlSend.mask());
  auto st = poll([](std::uint32_t s) { return m::kStatusDone.get(s) != 0; });
  if (!st) {
    if (st.error().code() == Code::kDeadlineExceeded) {
      return fail(Code::kDeadlineExceeded,
                  fmt::format("mailbox command 0x{:04x} seq {}: no reply within {} ms", static_cast<unsigned>(cmd), seq,
                              timeout_ns_ / 1'000'000),
                  ctx);
    }
    return std::unexpected(st.error());
  }
  bar0_.write32(reg(m::kStatus), m::kStatusDone.mask() | m::kStatusError.mask());
  if (m::kStatusError.get(*st)) {
    return fail(
        Code::kInternal,
        fmt::format("mailbox command 0x{:04x}: firmware could not read the request", static_cast<unsigned>(cmd)), ctx);
  }
  const std::uint32_t rlen = bar0_.read32(reg(m::kRspLen));
  if (rlen < mb::hdr::kSize || rlen > m::kBufSize) {
    return fail(Code::kInternal, fmt::format("mailbox reply length {} outside [16, 1024]", rlen), ctx);
  }
  std::array<std::byte, m::kBufSize> rsp{};
  for (std::uint32_t o = 0; o < rlen; o += 4) store_le<std::uint32_t>(rsp.data(), o, bar0_.read32(reg(m::kRspBuf + o)));
  const auto crc = load_le<std::uint32_t>(rsp.data(), mb::hdr::kCrc);
  if (crc != mb::message_crc(std::span<const std::byte>(rsp.data(), rlen))) {
    return fail(Code::kDataLoss,
                fmt::format("mailbox reply to 0x{:04x} seq {}: CRC32C mismatch (got 0x{:08x})",
                            static_cast<unsigned>(cmd), seq, crc),
                ctx);
  }
  const auto ver = load_le<std::uint8_t>(rsp.data(), mb::hdr::kVersion);
  const auto flags = load_le<std::uint8_t>(rsp.data(), mb::hdr::kFlags);
  const auto op = load_le<std::uint16_t>(rsp.data(), mb::hdr::kOpcode);
  const auto rseq = load_le<std::uint32_t>(rsp.data(), mb::hdr::kSequence);
  const auto plen = load_le<std::uint16_t>(rsp.data(), mb::hdr::kPayloadLen);
  if (ver != mb::kProtocolVersion || !(flags & mb::hdr::kFlagResponse) || op != static_cast<std::uint16_t>(cmd) ||
      rseq != seq || std::size_t{plen} + mb::hdr::kSize != rlen) {
    return fail(
        Code::kInternal,
        fmt::format("mailbox reply breaks the protocol: version {} flags 0x{:x} opcode 0x{:04x} (sent 0x{:04x}) "
                    "seq {} (sent {}) payload {} B in {} B",
                    ver, flags, op, static_cast<unsigned>(cmd), rseq, seq, plen, rlen),
        ctx);
  }
  const auto status = static_cast<mb::Status>(load_le<std::uint16_t>(rsp.data(), mb::hdr::kStatus));
  if (status != mb::Status::kOk) {
    last_status_ = status;
    return fail(map_status(status),
                fmt::format("firmware answered {} to mailbox command 0x{:04x}", mb::status_name(status),
                            static_cast<unsigned>(cmd)),
                ctx);
  }
  return std::vector<std::byte>(rsp.begin() + mb::hdr::kSize, rsp.begin() + rlen);
}

}  // namespace npo::card
