// SPDX-License-Identifier: Apache-2.0
// Signed card firmware update (docs/firmware.md, docs/spec/firmware-image.md, mailbox.md §5) on
// the emulator: every refusal leaves the card's flash untouched, a good update goes A -> B and
// is committed, an image that fails to boot rolls back by itself, and a power cut at every chunk
// and every state of an update always leaves a valid image booting.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "card.hpp"
#include "card/access.hpp"
#include "card/mailbox.hpp"
#include "common/emu_system.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/fw/image.hpp"
#include "npo/hal/device.hpp"
#include "npo/hal/firmware.hpp"
#include "npo/hal/system.hpp"

namespace {

using npo::Code;
using npo::FirmwareUpdateStage;
using npo::FirmwareVersion;
using npo::emu::FirmwareFlash;

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

npo::FirmwareSecretKey dev_secret() {
  const auto b = read_file(std::string(NPO_TEST_DATA_DIR) + "/firmware/dev-key.sec");
  npo::FirmwareSecretKey k{};
  EXPECT_EQ(b.size(), k.size());
  std::copy_n(b.begin(), std::min(b.size(), k.size()), k.begin());
  return k;
}

std::vector<std::byte> payload(std::size_t n, std::string_view tag = "") {
  std::vector<std::byte> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
  for (std::size_t i = 0; i < tag.size() && i < n; ++i) p[64 + i] = static_cast<std::byte>(tag[i]);
  return p;
}

std::vector<std::byte> make_image(std::string_view version, std::uint32_t security, std::size_t n = 3000,
                                  std::string_view tag = "", const npo::FirmwareSecretKey* key = nullptr,
                                  npo::FirmwareImageSpec spec = {}) {
  spec.version = FirmwareVersion::parse(version).value();
  spec.security_version = security;
  auto img = npo::sign_firmware_image(payload(n, tag), key ? *key : dev_secret(), spec);
  EXPECT_TRUE(img.has_value()) << (img ? "" : img.error().to_string());
  return img ? *img : std::vector<std::byte>{};
}

struct Rig {
  std::shared_ptr<npo::emu::Emulator> emu;
  std::unique_ptr<npo::System> sys;
  Rig() {
    npo::emu::SystemConfig c;
    c.num_cards = 1;
    c.cables.clear();
    c.card.hbm_bytes = 4u << 20;
    c.card.firmware_version = "1.2.0";
    c.clock = npo::emu::ClockMode::kVirtual;
    emu = npo::emu::Emulator::create(c).value();
    sys = npo_test::open_system(emu);
  }
  npo::Device& dev() { return sys->device(0); }
  FirmwareFlash& flash() { return emu->card(0).firmware().flash(); }
};

void expect_same_flash(const FirmwareFlash::Snapshot& a, const FirmwareFlash::Snapshot& b) {
  for (unsigned s = 0; s < 2; ++s) {
    SCOPED_TRACE(testing::Message() << "slot " << s);
    EXPECT_EQ(a.slots[s].bytes, b.slots[s].bytes);
    EXPECT_EQ(a.slots[s].version, b.slots[s].version);
    EXPECT_EQ(a.slots[s].security_version, b.slots[s].security_version);
    EXPECT_EQ(a.slots[s].valid, b.slots[s].valid);
  }
  EXPECT_EQ(a.committed, b.committed);
  EXPECT_EQ(a.active, b.active);
  EXPECT_EQ(a.security_version, b.security_version);
  EXPECT_EQ(a.state, b.state);
}

TEST(FirmwareImage, SignInspectRoundTrip) {
  const auto img = make_image("1.3.0", 2);
  ASSERT_FALSE(img.empty());
  const npo::FirmwarePublicKey pub = [] {
    npo::FirmwarePublicKey k{};
    const auto s = dev_secret();
    std::copy_n(s.begin() + 32, 32, k.begin());
    return k;
  }();
  auto info = npo::inspect_firmware_image(img, &pub);
  ASSERT_TRUE(info.has_value()) << info.error().to_string();
  EXPECT_EQ(info->version, (FirmwareVersion{1, 3, 0}));
  EXPECT_EQ(info->security_version, 2u);
  EXPECT_EQ(info->model, "NPO-REF-1");
  EXPECT_EQ(info->payload_bytes, 3000u);
  EXPECT_TRUE(info->signature_checked);
  EXPECT_EQ(info->signer_key, pub);
  EXPECT_EQ(npo::emu::kDevelopmentFirmwareKey, pub) << "the emulator trusts tests/data/firmware/dev-key.pub";
  // BLAKE2b digests verify too.
  npo::FirmwareImageSpec spec;
  spec.digest = npo::FirmwareDigest::kBlake2b512;
  const auto b2 = make_image("1.3.0", 2, 100, "", nullptr, spec);
  auto i2 = npo::inspect_firmware_image(b2, &pub);
  ASSERT_TRUE(i2.has_value()) << i2.error().to_string();
  EXPECT_EQ(i2->digest, npo::FirmwareDigest::kBlake2b512);
}

TEST(FirmwareImage, VersionParse) {
  EXPECT_EQ(FirmwareVersion::parse("1.2.3").value(), (FirmwareVersion{1, 2, 3}));
  for (const char* bad : {"", "1", "1.2", "1.2.3.4", "1.256.0", "a.b.c", "1..2", "-1.2.3"}) {
    EXPECT_FALSE(FirmwareVersion::parse(bad).has_value()) << bad;
  }
}

/// Every refusal of firmware-image.md §4, each with its own error, before anything is written.
TEST(FirmwareUpdate, RefusalsLeaveTheFlashUnchanged) {
  Rig rig;
  ASSERT_NE(rig.sys, nullptr);
  // Raise the card's security version to 2 with a good update first, so "lower" can be tested.
  ASSERT_TRUE(npo::update_firmware(rig.dev(), make_image("1.4.0", 2)).has_value());
  const auto before = rig.flash().snapshot();
  ASSERT_EQ(before.security_version, 2u);

  const auto good = make_image("1.5.0", 2);
  std::vector<std::byte> tampered = good;
  tampered[npo::fw::image::hdr::kFwVersion] ^= std::byte{1};  // header changed after signing
  std::vector<std::byte> corrupt = good;
  corrupt[npo::fw::image::hdr::kSize + 10] ^= std::byte{0xff};  // payload changed
  std::vector<std::byte> bad_magic = good;
  bad_magic[0] = std::byte{'X'};
  std::vector<std::byte> bad_version = good;
  bad_version[npo::fw::image::hdr::kFormatVersion] = std::byte{9};
  const std::vector<std::byte> truncated(good.begin(), good.end() - 1);
  const std::vector<std::byte> short_header(good.begin(), good.begin() + 100);
  std::vector<std::byte> oversized(npo::kMaxFirmwareImageBytes + 1);
  std::copy(good.begin(), good.begin() + npo::fw::image::hdr::kSize, oversized.begin());
  std::vector<std::byte> trailing = good;
  trailing.push_back(std::byte{0});
  const auto other_key = npo::generate_firmware_key().value();
  npo::FirmwareImageSpec wrong_dev;
  wrong_dev.device_id = 0x1234;
  npo::FirmwareImageSpec wrong_model;
  wrong_model.model = "NPO-OTHER";

  struct Case {
    const char* name;
    std::vector<std::byte> image;
    Code code;
    const char* says;
  };
  const std::vector<Case> cases{
      {"bad signature", tampered, Code::kPermissionDenied, "(bad_signature)"},
      {"unknown key", make_image("1.5.0", 2, 3000, "", &other_key.secret_key), Code::kPermissionDenied,
       "(unknown_key)"},
      {"wrong device", make_image("1.5.0", 2, 3000, "", nullptr, wrong_dev), Code::kFailedPrecondition,
       "(wrong_device)"},
      {"wrong model", make_image("1.5.0", 2, 3000, "", nullptr, wrong_model), Code::kFailedPrecondition,
       "(wrong_device)"},
      {"older version", make_image("1.3.9", 2), Code::kFailedPrecondition, "(older_version)"},
      {"lower security version", make_image("1.6.0", 1), Code::kFailedPrecondition, "(security_version_low)"},
      {"truncated payload", truncated, Code::kInvalidArgument, "(truncated)"},
      {"truncated header", short_header, Code::kInvalidArgument, "(truncated)"},
      {"oversized", oversized, Code::kOutOfRange, "(oversized)"},
      {"corrupt payload", corrupt, Code::kDataLoss, "(digest_mismatch)"},
      {"bad magic", bad_magic, Code::kInvalidArgument, "(bad_magic)"},
      {"bad format version", bad_version, Code::kInvalidArgument, "(bad_format_version)"},
      {"trailing bytes", trailing, Code::kInvalidArgument, "(trailing_bytes)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    bool wrote = false;
    auto r = npo::update_firmware(rig.dev(), c.image, {}, [&](FirmwareUpdateStage st, std::uint64_t, std::uint64_t) {
      if (st != FirmwareUpdateStage::kChecked) wrote = true;
    });
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code(), c.code) << r.error().to_string();
    EXPECT_NE(r.error().message().find(c.says), std::string::npos) << r.error().to_string();
    EXPECT_FALSE(wrote);
    expect_same_flash(before, rig.flash().snapshot());
  }
  // A downgrade is possible on request, never below the security version.
  npo::FirmwareUpdateOptions o;
  o.allow_downgrade = true;
  auto down = npo::update_firmware(rig.dev(), make_image("1.3.9", 2), o);
  ASSERT_TRUE(down.has_value()) << down.error().to_string();
  EXPECT_EQ(rig.dev().firmware_versions().value().firmware, "1.3.9");
}

/// The card checks again itself: an image the host would refuse, written raw, fails FINISH and
/// the slot stays invalid (mailbox.md §5.5).
TEST(FirmwareUpdate, CardRefusesAtFinishWhateverTheHost) {
  Rig rig;
  ASSERT_NE(rig.sys, nullptr);
  std::array<std::byte, 32> other{};
  other[0] = std::byte{1};
  rig.flash().set_trusted_key(other);  // the card trusts another key than the host checks below
  auto st = npo::firmware_status(rig.dev());
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->trusted_key, other);
  auto r = npo::update_firmware(rig.dev(), make_image("1.3.0", 1));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kPermissionDenied);
  EXPECT_NE(r.error().message().find("unknown_key"), std::string::npos) << r.error().to_string();
  EXPECT_FALSE(rig.flash().snapshot().slots[1].valid);
}

