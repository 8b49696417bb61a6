// SPDX-License-Identifier: Apache-2.0
// Transceiver firmware through CMIS CDB (npo/hal/module_firmware.hpp, docs/spec/cdb.md) on
// the emulated module, virtual clock: the update A -> B with commit, a bad image refused at
// Complete, a power cut at every CDB state, no collateral damage on the links, one CDB user
// per port, and a module stuck busy. White box (emulator/src): the power-cut and stuck-busy
// hooks of the emulated module.
#include "npo/fw/cdb.hpp"

#include <cerrno>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "card.hpp"
#include "npo/hal/link_monitor.hpp"
#include "npo/hal/module_firmware.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/transceiver.hpp"
#include "optics/optics_emu_rig.hpp"
#include "port.hpp"

namespace {

using optics_test::EmuRig;
namespace emu = npo::emu;
namespace cdb = npo::fw::cdb;

constexpr std::uint64_t kMs = 1'000'000;

/// Two cards, ports 0 and 1 of card 0 cabled to ports 0 and 1 of card 1.
emu::SystemConfig two_cards() {
  auto c = emu::parse_uri("2?clock=virtual&hbm=1M&ports=2");
  EXPECT_TRUE(c.has_value());
  c->cables.push_back({.card_a = 0, .port_a = 0, .card_b = 1, .port_b = 0, .channel = {}});
  c->cables.push_back({.card_a = 0, .port_a = 1, .card_b = 1, .port_b = 1, .channel = {}});
  return *c;
}

std::vector<std::byte> make_image(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  std::uint32_t x = 0x9e3779b9u * (seed + 1);
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return v;
}

emu::Port& module_of(EmuRig& rig, std::uint32_t card, unsigned port) { return rig.emu->card(card).ports()[port]; }

struct Update {
  std::vector<std::byte> image;
  std::array<std::byte, cdb::emu_header::kSize> header{};
};
Update new_image(std::size_t n = 3000) {
  Update u;
  u.image = make_image(n, 7);
  u.header = cdb::emu_header::make(u.image, 2, 1, 7);
  return u;
}

void bring_up(EmuRig& rig) {
  auto up = npo::bring_up_links(*rig.sys, 10'000 * kMs);
  ASSERT_TRUE(up.has_value()) << up.error().to_string();
  ASSERT_EQ(up->failed, 0u);
}

TEST(ModuleFirmware, QueryShowsImageARunningAndCommitted) {
  EmuRig rig(two_cards());
  ASSERT_TRUE(rig.ok());
  auto info = npo::query_module_firmware(rig.sys->device(0), 0);
  ASSERT_TRUE(info.has_value()) << info.error().to_string();
  EXPECT_EQ(info->running, 0u);
  EXPECT_EQ(info->committed, 0u);
  EXPECT_TRUE(info->images[0].valid && info->images[0].running && info->images[0].committed);
  EXPECT_EQ(info->images[0].major, 1);
  EXPECT_EQ(info->images[0].build, 100);
  EXPECT_EQ(info->images[0].extra, "emu-1.0.100");
  EXPECT_TRUE(info->images[1].valid);
  EXPECT_FALSE(info->images[1].running || info->images[1].committed);
  auto f = npo::query_module_firmware_features(rig.sys->device(0), 0);
  ASSERT_TRUE(f.has_value()) << f.error().to_string();
  EXPECT_EQ(f->header_bytes, cdb::emu_header::kSize);
  EXPECT_EQ(f->block_bytes, 116u);
  EXPECT_TRUE(f->lpl_write);
  EXPECT_TRUE(f->epl_write);
  EXPECT_EQ(f->epl_block_bytes, 2048u);
  EXPECT_TRUE(f->hitless_run);
  EXPECT_EQ(f->start_timeout_ns, 200 * kMs);
  EXPECT_EQ(f->write_timeout_ns, 20 * kMs);
  EXPECT_EQ(f->complete_timeout_ns, 500 * kMs);
  // No module: NOT_FOUND.
  EmuRig bare("1?clock=virtual&hbm=1M&ports=1");
  ASSERT_TRUE(bare.ok());
  auto none = npo::query_module_firmware(bare.sys->device(0), 0);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code(), npo::Code::kNotFound);
}

TEST(ModuleFirmware, FullUpdateAToBWithCommit) {
  EmuRig rig(two_cards());
  ASSERT_TRUE(rig.ok());
  bring_up(rig);
  auto& dev = rig.sys->device(0);
  const auto u = new_image(3000);
  std::vector<npo::ModuleUpdateProgress> seen;
  npo::ModuleUpdateOptions o;
  o.progress = [&seen](const npo::ModuleUpdateProgress& p) { seen.push_back(p); };
  auto r = npo::update_module_firmware(dev, 0, u.header, u.image, o);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ(r->blocks, (3000u + 115u) / 116u);
  EXPECT_TRUE(r->hitless);
  EXPECT_EQ(r->before.running, 0u);
  EXPECT_EQ(r->after.running, 1u);
  EXPECT_EQ(r->after.committed, 1u);
  EXPECT_TRUE(r->after.images[1].valid);
  EXPECT_EQ(r->after.images[1].major, 2);
  EXPECT_EQ(r->after.images[1].minor, 1);
  EXPECT_EQ(r->after.images[1].build, 7);
  EXPECT_TRUE(r->after.images[0].valid);  // the old image stays as the fallback
  EXPECT_GT(r->elapsed_ns, 0u);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().step, npo::ModuleUpdateStep::kStart);
  EXPECT_EQ(seen.back().step, npo::ModuleUpdateStep::kDone);
  std::size_t writes = 0, last = 0;
  for (const auto& p : seen) {
    EXPECT_EQ(p.total_bytes, 3000u);
    EXPECT_GE(p.bytes_written, last);
    last = p.bytes_written;
    if (p.step == npo::ModuleUpdateStep::kWrite) ++writes;
  }
  EXPECT_EQ(writes, r->blocks);
  EXPECT_EQ(last, 3000u);
  // Lower memory 39/40 now report the running image, page 01h 128/129 the other one.
  std::array<std::byte, 2> active{}, inactive{};
  ASSERT_TRUE(npo::read_transceiver(dev, 0, 0, 0x01, 39, active).has_value());
  ASSERT_TRUE(npo::read_transceiver(dev, 0, 0, 0x01, 128, inactive).has_value());
  EXPECT_EQ(std::to_integer<int>(active[0]), 2);
  EXPECT_EQ(std::to_integer<int>(active[1]), 1);
  EXPECT_EQ(std::to_integer<int>(inactive[0]), 1);
  // Committed: a power cut boots B.
  module_of(rig, 0, 0).module_power_cut();
  rig.advance_ms(100);
  auto again = npo::query_module_firmware(dev, 0);
  ASSERT_TRUE(again.has_value()) << again.error().to_string();
  EXPECT_EQ(again->running, 1u);
  EXPECT_EQ(again->running_image().build, 7);
}

