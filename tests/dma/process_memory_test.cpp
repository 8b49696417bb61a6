// SPDX-License-Identifier: Apache-2.0
// map_process_memory (hal/include/npo/hal/memory.hpp): the process's whole address space
// mapped for a card's DMA without pinning or sharing, on both emulator backends -- in process
// (the engine copies with process_vm_readv/writev on its own pid) and through npo-emud
// (DMA_MAP flag PROCESS_MEMORY, docs/spec/emud-protocol.md §5.2 "Process memory"; the daemon
// copies from and to this test process). What the card reads is what the process has at that
// address when the op runs; an address the process has not mapped faults and crashes nothing.
#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dma_run.hpp"
#include "common/emu_system.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/hal/hal.hpp"
#ifdef NPO_EMUD
#include "common/emud_process.hpp"
#endif

namespace {

using npo::DmaAddress;
using npo::OpStatus;

constexpr std::size_t kLen = 1u << 20;

// One card on the in-process emulator, or card 0 of a private npo-emud (mesh8).
class ProcessMemory : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
#ifdef NPO_EMUD
      ASSERT_TRUE(daemon_.start(NPO_EMUD, "emu:mesh8")) << daemon_.output();
      auto s = npo::System::open(daemon_.uri() + "?card=0");
      ASSERT_TRUE(s) << s.error().to_string();
      sys_ = std::move(*s);
#else
      // Only a build configured without the daemon's target (no CLI11) lacks it; CI builds it.
      GTEST_SKIP() << "npo-emud not built";
#endif
    } else {
      npo::emu::SystemConfig c;
      c.num_cards = 1;
      c.cables.clear();
      c.card.hbm_bytes = 16u << 20;
      emu_ = npo::emu::Emulator::create(c).value();
      sys_ = npo_test::open_system(emu_);
    }
    q_ = dev().open_queue({.engine = 0, .depth = 64}).value();
    hbm_ = npo::allocate_hbm(dev(), 2 * kLen).value();
    check_ = npo::allocate_host_memory(dev(), kLen).value();
  }
  npo::Device& dev() { return sys_->device(0); }
  // Runs `n` enqueued ops; their statuses in order.
  std::vector<OpStatus> run(std::size_t n) {
    std::vector<OpStatus> st;
    for (const auto& c : npo_test::run(*q_, n)) st.push_back(c.status);
    return st;
  }
  // HBM [off, off+len) as the card holds it, through registered memory.
  std::vector<unsigned char> hbm_bytes(std::uint64_t off, std::size_t len) {
    EXPECT_TRUE(q_->enqueue_copy(DmaAddress::hbm(hbm_.offset + off), DmaAddress::host(check_->iova()),
                                 static_cast<std::uint32_t>(len)));
    EXPECT_EQ(run(1), std::vector<OpStatus>{OpStatus::kOk});
    const auto* p = reinterpret_cast<const unsigned char*>(check_->bytes().data());
    return {p, p + len};
  }

#ifdef NPO_EMUD
  npo_test::EmudProcess daemon_;
#endif
  std::shared_ptr<npo::emu::Emulator> emu_;
  std::unique_ptr<npo::System> sys_;
  std::unique_ptr<npo::DmaQueue> q_;
  npo::HbmRange hbm_{};
  std::unique_ptr<npo::MemoryRegion> check_;
};

std::vector<unsigned char> pattern(std::size_t len, unsigned seed) {
  std::vector<unsigned char> v(len);
  for (std::size_t i = 0; i < len; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed) >> 3);
  return v;
}

