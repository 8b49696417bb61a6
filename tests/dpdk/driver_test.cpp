// SPDX-License-Identifier: Apache-2.0
// dma_npo through the dmadev API, linked statically (npo::dpdk, npo_dpdk_register): what
// DPDK 22.11's dmadev_autotest does not cover -- copy_sg (scatter and gather), addresses
// outside DPDK's memory, fences after a failure, ring full, several vchans, and DPDK's error
// conventions for bad input (docs/dpdk.md "Errors"). One EAL per process: main() starts it
// with two dma_npo devices on the two cards of one emu:2 backend.
#include <rte_bus_vdev.h>
#include <rte_dmadev.h>
#include <rte_eal.h>
#include <rte_malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "device.hpp"  // drivers/dpdk (white box: the status map)
#include "npo/dpdk/dmadev.h"

namespace {

int16_t dev_id(const char* name) { return static_cast<int16_t>(rte_dma_get_dev_id_by_name(name)); }

/// Configures `nb_vchans` vchans of `desc` descriptors and starts the device.
void start(int16_t dev, std::uint16_t nb_vchans = 1, std::uint16_t desc = 64) {
  rte_dma_stop(dev);
  const rte_dma_conf conf{.nb_vchans = nb_vchans, .enable_silent = false};
  ASSERT_EQ(rte_dma_configure(dev, &conf), 0);
  for (std::uint16_t v = 0; v < nb_vchans; ++v) {
    rte_dma_vchan_conf q{};
    q.direction = RTE_DMA_DIR_MEM_TO_MEM;
    q.nb_desc = desc;
    ASSERT_EQ(rte_dma_vchan_setup(dev, v, &q), 0);
  }
  ASSERT_EQ(rte_dma_start(dev), 0);
  rte_dma_stats_reset(dev, RTE_DMA_ALL_VCHAN);
}

/// Waits (bounded) until `n` ops of vchan `v` completed; returns their statuses.
std::vector<rte_dma_status_code> reap(int16_t dev, std::uint16_t v, unsigned n) {
  std::vector<rte_dma_status_code> st;
  for (int i = 0; i < 200000 && st.size() < n; ++i) {
    rte_dma_status_code s[32];
    const auto k = rte_dma_completed_status(dev, v, static_cast<std::uint16_t>(std::min(32u, n - unsigned(st.size()))),
                                            nullptr, s);
    st.insert(st.end(), s, s + k);
    if (k == 0) usleep(10);
  }
  return st;
}

struct Buf {
  explicit Buf(std::size_t n) : p(static_cast<std::uint8_t*>(rte_zmalloc(nullptr, n, 64))), size(n) {}
  ~Buf() { rte_free(p); }
  rte_iova_t iova(std::size_t off = 0) const { return rte_malloc_virt2iova(p) + off; }
  std::uint8_t* p;
  std::size_t size;
};

TEST(DmaNpo, EveryHalOpStatusMapsToADmadevStatus) {
  using npo::OpStatus;
  using npo::dpdk::map_status;
  EXPECT_EQ(map_status(OpStatus::kOk), RTE_DMA_STATUS_SUCCESSFUL);
  // Every other status the HAL defines is a failure with a specific code.
  const OpStatus failures[] = {
      OpStatus::kBadOpcode,     OpStatus::kBadDescriptor, OpStatus::kIommuFault,   OpStatus::kIommuPermission,
      OpStatus::kHbmRange,      OpStatus::kSgError,       OpStatus::kFenceSkipped, OpStatus::kRemoteUnreachable,
      OpStatus::kWindowInvalid, OpStatus::kWindowKey,     OpStatus::kWindowRange,  OpStatus::kWindowRights,
      OpStatus::kWindowRevoked, OpStatus::kEngineError,   OpStatus::kTimeout,      OpStatus::kAborted};
  for (auto s : failures) EXPECT_NE(map_status(s), RTE_DMA_STATUS_SUCCESSFUL) << npo::op_status_name(s);
  EXPECT_EQ(map_status(OpStatus::kIommuFault), RTE_DMA_STATUS_PAGE_FAULT);
  EXPECT_EQ(map_status(OpStatus::kFenceSkipped), RTE_DMA_STATUS_NOT_ATTEMPTED);
  EXPECT_EQ(map_status(OpStatus::kBadOpcode), RTE_DMA_STATUS_INVALID_OPCODE);
  EXPECT_EQ(map_status(OpStatus::kRemoteUnreachable), RTE_DMA_STATUS_DEV_LINK_ERROR);
  EXPECT_EQ(map_status(OpStatus::kAborted), RTE_DMA_STATUS_USER_ABORT);
  EXPECT_EQ(map_status(OpStatus::kEngineError), RTE_DMA_STATUS_BUS_ERROR);
}

TEST(DmaNpo, InfoAdvertisesCopySgFillAndErrors) {
  rte_dma_info info{};
  ASSERT_EQ(rte_dma_info_get(dev_id("dma_npo0"), &info), 0);
  EXPECT_TRUE(info.dev_capa & RTE_DMA_CAPA_MEM_TO_MEM);
  EXPECT_TRUE(info.dev_capa & RTE_DMA_CAPA_OPS_COPY);
  EXPECT_TRUE(info.dev_capa & RTE_DMA_CAPA_OPS_COPY_SG);
  EXPECT_TRUE(info.dev_capa & RTE_DMA_CAPA_OPS_FILL);
  EXPECT_TRUE(info.dev_capa & RTE_DMA_CAPA_HANDLES_ERRORS);
  EXPECT_FALSE(info.dev_capa & RTE_DMA_CAPA_SILENT);
  EXPECT_GE(info.max_vchans, 2);
  EXPECT_GE(info.max_sges, 2);
  EXPECT_GE(info.max_desc, 512);
}

TEST(DmaNpo, CopySgScattersAndGathers) {
  const auto dev = dev_id("dma_npo0");
  start(dev);
  Buf src(4096), dst(4096);
  for (std::size_t i = 0; i < src.size; ++i) src.p[i] = static_cast<std::uint8_t>(i * 7 + 1);
  // Sources 100 + 200 + 300 bytes (not adjacent) -> destinations 250 + 350 bytes.
  rte_dma_sge s[] = {{src.iova(0), 100}, {src.iova(1000), 200}, {src.iova(2000), 300}};
  rte_dma_sge d[] = {{dst.iova(0), 250}, {dst.iova(3000), 350}};
  const int id = rte_dma_copy_sg(dev, 0, s, d, 3, 2, RTE_DMA_OP_FLAG_SUBMIT);
  ASSERT_GE(id, 0);
  const auto st = reap(dev, 0, 1);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0], RTE_DMA_STATUS_SUCCESSFUL);
  std::vector<std::uint8_t> want;
  want.insert(want.end(), src.p, src.p + 100);
  want.insert(want.end(), src.p + 1000, src.p + 1200);
  want.insert(want.end(), src.p + 2000, src.p + 2300);
  EXPECT_EQ(std::memcmp(dst.p, want.data(), 250), 0);
  EXPECT_EQ(std::memcmp(dst.p + 3000, want.data() + 250, 350), 0);
  EXPECT_EQ(dst.p[250], 0);  // nothing written past the first destination entry
  // Unequal totals: -EINVAL, nothing enqueued.
  rte_dma_sge d2[] = {{dst.iova(0), 10}};
  EXPECT_EQ(rte_dma_copy_sg(dev, 0, s, d2, 3, 1, 0), -EINVAL);
}

