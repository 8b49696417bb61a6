// SPDX-License-Identifier: Apache-2.0
// File descriptors over a UNIX socket (SCM_RIGHTS), written once for both ends of the npo-emud
// protocol (docs/spec/emud-protocol.md §2): the emu-remote client and the daemon's sessions.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "npo/fw/emud.hpp"

namespace npo::emu::wire {

/// Sends `msg` as one message (MSG_NOSIGNAL) with `fds` attached as one SCM_RIGHTS record
/// (at most fw::emud::kMaxFds). Returns sendmsg(2)'s result: -1 with errno set on error (EINTR
/// included: the caller decides whether to retry). The fds stay the caller's.
inline ssize_t send_with_fds(int sock, std::span<const std::byte> msg, std::span<const int> fds) {
  iovec iov{const_cast<std::byte*>(msg.data()), msg.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * fw::emud::kMaxFds)> ctrl{};
  if (!fds.empty()) {
    mh.msg_control = ctrl.data();
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  return ::sendmsg(sock, &mh, MSG_NOSIGNAL);
}

/// What recv_with_fds took besides the bytes.
struct Received {
  std::vector<int> fds;  ///< every fd attached (SCM_RIGHTS), now owned by the caller
  pid_t pid = 0;         ///< the sender's pid (SCM_CREDENTIALS, with SO_PASSCRED), 0: none
  int msg_flags = 0;     ///< recvmsg's msg_flags (MSG_TRUNC, MSG_CTRUNC)
};

/// Receives one message into `buf` with `flags` (MSG_CMSG_CLOEXEC and the like), its control
/// records into `ctrl` (cmsghdr-aligned; its size bounds the fds and credentials taken), and
/// fills `out`. Returns recvmsg(2)'s result (-1 with errno set, untouched by the parsing). Only
/// a message that arrived (result > 0) has descriptors: after a failed recvmsg the control
/// buffer may still hold an earlier message's (long closed) fds, which are not reported.
inline ssize_t recv_with_fds(int sock, std::span<std::byte> buf, std::span<char> ctrl, int flags, Received& out) {
  iovec iov{buf.data(), buf.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctrl.data();
  mh.msg_controllen = ctrl.size();
  const ssize_t n = ::recvmsg(sock, &mh, flags);
  const int err = errno;
  out.fds.clear();
  out.pid = 0;
  out.msg_flags = mh.msg_flags;
  for (cmsghdr* c = n > 0 ? CMSG_FIRSTHDR(&mh) : nullptr; c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
      ucred uc{};
      std::memcpy(&uc, CMSG_DATA(c), sizeof uc);
      out.pid = uc.pid;
      continue;
    }
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < k; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      out.fds.push_back(fd);
    }
  }
  errno = err;
  return n;
}

}  // namespace npo::emu::wire
