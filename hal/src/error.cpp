// SPDX-License-Identifier: Apache-2.0
#include "npo/hal/error.hpp"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace npo {

std::string_view code_name(Code c) noexcept {
  switch (c) {
    case Code::kOk: return "ok";
    case Code::kCancelled: return "cancelled";
    case Code::kUnknown: return "unknown";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kDeadlineExceeded: return "deadline_exceeded";
    case Code::kNotFound: return "not_found";
    case Code::kAlreadyExists: return "already_exists";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kResourceExhausted: return "resource_exhausted";
    case Code::kFailedPrecondition: return "failed_precondition";
    case Code::kAborted: return "aborted";
    case Code::kOutOfRange: return "out_of_range";
    case Code::kUnimplemented: return "unimplemented";
    case Code::kInternal: return "internal";
    case Code::kUnavailable: return "unavailable";
    case Code::kDataLoss: return "data_loss";
  }
  return "invalid_code";
}

bool is_retryable(Code c) noexcept {
  return c == Code::kUnavailable || c == Code::kDeadlineExceeded || c == Code::kResourceExhausted;
}

namespace {
void merge(ErrorContext& into, const ErrorContext& more) {
  if (!into.card) into.card = more.card;
  if (!into.engine) into.engine = more.engine;
  if (!into.queue) into.queue = more.queue;
  if (!into.port) into.port = more.port;
  if (!into.lane) into.lane = more.lane;
  if (!into.reg) into.reg = more.reg;
  if (!into.value) into.value = more.value;
}
}  // namespace

Error& Error::with(const ErrorContext& more) & {
  merge(ctx_, more);
  return *this;
}
Error&& Error::with(const ErrorContext& more) && {
  merge(ctx_, more);
  return std::move(*this);
}
Error&& Error::prefixed(std::string_view what) && {
  message_ = fmt::format("{}: {}", what, message_);
  return std::move(*this);
}

std::string Error::to_string() const {
  std::string s = fmt::format("{}: {}", code_name(code_), message_);
  std::string ctx;
  auto add = [&ctx](std::string_view k, const auto& v) {
    if (v) ctx += fmt::format("{}{}={}", ctx.empty() ? "" : " ", k, *v);
  };
  add("card", ctx_.card);
  add("engine", ctx_.engine);
  add("queue", ctx_.queue);
  add("port", ctx_.port);
  add("lane", ctx_.lane);
  if (ctx_.reg) ctx += fmt::format("{}reg=0x{:05x}", ctx.empty() ? "" : " ", *ctx_.reg);
  if (ctx_.value) ctx += fmt::format("{}value=0x{:x}", ctx.empty() ? "" : " ", *ctx_.value);
  if (!ctx.empty()) s += fmt::format(" [{}]", ctx);
  if (errno_ != 0) s += fmt::format(" (errno {}: {})", errno_, std::strerror(errno_));
  return s;
}

Code errno_code(int err) noexcept {
  switch (err) {
    case 0: return Code::kOk;
    case ENOENT:
    case ENODEV:
    case ENXIO: return Code::kNotFound;
    case EACCES:
    case EPERM: return Code::kPermissionDenied;
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE: return Code::kResourceExhausted;
    case EBUSY:
    case EAGAIN:
    case EIO:
    case EINTR: return Code::kUnavailable;
    case EINVAL: return Code::kInvalidArgument;
    case ETIMEDOUT: return Code::kDeadlineExceeded;
    case ENOTTY:
    case ENOSYS:
    case EOPNOTSUPP: return Code::kUnimplemented;
    case EEXIST: return Code::kAlreadyExists;
    case ERANGE:
    case EFAULT: return Code::kOutOfRange;
    default: return Code::kUnknown;
  }
}

std::unexpected<Error> fail_errno(int err, std::string message, ErrorContext ctx) {
  return std::unexpected<Error>(Error(errno_code(err), std::move(message), err, std::move(ctx)));
}

}  // namespace npo