TEST(FirmwareUpdate, GoodUpdateGoesAToBAndCommits) {
  Rig rig;
  ASSERT_NE(rig.sys, nullptr);
  auto st0 = npo::firmware_status(rig.dev());
  ASSERT_TRUE(st0.has_value()) << st0.error().to_string();
  EXPECT_EQ(st0->active, 0u);
  EXPECT_EQ(st0->committed, 0u);
  EXPECT_TRUE(st0->slots[0].valid);
  EXPECT_FALSE(st0->slots[1].valid);
  EXPECT_EQ(st0->slots[0].version, (FirmwareVersion{1, 2, 0}));
  EXPECT_EQ(st0->security_version, 1u);
  EXPECT_EQ(st0->state, npo::FirmwareUpdateState::kIdle);

  const auto img = make_image("1.3.0", 3, 5000);
  std::vector<FirmwareUpdateStage> stages;
  std::uint64_t last_done = 0;
  auto r =
      npo::update_firmware(rig.dev(), img, {}, [&](FirmwareUpdateStage s, std::uint64_t done, std::uint64_t total) {
        EXPECT_EQ(total, img.size());
        EXPECT_GE(done, last_done);
        last_done = done;
        if (stages.empty() || stages.back() != s) stages.push_back(s);
      });
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_EQ(r->slot, 1u);
  EXPECT_EQ(r->from, (FirmwareVersion{1, 2, 0}));
  EXPECT_EQ(r->to, (FirmwareVersion{1, 3, 0}));
  EXPECT_EQ(r->security_version, 3u);
  EXPECT_TRUE(r->committed);
  using S = FirmwareUpdateStage;
  EXPECT_EQ(stages, (std::vector<S>{S::kChecked, S::kBegun, S::kWriting, S::kVerified, S::kActivated, S::kReady,
                                    S::kCommitted}));
  const auto snap = rig.flash().snapshot();
  EXPECT_EQ(snap.slots[1].bytes, img);
  EXPECT_EQ(snap.active, 1u);
  EXPECT_EQ(snap.committed, 1u);
  EXPECT_EQ(snap.security_version, 3u);
  EXPECT_EQ(rig.dev().firmware_versions().value().firmware, "1.3.0");
  // Committed: a power cut keeps it.
  rig.emu->card(0).power_cycle();
  EXPECT_EQ(rig.flash().snapshot().active, 1u);
  EXPECT_EQ(rig.dev().firmware_versions().value().firmware, "1.3.0");
  // The next update goes B -> A.
  auto r2 = npo::update_firmware(rig.dev(), make_image("1.4.0", 3));
  ASSERT_TRUE(r2.has_value()) << r2.error().to_string();
  EXPECT_EQ(r2->slot, 0u);
  EXPECT_EQ(rig.flash().snapshot().committed, 0u);
}

