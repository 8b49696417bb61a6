// SPDX-License-Identifier: Apache-2.0
// The card's firmware flash and update state machine (docs/spec/mailbox.md §5). The card checks
// what it is given as the host does (docs/spec/firmware-image.md §4), with its own crypto: the
// host's checks are a courtesy, these are the ones that protect the card.
#include "firmware_flash.hpp"

#include <sodium.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "npo/fw/pci.hpp"

namespace npo::emu {

namespace mb = fw::mbox;
namespace fwu = fw::mbox::fwu;
namespace img = fw::image;
using fw::load_le;
using fw::store_le;

// tests/data/firmware/dev-key.pub (DEVELOPMENT ONLY; docs/firmware.md "Keys").
const std::array<std::byte, 32> kDevelopmentFirmwareKey = [] {
  constexpr std::uint8_t k[32] = {0x7c, 0x3b, 0x70, 0x33, 0x04, 0x34, 0xce, 0xcf, 0xeb, 0x2e, 0x3e,
                                  0x0c, 0x41, 0x0e, 0x7d, 0xff, 0x1a, 0x40, 0xf2, 0xba, 0xed, 0x36,
                                  0x67, 0xc5, 0x26, 0x53, 0x7a, 0x9e, 0x84, 0xa2, 0x29, 0xd1};
  std::array<std::byte, 32> a{};
  for (std::size_t i = 0; i < 32; ++i) a[i] = static_cast<std::byte>(k[i]);
  return a;
}();

namespace {

/// The marker of an image the emulated card cannot boot (docs/firmware.md "The emulator"):
/// a payload holding these bytes never reports ready, and the card rolls back.
constexpr std::string_view kBootFailMarker = "NPO-EMU:BOOT-FAIL";

std::uint32_t parse_version(const std::string& v) {
  unsigned a = 0, b = 0, c = 0;
  if (std::sscanf(v.c_str(), "%u.%u.%u", &a, &b, &c) != 3) return 0;
  return img::make_version(a, b, c);
}

bool boots(std::span<const std::byte> image) {
  const auto* m = reinterpret_cast<const std::byte*>(kBootFailMarker.data());
  return std::search(image.begin(), image.end(), m, m + kBootFailMarker.size()) == image.end();
}

/// The card's own verification of a staged image (firmware-image.md §4), in the spec's order.
mb::Status verify(std::span<const std::byte> bytes, const std::array<std::byte, 32>& key, std::uint32_t security) {
  auto v = img::parse_layout(bytes);
  if (!v) return mb::Status::kImageInvalid;
  const img::Header& h = v->header;
  if (h.vendor_id != fw::pci::kVendorId || h.device_id != fw::pci::kDeviceId ||
      (!h.model_view().empty() && h.model_view() != kBoardModel)) {
    return mb::Status::kImageInvalid;
  }
  if (sodium_init() < 0) return mb::Status::kInternal;
  std::array<unsigned char, img::hdr::kDigestLen> d{};
  const auto* pl = reinterpret_cast<const unsigned char*>(v->payload.data());
  if (h.digest_alg == img::DigestAlg::kSha512) {
    crypto_hash_sha512(d.data(), pl, v->payload.size());
  } else {
    crypto_generichash(d.data(), d.size(), pl, v->payload.size(), nullptr, 0);
  }
  if (std::memcmp(d.data(), h.digest.data(), d.size()) != 0) return mb::Status::kImageCorrupt;
  if (h.signer_key != key) return mb::Status::kImageSignature;
  std::vector<unsigned char> msg(img::hdr::kSigned + v->payload.size());
  std::memcpy(msg.data(), bytes.data(), img::hdr::kSigned);
  std::memcpy(msg.data() + img::hdr::kSigned, v->payload.data(), v->payload.size());
  if (crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(h.signature.data()), msg.data(), msg.size(),
                                  reinterpret_cast<const unsigned char*>(key.data())) != 0) {
    return mb::Status::kImageSignature;
  }
  if (h.security_version < security) return mb::Status::kRollbackRefused;
  return mb::Status::kOk;
}

}  // namespace

FirmwareFlash::FirmwareFlash(const std::string& factory_version) : key_(kDevelopmentFirmwareKey) {
  Slot& a = slots_[0];
  constexpr std::string_view kFill = "NPO reference card factory firmware (emulated) ";
  a.bytes.resize(4096);
  for (std::size_t i = 0; i < a.bytes.size(); ++i) a.bytes[i] = static_cast<std::byte>(kFill[i % kFill.size()]);
  a.version = parse_version(factory_version);
  a.security_version = 1;
  a.valid = true;
}

