// SPDX-License-Identifier: Apache-2.0
// The CDB message interface of a port's CMIS 5.2 module (CMIS §9, docs/spec/cdb.md): page
// 9Fh, CdbStatus (lower byte 37) and the complete flag (lower byte 8 bit 6), the firmware
// management commands over two image banks, busy times on the emulated clock, power cuts.
#include <algorithm>

#include <fmt/format.h>

#include "card.hpp"
#include "port.hpp"
#include "port_internal.hpp"
#include "system.hpp"

namespace npo::emu {

using namespace portdef;  // NOLINT(google-build-using-namespace): the port model's own constants
namespace cdb = fw::cdb;

namespace {
// Busy times of the emulated module (docs/spec/cdb.md §5); 0041h advertises the maxima.
constexpr std::uint64_t kCheckNs = 100'000;  // capture and check of any command
constexpr std::uint64_t kQueryNs = 1 * kMsNs;
constexpr std::uint64_t kStartNs = 50 * kMsNs;  // erases the inactive bank
constexpr std::uint64_t kWriteNs = 2 * kMsNs;
constexpr std::uint64_t kWriteEplNs = 8 * kMsNs;    // up to 2 KiB
constexpr std::uint64_t kCompleteNs = 100 * kMsNs;  // reads the bank back, checks the CRC
constexpr std::uint64_t kRunNs = 150 * kMsNs;       // firmware restart
constexpr std::uint64_t kCommitNs = 20 * kMsNs;
constexpr std::uint16_t kMaxStartMs = 200, kMaxWriteMs = 20, kMaxCompleteMs = 500;
constexpr std::uint32_t kBankBytes = 1u << 20;
constexpr std::uint8_t kRwLenExt = 14;  // LPL accesses of 8 x 15 = 120 bytes: 116-byte blocks

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}
std::uint16_t be16(const std::uint8_t* p) { return static_cast<std::uint16_t>((p[0] << 8) | p[1]); }
}  // namespace

void Port::cdb_power_on(std::optional<unsigned> image) {
  auto& f = fw_;
  if (image) {
    f.running = *image;
  } else {
    // Boot selection: the committed image; the other one if the committed bank is invalid.
    f.running = f.bank[f.committed].valid ? f.committed : 1 - f.committed;
  }
  f.downloading = false;
  f.dl_size = 0;
  f.dl_image.clear();
  f.dl_image.shrink_to_fit();
  f.dl_written.clear();
  f.dl_written.shrink_to_fit();
  f.dl_written_bytes = 0;
  f.page.fill(0);
  f.epl.reset();
  f.stuck = false;
  ++f.epoch;
}

void Port::cdb_publish_versions() {
  auto& p01 = cmis_[static_cast<unsigned>(CmisPage::k01)];
  const auto& run = fw_.bank[fw_.running];
  const auto& other = fw_.bank[1 - fw_.running];
  cmis_[0][cdb::kLowerActiveFwMajor] = run.major;
  cmis_[0][cdb::kLowerActiveFwMinor] = run.minor;
  p01[cdb::kP01InactiveFwMajor - 128] = other.valid ? other.major : 0;
  p01[cdb::kP01InactiveFwMinor - 128] = other.valid ? other.minor : 0;
}

void Port::cdb_event() {
  ++fw_.events;
  if (fw_.cut_at && fw_.events == *fw_.cut_at) {
    fw_.cut_at.reset();
    sys_.sched.schedule_in(0, [this](std::uint64_t) { module_power_cut(); });
  }
}

void Port::cdb_trigger(std::uint64_t now) {
  const std::uint16_t id = be16(&fw_.page[cdb::kCmdId - 128]);
  cmis_[0][cdb::kLowerStatus] = cdb::kBusyCapturing;
  card_.log_event(fmt::format("port={} cdb command 0x{:04x} captured", index_, id));
  cdb_event();
  const std::uint64_t ep = fw_.epoch;
  sys_.sched.schedule_at(now + kCheckNs, [this, ep, id](std::uint64_t t) {
    std::lock_guard lock(mu_);
    if (fw_.epoch == ep) cdb_check(t, id);
  });
}

