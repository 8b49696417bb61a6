// SPDX-License-Identifier: Apache-2.0
// The card enforces partitions (registers.md §3.8, dma.md §3.2): a remote op from a card in
// another partition completes PARTITION_DENIED and moves 0 bytes, whatever key it holds; the
// host cannot change its own card's partition through BAR0; moving a card changes what it
// reaches from its next op on.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "card.hpp"
#include "common/dma_run.hpp"
#include "common/emu_system.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/hal.hpp"

namespace {

using npo::DmaAddress;
using npo::OpStatus;
using npo_test::run;

struct Mesh {
  std::shared_ptr<npo::emu::Emulator> emu;
  std::unique_ptr<npo::System> sys;
  Mesh() {
    emu = npo::emu::Emulator::create(npo::emu::parse_uri("mesh8?hbm=4M").value()).value();
    sys = npo_test::open_system(emu);
    auto up = npo::bring_up_links(*sys, 5'000'000'000ULL);
    EXPECT_TRUE(up.has_value());
    if (up) {
      EXPECT_EQ(up->failed, 0u);
    }
  }
};

bool all_zero(std::span<const std::byte> b) {
  for (auto x : b)
    if (x != std::byte{0}) return false;
  return true;
}

TEST(Partition, TheTargetCardRefusesAnotherPartitionAndMovesNothing) {
  Mesh m;
  // Job A: cards 0-3 in partition 7; job B: cards 4-7 in partition 9.
  for (unsigned c = 0; c < 8; ++c) ASSERT_TRUE(m.emu->set_partition(c, c < 4 ? 7 : 9));
  for (unsigned c = 0; c < 8; ++c) EXPECT_EQ(m.sys->device(c).partition().value(), c < 4 ? 7u : 9u);
  auto& a = m.sys->device(0);
  auto& peer = m.sys->device(1);      // same partition
  auto& stranger = m.sys->device(5);  // the other partition
  auto q = a.open_queue({.depth = 32}).value();
  auto host = npo::allocate_host_memory(a, 64u << 10).value();
  std::memset(host->bytes().data(), 0x5a, 64u << 10);
  auto w_peer = npo::export_window(peer, 0, 64u << 10).value();
  auto w_str = npo::export_window(stranger, 0, 64u << 10).value();
  auto map_str = npo::map_window(stranger, *w_str).value();
  auto map_peer = npo::map_window(peer, *w_peer).value();
  std::memset(map_str->bytes().data(), 0, 64u << 10);
  std::memset(map_peer->bytes().data(), 0, 64u << 10);

  // The right key, offset and rights: only the partition differs.
  ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(host->iova()), w_str->handle(), 0, 4096));
  ASSERT_TRUE(q->enqueue_remote_read(w_str->handle(), 0, DmaAddress::host(host->iova() + 8192), 4096));
  ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(host->iova()), w_peer->handle(), 0, 4096));
  auto c = run(*q, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].status, OpStatus::kPartitionDenied);
  EXPECT_EQ(c[0].info, stranger.info().fabric_id);
  EXPECT_EQ(c[1].status, OpStatus::kPartitionDenied);
  EXPECT_EQ(c[2].status, OpStatus::kOk) << "inside the partition nothing changes";
  EXPECT_EQ(npo::op_status_name(c[0].status), "partition_denied");
  EXPECT_TRUE(all_zero(map_str->bytes())) << "the denied write moved bytes";
  EXPECT_EQ(host->bytes()[8192], std::byte{0x5a}) << "the denied read moved bytes";
  EXPECT_EQ(map_peer->bytes()[0], std::byte{0x5a});

  // The stranger cannot reach job A either, and the host cannot move its card by BAR0.
  auto qs = stranger.open_queue({.depth = 8}).value();
  auto hs = npo::allocate_host_memory(stranger, 4096).value();
  ASSERT_TRUE(qs->enqueue_remote_write(DmaAddress::host(hs->iova()), w_peer->handle(), 0, 4096));
  EXPECT_EQ(run(*qs, 1).at(0).status, OpStatus::kPartitionDenied);

  // Fabric management moves card 5 into partition 7: from its next op on it reaches job A
  // and job A reaches it.
  ASSERT_TRUE(m.emu->set_partition(5, 7));
  EXPECT_EQ(stranger.partition().value(), 7u);
  ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(host->iova()), w_str->handle(), 0, 4096));
  EXPECT_EQ(run(*q, 1).at(0).status, OpStatus::kOk);
  EXPECT_EQ(map_str->bytes()[0], std::byte{0x5a});
  bool logged = false;
  for (const auto& l : m.emu->event_log())
    logged = logged || l.find("partition card=5 id=7 was=9") != std::string::npos;
  EXPECT_TRUE(logged);
  EXPECT_FALSE(m.emu->set_partition(8, 1).has_value()) << "no card 8";
}

TEST(Partition, BarZeroWritesCannotChangeIt) {
  Mesh m;
  ASSERT_TRUE(m.emu->set_partition(2, 3));
  // A raw BAR0 write to GLOBAL.PARTITION, as a host without the library would try.
  auto& card = m.emu->card(2);
  card.bar0_write(npo::fw::regs::global::kPartition, 32, 0);
  EXPECT_EQ(m.sys->device(2).partition().value(), 3u) << "GLOBAL.PARTITION is read-only to the host";
  EXPECT_EQ(m.emu->partition(2).value(), 3u);
}

}  // namespace