TEST(ModuleFirmware, BadImageIsRefusedAtCompleteAndTheRunningImageStays) {
  EmuRig rig(two_cards());
  ASSERT_TRUE(rig.ok());
  bring_up(rig);
  auto& dev = rig.sys->device(0);
  auto u = new_image(1000);
  u.image[517] ^= std::byte{0x10};  // one bit off: the header's CRC-32C no longer matches
  auto r = npo::update_module_firmware(dev, 0, u.header, u.image);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), npo::Code::kDataLoss) << r.error().to_string();
  EXPECT_NE(r.error().message().find("0107h"), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().message().find("0x71"), std::string::npos) << r.error().message();
  EXPECT_EQ(r.error().context().value, std::uint64_t{cdb::kFailedImageCheck});
  EXPECT_EQ(r.error().context().port, 0u);
  auto info = npo::query_module_firmware(dev, 0);
  ASSERT_TRUE(info.has_value()) << info.error().to_string();
  EXPECT_EQ(info->running, 0u);
  EXPECT_EQ(info->committed, 0u);
  EXPECT_TRUE(info->images[0].valid);
  EXPECT_FALSE(info->images[1].valid);  // erased at Start, never validated
  // A short image (bytes never written) cannot be built by the HAL; a wrong header size is refused.
  std::array<std::byte, 4> short_header{};
  auto h = npo::update_module_firmware(dev, 0, short_header, u.image);
  ASSERT_FALSE(h.has_value());
  EXPECT_EQ(h.error().code(), npo::Code::kInvalidArgument);
  auto ps = npo::read_port(dev, 0);
  ASSERT_TRUE(ps.has_value());
  EXPECT_EQ(ps->state, npo::LinkState::kUp);
}

