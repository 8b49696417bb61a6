// SPDX-License-Identifier: Apache-2.0
// npo-hal: which host memory another process can map. A backend whose device lives in another
// process (emu-remote: the npo-emud daemon) cannot reach host memory by address; it sends the
// memory's file descriptor instead (DESIGN.md "One supernode, many processes"). The HAL's DMA
// allocations (npo::allocate_host_memory) are memfd-backed and recorded here; applications
// that map their own memfds may record them too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace npo::backend {

/// A recorded file-backed range: the fd and the file offset of the queried address.
struct HostMemoryFd {
  int fd = -1;               ///< owned by whoever registered it; valid while registered
  std::uint64_t offset = 0;  ///< file offset of the first queried byte
};

/// Records that [addr, addr+length) is a MAP_SHARED mapping of `fd` at file offset `offset`
/// (page aligned). The fd must stay open until unregister_host_memory_fd(addr). A memfd made
/// with MFD_ALLOW_SEALING lets a daemon seal it against shrinking. Replaces a record at the
/// same address. Thread-safety: any thread.
void register_host_memory_fd(const void* addr, std::size_t length, int fd, std::uint64_t offset) noexcept;
/// Forgets the record that starts at `addr` (no-op if none). Thread-safety: any thread.
void unregister_host_memory_fd(const void* addr) noexcept;
/// The record covering all of [addr, addr+length), if one does. Thread-safety: any thread.
[[nodiscard]] std::optional<HostMemoryFd> find_host_memory_fd(const void* addr, std::size_t length) noexcept;

}  // namespace npo::backend
