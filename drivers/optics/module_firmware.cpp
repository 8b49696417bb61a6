// SPDX-License-Identifier: Apache-2.0
// Transceiver firmware through CMIS 5.2 CDB (npo/hal/module_firmware.hpp, docs/spec/cdb.md):
// one CDB command = write the LPL, write the header (the write of byte 129 triggers it), poll
// CdbStatus (lower byte 37) on the platform clock until it is no longer busy, read the reply.
#include "npo/hal/module_firmware.hpp"

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "card/access.hpp"
#include "card/deadline.hpp"
#include "npo/fw/cdb.hpp"
#include "npo/hal/device.hpp"
#include "npo/hal/transceiver.hpp"

namespace npo {

namespace cdb = fw::cdb;

namespace {

constexpr std::uint64_t kMsNs = 1'000'000;

/// The ports whose CDB a call holds (process-wide): (device, port).
class CdbLocks {
 public:
  bool try_lock(const Device* d, unsigned port) {
    std::lock_guard lock(mu_);
    return held_.emplace(d, port).second;
  }
  void unlock(const Device* d, unsigned port) {
    std::lock_guard lock(mu_);
    held_.erase({d, port});
  }

 private:
  std::mutex mu_;
  std::set<std::pair<const Device*, unsigned>> held_;
};
CdbLocks& cdb_locks() {
  static CdbLocks locks;
  return locks;
}

/// One call's hold on a port's CDB (RAII).
class CdbSession {
 public:
  CdbSession(Device& device, unsigned port, std::uint64_t poll_ns)
      : dev_(device), port_(port), poll_ns_(std::max<std::uint64_t>(poll_ns, 1000)) {}
  ~CdbSession() {
    if (held_) cdb_locks().unlock(&dev_, port_);
  }
  CdbSession(const CdbSession&) = delete;
  CdbSession& operator=(const CdbSession&) = delete;

  Result<void> acquire() {
    const auto a = card::access(dev_);
    if (port_ >= a.info.num_ports) {
      return fail(Code::kOutOfRange, fmt::format("port {} outside 0..{}", port_, a.info.num_ports - 1),
                  {.card = a.info.index, .port = port_});
    }
    if (!cdb_locks().try_lock(&dev_, port_)) {
      return std::unexpected(Error(Code::kUnavailable,
                                   fmt::format("port {}: the module's CDB is in use by another firmware call", port_),
                                   EBUSY, {.card = a.info.index, .port = port_}));
    }
    held_ = true;
    return {};
  }