TEST(FirmwareUpdate, ImageThatFailsToBootRollsBack) {
  Rig rig;
  ASSERT_NE(rig.sys, nullptr);
  const auto img = make_image("1.3.0", 2, 3000, "NPO-EMU:BOOT-FAIL");
  auto r = npo::update_firmware(rig.dev(), img);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kAborted) << r.error().to_string();
  EXPECT_NE(r.error().message().find("rolled back to slot A"), std::string::npos) << r.error().to_string();
  auto st = npo::firmware_status(rig.dev());
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->active, 0u);
  EXPECT_EQ(st->committed, 0u);
  EXPECT_TRUE(st->rolled_back);
  EXPECT_EQ(st->security_version, 1u) << "a rolled-back image does not raise the counter";
  EXPECT_EQ(rig.dev().firmware_versions().value().firmware, "1.2.0");
}

TEST(FirmwareUpdate, TrialWithoutCommitRollsBackOnResetOrExplicitly) {
  Rig rig;
  ASSERT_NE(rig.sys, nullptr);
  npo::FirmwareUpdateOptions o;
  o.commit = false;
  auto r = npo::update_firmware(rig.dev(), make_image("1.3.0", 2), o);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_FALSE(r->committed);
  auto st = npo::firmware_status(rig.dev()).value();
  EXPECT_EQ(st.state, npo::FirmwareUpdateState::kTrial);
  EXPECT_EQ(st.active, 1u);
  // Another update is refused while one is on trial.
  auto again = npo::update_firmware(rig.dev(), make_image("1.3.1", 2));
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code(), Code::kFailedPrecondition);
  // Explicit rollback.
  auto rb = npo::rollback_firmware(rig.dev());
  ASSERT_TRUE(rb.has_value());
  EXPECT_EQ(rb->active, 0u);
  EXPECT_EQ(rb->state, npo::FirmwareUpdateState::kIdle);
  // On trial again: a card reset returns to the committed slot (mailbox.md §5.1).
  ASSERT_TRUE(npo::update_firmware(rig.dev(), make_image("1.3.0", 2), o).has_value());
  ASSERT_TRUE(rig.dev().reset().has_value());
  st = npo::firmware_status(rig.dev()).value();
  EXPECT_EQ(st.active, 0u);
  EXPECT_TRUE(st.rolled_back);
  EXPECT_EQ(rig.dev().firmware_versions().value().firmware, "1.2.0");
  // Trial again, then commit explicitly.
  ASSERT_TRUE(npo::update_firmware(rig.dev(), make_image("1.3.0", 2), o).has_value());
  auto c = npo::commit_firmware(rig.dev());
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  EXPECT_EQ(c->committed, 1u);
  EXPECT_EQ(c->security_version, 2u);
  auto c2 = npo::commit_firmware(rig.dev());
  ASSERT_FALSE(c2.has_value());
  EXPECT_EQ(c2.error().code(), Code::kFailedPrecondition);
}