// A power cut right after every CDB event of a full update (each command captured = busy,
// each command finished = done, every block included): after power-up the module always
// runs a valid image, the committed one: A until Commit has finished, B afterwards.
void power_cut_at_every_cdb_event(std::size_t bytes, bool epl, unsigned blocks) {
  const auto u = new_image(bytes);
  npo::ModuleUpdateOptions o;
  o.epl = epl;
  std::uint64_t total = 0;
  {
    EmuRig dry(two_cards());
    ASSERT_TRUE(dry.ok());
    auto r = npo::update_module_firmware(dry.sys->device(0), 0, u.header, u.image, o);
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    ASSERT_EQ(r->blocks, blocks);
    ASSERT_EQ(r->used_epl, epl);
    total = module_of(dry, 0, 0).cdb_events();
  }
  // 0041h, 0100h, Start, the blocks, Complete, Run, 0100h, Commit, 0100h: two events each.
  ASSERT_EQ(total, 2u * (8u + blocks));
  const std::uint64_t commit_done = total - 2;
  unsigned failed_updates = 0;
  for (std::uint64_t k = 1; k <= total; ++k) {
    SCOPED_TRACE("power cut after CDB event " + std::to_string(k));
    EmuRig rig(two_cards());
    ASSERT_TRUE(rig.ok());
    bring_up(rig);
    auto& dev = rig.sys->device(0);
    module_of(rig, 0, 0).arm_power_cut_after_events(k);
    auto r = npo::update_module_firmware(dev, 0, u.header, u.image, o);
    if (!r) {
      ++failed_updates;
      const auto c = r.error().code();
      EXPECT_TRUE(c == npo::Code::kAborted || c == npo::Code::kFailedPrecondition) << r.error().to_string();
    }
    rig.advance_ms(200);  // the module powers up again
    const auto fw = module_of(rig, 0, 0).module_firmware();
    const unsigned want = k >= commit_done ? 1u : 0u;
    EXPECT_EQ(fw.running, want);
    EXPECT_TRUE(fw.bank[fw.running].valid);
    EXPECT_EQ(fw.committed, want);
    EXPECT_FALSE(fw.downloading);
    auto info = npo::query_module_firmware(dev, 0);
    ASSERT_TRUE(info.has_value()) << info.error().to_string();
    EXPECT_EQ(info->running, want);
    EXPECT_TRUE(info->running_image().valid);
    EXPECT_EQ(info->running_image().build, want == 1 ? 7 : 100);
    // Image B holds the new image only once Complete has checked it.
    const bool b_new = info->images[1].valid && info->images[1].build == 7;
    if (k >= total - 8) {
      EXPECT_TRUE(b_new);  // cut at or after Complete finished
    } else if (k <= 5) {
      EXPECT_TRUE(info->images[1].valid && info->images[1].build == 90);  // before Start finished
    } else {
      EXPECT_FALSE(info->images[1].valid);  // erased at Start, not yet checked
    }
  }
  EXPECT_GE(failed_updates, total - 1);  // only a cut after the very last event can go unnoticed
}

TEST(ModuleFirmware, PowerCutAtEveryCdbStateBootsAValidImage) { power_cut_at_every_cdb_event(1000, false, 9); }

// The same through Write Firmware Block EPL (0104h): 2 KiB blocks through pages A0h..AFh.
TEST(ModuleFirmware, PowerCutAtEveryCdbStateOfAnEplUpdateBootsAValidImage) {
  power_cut_at_every_cdb_event(5000, true, 3);
}

