// SPDX-License-Identifier: Apache-2.0
// Test helper: a raw npo-emud protocol client (docs/spec/emud-protocol.md) for crafted
// messages, with no emu-remote backend in between, and builders of the commands the tests send.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/emud_process.hpp"
#include "npo/fw/emud.hpp"

namespace npo_test {

namespace emud = npo::fw::emud;

/// The socket of card `card` of the daemon `d`.
inline std::string sock(const EmudProcess& d, unsigned card) {
  return d.dir() + "/card-" + std::to_string(card) + ".sock";
}

/// A raw connection to one card socket, for crafted messages.
struct Raw {
  int fd = -1;
  explicit Raw(const std::string& path) {
    fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path.c_str(), sizeof sa.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~Raw() { close(); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
  /// Closes the connection (the daemon sees the client go).
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  bool send(std::span<const std::byte> msg, std::span<const int> fds = {}) const {
    iovec iov{const_cast<std::byte*>(msg.data()), msg.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * 8)> ctrl{};
    if (!fds.empty()) {
      mh.msg_control = ctrl.data();
      mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    return ::sendmsg(fd, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size());
  }
  /// The reply's error code (0 = ok) and body; code -1 if none came within 5 s.
  std::pair<int, std::vector<std::byte>> recv() const {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) return {-1, {}};
    std::vector<std::byte> b(emud::kMaxMessage);
    const ssize_t n = ::recv(fd, b.data(), b.size(), 0);
    if (n < static_cast<ssize_t>(emud::hdr::kBytes)) return {-1, {}};
    b.resize(static_cast<std::size_t>(n));
    const auto flags = emud::load<std::uint32_t>(b, emud::hdr::kFlags);
    const int code =
        (flags & emud::kFlagError) != 0 ? static_cast<int>(emud::load<std::uint32_t>(b, emud::hdr::kError)) : 0;
    return {code, std::vector<std::byte>(b.begin() + emud::hdr::kBytes, b.end())};
  }
  int call(std::span<const std::byte> msg, std::span<const int> fds = {}) const {
    if (!send(msg, fds)) return -2;
    return recv().first;
  }
  /// As recv(), and the fd the reply carries (-1 if none; the caller closes it).
  std::tuple<int, std::vector<std::byte>, int> recv_fd() const {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) return {-1, {}, -1};
    std::vector<std::byte> b(emud::kMaxMessage);
    iovec iov{b.data(), b.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> ctrl{};
    mh.msg_control = ctrl.data();
    mh.msg_controllen = ctrl.size();
    const ssize_t n = ::recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    int rfd = -1;
    for (cmsghdr* c = n > 0 ? CMSG_FIRSTHDR(&mh) : nullptr; c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&rfd, CMSG_DATA(c), sizeof(int));
    }
    if (n < static_cast<ssize_t>(emud::hdr::kBytes)) return {-1, {}, rfd};
    b.resize(static_cast<std::size_t>(n));
    const auto flags = emud::load<std::uint32_t>(b, emud::hdr::kFlags);
    const int code =
        (flags & emud::kFlagError) != 0 ? static_cast<int>(emud::load<std::uint32_t>(b, emud::hdr::kError)) : 0;
    return {code, std::vector<std::byte>(b.begin() + emud::hdr::kBytes, b.end()), rfd};
  }
};

inline std::vector<std::byte> message(emud::Command cmd, std::span<const std::byte> body, std::uint32_t flags = 0) {
  std::vector<std::byte> m(emud::hdr::kBytes + body.size());
  emud::store<std::uint16_t>(m, emud::hdr::kMsgId, 7);
  emud::store<std::uint16_t>(m, emud::hdr::kCommand, static_cast<std::uint16_t>(cmd));
  emud::store<std::uint32_t>(m, emud::hdr::kSize, static_cast<std::uint32_t>(m.size()));
  emud::store<std::uint32_t>(m, emud::hdr::kFlags, flags);
  if (!body.empty()) std::memcpy(m.data() + emud::hdr::kBytes, body.data(), body.size());
  return m;
}
inline std::vector<std::byte> version_msg(bool read_only) {
  std::array<std::byte, emud::version::kBytes> b{};
  emud::store<std::uint16_t>(b, emud::version::kMajor, emud::kVersionMajor);
  emud::store<std::uint32_t>(b, emud::version::kFlags, read_only ? emud::version::kAttachReadOnly : 0u);
  return message(emud::Command::kVersion, b);
}
inline std::vector<std::byte> access_msg(emud::Command cmd, std::uint32_t region, std::uint64_t off,
                                         std::uint32_t count, std::uint64_t value = 0) {
  std::vector<std::byte> b(emud::access::kBytes + (cmd == emud::Command::kRegionWrite ? count : 0));
  emud::store<std::uint64_t>(b, emud::access::kOffset, off);
  emud::store<std::uint32_t>(b, emud::access::kRegion, region);
  emud::store<std::uint32_t>(b, emud::access::kCount, count);
  if (cmd == emud::Command::kRegionWrite)
    std::memcpy(b.data() + emud::access::kBytes, &value, std::min<std::size_t>(count, 8));
  return message(cmd, b);
}
inline std::vector<std::byte> dma_map_msg(std::uint64_t iova, std::uint64_t size, std::uint64_t fd_off) {
  std::array<std::byte, emud::dma_map::kBytes> b{};
  emud::store<std::uint64_t>(b, emud::dma_map::kIova, iova);
  emud::store<std::uint64_t>(b, emud::dma_map::kSize, size);
  emud::store<std::uint64_t>(b, emud::dma_map::kFdOffset, fd_off);
  emud::store<std::uint32_t>(b, emud::dma_map::kAccess, 3);
  return message(emud::Command::kDmaMap, b);
}

inline std::vector<std::byte> shadow_msg(std::uint32_t flags = 0) {
  std::array<std::byte, emud::shadow::kBytes> b{};
  emud::store<std::uint32_t>(b, emud::shadow::kFlags, flags);
  return message(emud::Command::kDoorbellShadow, b);
}

}  // namespace npo_test
