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

class MailboxClient {
 public:
  /// `bar0` and `clock` must outlive the client. `card` is used for error context.
  /// `timeout_ns` bounds each call's wait for BUSY to clear and for the reply, on `clock`
  /// (the platform clock; a kCardWork deadline, card/deadline.hpp: on a virtual clock a lost
  /// request fails after `timeout_ns` of emulated time, a few ms of wall time).
  MailboxClient(backend::Mmio& bar0, backend::Clock& clock, std::uint32_t card, std::uint64_t timeout_ns)
      : bar0_(bar0), clock_(clock), card_(card), timeout_ns_(timeout_ns) {}

  /// Sends one command and returns the reply payload.
  /// Errors: kInvalidArgument (payload > 1008 bytes); kDeadlineExceeded (no reply in time);
  /// kUnavailable (card removed: all-ones reads; mailbox still busy from an earlier timed-out
  /// request; firmware kBusy); kDataLoss (reply CRC mismatch -- retry the call); kInternal
  /// (reply breaks the protocol: wrong version, opcode, sequence or length); and the
  /// mapping of firmware statuses (mailbox.md §4): kBadArgument->kInvalidArgument,
  /// kNoModule->kNotFound, kBadVersion/kPageNotSupported/kUnknownCommand->kUnimplemented,
  /// kReadOnly->kPermissionDenied, kBadCrc (after one retry)->kDataLoss, kBusy (after 3
  /// retries 1 ms apart)->kUnavailable, others->kInternal. Thread-safety: calls are serialised.
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