TEST(ModuleFirmware, EplUpdateAToBWritesTwoKibBlocks) {
  EmuRig rig(two_cards());
  ASSERT_TRUE(rig.ok());
  bring_up(rig);
  auto& dev = rig.sys->device(0);
  const auto u = new_image(5000);
  npo::ModuleUpdateOptions o;
  o.epl = true;
  auto r = npo::update_module_firmware(dev, 0, u.header, u.image, o);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_TRUE(r->used_epl);
  EXPECT_EQ(r->blocks, 3u);
  EXPECT_EQ(r->after.running, 1u);
  EXPECT_EQ(r->after.committed, 1u);
  EXPECT_EQ(r->after.images[1].build, 7);
  // A corrupt EPL image is refused at Complete like an LPL one.
  auto bad = new_image(5000);
  bad.image[4097] ^= std::byte{1};
  auto f = npo::update_module_firmware(dev, 0, bad.header, bad.image, o);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().context().value, std::uint64_t{cdb::kFailedImageCheck}) << f.error().to_string();
  auto info = npo::query_module_firmware(dev, 0);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->running, 1u);         // B runs on
  EXPECT_FALSE(info->images[0].valid);  // A was the inactive bank: erased, not validated
  auto ps = npo::read_port(dev, 0);
  ASSERT_TRUE(ps.has_value());
  EXPECT_EQ(ps->state, npo::LinkState::kUp);
}

// During a module download and a hitless Run + Commit on card 0 port 0, no port of the
// system changes state, train count, flap count, up count, events or uncorrectable codewords.
TEST(ModuleFirmware, NoCollateralDamageDuringAnUpdate) {
  EmuRig rig("mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(rig.ok());
  bring_up(rig);
  rig.advance_ms(20);
  struct Seen {
    npo::LinkState state;
    std::uint32_t trains, flaps, ups;
    npo::PortEvents events;
    std::uint64_t uncorrectable, codewords;
  };
  auto take = [&rig]() {
    std::vector<Seen> v;
    for (std::uint32_t c = 0; c < 8; ++c) {
      for (unsigned p = 0; p < 8; ++p) {
        auto ps = npo::read_port(rig.sys->device(c), p);
        EXPECT_TRUE(ps.has_value());
        if (!ps) return v;
        Seen s{ps->state, ps->train_count, ps->flap_count, ps->up_count, ps->events, 0, 0};
        for (const auto& l : ps->lanes) {
          s.uncorrectable += l.uncorrectable;
          s.codewords += l.codewords;
        }
        v.push_back(s);
      }
    }
    return v;
  };
  const auto before = take();
  ASSERT_EQ(before.size(), 64u);
  auto& dev = rig.sys->device(0);
  const auto u = new_image(4000);
  unsigned checks = 0;
  npo::ModuleUpdateOptions o;
  o.progress = [&](const npo::ModuleUpdateProgress&) {
    auto ps = npo::read_port(dev, 0);
    ASSERT_TRUE(ps.has_value());
    EXPECT_EQ(ps->state, npo::LinkState::kUp);
    EXPECT_EQ(ps->train_count, before[0].trains);
    ++checks;
  };
  const std::uint64_t t0 = rig.sys->clock().now_ns();
  auto r = npo::update_module_firmware(dev, 0, u.header, u.image, o);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_TRUE(r->hitless);
  EXPECT_GT(rig.sys->clock().now_ns() - t0, 200 * kMs);  // the update took emulated time
  EXPECT_GT(checks, r->blocks);
  const auto after = take();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    SCOPED_TRACE("card " + std::to_string(i / 8) + " port " + std::to_string(i % 8));
    EXPECT_EQ(after[i].state, before[i].state);
    EXPECT_EQ(after[i].trains, before[i].trains);
    EXPECT_EQ(after[i].flaps, before[i].flaps);
    EXPECT_EQ(after[i].ups, before[i].ups);
    EXPECT_EQ(after[i].events, before[i].events);
    EXPECT_EQ(after[i].uncorrectable, before[i].uncorrectable);
    if (before[i].state == npo::LinkState::kUp) {
      EXPECT_GT(after[i].codewords, before[i].codewords);  // traffic flowed
    }
  }
  npo::LinkMonitor mon(*rig.sys);
  auto snap = mon.snapshot();
  ASSERT_TRUE(snap.has_value()) << snap.error().to_string();
  for (const auto& c : snap->cards) {
    for (std::size_t p = 0; p < 7; ++p) EXPECT_EQ(c.health[p].state, npo::PortState::kHealthy) << c.health[p].reason;
  }
}