  /// Runs CDB command `id` with `lpl` and returns its reply (RPL). Waits at most `timeout_ns`.
  Result<std::vector<std::uint8_t>> run(cdb::Command cmd, std::span<const std::uint8_t> lpl, std::uint64_t timeout_ns,
                                        std::span<const std::byte> epl = {}) {
    const auto id = static_cast<std::uint16_t>(cmd);
    auto st = status();
    if (!st) return std::unexpected(st.error());
    if ((*st & cdb::kStatusBusy) != 0) {
      return fail_cmd(Code::kUnavailable, id, *st, "the module is still busy with an earlier command");
    }
    // EPL first (pages A0h.., 128 bytes each), then the LPL, then the header.
    for (std::size_t off = 0; off < epl.size(); off += 128) {
      const auto page = static_cast<std::uint8_t>(cdb::kEplFirstPage + off / 128);
      const auto part = epl.subspan(off, std::min<std::size_t>(128, epl.size() - off));
      if (auto r = write_transceiver(dev_, port_, 0, page, 128, part); !r) return std::unexpected(r.error());
    }
    if (!lpl.empty()) {
      if (auto r = write(cdb::kLpl, lpl); !r) return std::unexpected(r.error());
    }
    std::array<std::uint8_t, 8> hdr{static_cast<std::uint8_t>(id >> 8),
                                    static_cast<std::uint8_t>(id & 0xff),
                                    static_cast<std::uint8_t>(epl.size() >> 8),
                                    static_cast<std::uint8_t>(epl.size() & 0xff),
                                    static_cast<std::uint8_t>(lpl.size()),
                                    0,
                                    0,
                                    0};
    hdr[cdb::kCheckCode - cdb::kCmdId] = cdb::check_code(std::span<const std::uint8_t, 5>(hdr.data(), 5), lpl);
    if (auto r = write(cdb::kCmdId, hdr); !r) return std::unexpected(r.error());
    // Poll CdbStatus: kCardTime, the module works on its own time line.
    auto& clock = *card::access(dev_).clock;
    card::Deadline dl(clock, timeout_ns, card::WaitFor::kCardTime);
    for (unsigned attempt = 0;; ++attempt) {
      st = status();
      if (!st) return std::unexpected(st.error());
      if ((*st & cdb::kStatusBusy) == 0) break;
      if (dl.expired()) {
        return fail_cmd(Code::kDeadlineExceeded, id, *st,
                        fmt::format("still busy after {} ms", (timeout_ns + kMsNs - 1) / kMsNs));
      }
      dl.pause(attempt, poll_ns_);
    }
    if (*st == cdb::kIdle) return fail_cmd(Code::kAborted, id, *st, "the module reset under the command");
    if ((*st & cdb::kStatusFailed) != 0) {
      Code c = Code::kUnknown;
      switch (*st) {
        case cdb::kFailedParameter: c = Code::kInvalidArgument; break;
        case cdb::kFailedUnknownCmd: c = Code::kUnimplemented; break;
        case cdb::kFailedCheckCode:
        case cdb::kFailedImageCheck: c = Code::kDataLoss; break;
        case cdb::kFailedState:
        case cdb::kFailedImageInvalid: c = Code::kFailedPrecondition; break;
        case cdb::kFailedImageIncomplete: c = Code::kInternal; break;
        default: break;
      }
      return fail_cmd(c, id, *st, "");
    }
    // Reply: RPL length and check code (134, 135), then the RPL from 136.
    std::array<std::byte, 2> rh{};
    if (auto r = read_transceiver(dev_, port_, 0, cdb::kPage, cdb::kRplLength, rh); !r)
      return std::unexpected(r.error());
    const unsigned n = std::to_integer<unsigned>(rh[0]);
    if (n > cdb::kLplMax) return fail_cmd(Code::kInternal, id, *st, fmt::format("reply length {} above 120", n));
    std::vector<std::uint8_t> rpl(n);
    if (n != 0) {
      std::vector<std::byte> raw(n);
      if (auto r = read_transceiver(dev_, port_, 0, cdb::kPage, cdb::kLpl, raw); !r) return std::unexpected(r.error());
      std::transform(raw.begin(), raw.end(), rpl.begin(), [](std::byte b) { return std::to_integer<std::uint8_t>(b); });
    }
    if (cdb::reply_check_code(rpl) != std::to_integer<std::uint8_t>(rh[1])) {
      return fail_cmd(Code::kDataLoss, id, *st, "reply check code mismatch");
    }
    return rpl;
  }

  Result<ModuleFirmwareFeatures> features() {
    auto r = run(cdb::Command::kFwMgmtFeatures, {}, kCdbDefaultTimeoutNs);
    if (!r) return std::unexpected(r.error());
    namespace ft = cdb::features;
    if (r->size() < ft::kSize) return short_reply(cdb::Command::kFwMgmtFeatures, r->size());
    const auto& p = *r;
    auto ms = [&p](unsigned at) {
      const std::uint64_t v = (std::uint64_t{p[at]} << 8) | p[at + 1];
      return v == 0 ? kCdbDefaultTimeoutNs : v * kMsNs * ((p[ft::kFlags] & 0x08) != 0 ? 10 : 1);
    };
    ModuleFirmwareFeatures f;
    f.header_bytes = p[ft::kStartPayloadSize];
    const unsigned access = std::min(8u * (1u + std::min<unsigned>(p[ft::kRwLenExt], 15u)), cdb::kLplMax);
    f.block_bytes = access - cdb::block::kData;
    f.lpl_write = (p[ft::kWriteMechanism] & ft::kWriteLplOnly) != 0;
    f.epl_write = (p[ft::kWriteMechanism] & ft::kWriteEplOnly) != 0;
    f.hitless_run = (p[ft::kHitlessRestart] & 0x01) != 0;
    f.start_timeout_ns = ms(ft::kMaxDurationStart);
    f.write_timeout_ns = ms(ft::kMaxDurationWrite);
    f.complete_timeout_ns = ms(ft::kMaxDurationComplete);
    if (f.epl_write) {
      std::array<std::byte, 1> adv{};
      if (auto a = read_transceiver(dev_, port_, 0, 0x01, cdb::kP01CdbSupport, adv); !a)
        return std::unexpected(a.error());
      const unsigned code = std::to_integer<unsigned>(adv[0]) & 0x0f;
      f.epl_block_bytes = code == 0 || code > 5 ? 0 : 128u << (code - 1);
    }
    return f;
  }