TEST(FirmwareUpdate, RefusedWithOpenQueuesUnlessForced) {
  Rig rig;
  ASSERT_NE(rig.sys, nullptr);
  auto q = rig.dev().open_queue({});
  ASSERT_TRUE(q.has_value()) << q.error().to_string();
  auto r = npo::update_firmware(rig.dev(), make_image("1.3.0", 2));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kFailedPrecondition);
  EXPECT_NE(r.error().message().find("open DMA queue"), std::string::npos);
  EXPECT_FALSE(rig.flash().snapshot().slots[1].valid);
  npo::FirmwareUpdateOptions o;
  o.force = true;
  EXPECT_TRUE(npo::update_firmware(rig.dev(), make_image("1.3.0", 2), o).has_value());
}

/// The card's state machine itself (mailbox.md §5), command by command: each out-of-place
/// command is refused with its status and changes nothing.
TEST(FirmwareUpdate, CardStateMachineRefusesOutOfPlaceCommands) {
  namespace mb = npo::fw::mbox;
  namespace fwu = mb::fwu;
  Rig rig;
  ASSERT_NE(rig.sys, nullptr);
  auto& mbox = *npo::card::access(rig.dev()).mailbox;
  const auto call = [&](mb::Command c, std::vector<std::byte> p = {}) { return mbox.call(c, p); };
  const auto begin = [](std::uint64_t total, std::uint8_t slot) {
    std::vector<std::byte> b(fwu::kBeginReqSize);
    npo::fw::store_le<std::uint64_t>(b.data(), fwu::kBeginTotal, total);
    npo::fw::store_le<std::uint8_t>(b.data(), fwu::kBeginSlot, slot);
    return b;
  };
  const auto write = [](std::uint32_t off, std::span<const std::byte> data) {
    std::vector<std::byte> b(fwu::kWriteHdrSize);
    npo::fw::store_le<std::uint32_t>(b.data(), fwu::kWriteOffset, off);
    npo::fw::store_le<std::uint16_t>(b.data(), fwu::kWriteLength, static_cast<std::uint16_t>(data.size()));
    b.insert(b.end(), data.begin(), data.end());
    return b;
  };
  const auto img = make_image("1.3.0", 2, 600);
  const auto code = [](const auto& r) { return r ? Code::kOk : r.error().code(); };
  EXPECT_EQ(code(call(mb::Command::kFwWrite, write(0, std::span(img).first(16)))), Code::kFailedPrecondition);
  EXPECT_EQ(code(call(mb::Command::kFwFinish)), Code::kFailedPrecondition);
  EXPECT_EQ(code(call(mb::Command::kFwActivate)), Code::kFailedPrecondition);
  EXPECT_EQ(code(call(mb::Command::kFwCommit)), Code::kFailedPrecondition);
  EXPECT_EQ(code(call(mb::Command::kFwBegin, begin(img.size(), 0))), Code::kInvalidArgument) << "slot A is running";
  EXPECT_EQ(code(call(mb::Command::kFwBegin, begin(100, 1))), Code::kInvalidArgument) << "smaller than a header";
  EXPECT_EQ(code(call(mb::Command::kFwBegin, begin(npo::kMaxFirmwareImageBytes + 1, 1))), Code::kInvalidArgument);
  const auto before = rig.flash().snapshot();
  expect_same_flash(before, rig.flash().snapshot());
  ASSERT_EQ(code(call(mb::Command::kFwBegin, begin(img.size(), 0xff))), Code::kOk);
  EXPECT_EQ(code(call(mb::Command::kFwWrite, write(16, std::span(img).subspan(16, 16)))), Code::kInvalidArgument)
      << "out of order";
  std::vector<std::byte> big(fwu::kMaxChunk + 1);
  EXPECT_EQ(code(call(mb::Command::kFwWrite, write(0, big))), Code::kInvalidArgument) << "chunk above max_chunk";
  ASSERT_EQ(code(call(mb::Command::kFwWrite, write(0, std::span(img).first(512)))), Code::kOk);
  EXPECT_EQ(code(call(mb::Command::kFwFinish)), Code::kFailedPrecondition) << "not all bytes received";
  auto st = npo::firmware_status(rig.dev()).value();
  EXPECT_EQ(st.state, npo::FirmwareUpdateState::kReceiving);
  EXPECT_FALSE(st.slots[1].valid);
  EXPECT_EQ(rig.flash().snapshot().slots[1].bytes.size(), 512u);
  ASSERT_EQ(code(call(mb::Command::kFwWrite, write(512, std::span(img).subspan(512)))), Code::kOk);
  ASSERT_EQ(code(call(mb::Command::kFwFinish)), Code::kOk);
  EXPECT_EQ(npo::firmware_status(rig.dev()).value().state, npo::FirmwareUpdateState::kStaged);
  ASSERT_EQ(code(call(mb::Command::kFwAbort)), Code::kOk);
  st = npo::firmware_status(rig.dev()).value();
  EXPECT_EQ(st.state, npo::FirmwareUpdateState::kIdle);
  EXPECT_FALSE(st.slots[1].valid);
  EXPECT_EQ(st.active, 0u);
}

