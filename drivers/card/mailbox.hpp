// SPDX-License-Identifier: Apache-2.0
// drivers/card: the firmware mailbox client (docs/spec/mailbox.md). Writes a request into
// the BAR0 mailbox block, rings CTRL.SEND, polls STATUS.DONE with a timeout, and checks
// the reply (version, response flag, opcode, sequence, length, CRC32C) before use.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "npo/fw/mailbox.hpp"
#include "npo/hal/backend/backend.hpp"

namespace npo::card {

/// Whether repeating `cmd` cannot change the outcome (mailbox.md §3 table "Idempotent"):
/// IDENTIFY, GET_VERSIONS, HEARTBEAT, TELEMETRY, POWER_READ, ERROR_LOG_READ, FW_QUERY.
[[nodiscard]] bool is_idempotent(fw::mbox::Command cmd) noexcept;

class MailboxClient {
 public:
  /// `bar0` and `clock` must outlive the client. `card` is used for error context.
  /// `timeout_ns` bounds each call's wait for BUSY to clear and for the reply, on `clock`
  /// (the platform clock; a kCardWork deadline, card/deadline.hpp: on a virtual clock a lost
  /// request fails after `timeout_ns` of emulated time, a few ms of wall time).
  MailboxClient(backend::Mmio& bar0, backend::Clock& clock, std::uint32_t card, std::uint64_t timeout_ns)
      : bar0_(bar0), clock_(clock), card_(card), timeout_ns_(timeout_ns) {}

  /// mailbox.md §2.5 retry budget.
  static constexpr int kBusyRetries = 5;
  static constexpr std::uint64_t kBusyFirstDelayNs = 10'000'000;
  static constexpr int kBadCrcRetries = 2;
  static constexpr int kReplyCrcRetries = 2;

  /// Sends one command and returns the reply payload.
  /// Errors: kInvalidArgument (payload > 1008 bytes); kDeadlineExceeded (no reply in time);
  /// kUnavailable (card removed: all-ones reads; mailbox still busy from an earlier timed-out
  /// request; firmware kBusy); kDataLoss (reply CRC mismatch -- retry the call); kInternal
  /// (reply breaks the protocol: wrong version, opcode, sequence or length); and the
  /// mapping of firmware statuses (mailbox.md §4): kBadArgument->kInvalidArgument,
  /// kNoModule->kNotFound, kBadVersion/kPageNotSupported/kUnknownCommand->kUnimplemented,
  /// kReadOnly->kPermissionDenied, kBadCrc->kDataLoss, kBusy->kUnavailable; firmware update
  /// (mailbox.md §5): kBadState/kRollbackRefused->kFailedPrecondition, kImageInvalid->
  /// kInvalidArgument, kImageCorrupt->kDataLoss, kImageSignature->kPermissionDenied; others->kInternal.
  /// Retries (mailbox.md §2.5): BUSY up to 5 times, 10 ms apart doubling (platform clock);
  /// BAD_CRC up to 2 times; a reply CRC mismatch up to 2 times for idempotent commands
  /// (is_idempotent); a timeout never. Thread-safety: calls are serialised.
  Result<std::vector<std::byte>> call(fw::mbox::Command cmd, std::span<const std::byte> payload);

 private:
  Result<std::vector<std::byte>> call_once(fw::mbox::Command cmd, std::span<const std::byte> payload);

  backend::Mmio& bar0_;
  backend::Clock& clock_;
  std::uint32_t card_;
  std::uint64_t timeout_ns_;
  std::mutex mu_;
  std::uint32_t seq_ = 0;
  fw::mbox::Status last_status_ = fw::mbox::Status::kOk;  ///< status of the last firmware error reply
};

}  // namespace npo::card