// One CDB user per port: a second update (or a query) on the port being updated gets EBUSY at
// once, from another thread; another port of the same card answers meanwhile.
TEST(ModuleFirmware, ASecondUpdateOnTheSamePortGetsEbusy) {
  EmuRig rig(two_cards());
  ASSERT_TRUE(rig.ok());
  auto& dev = rig.sys->device(0);
  const auto u = new_image(1000);
  bool tried = false;
  npo::ModuleUpdateOptions o;
  o.progress = [&](const npo::ModuleUpdateProgress& p) {
    if (tried || p.step != npo::ModuleUpdateStep::kWrite) return;
    tried = true;
    std::thread other([&] {
      auto second = npo::update_module_firmware(dev, 0, u.header, u.image);
      ASSERT_FALSE(second.has_value());
      EXPECT_EQ(second.error().code(), npo::Code::kUnavailable);
      EXPECT_EQ(second.error().sys_errno(), EBUSY);
      auto q = npo::query_module_firmware(dev, 0);
      ASSERT_FALSE(q.has_value());
      EXPECT_EQ(q.error().sys_errno(), EBUSY);
      auto other_port = npo::query_module_firmware(dev, 1);
      EXPECT_TRUE(other_port.has_value()) << other_port.error().to_string();
    });
    other.join();
  };
  auto r = npo::update_module_firmware(dev, 0, u.header, u.image, o);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_TRUE(tried);
  EXPECT_EQ(r->after.running, 1u);
  // Released: the port answers again.
  EXPECT_TRUE(npo::query_module_firmware(dev, 0).has_value());
}

// A module whose firmware hangs (CdbStatus stays "busy executing"): the call fails with a
// timeout naming the command and the status, after the command's bounded wait.
TEST(ModuleFirmware, StuckBusyModuleTimesOutWithinTheBoundedWait) {
  EmuRig rig(two_cards());
  ASSERT_TRUE(rig.ok());
  auto& dev = rig.sys->device(0);
  auto clock = rig.sys->clock();
  const auto u = new_image(1000);
  // Stuck at the first command (0041h: no advertised maximum, the 1 s default).
  module_of(rig, 0, 0).set_cdb_stuck(true);
  std::uint64_t t0 = clock.now_ns();
  auto r = npo::update_module_firmware(dev, 0, u.header, u.image);
  std::uint64_t took = clock.now_ns() - t0;
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), npo::Code::kDeadlineExceeded) << r.error().to_string();
  EXPECT_NE(r.error().message().find("0041h"), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().message().find("0x83"), std::string::npos) << r.error().message();
  EXPECT_EQ(r.error().context().value, std::uint64_t{cdb::kBusyExecuting});
  EXPECT_GE(took, npo::kCdbDefaultTimeoutNs);
  EXPECT_LE(took, npo::kCdbDefaultTimeoutNs + 5 * kMs);
  // While it is still busy, the next call says so at once instead of writing over the command.
  module_of(rig, 0, 0).set_cdb_stuck(false);
  auto busy = npo::query_module_firmware(dev, 0);
  ASSERT_FALSE(busy.has_value());
  EXPECT_EQ(busy.error().code(), npo::Code::kUnavailable) << busy.error().to_string();
  // A power cycle recovers it; then it hangs in Start: the wait is 0041h's MaxDurationStart.
  module_of(rig, 0, 0).module_power_cut();
  rig.advance_ms(50);
  npo::ModuleUpdateOptions o;
  o.progress = [&](const npo::ModuleUpdateProgress& p) {
    if (p.step == npo::ModuleUpdateStep::kStart) {
      module_of(rig, 0, 0).set_cdb_stuck(true);
      t0 = clock.now_ns();
    }
  };
  r = npo::update_module_firmware(dev, 0, u.header, u.image, o);
  took = clock.now_ns() - t0;
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), npo::Code::kDeadlineExceeded) << r.error().to_string();
  EXPECT_NE(r.error().message().find("0101h (Start Firmware Download)"), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().message().find("200 ms"), std::string::npos) << r.error().message();
  EXPECT_GE(took, 200 * kMs);
  EXPECT_LE(took, 205 * kMs);
  module_of(rig, 0, 0).module_power_cut();
  rig.advance_ms(50);
  auto info = npo::query_module_firmware(dev, 0);
  ASSERT_TRUE(info.has_value()) << info.error().to_string();
  EXPECT_EQ(info->running, 0u);
}

