// SPDX-License-Identifier: Apache-2.0
#include "npo/hal/error.hpp"

#include <cerrno>

#include <gtest/gtest.h>

namespace {

using npo::Code;

TEST(Error, CodeNamesAreStableAndDistinct) {
  EXPECT_EQ(npo::code_name(Code::kResourceExhausted), "resource_exhausted");
  EXPECT_EQ(npo::code_name(Code::kDeadlineExceeded), "deadline_exceeded");
  EXPECT_EQ(npo::code_name(Code::kDataLoss), "data_loss");
  std::set<std::string_view> names;
  for (int c = 0; c <= static_cast<int>(Code::kDataLoss); ++c) names.insert(npo::code_name(static_cast<Code>(c)));
  EXPECT_EQ(names.size(), 16u);
}

TEST(Error, RetryMeaning) {
  EXPECT_TRUE(npo::is_retryable(Code::kUnavailable));
  EXPECT_TRUE(npo::is_retryable(Code::kDeadlineExceeded));
  EXPECT_TRUE(npo::is_retryable(Code::kResourceExhausted));
  EXPECT_FALSE(npo::is_retryable(Code::kAborted));  // retried one level up, not the same call
  EXPECT_FALSE(npo::is_retryable(Code::kInvalidArgument));
  EXPECT_FALSE(npo::is_retryable(Code::kFailedPrecondition));
  EXPECT_FALSE(npo::is_retryable(Code::kInternal));
}

TEST(Error, ErrnoMapping) {
  EXPECT_EQ(npo::errno_code(ENOENT), Code::kNotFound);
  EXPECT_EQ(npo::errno_code(ENODEV), Code::kNotFound);
  EXPECT_EQ(npo::errno_code(EPERM), Code::kPermissionDenied);
  EXPECT_EQ(npo::errno_code(EACCES), Code::kPermissionDenied);
  EXPECT_EQ(npo::errno_code(ENOMEM), Code::kResourceExhausted);
  EXPECT_EQ(npo::errno_code(ENOSPC), Code::kResourceExhausted);
  EXPECT_EQ(npo::errno_code(EBUSY), Code::kUnavailable);
  EXPECT_EQ(npo::errno_code(EINVAL), Code::kInvalidArgument);
  EXPECT_EQ(npo::errno_code(ETIMEDOUT), Code::kDeadlineExceeded);
  EXPECT_EQ(npo::errno_code(ENOTTY), Code::kUnimplemented);
  EXPECT_EQ(npo::errno_code(EEXIST), Code::kAlreadyExists);
  EXPECT_EQ(npo::errno_code(EXDEV), Code::kUnknown);
}

TEST(Error, FailErrnoKeepsErrnoAndFormats) {
  npo::Result<int> r = npo::fail_errno(EBUSY, "VFIO_GROUP_SET_CONTAINER", {.card = 3});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_EQ(r.error().sys_errno(), EBUSY);
  EXPECT_EQ(r.error().to_string(),
            "unavailable: VFIO_GROUP_SET_CONTAINER [card=3] (errno 16: Device or resource busy)");
}

TEST(Error, ContextMergesWithoutOverwriting) {
  npo::Error e(Code::kResourceExhausted, "queue full (64 slots)", 0, {.engine = 1, .queue = 2});
  e.with({.card = 0, .engine = 7, .reg = 0x1001c, .value = 0x40});
  EXPECT_EQ(e.context().card, 0u);
  EXPECT_EQ(e.context().engine, 1u);  // the inner, more precise value wins
  EXPECT_EQ(e.to_string(),
            "resource_exhausted: queue full (64 slots) [card=0 engine=1 queue=2 reg=0x1001c value=0x40]");
  npo::Error p = std::move(e).prefixed("submit");
  EXPECT_EQ(p.message(), "submit: queue full (64 slots)");
}

TEST(Error, ExpectedCarriesValuesAndErrors) {
  auto half = [](int x) -> npo::Result<int> {
    if (x % 2 != 0) return npo::fail(Code::kInvalidArgument, "odd");
    return x / 2;
  };
  EXPECT_EQ(half(8).value(), 4);
  EXPECT_EQ(half(7).error().code(), Code::kInvalidArgument);
  auto r = half(6);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(half(*r).has_value());  // 3 is odd
}

}  // namespace
