// SPDX-License-Identifier: Apache-2.0
// The real Sys: each call reaches libc and returns the errno unchanged.
#include "vfio/sys.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "fake_kernel.hpp"

namespace npo::vfio {
namespace {

/// The errno of a failed call, 0 on success (g++ 12's std::expected has no error_or).
template <typename T>
int err_of(const SysResult<T>& r) {
  return r ? 0 : r.error();
}

TEST(RealSys, FileCallsAndErrnos) {
  test::FakeTree tree;
  Sys& sys = real_sys();
  const std::string path = (tree.dir() / "f").string();
  tree.write("f", "0123456789");

  auto fd = sys.open(path, O_RDWR);
  ASSERT_TRUE(fd.has_value()) << std::strerror(fd.error());
  Fd owned(sys, *fd);
  char buf[4] = {};
  auto n = sys.pread(*fd, buf, sizeof buf, 3);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(*n, 4u);
  EXPECT_EQ(std::string(buf, 4), "3456");
  auto w = sys.pwrite(*fd, "ab", 2, 8);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(*w, 2u);
  auto text = sys.read_file(path, 4096);
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(*text, "01234567ab");
  EXPECT_EQ(sys.read_file(path, 3).value_or(""), "012") << "max_bytes caps the read";

  // A regular file is no VFIO node: ioctl says ENOTTY.
  int v = 0;
  auto io = sys.ioctl(*fd, 0x3b64, &v);
  ASSERT_FALSE(io.has_value());
  EXPECT_EQ(io.error(), ENOTTY);
  auto ioi = sys.ioctl_int(*fd, 0x3b65, 3);
  ASSERT_FALSE(ioi.has_value());
  EXPECT_EQ(ioi.error(), ENOTTY);

  // mmap of the file is shared with the file.
  ASSERT_EQ(::ftruncate(*fd, 4096), 0);
  auto p = sys.mmap(4096, PROT_READ | PROT_WRITE, *fd, 0);
  ASSERT_TRUE(p.has_value()) << std::strerror(p.error());
  static_cast<char*>(*p)[0] = 'Z';
  sys.munmap(*p, 4096);
  EXPECT_EQ(sys.read_file(path, 1).value_or(""), "Z");

  auto badmap = sys.mmap(4096, PROT_READ | PROT_WRITE, *fd, 100);
  ASSERT_FALSE(badmap.has_value());
  EXPECT_EQ(badmap.error(), EINVAL) << "unaligned offset";

  auto missing = sys.open((tree.dir() / "nope").string(), O_RDONLY);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error(), ENOENT);
  EXPECT_EQ(err_of(sys.access((tree.dir() / "nope").string(), F_OK)), ENOENT);
  EXPECT_TRUE(sys.access(path, R_OK | W_OK).has_value());
  EXPECT_EQ(err_of(sys.read_file((tree.dir() / "nope").string(), 16)), ENOENT);
  EXPECT_EQ(err_of(sys.list_dir((tree.dir() / "nope").string())), ENOENT);
  EXPECT_EQ(err_of(sys.readlink(path)), EINVAL) << "not a link";
}

TEST(RealSys, LinksDirectoriesEventfd) {
  test::FakeTree tree;
  Sys& sys = real_sys();
  tree.link("a/link", "../target/x");
  tree.write("a/file", "");
  EXPECT_EQ(sys.readlink((tree.dir() / "a/link").string()).value_or(""), "../target/x");
  auto names = sys.list_dir((tree.dir() / "a").string());
  ASSERT_TRUE(names.has_value());
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"file", "link"}));

  auto efd = sys.eventfd(0, 0);
  ASSERT_TRUE(efd.has_value());
  Fd owned(sys, *efd);
  EXPECT_GE(::fcntl(*efd, F_GETFD) & FD_CLOEXEC, 1) << "CLOEXEC added";
  std::uint64_t one = 1, got = 0;
  ASSERT_EQ(::write(*efd, &one, sizeof one), 8);
  ASSERT_EQ(::read(*efd, &got, sizeof got), 8);
  EXPECT_EQ(got, 1u);
}

TEST(RealSys, FdClosesOnceAndMoves) {
  Sys& sys = real_sys();
  auto efd = sys.eventfd(0, 0);
  ASSERT_TRUE(efd.has_value());
  const int raw = *efd;
  {
    Fd a(sys, raw);
    Fd b(std::move(a));
    EXPECT_EQ(a.get(), -1);
    EXPECT_EQ(b.get(), raw);
    Fd c;
    c = std::move(b);
    EXPECT_TRUE(static_cast<bool>(c));
  }
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1) << "closed by the last owner";
}

}  // namespace
}  // namespace npo::vfio