// The CDB framing itself, byte by byte: a wrong CdbChkCode fails 45h, an unknown command 41h,
// page 9Fh refuses writes while busy; the complete flag latches in lower byte 8 bit 6.
TEST(ModuleFirmware, RawCdbFramingCheckCodeUnknownCommandBusyAndFlag) {
  EmuRig rig(two_cards());
  ASSERT_TRUE(rig.ok());
  auto& dev = rig.sys->device(0);
  auto status = [&] {
    std::array<std::byte, 1> b{};
    EXPECT_TRUE(npo::read_transceiver(dev, 0, 0, cdb::kPage, cdb::kLowerStatus, b).has_value());
    return std::to_integer<unsigned>(b[0]);
  };
  auto send = [&](std::array<std::uint8_t, 8> h) {
    return npo::write_transceiver(dev, 0, 0, cdb::kPage, cdb::kCmdId, std::as_bytes(std::span(h)));
  };
  std::array<std::byte, 1> flags{};
  ASSERT_TRUE(npo::read_transceiver(dev, 0, 0, 0, cdb::kLowerFlags, flags).has_value());  // clear the latches
  EXPECT_EQ(status(), cdb::kIdle);
  ASSERT_TRUE(send({0x00, 0x41, 0, 0, 0, 0x00, 0, 0}).has_value());  // check code should be BEh
  EXPECT_EQ(status(), cdb::kBusyCapturing);
  rig.advance_ms(1);
  EXPECT_EQ(status(), cdb::kFailedCheckCode);
  ASSERT_TRUE(npo::read_transceiver(dev, 0, 0, 0, cdb::kLowerFlags, flags).has_value());
  EXPECT_EQ(std::to_integer<unsigned>(flags[0]) & cdb::kFlagCdbComplete1, cdb::kFlagCdbComplete1);
  ASSERT_TRUE(npo::read_transceiver(dev, 0, 0, 0, cdb::kLowerFlags, flags).has_value());
  EXPECT_EQ(std::to_integer<unsigned>(flags[0]) & cdb::kFlagCdbComplete1, 0u);  // clear on read
  // While a command runs, page 9Fh belongs to the module: a write gets mailbox BUSY, which
  // the mailbox client retries (mailbox.md §2.5, 10 ms apart on the platform clock), so the
  // second command is taken only after the first has finished.
  auto& m = module_of(rig, 0, 0);
  const std::uint64_t ev0 = m.cdb_events();
  ASSERT_TRUE(send({0x00, 0x41, 0, 0, 0, 0xbe, 0, 0}).has_value());
  EXPECT_EQ(status(), cdb::kBusyCapturing);
  ASSERT_TRUE(send({0x00, 0x41, 0, 0, 0, 0xbe, 0, 0}).has_value());  // retried until the first finished
  EXPECT_EQ(m.cdb_events(), ev0 + 3);
  rig.advance_ms(5);
  EXPECT_EQ(m.cdb_events(), ev0 + 4);
  EXPECT_EQ(status(), cdb::kSuccess);
  std::array<std::byte, 1> rpl_len{};
  ASSERT_TRUE(npo::read_transceiver(dev, 0, 0, cdb::kPage, cdb::kRplLength, rpl_len).has_value());
  EXPECT_EQ(std::to_integer<unsigned>(rpl_len[0]), cdb::features::kSize);
  ASSERT_TRUE(send({0x0f, 0x0f, 0, 0, 0, static_cast<std::uint8_t>(~0x1e), 0, 0}).has_value());
  rig.advance_ms(5);
  EXPECT_EQ(status(), cdb::kFailedUnknownCmd);
  // CdbStatus is the module's: the host cannot write it.
  std::array<std::byte, 1> zero{};
  auto ro = npo::write_transceiver(dev, 0, 0, 0, cdb::kLowerStatus, zero);
  ASSERT_FALSE(ro.has_value());
  EXPECT_EQ(ro.error().code(), npo::Code::kPermissionDenied);
}

}  // namespace