  Result<ModuleFirmwareInfo> info() {
    auto r = run(cdb::Command::kGetFwInfo, {}, kCdbDefaultTimeoutNs);
    if (!r) return std::unexpected(r.error());
    namespace in = cdb::info;
    if (r->size() < in::kSize) return short_reply(cdb::Command::kGetFwInfo, r->size());
    const auto& p = *r;
    ModuleFirmwareInfo out;
    for (unsigned b = 0; b < 2; ++b) {
      const unsigned sh = b == 0 ? 0 : 4;
      const unsigned at = b == 0 ? in::kA : in::kB;
      auto& im = out.images[b];
      im.running = (p[in::kStatus] & (in::kARunning << sh)) != 0;
      im.committed = (p[in::kStatus] & (in::kACommitted << sh)) != 0;
      im.valid = (p[in::kStatus] & (in::kAInvalid << sh)) == 0;
      im.major = p[at];
      im.minor = p[at + 1];
      im.build = static_cast<std::uint16_t>((p[at + 2] << 8) | p[at + 3]);
      for (unsigned i = 0; i < in::kExtraLen && p[at + 4 + i] != 0; ++i)
        im.extra.push_back(static_cast<char>(p[at + 4 + i]));
      if (im.running) out.running = b;
      if (im.committed) out.committed = b;
    }
    return out;
  }

  /// Lower memory byte 3 bits 3:1: the CMIS module state.
  Result<std::uint8_t> module_state() {
    std::array<std::byte, 1> b{};
    if (auto r = read_transceiver(dev_, port_, 0, 0, 3, b); !r) return std::unexpected(r.error());
    return static_cast<std::uint8_t>((std::to_integer<unsigned>(b[0]) >> 1) & 7);
  }

  [[nodiscard]] std::uint64_t poll_ns() const noexcept { return poll_ns_; }
  [[nodiscard]] std::uint32_t card() { return card::access(dev_).info.index; }

 private:
  Result<std::uint8_t> status() {
    std::array<std::byte, 1> b{};
    if (auto r = read_transceiver(dev_, port_, 0, cdb::kPage, cdb::kLowerStatus, b); !r) {
      return std::unexpected(r.error());
    }
    return std::to_integer<std::uint8_t>(b[0]);
  }
  Result<void> write(unsigned at, std::span<const std::uint8_t> bytes) {
    return write_transceiver(dev_, port_, 0, cdb::kPage, static_cast<std::uint8_t>(at), std::as_bytes(bytes));
  }
  std::unexpected<Error> fail_cmd(Code c, std::uint16_t id, std::uint8_t st, const std::string& what) {
    return fail(c,
                fmt::format("CDB {:04X}h ({}) on port {}: status 0x{:02x} ({}){}{}", id, cdb::command_name(id), port_,
                            st, cdb::status_name(st), what.empty() ? "" : ": ", what),
                {.card = card(), .port = port_, .value = st});
  }
  std::unexpected<Error> short_reply(cdb::Command cmd, std::size_t n) {
    const auto id = static_cast<std::uint16_t>(cmd);
    return fail(
        Code::kInternal,
        fmt::format("CDB {:04X}h ({}) on port {}: reply of {} bytes is too short", id, cdb::command_name(id), port_, n),
        {.card = card(), .port = port_});
  }

  Device& dev_;
  unsigned port_;
  std::uint64_t poll_ns_;
  bool held_ = false;
};

void put_be32(std::vector<std::uint8_t>& v, std::uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<std::uint8_t>(x >> s));
}

}  // namespace

const char* module_update_step_name(ModuleUpdateStep s) noexcept {
  switch (s) {
    case ModuleUpdateStep::kStart: return "start";
    case ModuleUpdateStep::kWrite: return "write";
    case ModuleUpdateStep::kComplete: return "complete";
    case ModuleUpdateStep::kRun: return "run";
    case ModuleUpdateStep::kCommit: return "commit";
    case ModuleUpdateStep::kDone: return "done";
  }
  return "unknown";
}

Result<ModuleFirmwareInfo> query_module_firmware(Device& device, unsigned port) {
  CdbSession s(device, port, 1'000'000);
  if (auto r = s.acquire(); !r) return std::unexpected(r.error());
  return s.info();
}

Result<ModuleFirmwareFeatures> query_module_firmware_features(Device& device, unsigned port) {
  CdbSession s(device, port, 1'000'000);
  if (auto r = s.acquire(); !r) return std::unexpected(r.error());
  return s.features();
}