TEST(DmaNpo, AddressesOutsideDpdkMemoryFailThroughTheCardInOrder) {
  const auto dev = dev_id("dma_npo0");
  start(dev);
  Buf a(256), b(256);
  std::memset(a.p, 0x5a, 256);
  static std::uint8_t not_dpdk[4096];  // .bss: not DPDK memory, never registered with the card
  ASSERT_GE(rte_dma_copy(dev, 0, a.iova(), b.iova(), 64, 0), 0);
  ASSERT_GE(rte_dma_copy(dev, 0, reinterpret_cast<rte_iova_t>(not_dpdk), b.iova(), 64, 0), 0);
  ASSERT_GE(rte_dma_copy(dev, 0, a.iova(), reinterpret_cast<rte_iova_t>(not_dpdk), 64, 0), 0);
  ASSERT_GE(rte_dma_fill(dev, 0, 1, 0, 64, 0), 0);  // IOVA 0
  ASSERT_GE(rte_dma_copy(dev, 0, a.iova(), b.iova(64), 64, RTE_DMA_OP_FLAG_FENCE | RTE_DMA_OP_FLAG_SUBMIT), 0);
  const auto st = reap(dev, 0, 5);
  ASSERT_EQ(st.size(), 5u);
  EXPECT_EQ(st[0], RTE_DMA_STATUS_SUCCESSFUL);
  EXPECT_EQ(st[1], RTE_DMA_STATUS_INVALID_SRC_ADDR);
  EXPECT_EQ(st[2], RTE_DMA_STATUS_INVALID_DST_ADDR);
  EXPECT_EQ(st[3], RTE_DMA_STATUS_INVALID_DST_ADDR);
  EXPECT_EQ(st[4], RTE_DMA_STATUS_SUCCESSFUL);  // fenced after failures: still runs
  EXPECT_EQ(b.p[64], 0x5a);
  for (auto x : not_dpdk) ASSERT_EQ(x, 0);  // the card never touched it
  rte_dma_stats stats{};
  ASSERT_EQ(rte_dma_stats_get(dev, 0, &stats), 0);
  EXPECT_EQ(stats.submitted, 5u);
  EXPECT_EQ(stats.completed, 5u);
  EXPECT_EQ(stats.errors, 3u);
}