void Port::cdb_done(std::uint8_t status, std::span<const std::uint8_t> rpl) {
  auto& pg = fw_.page;
  const std::size_t n = std::min<std::size_t>(rpl.size(), cdb::kLplMax);
  std::fill(pg.begin() + (cdb::kLpl - 128), pg.end(), std::uint8_t{0});
  std::copy_n(rpl.begin(), n, pg.begin() + (cdb::kLpl - 128));
  pg[cdb::kRplLength - 128] = static_cast<std::uint8_t>(n);
  pg[cdb::kRplCheckCode - 128] = cdb::reply_check_code(rpl.first(n));
  cmis_[0][cdb::kLowerStatus] = status;
  cmis_[0][cdb::kLowerFlags] |= cdb::kFlagCdbComplete1;
  card_.log_event(
      fmt::format("port={} cdb command 0x{:04x} done status=0x{:02x}", index_, be16(&pg[cdb::kCmdId - 128]), status));
  cdb_event();
}

void Port::cdb_check(std::uint64_t now, std::uint16_t id) {
  (void)now;
  const auto& pg = fw_.page;
  const unsigned lpl_len = pg[cdb::kLplLength - 128];
  const unsigned epl_len = be16(&pg[cdb::kEplLength - 128]);
  std::uint8_t fail = 0;
  if (lpl_len > cdb::kLplMax) {
    fail = cdb::kFailedParameter;
  } else {
    const std::array<std::uint8_t, 5> hdr{pg[0], pg[1], pg[2], pg[3], pg[4]};
    const std::span<const std::uint8_t> lpl(pg.data() + (cdb::kLpl - 128), lpl_len);
    if (cdb::check_code(hdr, lpl) != pg[cdb::kCheckCode - 128]) fail = cdb::kFailedCheckCode;
  }
  const std::uint8_t ms = module_state();
  std::uint64_t busy = 0;
  if (fail == 0) {
    switch (static_cast<cdb::Command>(id)) {
      case cdb::Command::kQueryStatus:
      case cdb::Command::kFwMgmtFeatures:
      case cdb::Command::kGetFwInfo: busy = kQueryNs; break;
      case cdb::Command::kStartDownload: busy = kStartNs; break;
      case cdb::Command::kWriteLpl: busy = kWriteNs; break;
      case cdb::Command::kWriteEpl: busy = kWriteEplNs; break;
      case cdb::Command::kCompleteDownload: busy = kCompleteNs; break;
      case cdb::Command::kRunImage:
        busy = kRunNs + std::uint64_t{be16(&pg[cdb::kLpl - 128 + cdb::run::kDelay])} * kMsNs;
        break;
      case cdb::Command::kCommitImage: busy = kCommitNs; break;
      default: fail = cdb::kFailedUnknownCmd; break;
    }
  }
  // Only 0104h carries an EPL, of 1..2048 bytes.
  if (fail == 0 && static_cast<cdb::Command>(id) == cdb::Command::kWriteEpl) {
    if (epl_len == 0 || epl_len > cdb::kEplMax) fail = cdb::kFailedParameter;
  } else if (fail == 0 && epl_len != 0) {
    fail = cdb::kFailedParameter;
  }
  // CDB runs in ModuleLowPwr and ModuleReady (CMIS 5.2 §9.1), not while the module powers up.
  if (fail == 0 && ms != kModLowPwr && ms != kModReady) fail = cdb::kFailedState;
  if (fail != 0) {
    cdb_done(fail, {});
    return;
  }
  cmis_[0][cdb::kLowerStatus] = cdb::kBusyExecuting;
  if (fw_.stuck) return;  // a hung firmware never finishes
  const std::uint64_t ep = fw_.epoch;
  sys_.sched.schedule_in(busy, [this, ep, id](std::uint64_t t) {
    std::lock_guard lock(mu_);
    if (fw_.epoch == ep && !fw_.stuck) cdb_finish(t, id);
  });
}