TEST_P(ProcessMemory, TheCardReadsAnyHeapBufferAsItIsWhenTheOpRuns) {
  const auto before = npo::memory_budget(dev());
  auto map = npo::map_process_memory(dev(), false);
  ASSERT_TRUE(map) << map.error().to_string();
  EXPECT_FALSE((*map)->writable());
  // It pins nothing and takes no IOVA budget (it is not registered memory).
  EXPECT_EQ(npo::memory_budget(dev()).pinned_used, before.pinned_used);
  EXPECT_EQ(npo::memory_budget(dev()).iova_used, before.iova_used);

  auto heap = pattern(kLen + 7, 1);  // a plain heap buffer, read from an odd offset
  const std::uint64_t src = (*map)->iova_of(heap.data() + 3);
  ASSERT_NE(src, 0u);
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::host(src), DmaAddress::hbm(hbm_.offset), kLen));
  ASSERT_EQ(run(1), std::vector<OpStatus>{OpStatus::kOk});
  EXPECT_TRUE(hbm_bytes(0, kLen) == std::vector<unsigned char>(heap.begin() + 3, heap.begin() + 3 + kLen));

  // Not a snapshot: the next op sees what the buffer holds then.
  heap[3] = 0xa5;
  heap[3 + 4095] = 0x5a;
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::host(src), DmaAddress::hbm(hbm_.offset), 4096));
  ASSERT_EQ(run(1), std::vector<OpStatus>{OpStatus::kOk});
  const auto got = hbm_bytes(0, 4096);
  EXPECT_EQ(got[0], 0xa5);
  EXPECT_EQ(got[4095], 0x5a);

  // Addresses outside user space have no IOVA (0 always faults).
  EXPECT_EQ((*map)->iova_of(nullptr), 0u);
  EXPECT_EQ((*map)->iova_of(reinterpret_cast<const void*>(std::uintptr_t{1} << 47)), 0u);
}

TEST_P(ProcessMemory, WritesNeedAWritableMapAndLandInTheBuffer) {
  auto src = pattern(kLen, 9);
  std::memcpy(check_->bytes().data(), src.data(), kLen);
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::host(check_->iova()), DmaAddress::hbm(hbm_.offset), kLen));
  ASSERT_EQ(run(1), std::vector<OpStatus>{OpStatus::kOk});

  std::vector<unsigned char> dst(kLen, 0);
  {
    auto ro = npo::map_process_memory(dev(), false).value();
    ASSERT_TRUE(q_->enqueue_copy(DmaAddress::hbm(hbm_.offset), DmaAddress::host(ro->iova_of(dst.data())), kLen));
    EXPECT_EQ(run(1), std::vector<OpStatus>{OpStatus::kIommuPermission});
    EXPECT_EQ(dst, std::vector<unsigned char>(kLen, 0)) << "a refused write touched the buffer";
  }
  auto rw = npo::map_process_memory(dev(), true);
  ASSERT_TRUE(rw) << rw.error().to_string();
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::hbm(hbm_.offset), DmaAddress::host((*rw)->iova_of(dst.data())), kLen));
  ASSERT_EQ(run(1), std::vector<OpStatus>{OpStatus::kOk});
  EXPECT_TRUE(dst == src);

  // host -> host with both ends in process memory (the engine's bounce buffer), 3 MiB so it
  // takes more than one bounce; and from registered memory into process memory.
  auto a = pattern(3 * kLen, 4);
  std::vector<unsigned char> b(3 * kLen, 0);
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::host((*rw)->iova_of(a.data())), DmaAddress::host((*rw)->iova_of(b.data())),
                               3 * kLen));
  ASSERT_EQ(run(1), std::vector<OpStatus>{OpStatus::kOk});
  EXPECT_TRUE(a == b);
  std::vector<unsigned char> c(kLen, 0);
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::host(check_->iova()), DmaAddress::host((*rw)->iova_of(c.data())), kLen));
  ASSERT_EQ(run(1), std::vector<OpStatus>{OpStatus::kOk});
  EXPECT_TRUE(c == src);
}

TEST_P(ProcessMemory, AnAddressTheProcessHasNotMappedFaultsAndTheCardGoesOn) {
  auto map = npo::map_process_memory(dev(), true).value();
  void* p = ::mmap(nullptr, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 0x11, 3 * 4096);
  auto* bytes = static_cast<unsigned char*>(p);
  ASSERT_EQ(::munmap(bytes + 4096, 4096), 0);  // a hole in the middle
  ASSERT_EQ(::mprotect(bytes + 2 * 4096, 4096, PROT_READ), 0);

  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::host(map->iova_of(bytes)), DmaAddress::hbm(hbm_.offset), 3 * 4096));
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::hbm(hbm_.offset), DmaAddress::host(map->iova_of(bytes + 2 * 4096)), 64));
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::host(map->iova_of(bytes)), DmaAddress::hbm(hbm_.offset + kLen), 4096));
  EXPECT_EQ(run(3), (std::vector<OpStatus>{OpStatus::kIommuFault, OpStatus::kIommuFault, OpStatus::kOk}))
      << "the unmapped page and the write to a read-only page fault; the card goes on";
  EXPECT_EQ(hbm_bytes(kLen, 4096), std::vector<unsigned char>(4096, 0x11));
  EXPECT_EQ(bytes[2 * 4096], 0x11) << "a faulting write changed read-only memory";
  ::munmap(bytes, 4096);
  ::munmap(bytes + 2 * 4096, 4096);
}