TEST(DmaNpo, RingFullIsEnospcAndCapacityCountsDown) {
  const auto dev = dev_id("dma_npo0");
  start(dev, 1, 64);
  Buf a(64), b(64);
  const int cap = rte_dma_burst_capacity(dev, 0);
  ASSERT_EQ(cap, 64);
  for (int i = 0; i < cap; ++i) ASSERT_EQ(rte_dma_copy(dev, 0, a.iova(), b.iova(), 64, 0), i);
  EXPECT_EQ(rte_dma_burst_capacity(dev, 0), 0);
  EXPECT_EQ(rte_dma_copy(dev, 0, a.iova(), b.iova(), 64, 0), -ENOSPC);
  ASSERT_EQ(rte_dma_submit(dev, 0), 0);
  EXPECT_EQ(reap(dev, 0, 64).size(), 64u);
  EXPECT_EQ(rte_dma_burst_capacity(dev, 0), 64);
}

TEST(DmaNpo, TwoVchansAndAllVchanStats) {
  const auto dev = dev_id("dma_npo1");  // card 1 of the same backend
  start(dev, 2, 32);
  Buf a(512), b(512), c(512);
  std::memset(a.p, 0x11, 512);
  ASSERT_EQ(rte_dma_copy(dev, 0, a.iova(), b.iova(), 512, RTE_DMA_OP_FLAG_SUBMIT), 0);
  ASSERT_EQ(rte_dma_fill(dev, 1, 0x2222222222222222ull, c.iova(), 100, RTE_DMA_OP_FLAG_SUBMIT), 0);
  EXPECT_EQ(reap(dev, 0, 1).size(), 1u);
  EXPECT_EQ(reap(dev, 1, 1).size(), 1u);
  EXPECT_EQ(b.p[511], 0x11);
  EXPECT_EQ(c.p[99], 0x22);
  EXPECT_EQ(c.p[100], 0);
  rte_dma_stats s{};
  ASSERT_EQ(rte_dma_stats_get(dev, RTE_DMA_ALL_VCHAN, &s), 0);
  EXPECT_EQ(s.submitted, 2u);
  EXPECT_EQ(s.completed, 2u);
  char* text = nullptr;
  std::size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  ASSERT_EQ(rte_dma_dump(dev, f), 0);
  std::fclose(f);
  const std::string dump(text, len);
  std::free(text);
  EXPECT_NE(dump.find("npo card 1 of backend emu:2"), std::string::npos) << dump;
  EXPECT_NE(dump.find("vchan 1: depth 32"), std::string::npos) << dump;
}

TEST(DmaNpo, BadInputGetsDpdkErrnos) {
  const auto dev = dev_id("dma_npo0");
  rte_dma_info info{};
  ASSERT_EQ(rte_dma_info_get(dev, &info), 0);
  rte_dma_stop(dev);
  // Too many vchans.
  const rte_dma_conf too_many{.nb_vchans = static_cast<std::uint16_t>(info.max_vchans + 1), .enable_silent = false};
  EXPECT_EQ(rte_dma_configure(dev, &too_many), -EINVAL);
  // Silent mode is not offered.
  const rte_dma_conf silent{.nb_vchans = 1, .enable_silent = true};
  EXPECT_EQ(rte_dma_configure(dev, &silent), -EINVAL);
  // Ring sizes outside min..max.
  const rte_dma_conf one{.nb_vchans = 1, .enable_silent = false};
  ASSERT_EQ(rte_dma_configure(dev, &one), 0);
  rte_dma_vchan_conf q{};
  q.direction = RTE_DMA_DIR_MEM_TO_MEM;
  q.nb_desc = static_cast<std::uint16_t>(info.max_desc + 1);
  EXPECT_EQ(rte_dma_vchan_setup(dev, 0, &q), -EINVAL);
  q.direction = RTE_DMA_DIR_MEM_TO_DEV;
  q.nb_desc = 64;
  EXPECT_EQ(rte_dma_vchan_setup(dev, 0, &q), -EINVAL);
  q.direction = RTE_DMA_DIR_MEM_TO_MEM;
  ASSERT_EQ(rte_dma_vchan_setup(dev, 0, &q), 0);
  // Calls on a stopped (configured, never started) device.
  Buf a(64), b(64);
  EXPECT_EQ(rte_dma_copy(dev, 0, a.iova(), b.iova(), 64, 0), -EINVAL);
  EXPECT_EQ(rte_dma_fill(dev, 0, 0, b.iova(), 64, 0), -EINVAL);
  EXPECT_EQ(rte_dma_submit(dev, 0), -EINVAL);
  EXPECT_EQ(rte_dma_burst_capacity(dev, 0), 0);
  ASSERT_EQ(rte_dma_start(dev), 0);
  // Reconfiguring a started device: -EBUSY.
  EXPECT_EQ(rte_dma_configure(dev, &one), -EBUSY);
  // Oversize and zero-length copies.
  EXPECT_EQ(rte_dma_copy(dev, 0, a.iova(), b.iova(), 0, 0), -EINVAL);
  EXPECT_EQ(rte_dma_copy(dev, 0, a.iova(), b.iova(), 0xffffffffu, 0), -EINVAL);
  EXPECT_EQ(rte_dma_fill(dev, 0, 0, b.iova(), 0xffffffffu, 0), -EINVAL);
  // Still works afterwards.
  ASSERT_EQ(rte_dma_copy(dev, 0, a.iova(), b.iova(), 64, RTE_DMA_OP_FLAG_SUBMIT), 0);
  EXPECT_EQ(reap(dev, 0, 1).size(), 1u);
  rte_dma_stop(dev);
  EXPECT_EQ(rte_dma_copy(dev, 0, a.iova(), b.iova(), 64, 0), -EINVAL);
}