void Port::cdb_finish(std::uint64_t now, std::uint16_t id) {
  auto& f = fw_;
  const std::uint8_t* lpl = f.page.data() + (cdb::kLpl - 128);
  const unsigned lpl_len = f.page[cdb::kLplLength - 128];
  const unsigned inactive = 1 - f.running;
  switch (static_cast<cdb::Command>(id)) {
    case cdb::Command::kQueryStatus: {
      const std::array<std::uint8_t, 1> rpl{0x00};  // no password in use
      cdb_done(cdb::kSuccess, rpl);
      return;
    }
    case cdb::Command::kFwMgmtFeatures: {
      namespace ft = cdb::features;
      std::array<std::uint8_t, ft::kSize> rpl{};
      rpl[ft::kStartPayloadSize] = cdb::emu_header::kSize;
      rpl[ft::kErasedByte] = 0xff;
      rpl[ft::kRwLenExt] = kRwLenExt;
      rpl[ft::kWriteMechanism] = ft::kWriteBoth;
      rpl[ft::kHitlessRestart] = 0x01;
      auto put16 = [&rpl](unsigned at, std::uint16_t v) {
        rpl[at] = static_cast<std::uint8_t>(v >> 8);
        rpl[at + 1] = static_cast<std::uint8_t>(v & 0xff);
      };
      put16(ft::kMaxDurationStart, kMaxStartMs);
      put16(ft::kMaxDurationWrite, kMaxWriteMs);
      put16(ft::kMaxDurationComplete, kMaxCompleteMs);
      cdb_done(cdb::kSuccess, rpl);
      return;
    }
    case cdb::Command::kGetFwInfo: {
      namespace in = cdb::info;
      std::array<std::uint8_t, in::kSize> rpl{};
      std::uint8_t st = 0;
      for (unsigned b = 0; b < 2; ++b) {
        const unsigned sh = b == 0 ? 0 : 4;
        if (f.running == b) st |= static_cast<std::uint8_t>(in::kARunning << sh);
        if (f.committed == b) st |= static_cast<std::uint8_t>(in::kACommitted << sh);
        if (!f.bank[b].valid) st |= static_cast<std::uint8_t>(in::kAInvalid << sh);
        const unsigned at = b == 0 ? in::kA : in::kB;
        if (f.bank[b].valid) {
          rpl[at] = f.bank[b].major;
          rpl[at + 1] = f.bank[b].minor;
          rpl[at + 2] = static_cast<std::uint8_t>(f.bank[b].build >> 8);
          rpl[at + 3] = static_cast<std::uint8_t>(f.bank[b].build & 0xff);
          const auto extra = fmt::format("emu-{}.{}.{}", f.bank[b].major, f.bank[b].minor, f.bank[b].build);
          std::copy_n(extra.begin(), std::min<std::size_t>(extra.size(), in::kExtraLen), rpl.begin() + at + 4);
        }
      }
      rpl[in::kStatus] = st;
      rpl[in::kImageInfo] = 0x03;
      cdb_done(cdb::kSuccess, rpl);
      return;
    }
    case cdb::Command::kStartDownload: {
      const std::uint32_t size = lpl_len >= 4 ? be32(lpl + cdb::start::kImageSize) : 0;
      const bool magic =
          lpl_len >= cdb::start::kHeader + cdb::emu_header::kSize &&
          std::equal(cdb::emu_header::kMagic.begin(), cdb::emu_header::kMagic.end(), lpl + cdb::start::kHeader);
      if (size == 0 || size > kBankBytes || !magic) {
        cdb_done(cdb::kFailedParameter, {});
        return;
      }
      // Start aborts a download in progress; the inactive bank is erased.
      f.bank[inactive] = FirmwareBank{};
      f.downloading = true;
      f.dl_size = size;
      std::copy_n(lpl + cdb::start::kHeader, cdb::emu_header::kSize, f.dl_header.begin());
      f.dl_image.assign(size, 0xff);
      f.dl_written.assign(size, 0);
      f.dl_written_bytes = 0;
      cdb_publish_versions();
      card_.log_event(
          fmt::format("port={} cdb download start bank={} size={}", index_, inactive == 0 ? 'A' : 'B', size));
      cdb_done(cdb::kSuccess, {});
      return;
    }
    case cdb::Command::kWriteLpl:
    case cdb::Command::kWriteEpl: {
      if (!f.downloading) {
        cdb_done(cdb::kFailedState, {});
        return;
      }
      if (lpl_len < cdb::block::kData) {
        cdb_done(cdb::kFailedParameter, {});
        return;
      }
      const bool epl = static_cast<cdb::Command>(id) == cdb::Command::kWriteEpl;
      const std::uint32_t addr = be32(lpl + cdb::block::kAddress);
      const std::uint32_t n = epl ? be16(&f.page[cdb::kEplLength - 128]) : lpl_len - cdb::block::kData;
      if (std::uint64_t{addr} + n > f.dl_size) {
        cdb_done(cdb::kFailedParameter, {});
        return;
      }
      auto data = [&](std::uint32_t i) -> std::uint8_t {
        if (!epl) return lpl[cdb::block::kData + i];
        return f.epl ? (*f.epl)[i / 128][i % 128] : std::uint8_t{0};
      };
      for (std::uint32_t i = 0; i < n; ++i) {
        f.dl_image[addr + i] = data(i);
        if (f.dl_written[addr + i] == 0) {
          f.dl_written[addr + i] = 1;
          ++f.dl_written_bytes;
        }
      }
      cdb_done(cdb::kSuccess, {});
      return;
    }
    case cdb::Command::kCompleteDownload: {
      if (!f.downloading) {
        cdb_done(cdb::kFailedState, {});
        return;
      }
      f.downloading = false;
      std::uint8_t st = cdb::kSuccess;
      if (f.dl_written_bytes != f.dl_size) {
        st = cdb::kFailedImageIncomplete;
      } else {
        const auto crc = fw::mbox::crc32c(std::as_bytes(std::span(f.dl_image)));
        if (crc != be32(f.dl_header.data() + cdb::emu_header::kCrc)) st = cdb::kFailedImageCheck;
      }
      if (st == cdb::kSuccess) {
        f.bank[inactive] =
            FirmwareBank{true, f.dl_header[cdb::emu_header::kMajor], f.dl_header[cdb::emu_header::kMinor],
                         be16(f.dl_header.data() + cdb::emu_header::kBuild)};
      }
      card_.log_event(fmt::format("port={} cdb download complete bank={} {}", index_, inactive == 0 ? 'A' : 'B',
                                  st == cdb::kSuccess ? "valid" : cdb::status_name(st)));
      f.dl_image.clear();
      f.dl_written.clear();
      f.dl_written_bytes = 0;
      cdb_publish_versions();
      cdb_done(st, {});
      return;
    }
    case cdb::Command::kRunImage: {
      const std::uint8_t mode = lpl_len > cdb::run::kMode ? lpl[cdb::run::kMode] : 0;
      if (mode > cdb::run::kHitlessInactive + 2) {
        cdb_done(cdb::kFailedParameter, {});
        return;
      }
      const unsigned target = (mode & 0x02) != 0 ? f.running : inactive;  // modes 2, 3: the running image
      if (!f.bank[target].valid) {
        cdb_done(cdb::kFailedImageInvalid, {});
        return;
      }
      if ((mode & 0x01) != 0) {
        // Hitless restart: the new firmware takes over the data path as it is (the link stays up).
        f.running = target;
        f.downloading = false;
        cdb_publish_versions();
        card_.log_event(fmt::format("port={} cdb run image {} (hitless)", index_, target == 0 ? 'A' : 'B'));
        cdb_done(cdb::kSuccess, {});
        return;
      }
      // Traffic affecting: the module resets into the target image; the link drops and retrains.
      module_restart(now, target, "cdb run (module reset)");
      cdb_done(cdb::kSuccess, {});
      return;
    }
    case cdb::Command::kCommitImage: {
      f.committed = f.running;
      card_.log_event(fmt::format("port={} cdb commit image {}", index_, f.running == 0 ? 'A' : 'B'));
      cdb_done(cdb::kSuccess, {});
      return;
    }
    default: cdb_done(cdb::kFailedUnknownCmd, {}); return;
  }
}

void Port::module_restart(std::uint64_t now, std::optional<unsigned> image, const char* why) {
  sync_lanes(now);
  card_.log_event(fmt::format("port={} module {}", index_, why));
  cdb_power_on(image);
  const auto cut_at = fw_.cut_at;
  build_cmis();
  fw_.cut_at = cut_at;
  pub_power_on_ns_.store(now);
  if (state_ != LinkState::kDisabled) enter_module_wait(now, true);
  publish();
}

void Port::module_power_cut() {
  std::lock_guard lock(mu_);
  if (!cabled_) return;
  module_restart(sys_.sched.now_ns(), std::nullopt, "power cut");
}

void Port::arm_power_cut_after_events(std::uint64_t n) {
  std::lock_guard lock(mu_);
  if (n == 0) {
    fw_.cut_at.reset();
  } else {
    fw_.cut_at = fw_.events + n;
  }
}

std::uint64_t Port::cdb_events() {
  std::lock_guard lock(mu_);
  return fw_.events;
}

void Port::set_cdb_stuck(bool stuck) {
  std::lock_guard lock(mu_);
  fw_.stuck = stuck;
}

ModuleFirmware Port::module_firmware() {
  std::lock_guard lock(mu_);
  return fw_;
}

}  // namespace npo::emu