Result<ModuleUpdateResult> update_module_firmware(Device& device, unsigned port, std::span<const std::byte> header,
                                                  std::span<const std::byte> payload,
                                                  const ModuleUpdateOptions& options) {
  CdbSession s(device, port, options.poll_interval_ns);
  if (auto r = s.acquire(); !r) return std::unexpected(r.error());
  auto& clock = *card::access(device).clock;
  const std::uint64_t t0 = clock.now_ns();
  const ErrorContext where{.card = s.card(), .port = port};
  if (payload.empty() || payload.size() > 0xffffffffu) {
    return fail(Code::kInvalidArgument, fmt::format("module firmware payload of {} bytes", payload.size()), where);
  }
  auto feat = s.features();
  if (!feat) return std::unexpected(feat.error());
  if (!feat->lpl_write) {
    return fail(Code::kUnimplemented, "the module does not take firmware blocks through the LPL (0041h)", where);
  }
  if (header.size() != feat->header_bytes || header.size() > cdb::kLplMax - cdb::start::kHeader) {
    return fail(
        Code::kInvalidArgument,
        fmt::format("vendor header of {} bytes; the module's Start takes {}", header.size(), feat->header_bytes),
        where);
  }
  ModuleUpdateResult res;
  auto before = s.info();
  if (!before) return std::unexpected(before.error());
  res.before = *before;
  const unsigned target = 1 - before->running;
  auto report = [&](ModuleUpdateStep step, std::size_t done) {
    if (options.progress) options.progress({.step = step, .bytes_written = done, .total_bytes = payload.size()});
  };

  report(ModuleUpdateStep::kStart, 0);
  std::vector<std::uint8_t> lpl;
  put_be32(lpl, static_cast<std::uint32_t>(payload.size()));
  put_be32(lpl, 0);
  for (auto b : header) lpl.push_back(std::to_integer<std::uint8_t>(b));
  if (auto r = s.run(cdb::Command::kStartDownload, lpl, feat->start_timeout_ns); !r) return std::unexpected(r.error());

  res.used_epl = options.epl && feat->epl_write && feat->epl_block_bytes != 0;
  const std::size_t block = res.used_epl ? feat->epl_block_bytes : feat->block_bytes;
  for (std::size_t off = 0; off < payload.size(); off += block) {
    const std::size_t n = std::min<std::size_t>(block, payload.size() - off);
    lpl.clear();
    put_be32(lpl, static_cast<std::uint32_t>(off));
    if (res.used_epl) {
      if (auto r = s.run(cdb::Command::kWriteEpl, lpl, feat->write_timeout_ns, payload.subspan(off, n)); !r) {
        return std::unexpected(r.error());
      }
    } else {
      for (auto b : payload.subspan(off, n)) lpl.push_back(std::to_integer<std::uint8_t>(b));
      if (auto r = s.run(cdb::Command::kWriteLpl, lpl, feat->write_timeout_ns); !r) return std::unexpected(r.error());
    }
    ++res.blocks;
    report(ModuleUpdateStep::kWrite, off + n);
  }

  report(ModuleUpdateStep::kComplete, payload.size());
  if (auto r = s.run(cdb::Command::kCompleteDownload, {}, feat->complete_timeout_ns); !r) {
    return std::unexpected(r.error());
  }

  if (options.run) {
    report(ModuleUpdateStep::kRun, payload.size());
    res.hitless = feat->hitless_run;
    const std::array<std::uint8_t, cdb::run::kSize> run{
        0, res.hitless ? cdb::run::kHitlessInactive : cdb::run::kResetInactive, 0, 0};
    const std::uint64_t run_t0 = clock.now_ns();
    if (auto r = s.run(cdb::Command::kRunImage, run, kCdbRunTimeoutNs); !r) return std::unexpected(r.error());
    // After a resetting Run the module powers up again: wait (within the Run budget) until it
    // is back in ModuleLowPwr or ModuleReady, where CDB answers.
    card::Deadline dl(clock, kCdbRunTimeoutNs - std::min(kCdbRunTimeoutNs, clock.now_ns() - run_t0),
                      card::WaitFor::kCardTime);
    for (unsigned attempt = 0;; ++attempt) {
      auto ms = s.module_state();
      if (!ms) return std::unexpected(ms.error());
      if (*ms == 1 || *ms == 3) break;
      if (dl.expired()) {
        return fail(Code::kDeadlineExceeded,
                    fmt::format("module state {} 5 s after Run: the module did not come back", *ms), where);
      }
      dl.pause(attempt, s.poll_ns());
    }
    auto now_info = s.info();
    if (!now_info) return std::unexpected(now_info.error());
    if (now_info->running != target) {
      return fail(Code::kAborted,
                  fmt::format("after Run the module runs image {}, not the new image {}",
                              now_info->running == 0 ? 'A' : 'B', target == 0 ? 'A' : 'B'),
                  where);
    }
    if (options.commit) {
      report(ModuleUpdateStep::kCommit, payload.size());
      if (auto r = s.run(cdb::Command::kCommitImage, {}, kCdbDefaultTimeoutNs); !r) return std::unexpected(r.error());
    }
  }
  auto after = s.info();
  if (!after) return std::unexpected(after.error());
  res.after = *after;
  res.elapsed_ns = clock.now_ns() - t0;
  report(ModuleUpdateStep::kDone, payload.size());
  return res;
}

}  // namespace npo
