// SPDX-License-Identifier: Apache-2.0
// drivers/vfio: the seam over the system calls the VFIO backend makes. Every open, ioctl,
// mmap, pread/pwrite and sysfs read goes through a `Sys`, so unit tests replay scripted
// kernel answers (tests/vfio/fake_kernel.hpp) -- errors included -- without a device, an
// IOMMU or root. The real implementation is a thin pass-through to libc (STYLE.md: "every
// third-party environment call goes through one thin interface").
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <string>
#include <vector>

namespace npo::vfio {

/// A system call's result: the value, or the errno it failed with (never 0).
template <typename T>
using SysResult = std::expected<T, int>;

/// The system calls of the VFIO backend. Paths are absolute (the backend prefixes its
/// configurable sysfs and /dev roots). Every method returns the errno of the failing call
/// unchanged (EINTR is retried inside the real implementation).
/// Thread-safety: implementations must allow concurrent calls (the real one is stateless).
class Sys {
 public:
  virtual ~Sys() = default;

  /// open(2) with O_CLOEXEC added. Returns the new fd.
  virtual SysResult<int> open(const std::string& path, int flags) = 0;
  /// close(2); errors are ignored (the fd is gone either way on Linux).
  virtual void close(int fd) noexcept = 0;
  /// ioctl(2) with a pointer argument (or an integer smuggled as one, as VFIO_CHECK_EXTENSION
  /// and VFIO_SET_IOMMU take). Returns the ioctl's non-negative return value.
  virtual SysResult<int> ioctl(int fd, unsigned long request, void* arg) = 0;
  /// ioctl(2) with an integer argument (VFIO_CHECK_EXTENSION, VFIO_SET_IOMMU).
  virtual SysResult<int> ioctl_int(int fd, unsigned long request, unsigned long value) = 0;
  /// mmap(2) of `length` bytes of `fd` at `offset`, MAP_SHARED, with `prot`.
  virtual SysResult<void*> mmap(std::size_t length, int prot, int fd, std::uint64_t offset) = 0;
  /// munmap(2) of a mapping returned by mmap().
  virtual void munmap(void* addr, std::size_t length) noexcept = 0;
  /// pread(2): returns the bytes read (may be short).
  virtual SysResult<std::size_t> pread(int fd, void* buf, std::size_t count, std::uint64_t offset) = 0;
  /// pwrite(2): returns the bytes written (may be short).
  virtual SysResult<std::size_t> pwrite(int fd, const void* buf, std::size_t count, std::uint64_t offset) = 0;
  /// eventfd(2) with EFD_CLOEXEC added.
  virtual SysResult<int> eventfd(unsigned initval, int flags) = 0;
  /// readlink(2): the link's target text.
  virtual SysResult<std::string> readlink(const std::string& path) = 0;
  /// Reads a small text file (a sysfs attribute), at most `max_bytes`.
  virtual SysResult<std::string> read_file(const std::string& path, std::size_t max_bytes = 4096) = 0;
  /// Names in a directory, without "." and "..", in no particular order.
  virtual SysResult<std::vector<std::string>> list_dir(const std::string& path) = 0;
  /// access(2) with `mode` (F_OK, R_OK | W_OK, ...).
  virtual SysResult<void> access(const std::string& path, int mode) = 0;
};

/// The process-wide pass-through to libc. Never null; lives until exit.
[[nodiscard]] Sys& real_sys() noexcept;

/// An owned file descriptor closed through its Sys on destruction. Move-only.
/// Thread-safety: none (an owner object, like std::unique_ptr).
class Fd {
 public:
  /// Empty (-1).
  Fd() = default;
  /// Takes ownership of `fd`, to be closed with `sys.close`.
  Fd(Sys& sys, int fd) noexcept : sys_(&sys), fd_(fd) {}
  Fd(Fd&& o) noexcept : sys_(o.sys_), fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      sys_ = o.sys_;
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  /// The descriptor, -1 when empty.
  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Closes the descriptor now (idempotent).
  void reset() noexcept {
    if (fd_ >= 0 && sys_ != nullptr) sys_->close(fd_);
    fd_ = -1;
  }

 private:
  Sys* sys_ = nullptr;
  int fd_ = -1;
};

}  // namespace npo::vfio
