// SPDX-License-Identifier: Apache-2.0
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/dma_run.hpp"
#include "npo/hal/hal.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using npo::Code;
using npo::DmaAddress;
using npo::OpCompletion;
using npo::OpStatus;

using npo_test::run;

struct Mesh {
  std::unique_ptr<npo::System> sys;
  explicit Mesh(const char* uri = "emu:mesh8?hbm=4M") {
    sys = std::move(npo::System::open(uri).value());
    auto up = npo::bring_up_links(*sys, 5'000'000'000ULL);
    EXPECT_TRUE(up.has_value());
    if (up) {
      EXPECT_EQ(up->failed, 0u);
    }
  }
};

TEST(Window, GenerationsStartAtRandomSoAnotherOpenDoesNotReissueThem) {
  // registers.md §6.4: the host chooses generations. Each open of a card starts every entry's
  // at a random non-zero value, so the process that opens a card next does not hand out the
  // (window, generation) pairs of the one before, which peers may still hold or key state by
  // (the provider's per-peer sequence, docs/libfabric.md). Eight opens of the same card: the
  // first window's generation is never 0 and not always the same (all equal: p = 65535^-7).
  std::vector<std::uint16_t> gens;
  for (int i = 0; i < 8; ++i) {
    auto sys = npo::System::open("emu:2?hbm=4M");
    ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
    auto w = npo::export_window((*sys)->device(0), 0, 4096);
    ASSERT_TRUE(w.has_value()) << w.error().to_string();
    EXPECT_EQ((*w)->handle().window_id, 0u);
    EXPECT_NE((*w)->handle().generation, 0u);
    gens.push_back((*w)->handle().generation);
    // within one open a revoked slot's next window takes the next generation
    const std::uint16_t g = (*w)->handle().generation;
    w->reset();
    auto again = npo::export_window((*sys)->device(0), 0, 4096);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ((*again)->handle().window_id, 0u);
    EXPECT_NE((*again)->handle().generation, g);
  }
  EXPECT_GT(std::set<std::uint16_t>(gens.begin(), gens.end()).size(), 1u);
}

TEST(Window, HandleSerialisesAndImports) {
  Mesh m("emu:2?hbm=4M");
  auto& dev = m.sys->device(1);
  auto w = npo::export_window(dev, 8192, 16384, {.read = true, .write = false}).value();
  const auto& h = w->handle();
  EXPECT_EQ(h.fabric_id, 2u);
  EXPECT_EQ(h.offset, 8192u);
  EXPECT_EQ(h.size, 16384u);
  EXPECT_NE(h.key, 0u);
  const auto bytes = h.serialize();
  auto back = npo::import_window(*m.sys, bytes);
  ASSERT_TRUE(back.has_value()) << back.error().to_string();
  EXPECT_EQ(back->fabric_id, h.fabric_id);
  EXPECT_EQ(back->window_id, h.window_id);
  EXPECT_EQ(back->generation, h.generation);
  EXPECT_EQ(back->key, h.key);
  EXPECT_TRUE(back->rights.read);
  EXPECT_FALSE(back->rights.write);
  auto bad = bytes;
  bad[30] ^= std::byte{1};
  EXPECT_EQ(npo::import_window(*m.sys, bad).error().code(), Code::kDataLoss);
  EXPECT_EQ(npo::import_window(*m.sys, std::span(bytes).first(39)).error().code(), Code::kInvalidArgument);
  npo::WindowHandle stranger = h;
  stranger.fabric_id = 77;
  EXPECT_EQ(npo::import_window(*m.sys, stranger.serialize()).error().code(), Code::kNotFound);
  EXPECT_EQ(npo::export_window(dev, 100, 4096).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(npo::export_window(dev, 0, 0).error().code(), Code::kInvalidArgument);
  EXPECT_EQ(npo::export_window(dev, 0, 8u << 20).error().code(), Code::kOutOfRange);
}

TEST(Window, CpuMappingSeesDmaAndAperturBudget) {
  Mesh m("emu:1?hbm=4M");
  auto& dev = m.sys->device(0);
  auto w = npo::export_window(dev, 1u << 20, 1u << 20).value();
  auto map = npo::map_window(dev, *w).value();
  ASSERT_EQ(map->bytes().size(), 1u << 20);
  const std::string msg = "written through the BAR2 aperture";
  ASSERT_TRUE(map->write(100, std::as_bytes(std::span(msg.data(), msg.size()))));
  EXPECT_EQ(map->write((1u << 20) - 2, std::as_bytes(std::span(msg.data(), msg.size()))).error().code(),
            Code::kOutOfRange);
  // DMA from HBM (window offset 100 = HBM 1 MiB + 100) to host sees the CPU write.
  auto q = dev.open_queue({.depth = 16}).value();
  auto host = npo::allocate_host_memory(dev, 4096).value();
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::hbm((1u << 20) + 100), DmaAddress::host(host->iova()), msg.size()));
  ASSERT_EQ(run(*q, 1).at(0).status, OpStatus::kOk);
  EXPECT_EQ(std::memcmp(host->bytes().data(), msg.data(), msg.size()), 0);
  // ... and a DMA write shows through the mapping.
  std::memset(host->bytes().data(), 0x3c, 64);
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::host(host->iova()), DmaAddress::hbm((1u << 20) + 512), 64));
  ASSERT_EQ(run(*q, 1).at(0).status, OpStatus::kOk);
  std::array<std::byte, 64> rd{};
  ASSERT_TRUE(map->read(512, rd));
  for (auto b : rd) ASSERT_EQ(b, std::byte{0x3c});
  // Aperture budget: BAR2 is 4 MiB; 1 MiB is mapped; a 4 MiB window no longer fits.
  auto big = npo::export_window(dev, 0, 4u << 20).value();
  auto over = npo::map_window(dev, *big);
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.error().code(), Code::kResourceExhausted);
  EXPECT_NE(over.error().message().find("BAR aperture budget"), std::string::npos);
  EXPECT_EQ(npo::window_budget(dev).aperture_used, 1u << 20);
  map.reset();
  EXPECT_EQ(npo::window_budget(dev).aperture_used, 0u);
  EXPECT_TRUE(npo::map_window(dev, *big).has_value());
}

