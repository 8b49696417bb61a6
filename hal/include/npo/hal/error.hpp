// SPDX-License-Identifier: Apache-2.0
// npo-hal: the one error convention of the library.
//
// Every fallible call returns `npo::Result<T>` = `std::expected<T, npo::Error>`.
// No exception leaves the library. An Error carries a canonical code (whose retry
// meaning is fixed below, in the spirit of absl::StatusCode), the errno when a
// system call failed, a message, and where it happened (card, engine, queue, port,
// lane, register).
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>

namespace npo {

/// Canonical error codes. The comment of each says what a caller should do.
enum class Code : std::uint8_t {
  kOk = 0,
  kCancelled = 1,          ///< The caller cancelled. Do not retry.
  kUnknown = 2,            ///< Unclassified. Do not retry blindly; log and escalate.
  kInvalidArgument = 3,    ///< Bad input, whatever the state. Fix the call; retrying fails again.
  kDeadlineExceeded = 4,   ///< A timeout elapsed (hung engine, mailbox, training). Retry may work after recovery.
  kNotFound = 5,           ///< The card, port, window or file does not exist.
  kAlreadyExists = 6,      ///< The thing to create exists already.
  kPermissionDenied = 7,   ///< Missing rights (file mode, window rights, wrong key). Fix permissions.
  kResourceExhausted = 8,  ///< A budget or ring is full (queue slots, pinned bytes, IOVA, BAR, window slots).
                           ///< Retry after something is released (poll the queue, free memory).
  kFailedPrecondition =
      9,                ///< Wrong state (queue not started, link down, card in reset). Fix state first; no blind retry.
  kAborted = 10,        ///< Concurrency conflict or reset under the op. Retry the whole higher-level sequence.
  kOutOfRange = 11,     ///< Offset/length past a valid range (HBM, window, page). Fix the call.
  kUnimplemented = 12,  ///< Not supported by this build, backend or card. Do not retry.
  kInternal = 13,       ///< Invariant broken (bug, or a device reply breaking the spec). Do not retry.
  kUnavailable = 14,    ///< Transient: device busy, removed, link flapping. Retry with backoff.
  kDataLoss = 15,       ///< Corrupt data (CRC mismatch, torn read). Retry the read; escalate if persistent.
};

/// Stable lower-case name of a code, e.g. "resource_exhausted".
[[nodiscard]] std::string_view code_name(Code c) noexcept;

/// Whether retrying the same call unchanged can succeed (kUnavailable, kDeadlineExceeded,
/// kResourceExhausted). kAborted is retryable one level up, so this returns false for it.
[[nodiscard]] bool is_retryable(Code c) noexcept;

/// Where an error happened. Unset fields are unknown or not applicable.
struct ErrorContext {
  std::optional<std::uint32_t> card = std::nullopt;    ///< card index in the System
  std::optional<std::uint32_t> engine = std::nullopt;  ///< DMA engine
  std::optional<std::uint32_t> queue = std::nullopt;   ///< DMA queue (within its engine)
  std::optional<std::uint32_t> port = std::nullopt;    ///< optical port
  std::optional<std::uint32_t> lane = std::nullopt;    ///< lane within the port
  std::optional<std::uint32_t> reg = std::nullopt;     ///< BAR0 register offset involved
  std::optional<std::uint64_t> value = std::nullopt;   ///< register value, address or status seen
};

/// An error value. Cheap to move; copying copies the message.
/// Thread-safety: a value type, no shared state.
class Error {
 public:
  Error() = default;
  Error(Code code, std::string message, int sys_errno = 0, ErrorContext ctx = {})
      : code_(code), errno_(sys_errno), message_(std::move(message)), ctx_(std::move(ctx)) {}

  [[nodiscard]] Code code() const noexcept { return code_; }
  /// errno of the failing system call, 0 when none.
  [[nodiscard]] int sys_errno() const noexcept { return errno_; }
  [[nodiscard]] const std::string& message() const noexcept { return message_; }
  [[nodiscard]] const ErrorContext& context() const noexcept { return ctx_; }
  [[nodiscard]] ErrorContext& context() noexcept { return ctx_; }

  /// Adds context fields that are not already set; returns *this for chaining.
  Error& with(const ErrorContext& more) &;
  Error&& with(const ErrorContext& more) &&;
  /// Prefixes the message with "what: ".
  Error&& prefixed(std::string_view what) &&;

  /// "resource_exhausted: queue full (64 slots) [card=0 engine=1 queue=2] (errno 12: Cannot allocate memory)".
  [[nodiscard]] std::string to_string() const;

 private:
  Code code_ = Code::kUnknown;
  int errno_ = 0;
  std::string message_;
  ErrorContext ctx_;
};

/// The return type of every fallible call.
template <typename T>
using Result = std::expected<T, Error>;

/// Builds an unexpected Error in one expression: `return npo::fail(Code::kNotFound, "no card 3");`.
[[nodiscard]] inline std::unexpected<Error> fail(Code code, std::string message, ErrorContext ctx = {}) {
  return std::unexpected<Error>(Error(code, std::move(message), 0, std::move(ctx)));
}
/// Same, for a failed system call: the code is derived from `err` (see errno_code).
[[nodiscard]] std::unexpected<Error> fail_errno(int err, std::string message, ErrorContext ctx = {});

/// Canonical code for an errno value: ENOENT/ENODEV->kNotFound, EACCES/EPERM->kPermissionDenied,
/// ENOMEM/ENOSPC->kResourceExhausted, EBUSY/EAGAIN->kUnavailable, EINVAL->kInvalidArgument,
/// ETIMEDOUT->kDeadlineExceeded, ENOTTY/ENOSYS/EOPNOTSUPP->kUnimplemented, EEXIST->kAlreadyExists,
/// ERANGE/EFAULT->kOutOfRange, EIO->kUnavailable, others kUnknown.
[[nodiscard]] Code errno_code(int err) noexcept;

}  // namespace npo
