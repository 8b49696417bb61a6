// SPDX-License-Identifier: Apache-2.0
// The mailbox transport registers (registers.md §4).
#include "mailbox.hpp"

#include <cstring>

namespace npo::emu {

namespace m = fw::regs::mbox;

std::uint64_t Mailbox::read(std::uint32_t off, unsigned width) {
  std::lock_guard lock(mu_);
  switch (off) {
    case m::kCtrl: return 0;
    case m::kStatus: return status_.load();
    case m::kReqLen: return req_len_;
    case m::kRspLen: return rsp_len_;
    default: break;
  }
  const unsigned bytes = width / 8;
  auto load = [&](const auto& buf, std::uint32_t o) {
    std::uint64_t v = 0;
    std::memcpy(&v, buf.data() + o, bytes);
    return v;
  };
  if (off >= m::kReqBuf && off + bytes <= m::kReqBuf + m::kBufSize) return load(req_, off - m::kReqBuf);
  if (off >= m::kRspBuf && off + bytes <= m::kRspBuf + m::kBufSize) return load(rsp_, off - m::kRspBuf);
  return 0;
}

bool Mailbox::write(std::uint32_t off, unsigned width, std::uint64_t value) {
  bool send = false;
  std::lock_guard lock(mu_);
  switch (off) {
    case m::kCtrl:
      if ((value & m::kCtrlSend.mask()) && !(status_.load() & m::kStatusBusy.mask())) {
        status_.fetch_or(m::kStatusBusy.mask());
        send = true;
      }
      break;
    case m::kStatus:
      status_.fetch_and(~(static_cast<std::uint32_t>(value) & (m::kStatusDone.mask() | m::kStatusError.mask())));
      break;
    case m::kReqLen: req_len_ = static_cast<std::uint32_t>(value); break;
    default: {
      const unsigned bytes = width / 8;
      if (off >= m::kReqBuf && off + bytes <= m::kReqBuf + m::kBufSize && !(status_.load() & m::kStatusBusy.mask())) {
        std::memcpy(req_.data() + (off - m::kReqBuf), &value, bytes);
      }
      break;
    }
  }
  return send;
}

void Mailbox::reset() {
  std::lock_guard lock(mu_);
  req_.fill(std::byte{0});
  rsp_.fill(std::byte{0});
  req_len_ = 0;
  rsp_len_ = 0;
  status_.store(0);
}

Mailbox::Request Mailbox::request() {
  std::lock_guard lock(mu_);
  return Request{req_, req_len_};
}

void Mailbox::respond(const Buffer& rsp, std::uint32_t len) {
  std::lock_guard lock(mu_);
  rsp_ = rsp;
  rsp_len_ = len;
  status_.store((status_.load() & ~m::kStatusBusy.mask()) | m::kStatusDone.mask());
}

void Mailbox::fail_transport() {
  std::lock_guard lock(mu_);
  rsp_len_ = 0;
  status_.store((status_.load() & ~m::kStatusBusy.mask()) | m::kStatusError.mask() | m::kStatusDone.mask());
}

}  // namespace npo::emu