TEST(Window, RemoteWriteAndReadBetweenEveryPairOfMesh8) {
  Mesh m;
  const std::size_t n = m.sys->device_count();
  ASSERT_EQ(n, 8u);
  constexpr std::size_t kLen = 64u << 10;
  std::vector<std::unique_ptr<npo::Window>> wins;
  std::vector<std::unique_ptr<npo::WindowMapping>> maps;
  for (std::size_t j = 0; j < n; ++j) {
    // Each card exports 8 x 64 KiB: slot i receives card i's data.
    wins.push_back(npo::export_window(m.sys->device(j), 0, n * kLen).value());
    maps.push_back(npo::map_window(m.sys->device(j), *wins.back()).value());
  }
  for (std::size_t i = 0; i < n; ++i) {
    auto& src = m.sys->device(i);
    auto q = src.open_queue({.engine = 1, .depth = 64}).value();
    auto out = npo::allocate_host_memory(src, kLen).value();
    auto back = npo::allocate_host_memory(src, kLen).value();
    std::vector<std::unique_ptr<npo::MemoryRegion>> keep;
    for (std::size_t j = 0; j < n; ++j) {
      std::mt19937 rng(static_cast<unsigned>(i * 8 + j));
      for (auto& b : out->bytes()) b = static_cast<std::byte>(rng());
      const auto& h = wins[j]->handle();
      ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(out->iova()), h, i * kLen, kLen));
      ASSERT_TRUE(q->enqueue_remote_read(h, i * kLen, DmaAddress::host(back->iova()), kLen));
      const auto c = run(*q, 2);
      ASSERT_EQ(c.size(), 2u);
      ASSERT_EQ(c[0].status, OpStatus::kOk) << i << "->" << j << " " << npo::op_status_name(c[0].status);
      ASSERT_EQ(c[1].status, OpStatus::kOk) << i << "<-" << j << " " << npo::op_status_name(c[1].status);
      ASSERT_EQ(std::memcmp(back->bytes().data(), out->bytes().data(), kLen), 0) << i << "<->" << j;
      ASSERT_EQ(std::memcmp(maps[j]->bytes().data() + i * kLen, out->bytes().data(), kLen), 0) << i << "->" << j;
    }
  }
}

