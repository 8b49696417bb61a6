// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the mailbox transport registers of BAR0 (registers.md §4): CTRL,
// STATUS, REQ_LEN, RSP_LEN and the request and response buffers. The host side is reached
// through read()/write() (BAR0 decode); the firmware (firmware.hpp) takes the request and
// posts its reply through request(), respond() and fail_transport().
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "npo/fw/regs.hpp"

namespace npo::emu {

/// Mailbox transport state of one card. Thread-safe (one mutex).
class Mailbox {
 public:
  using Buffer = std::array<std::byte, fw::regs::mbox::kBufSize>;

  /// BAR0 read at `off` (relative to the mailbox block), `width` bits.
  std::uint64_t read(std::uint32_t off, unsigned width);
  /// BAR0 write. Returns true when it rang the doorbell (CTRL.SEND while not BUSY; BUSY is
  /// now set): the caller hands the request to the firmware.
  [[nodiscard]] bool write(std::uint32_t off, unsigned width, std::uint64_t value);
  /// Card reset: buffers, lengths and STATUS to 0.
  void reset();

  /// A copy of the request buffer and REQ_LEN, for the firmware.
  struct Request {
    Buffer buf{};
    std::uint32_t len = 0;
  };
  [[nodiscard]] Request request();
  /// Posts a reply of `len` bytes (the whole buffer is copied): BUSY clears, DONE sets.
  void respond(const Buffer& rsp, std::uint32_t len);
  /// Transport error (mailbox.md §4): RSP_LEN 0, BUSY clears, ERROR and DONE set.
  void fail_transport();

 private:
  std::mutex mu_;
  Buffer req_{};
  Buffer rsp_{};
  std::uint32_t req_len_ = 0;
  std::uint32_t rsp_len_ = 0;
  std::atomic<std::uint32_t> status_{0};
};

}  // namespace npo::emu
