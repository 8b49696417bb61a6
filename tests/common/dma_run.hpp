// SPDX-License-Identifier: Apache-2.0
// Tests: submit what a queue holds and collect `n` completions (or whatever arrived within
// 20 s of wall time, so a lost completion fails the test instead of hanging it).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

#include "npo/hal/dma.hpp"

namespace npo_test {

inline std::vector<npo::OpCompletion> run(npo::DmaQueue& q, std::size_t n) {
  EXPECT_TRUE(q.submit().has_value());
  std::vector<npo::OpCompletion> out;
  std::array<npo::OpCompletion, 64> buf;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    const auto k = q.poll(buf);
    out.insert(out.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return out;
}

}  // namespace npo_test