TEST(Window, CardEnforcesKeyRangeRightsGenerationAndReachability) {
  Mesh m("emu:mesh8?hbm=4M");
  auto& a = m.sys->device(0);
  auto& b = m.sys->device(1);
  auto q = a.open_queue({.depth = 32}).value();
  auto host = npo::allocate_host_memory(a, 1u << 20).value();
  std::memset(host->bytes().data(), 0x77, 1u << 20);
  auto w = npo::export_window(b, 0, 64u << 10).value();
  auto ro = npo::export_window(b, 64u << 10, 64u << 10, {.read = true, .write = false}).value();
  auto wo = npo::export_window(b, 128u << 10, 64u << 10, {.read = false, .write = true}).value();
  auto map = npo::map_window(b, *npo::export_window(b, 0, 256u << 10).value()).value();
  std::memset(map->bytes().data(), 0, 256u << 10);

  auto wrong_key = w->handle();
  wrong_key.key ^= 1;
  auto past = w->handle();
  auto not_exported = w->handle();
  not_exported.window_id = 1000;
  ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(host->iova()), wrong_key, 0, 4096));
  ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(host->iova()), past, (64u << 10) - 100, 4096));
  ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(host->iova()), ro->handle(), 0, 4096));
  ASSERT_TRUE(q->enqueue_remote_read(wo->handle(), 0, DmaAddress::host(host->iova()), 4096));
  ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(host->iova()), not_exported, 0, 4096));
  auto c = run(*q, 5);
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[0].status, OpStatus::kWindowKey);
  EXPECT_EQ(c[1].status, OpStatus::kWindowRange);
  EXPECT_EQ(c[2].status, OpStatus::kWindowRights);
  EXPECT_EQ(c[3].status, OpStatus::kWindowRights);
  EXPECT_EQ(c[4].status, OpStatus::kWindowInvalid);
  EXPECT_EQ(host->bytes()[0], std::byte{0x77});  // the denied read moved nothing
  // Revoked: a stale handle is refused even after the slot is reused.
  const auto stale = w->handle();
  ASSERT_TRUE(w->revoke());
  EXPECT_TRUE(w->revoked());
  auto reused = npo::export_window(b, 0, 64u << 10).value();
  ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(host->iova()), stale, 0, 4096));
  c = run(*q, 1);
  EXPECT_EQ(c.at(0).status, OpStatus::kWindowRevoked);
  for (std::size_t i = 0; i < (256u << 10); ++i) ASSERT_EQ(map->bytes()[i], std::byte{0}) << "byte " << i << " moved";
  // Unreachable: the link to card 1 goes down.
  for (unsigned p = 0; p < a.port_count(); ++p) ASSERT_TRUE(npo::enable_port(a, p, false));
  ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::host(host->iova()), reused->handle(), 0, 4096));
  c = run(*q, 1);
  EXPECT_EQ(c.at(0).status, OpStatus::kRemoteUnreachable);
  EXPECT_EQ(c.at(0).info, 2u);  // the fabric ID it could not reach
}