/// A power cut at every point of an update: before BEGIN, after BEGIN, after every WRITE chunk, after
/// FINISH, after ACTIVATE (on trial), after ready, after COMMIT. After power-up the card always
/// boots a valid image: the old one (slot A, 1.2.0) unless COMMIT had been done (slot B, 1.3.0).
TEST(FirmwareUpdate, PowerCutAtEveryChunkAndStateAlwaysBootsAValidImage) {
  const auto img = make_image("1.3.0", 2, 4000);  // 4256 bytes: 9 chunks of at most 512
  const std::size_t chunks = (img.size() + 511) / 512;
  // Points: 0 checked, 1 begun, 2..1+chunks writes, then verified, activated, ready, committed.
  const std::size_t points = 2 + chunks + 4;
  for (std::size_t cut = 0; cut < points; ++cut) {
    SCOPED_TRACE(testing::Message() << "power cut at point " << cut << " of " << points);
    Rig rig;
    ASSERT_NE(rig.sys, nullptr);
    const auto factory = rig.flash().snapshot();
    std::size_t at = 0;
    bool cut_done = false, new_image = false;
    FirmwareUpdateStage cut_stage{};
    auto r = npo::update_firmware(rig.dev(), img, {}, [&](FirmwareUpdateStage s, std::uint64_t, std::uint64_t) {
      if (at++ == cut) {
        cut_stage = s;
        // Before BEGIN nothing was written (the update then runs on a freshly booted card);
        // after COMMIT the new slot is permanent. Everywhere else the old image must come back.
        new_image = s == FirmwareUpdateStage::kChecked || s == FirmwareUpdateStage::kCommitted;
        rig.emu->card(0).power_cycle();
        cut_done = true;
      }
    });
    ASSERT_TRUE(cut_done) << "the update reported " << at << " points";
    SCOPED_TRACE(testing::Message() << "stage " << npo::firmware_stage_name(cut_stage));
    // The update either failed (cut between BEGIN and COMMIT) or completed.
    EXPECT_EQ(r.has_value(), new_image) << (r ? "" : r.error().to_string());
    const auto snap = rig.flash().snapshot();
    const unsigned want = new_image ? 1 : 0;
    EXPECT_EQ(snap.active, want);
    EXPECT_EQ(snap.committed, want);
    EXPECT_TRUE(snap.slots[snap.active].valid) << "the running slot holds a verified image";
    EXPECT_EQ(snap.state, npo::fw::mbox::fwu::State::kIdle);
    if (new_image) {
      EXPECT_EQ(snap.slots[1].bytes, img);
      EXPECT_EQ(snap.security_version, 2u);
    } else {
      EXPECT_EQ(snap.slots[0].bytes, factory.slots[0].bytes) << "slot A untouched";
      EXPECT_EQ(snap.security_version, 1u);
    }
    auto v = rig.dev().firmware_versions();
    ASSERT_TRUE(v.has_value()) << v.error().to_string();
    EXPECT_EQ(v->firmware, new_image ? "1.3.0" : "1.2.0");
    // And the card takes the update again afterwards.
    if (!new_image) {
      auto again = npo::update_firmware(rig.dev(), img);
      ASSERT_TRUE(again.has_value()) << again.error().to_string();
      EXPECT_EQ(rig.flash().snapshot().committed, 1u);
    }
  }
}

}  // namespace