TEST(DmaNpo, WrongDevargsAreRejectedWithEinval) {
  EXPECT_EQ(rte_vdev_init("dma_npo7", "card=abc"), -EINVAL);
  EXPECT_EQ(rte_vdev_init("dma_npo7", "bogus=1"), -EINVAL);
  EXPECT_EQ(rte_vdev_init("dma_npo7", "backend=emu:2,card=5"), -EINVAL);
  EXPECT_EQ(rte_vdev_init("dma_npo7", "backend=nonsense"), -EINVAL);
  EXPECT_EQ(rte_vdev_init("dma_npo7", "bring_up=2"), -EINVAL);
  EXPECT_EQ(rte_vdev_init("dma_npo7", "card=1,card=0"), -EINVAL);
  EXPECT_EQ(rte_vdev_init("dma_npo7", "card"), -EINVAL);
  EXPECT_EQ(rte_vdev_init("dma_npo7", "backend="), -EINVAL);
  EXPECT_EQ(rte_vdev_init("dma_npo7", "card=-1"), -EINVAL);
  EXPECT_LT(rte_dma_get_dev_id_by_name("dma_npo7"), 0);  // nothing half-created
  // A good one can be created and removed at run time.
  ASSERT_EQ(rte_vdev_init("dma_npo7", "backend=emu:2,card=1"), 0);
  EXPECT_GE(rte_dma_get_dev_id_by_name("dma_npo7"), 0);
  EXPECT_EQ(rte_vdev_uninit("dma_npo7"), 0);
  EXPECT_LT(rte_dma_get_dev_id_by_name("dma_npo7"), 0);
}

TEST(DmaNpo, BackendUriMayHoldEqualsSigns) {
  // emu:file=PATH: the devarg value keeps everything after the first '='.
  const std::string topo = std::string(NPO_TEST_DATA_DIR) + "/topology/mesh4.yaml";
  const std::string args = "backend=emu:file=" + topo + ",card=3";
  ASSERT_EQ(rte_vdev_init("dma_npo8", args.c_str()), 0);
  const auto dev = dev_id("dma_npo8");
  ASSERT_GE(dev, 0);
  start(dev);
  Buf a(128), b(128);
  std::memset(a.p, 0x33, 128);
  ASSERT_EQ(rte_dma_copy(dev, 0, a.iova(), b.iova(), 128, RTE_DMA_OP_FLAG_SUBMIT), 0);
  const auto st = reap(dev, 0, 1);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0], RTE_DMA_STATUS_SUCCESSFUL);
  EXPECT_EQ(b.p[127], 0x33);
  rte_dma_stop(dev);
  EXPECT_EQ(rte_vdev_uninit("dma_npo8"), 0);
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  npo_dpdk_register();
  const std::string prefix = "npo-drvtest-" + std::to_string(getpid());
  const char* eal[] = {"driver_test",
                       "--no-huge",
                       "-m",
                       "256",
                       "--no-pci",
                       "-l",
                       "0-1",
                       "--no-shconf",
                       "--file-prefix",
                       prefix.c_str(),
                       "--vdev",
                       "dma_npo0,backend=emu:2,card=0",
                       "--vdev",
                       "dma_npo1,backend=emu:2,card=1"};
  if (rte_eal_init(static_cast<int>(std::size(eal)), const_cast<char**>(eal)) < 0) {
    std::fprintf(stderr, "rte_eal_init failed\n");
    return 1;
  }
  const int rc = RUN_ALL_TESTS();
  rte_eal_cleanup();
  return rc;
}
