// SPDX-License-Identifier: Apache-2.0
// The real Sys: each method is one libc call, EINTR retried, errno returned unchanged.
#include "vfio/sys.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace npo::vfio {

namespace {

template <typename F>
auto retry_eintr(F&& f) {
  for (;;) {
    auto r = f();
    if (r >= 0 || errno != EINTR) return r;
  }
}

class RealSys final : public Sys {
 public:
  SysResult<int> open(const std::string& path, int flags) override {
    const int fd = retry_eintr([&] { return ::open(path.c_str(), flags | O_CLOEXEC); });
    if (fd < 0) return std::unexpected(errno);
    return fd;
  }
  void close(int fd) noexcept override { (void)::close(fd); }
  SysResult<int> ioctl(int fd, unsigned long request, void* arg) override {
    const int r = retry_eintr([&] { return ::ioctl(fd, request, arg); });
    if (r < 0) return std::unexpected(errno);
    return r;
  }
  SysResult<int> ioctl_int(int fd, unsigned long request, unsigned long value) override {
    const int r = retry_eintr([&] { return ::ioctl(fd, request, value); });
    if (r < 0) return std::unexpected(errno);
    return r;
  }
  SysResult<void*> mmap(std::size_t length, int prot, int fd, std::uint64_t offset) override {
    void* p = ::mmap(nullptr, length, prot, MAP_SHARED, fd, static_cast<off_t>(offset));
    if (p == MAP_FAILED) return std::unexpected(errno);
    return p;
  }
  void munmap(void* addr, std::size_t length) noexcept override { (void)::munmap(addr, length); }
  SysResult<std::size_t> pread(int fd, void* buf, std::size_t count, std::uint64_t offset) override {
    const ssize_t n = retry_eintr([&] { return ::pread(fd, buf, count, static_cast<off_t>(offset)); });
    if (n < 0) return std::unexpected(errno);
    return static_cast<std::size_t>(n);
  }
  SysResult<std::size_t> pwrite(int fd, const void* buf, std::size_t count, std::uint64_t offset) override {
    const ssize_t n = retry_eintr([&] { return ::pwrite(fd, buf, count, static_cast<off_t>(offset)); });
    if (n < 0) return std::unexpected(errno);
    return static_cast<std::size_t>(n);
  }
  SysResult<int> eventfd(unsigned initval, int flags) override {
    const int fd = ::eventfd(initval, flags | EFD_CLOEXEC);
    if (fd < 0) return std::unexpected(errno);
    return fd;
  }
  SysResult<std::string> readlink(const std::string& path) override {
    std::array<char, 4096> buf{};
    const ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
    if (n < 0) return std::unexpected(errno);
    if (static_cast<std::size_t>(n) >= buf.size()) return std::unexpected(ENAMETOOLONG);
    return std::string(buf.data(), static_cast<std::size_t>(n));
  }
  SysResult<std::string> read_file(const std::string& path, std::size_t max_bytes) override {
    const int fd = retry_eintr([&] { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); });
    if (fd < 0) return std::unexpected(errno);
    std::string out;
    std::array<char, 512> buf{};
    while (out.size() < max_bytes) {
      const ssize_t n = retry_eintr([&] { return ::read(fd, buf.data(), buf.size()); });
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        return std::unexpected(err);
      }
      if (n == 0) break;
      out.append(buf.data(), static_cast<std::size_t>(n));
    }
    ::close(fd);
    if (out.size() > max_bytes) out.resize(max_bytes);
    return out;
  }
  SysResult<std::vector<std::string>> list_dir(const std::string& path) override {
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) return std::unexpected(errno);
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    const int err = errno;
    ::closedir(d);
    if (err != 0) return std::unexpected(err);
    return names;
  }
  SysResult<void> access(const std::string& path, int mode) override {
    if (::access(path.c_str(), mode) != 0) return std::unexpected(errno);
    return {};
  }
};

}  // namespace

Sys& real_sys() noexcept {
  static RealSys sys;  // stateless; trivially destructible in practice
  return sys;
}

}  // namespace npo::vfio