TEST(Window, RevokeDuringInflightDmaStopsWritesCleanly) {
  Mesh m("emu:mesh8?hbm=160M");
  auto& a = m.sys->device(2);
  auto& b = m.sys->device(5);
  auto q = a.open_queue({.depth = 16}).value();
  constexpr std::size_t kLen = 64u << 20;
  auto src = npo::allocate_hbm(a, kLen).value();
  ASSERT_TRUE(q->enqueue_fill(DmaAddress::hbm(src.offset), 0x1111111111111111ULL, kLen));
  ASSERT_EQ(run(*q, 1).at(0).status, OpStatus::kOk);
  auto w = npo::export_window(b, 0, kLen).value();
  auto map = npo::map_window(b, *npo::export_window(b, 0, kLen).value()).value();
  int revoked_mid_flight = 0;
  for (int attempt = 0; attempt < 5 && revoked_mid_flight == 0; ++attempt) {
    std::memset(map->bytes().data(), 0, kLen);
    ASSERT_TRUE(q->enqueue_remote_write(DmaAddress::hbm(src.offset), w->handle(), 0, kLen));
    ASSERT_TRUE(q->submit());
    std::this_thread::sleep_for(std::chrono::microseconds(200 * attempt));
    ASSERT_TRUE(w->revoke());
    // After revoke() returns nothing may change any more.
    std::vector<std::byte> snap(map->bytes().begin(), map->bytes().end());
    const auto c = run(*q, 1);
    ASSERT_EQ(c.size(), 1u);
    std::this_thread::sleep_for(20ms);
    ASSERT_EQ(std::memcmp(snap.data(), map->bytes().data(), kLen), 0) << "memory changed after revoke returned";
    if (c[0].status == OpStatus::kWindowRevoked) {
      ++revoked_mid_flight;
      // What landed is a prefix of whole chunks of the right data, nothing else.
      std::size_t k = 0;
      while (k < kLen && map->bytes()[k] == std::byte{0x11}) ++k;
      for (std::size_t i = k; i < kLen; ++i) ASSERT_EQ(map->bytes()[i], std::byte{0}) << i;
    } else {
      ASSERT_EQ(c[0].status, OpStatus::kOk);  // finished before the revoke
    }
    w = npo::export_window(b, 0, kLen).value();
  }
  EXPECT_GT(revoked_mid_flight, 0) << "no attempt revoked the window while the copy was in flight";
}

TEST(Window, TranslationTableBudget) {
  Mesh m("emu:1?hbm=8M");
  auto& dev = m.sys->device(0);
  std::vector<std::unique_ptr<npo::Window>> ws;
  for (int i = 0; i < 1024; ++i) {
    auto w = npo::export_window(dev, 0, 4096);
    ASSERT_TRUE(w.has_value()) << i << ": " << w.error().to_string();
    ws.push_back(std::move(*w));
  }
  auto full = npo::export_window(dev, 0, 4096);
  ASSERT_FALSE(full.has_value());
  EXPECT_EQ(full.error().code(), Code::kResourceExhausted);
  EXPECT_NE(full.error().message().find("window translation table"), std::string::npos);
  EXPECT_EQ(npo::window_budget(dev).slots_used, 1024u);
  const std::uint16_t old_generation = ws[500]->handle().generation;
  ws.erase(ws.begin() + 500);  // destroying revokes and frees the slot
  auto again = npo::export_window(dev, 0, 4096);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ((*again)->handle().window_id, 500u);
  EXPECT_NE((*again)->handle().generation, old_generation);  // a new generation for the reused slot
  EXPECT_NE((*again)->handle().generation, 0u);
}

TEST(Window, SharedWithAnotherProcessThroughScmRights) {
  Mesh m("emu:1?hbm=4M");
  auto& dev = m.sys->device(0);
  auto w = npo::export_window(dev, 1u << 20, 64u << 10).value();
  auto map = npo::map_window(dev, *w).value();
  const std::string marker = "exporter-was-here";
  ASSERT_TRUE(map->write(0, std::as_bytes(std::span(marker.data(), marker.size()))));
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  const std::string fd = std::to_string(sv[1]);
  const char* argv[] = {NPO_WINDOW_PEER, fd.c_str(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, NPO_WINDOW_PEER, nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  ::close(sv[1]);
  ASSERT_TRUE(npo::send_window(sv[0], dev, *w));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ::close(sv[0]);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  const std::string reply = "peer-process-was-here";
  EXPECT_EQ(std::memcmp(map->bytes().data() + 4096, reply.data(), reply.size()), 0);
  // The other process's write is in HBM: visible to DMA too.
  auto q = dev.open_queue({.depth = 4}).value();
  auto host = npo::allocate_host_memory(dev, 4096).value();
  ASSERT_TRUE(q->enqueue_copy(DmaAddress::hbm((1u << 20) + 4096), DmaAddress::host(host->iova()), reply.size()));
  ASSERT_EQ(run(*q, 1).at(0).status, OpStatus::kOk);
  EXPECT_EQ(std::memcmp(host->bytes().data(), reply.data(), reply.size()), 0);
}

}  // namespace