std::uint32_t FirmwareFlash::running_version() const {
  std::lock_guard lock(mu_);
  return slots_[active_].version;
}

FirmwareFlash::Snapshot FirmwareFlash::snapshot() const {
  std::lock_guard lock(mu_);
  return {slots_, committed_, active_, security_version_, state_, ready_, rolled_back_};
}

void FirmwareFlash::set_trusted_key(const std::array<std::byte, 32>& key) {
  std::lock_guard lock(mu_);
  key_ = key;
}

void FirmwareFlash::boot() {
  std::lock_guard lock(mu_);
  if (state_ == fwu::State::kTrial) rolled_back_ = true;  // never committed: back to the committed slot
  if (state_ == fwu::State::kReceiving) slots_[target_].valid = false;
  active_ = committed_;
  state_ = fwu::State::kIdle;
  total_ = 0;
  ready_ = true;
}

mb::Status FirmwareFlash::finish_locked(std::vector<std::byte>& rsp) {
  Slot& s = slots_[target_];
  const mb::Status st = verify(s.bytes, key_, security_version_);
  if (st != mb::Status::kOk) {
    s.valid = false;
    state_ = fwu::State::kIdle;
    return st;
  }
  const auto v = img::parse_layout(s.bytes);
  s.version = v->header.fw_version;
  s.security_version = v->header.security_version;
  s.valid = true;
  state_ = fwu::State::kStaged;
  rsp.assign(fwu::kFinishRspSize, std::byte{0});
  store_le<std::uint8_t>(rsp.data(), fwu::kFinishSlot, static_cast<std::uint8_t>(target_));
  store_le<std::uint32_t>(rsp.data(), fwu::kFinishVersion, s.version);
  store_le<std::uint32_t>(rsp.data(), fwu::kFinishSecurityVersion, s.security_version);
  return mb::Status::kOk;
}

void FirmwareFlash::activate_locked() {
  // The firmware restarts into the staged slot on trial (mailbox.md §5.6). An image that does
  // not come up is caught by the boot watchdog: the card restarts into the committed slot.
  active_ = target_;
  if (!boots(slots_[target_].bytes)) {
    active_ = committed_;
    state_ = fwu::State::kIdle;
    ready_ = true;
    rolled_back_ = true;
    return;
  }
  state_ = fwu::State::kTrial;
  ready_ = true;
  rolled_back_ = false;
}