TEST_P(ProcessMemory, DestroyingTheMapUnmapsIt) {
  std::vector<unsigned char> heap = pattern(4096, 3);
  std::uint64_t iova = 0;
  {
    auto map = npo::map_process_memory(dev(), false).value();
    iova = map->iova_of(heap.data());
  }
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::host(iova), DmaAddress::hbm(hbm_.offset), 4096));
  EXPECT_EQ(run(1), std::vector<OpStatus>{OpStatus::kIommuFault});
  // and the range can be mapped again
  auto again = npo::map_process_memory(dev(), false);
  EXPECT_TRUE(again) << again.error().to_string();
}

TEST_P(ProcessMemory, AFaultNamesTheFirstIovaTheProcessCouldNotGiveOrTake) {
  // dma.md §3.2: an IOMMU_FAULT completion carries the faulting IOVA -- here the read-only
  // third page of the destination, not the op's source or the start of its range.
  auto map = npo::map_process_memory(dev(), true).value();
  void* m = ::mmap(nullptr, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* p = static_cast<unsigned char*>(m);
  std::memset(p, 0x11, 4 * 4096);
  ASSERT_EQ(::mprotect(p + 2 * 4096, 2 * 4096, PROT_READ), 0);
  const std::uint64_t dst = map->iova_of(p);
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::host(check_->iova()), DmaAddress::host(dst), 4 * 4096));     // host -> host
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::hbm(hbm_.offset), DmaAddress::host(dst), 4 * 4096));         // HBM -> host
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::host(dst + 4096), DmaAddress::host(check_->iova()), 4096));  // fine
  const auto c = npo_test::run(*q_, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].status, OpStatus::kIommuFault);
  EXPECT_EQ(c[0].info, dst + 2 * 4096);
  EXPECT_EQ(c[1].status, OpStatus::kIommuFault);
  EXPECT_EQ(c[1].info, dst + 2 * 4096);
  EXPECT_EQ(c[2].status, OpStatus::kOk);
  ::munmap(m, 4 * 4096);
}

TEST_P(ProcessMemory, EveryCallerSharesTheCardsOneMapOfAKind) {
  // Two domains of one process on a card (Open MPI's mtl and btl) each ask for a map.
  auto a = npo::map_process_memory(dev(), false).value();
  auto b = npo::map_process_memory(dev(), false);
  ASSERT_TRUE(b) << b.error().to_string();
  int x = 0;
  EXPECT_EQ(a->iova_of(&x), (*b)->iova_of(&x)) << "one map, shared";
  auto w = npo::map_process_memory(dev(), true);
  ASSERT_FALSE(w) << "a writable map beside the read-only one does not fit";
  EXPECT_EQ(w.error().code(), npo::Code::kResourceExhausted);
  a.reset();  // b still holds the map: it keeps working
  std::vector<unsigned char> heap = pattern(4096, 8);
  ASSERT_TRUE(q_->enqueue_copy(DmaAddress::host((*b)->iova_of(heap.data())), DmaAddress::hbm(hbm_.offset), 4096));
  EXPECT_EQ(run(1), std::vector<OpStatus>{OpStatus::kOk});
  b->reset();  // the last holder unmaps it; now the writable kind fits
  EXPECT_TRUE(npo::map_process_memory(dev(), true));
}

INSTANTIATE_TEST_SUITE_P(Backends, ProcessMemory, ::testing::Values(false, true),
                         [](const auto& i) { return i.param ? std::string("NpoEmud") : std::string("InProcess"); });

}  // namespace