mb::Status FirmwareFlash::handle(mb::Command cmd, std::span<const std::byte> req, std::vector<std::byte>& rsp) {
  std::lock_guard lock(mu_);
  const auto need = [&](std::size_t n) { return req.size() == n; };
  switch (cmd) {
    case mb::Command::kFwQuery: {
      if (!need(0)) return mb::Status::kBadLength;
      rsp.assign(fwu::kQuerySize, std::byte{0});
      std::byte* p = rsp.data();
      store_le<std::uint8_t>(p, fwu::kActiveSlot, static_cast<std::uint8_t>(active_));
      store_le<std::uint8_t>(p, fwu::kCommittedSlot, static_cast<std::uint8_t>(committed_));
      store_le<std::uint8_t>(p, fwu::kState, static_cast<std::uint8_t>(state_));
      store_le<std::uint8_t>(
          p, fwu::kFlags,
          static_cast<std::uint8_t>((ready_ ? fwu::kFlagReady : 0) | (rolled_back_ ? fwu::kFlagRolledBack : 0)));
      store_le<std::uint32_t>(p, fwu::kSecurityVersion, security_version_);
      store_le<std::uint32_t>(p, fwu::kQueryMaxChunk, fwu::kMaxChunk);
      store_le<std::uint32_t>(p, fwu::kMaxImage, static_cast<std::uint32_t>(img::kMaxImageBytes));
      store_le<std::uint16_t>(p, fwu::kVendorId, fw::pci::kVendorId);
      store_le<std::uint16_t>(p, fwu::kDeviceId, fw::pci::kDeviceId);
      store_le<std::uint32_t>(
          p, fwu::kReceived,
          state_ == fwu::State::kReceiving ? static_cast<std::uint32_t>(slots_[target_].bytes.size()) : 0);
      for (std::size_t i = 0; i < kBoardModel.size(); ++i) p[fwu::kBoardModel + i] = std::byte(kBoardModel[i]);
      for (std::size_t i = 0; i < key_.size(); ++i) p[fwu::kTrustedKey + i] = key_[i];
      for (unsigned s = 0; s < fwu::kNumSlots; ++s) {
        const std::size_t b = fwu::kSlots + s * fwu::kSlotRecord;
        store_le<std::uint8_t>(p, b + fwu::kSlotValid, slots_[s].valid ? 1 : 0);
        store_le<std::uint32_t>(p, b + fwu::kSlotVersion, slots_[s].valid ? slots_[s].version : 0);
        store_le<std::uint32_t>(p, b + fwu::kSlotSecurityVersion, slots_[s].valid ? slots_[s].security_version : 0);
        store_le<std::uint64_t>(p, b + fwu::kSlotBytes, slots_[s].valid ? slots_[s].bytes.size() : 0);
      }
      return mb::Status::kOk;
    }
    case mb::Command::kFwBegin: {
      if (!need(fwu::kBeginReqSize)) return mb::Status::kBadLength;
      const auto total = load_le<std::uint64_t>(req.data(), fwu::kBeginTotal);
      const unsigned slot = load_le<std::uint8_t>(req.data(), fwu::kBeginSlot);
      if (state_ == fwu::State::kTrial) return mb::Status::kBadState;
      const unsigned inactive = 1 - committed_;
      if ((slot != inactive && slot != 0xff) || total <= img::hdr::kSize || total > img::kMaxImageBytes) {
        return mb::Status::kBadArgument;
      }
      target_ = inactive;
      slots_[target_] = Slot{};  // erase: the slot is invalid until FINISH verifies it
      slots_[target_].bytes.reserve(static_cast<std::size_t>(total));
      total_ = total;
      state_ = fwu::State::kReceiving;
      rolled_back_ = false;
      rsp.assign(fwu::kBeginRspSize, std::byte{0});
      store_le<std::uint8_t>(rsp.data(), fwu::kBeginRspSlot, static_cast<std::uint8_t>(target_));
      return mb::Status::kOk;
    }
    case mb::Command::kFwWrite: {
      if (req.size() < fwu::kWriteHdrSize) return mb::Status::kBadLength;
      const auto off = load_le<std::uint32_t>(req.data(), fwu::kWriteOffset);
      const unsigned len = load_le<std::uint16_t>(req.data(), fwu::kWriteLength);
      if (req.size() != fwu::kWriteHdrSize + len) return mb::Status::kBadLength;
      if (state_ != fwu::State::kReceiving) return mb::Status::kBadState;
      auto& bytes = slots_[target_].bytes;
      if (len == 0 || len > fwu::kMaxChunk || off != bytes.size() || bytes.size() + len > total_) {
        return mb::Status::kBadArgument;
      }
      bytes.insert(bytes.end(), req.begin() + fwu::kWriteData, req.end());
      rsp.assign(fwu::kWriteRspSize, std::byte{0});
      store_le<std::uint32_t>(rsp.data(), fwu::kWriteRspReceived, static_cast<std::uint32_t>(bytes.size()));
      return mb::Status::kOk;
    }
    case mb::Command::kFwFinish: {
      if (!need(0)) return mb::Status::kBadLength;
      if (state_ != fwu::State::kReceiving || slots_[target_].bytes.size() != total_) return mb::Status::kBadState;
      return finish_locked(rsp);
    }
    case mb::Command::kFwActivate: {
      if (!need(0)) return mb::Status::kBadLength;
      if (state_ != fwu::State::kStaged) return mb::Status::kBadState;
      activate_locked();
      return mb::Status::kOk;
    }
    case mb::Command::kFwCommit: {
      if (!need(0)) return mb::Status::kBadLength;
      if (state_ != fwu::State::kTrial || !ready_) return mb::Status::kBadState;
      committed_ = active_;
      security_version_ = std::max(security_version_, slots_[active_].security_version);
      state_ = fwu::State::kIdle;
      rsp.assign(fwu::kCommitRspSize, std::byte{0});
      store_le<std::uint32_t>(rsp.data(), fwu::kCommitSecurityVersion, security_version_);
      return mb::Status::kOk;
    }
    case mb::Command::kFwAbort: {
      if (!need(0)) return mb::Status::kBadLength;
      if (state_ == fwu::State::kReceiving || state_ == fwu::State::kStaged) {
        slots_[target_] = Slot{};
      } else if (state_ == fwu::State::kTrial) {
        active_ = committed_;
        rolled_back_ = true;
      }
      state_ = fwu::State::kIdle;
      ready_ = true;
      return mb::Status::kOk;
    }
    default: return mb::Status::kUnknownCommand;
  }
}

}  // namespace npo::emu
