// SPDX-License-Identifier: Apache-2.0
// The firmware model: answers the mailbox command set of docs/spec/mailbox.md. Malformed
// requests get error replies; nothing a host writes can crash or hang it.
#include "firmware.hpp"

#include <cstring>

#include <fmt/format.h>

#include "card.hpp"
#include "mailbox.hpp"
#include "system.hpp"

namespace npo::emu {

namespace mb = fw::mbox;
namespace regs = fw::regs;
using fw::load_le;
using fw::store_le;

namespace {
void put_str(std::vector<std::byte>& out, std::size_t off, std::size_t len, std::string_view s) {
  for (std::size_t i = 0; i < len; ++i) out[off + i] = i < s.size() ? static_cast<std::byte>(s[i]) : std::byte{0};
}
}  // namespace

void Firmware::settle() noexcept {
  if (inflight_.exchange(false)) card_.system().mailbox_inflight.fetch_sub(1);
}

void Firmware::reset_state() {
  pending_.store(false);
  settle();  // a request in progress gets no reply (registers.md §3.6)
  drop_.store(0);
  corrupt_.store(0);
  heartbeats_ = 0;
  flash_.boot();
  std::lock_guard lock(log_mu_);
  log_.clear();
}

void Firmware::doorbell() {
  if (!inflight_.exchange(true)) card_.system().mailbox_inflight.fetch_add(1);
  pending_.store(true, std::memory_order_seq_cst);
  card_.system().workers.post(*this);
}

void Firmware::log_error(LogEntry e) {
  std::lock_guard lock(log_mu_);
  if (log_.size() >= mb::errlog::kCapacity) log_.pop_front();
  log_.push_back(e);
}

bool Firmware::run_once() {
  const bool more = process();
  settle();
  // A doorbell that landed while this one was handled counts again.
  if (pending_.load() && !inflight_.exchange(true)) card_.system().mailbox_inflight.fetch_add(1);
  return more;
}

bool Firmware::process() {
  if (!pending_.exchange(false)) return false;
  namespace m = regs::mbox;
  const Mailbox::Request request = mailbox_.request();
  const auto& req = request.buf;
  const std::uint32_t req_len = request.len;
  if (card_.removed()) return false;
  // Injected timeout: the request is swallowed; BUSY stays set until the host resets the card.
  if (std::uint32_t n = drop_.load(); n > 0 && drop_.compare_exchange_strong(n, n - 1)) {
    card_.log_event("mailbox request dropped (injected timeout)");
    return false;
  }
  if (req_len < mb::hdr::kSize || req_len > m::kBufSize) {
    card_.log_event(fmt::format("mailbox transport error req_len={}", req_len));
    card_.set_error(regs::global::kErrMailbox.mask());  // registers.md §4 step 4
    card_.count_mailbox_error();                        // registers.md §9
    mailbox_.fail_transport();
    card_.raise_msix(fw::pci::kMsixVectorGlobal);
    return false;
  }
  const auto opcode = load_le<std::uint16_t>(req.data(), mb::hdr::kOpcode);
  const auto seq = load_le<std::uint32_t>(req.data(), mb::hdr::kSequence);
  const auto plen = load_le<std::uint16_t>(req.data(), mb::hdr::kPayloadLen);
  std::vector<std::byte> payload;
  mb::Status st = mb::Status::kOk;
  if (load_le<std::uint8_t>(req.data(), mb::hdr::kVersion) != mb::kProtocolVersion) {
    st = mb::Status::kBadVersion;
  } else if (std::size_t{plen} + mb::hdr::kSize != req_len) {
    st = mb::Status::kBadLength;
  } else if (load_le<std::uint32_t>(req.data(), mb::hdr::kCrc) !=
             mb::message_crc(std::span<const std::byte>(req.data(), req_len))) {
    st = mb::Status::kBadCrc;
  } else {
    std::lock_guard hl(handle_mu_);
    st = handle(static_cast<mb::Command>(opcode), std::span<const std::byte>(req.data() + mb::hdr::kSize, plen),
                payload);
    if (st != mb::Status::kOk) payload.clear();
  }
  card_.log_event(fmt::format("mailbox op=0x{:04x} seq={} status={}", opcode, seq, mb::status_name(st)));
  // mailbox.md §4: these replies also set GLOBAL.ERR_STATUS.MAILBOX.
  if (st == mb::Status::kBadVersion || st == mb::Status::kBadCrc || st == mb::Status::kBadLength ||
      st == mb::Status::kInternal) {
    card_.set_error(regs::global::kErrMailbox.mask());
  }
  if (st != mb::Status::kOk) {
    log_error({card_.system().sched.now_ns(), 0x0400, 1, 4, opcode, seq, static_cast<std::uint64_t>(st)});
    card_.count_mailbox_error();  // GLOBAL.MBOX_ERRORS (registers.md §9)
  }
  // Build the response.
  std::array<std::byte, m::kBufSize> rsp{};
  store_le<std::uint8_t>(rsp.data(), mb::hdr::kVersion, mb::kProtocolVersion);
  store_le<std::uint8_t>(rsp.data(), mb::hdr::kFlags, mb::hdr::kFlagResponse);
  store_le<std::uint16_t>(rsp.data(), mb::hdr::kOpcode, opcode);
  store_le<std::uint32_t>(rsp.data(), mb::hdr::kSequence, seq);
  store_le<std::uint16_t>(rsp.data(), mb::hdr::kPayloadLen, static_cast<std::uint16_t>(payload.size()));
  store_le<std::uint16_t>(rsp.data(), mb::hdr::kStatus, static_cast<std::uint16_t>(st));
  if (!payload.empty()) std::memcpy(rsp.data() + mb::hdr::kSize, payload.data(), payload.size());  // data() may be null
  const std::size_t rlen = mb::hdr::kSize + payload.size();
  store_le<std::uint32_t>(rsp.data(), mb::hdr::kCrc, mb::message_crc(std::span<const std::byte>(rsp.data(), rlen)));
  if (std::uint32_t n = corrupt_.load(); n > 0 && corrupt_.compare_exchange_strong(n, n - 1)) {
    rsp[rlen - 1] ^= std::byte{0x5a};  // after the CRC: the host must notice
    card_.log_event("mailbox reply corrupted (injected)");
  }
  mailbox_.respond(rsp, static_cast<std::uint32_t>(rlen));
  card_.raise_msix(fw::pci::kMsixVectorGlobal);
  if (opcode == static_cast<std::uint16_t>(mb::Command::kReset) && st == mb::Status::kOk) {
    card_.reset("mailbox_reset", false);
  }
  return false;
}

std::vector<std::byte> Firmware::reply_message(std::uint16_t opcode, std::uint32_t seq, mb::Status st,
                                               std::span<const std::byte> payload) {
  std::vector<std::byte> rsp(mb::hdr::kSize + payload.size());
  store_le<std::uint8_t>(rsp.data(), mb::hdr::kVersion, mb::kProtocolVersion);
  store_le<std::uint8_t>(rsp.data(), mb::hdr::kFlags, mb::hdr::kFlagResponse);
  store_le<std::uint16_t>(rsp.data(), mb::hdr::kOpcode, opcode);
  store_le<std::uint32_t>(rsp.data(), mb::hdr::kSequence, seq);
  store_le<std::uint16_t>(rsp.data(), mb::hdr::kPayloadLen, static_cast<std::uint16_t>(payload.size()));
  store_le<std::uint16_t>(rsp.data(), mb::hdr::kStatus, static_cast<std::uint16_t>(st));
  if (!payload.empty()) std::memcpy(rsp.data() + mb::hdr::kSize, payload.data(), payload.size());
  store_le<std::uint32_t>(rsp.data(), mb::hdr::kCrc, mb::message_crc(std::span<const std::byte>(rsp)));
  return rsp;
}

std::vector<std::byte> Firmware::observe(std::span<const std::byte> request, std::string& refused) {
  refused.clear();
  // The caller (the emud parser) checked 16 <= size <= 1024.
  const auto opcode = load_le<std::uint16_t>(request.data(), mb::hdr::kOpcode);
  const auto seq = load_le<std::uint32_t>(request.data(), mb::hdr::kSequence);
  const auto plen = load_le<std::uint16_t>(request.data(), mb::hdr::kPayloadLen);
  std::vector<std::byte> payload;
  mb::Status st = mb::Status::kOk;
  if (load_le<std::uint8_t>(request.data(), mb::hdr::kVersion) != mb::kProtocolVersion) {
    st = mb::Status::kBadVersion;
  } else if (std::size_t{plen} + mb::hdr::kSize != request.size()) {
    st = mb::Status::kBadLength;
  } else if (load_le<std::uint32_t>(request.data(), mb::hdr::kCrc) != mb::message_crc(request)) {
    st = mb::Status::kBadCrc;
  } else {
    const auto cmd = static_cast<mb::Command>(opcode);
    const auto body = request.subspan(mb::hdr::kSize, plen);
    switch (cmd) {
      case mb::Command::kIdentify:
      case mb::Command::kGetVersions:
      case mb::Command::kTelemetry:
      case mb::Command::kPowerRead:
      case mb::Command::kErrorLogRead:
      case mb::Command::kFwQuery: {
        std::lock_guard hl(handle_mu_);
        st = handle(cmd, body, payload);
        break;
      }
      case mb::Command::kXcvrRead: {
        namespace x = mb::xcvr;
        if (body.size() != x::kHdrSize) {
          st = mb::Status::kBadLength;
          break;
        }
        const unsigned port = load_le<std::uint8_t>(body.data(), x::kPort);
        const unsigned len = load_le<std::uint8_t>(body.data(), x::kLength);
        const unsigned off = load_le<std::uint8_t>(body.data(), x::kOffset);
        if (port >= card_.config().num_ports || len == 0 || len > x::kMaxLength || off + len > 256) {
          st = mb::Status::kBadArgument;
          break;
        }
        std::lock_guard hl(handle_mu_);
        st = card_.ports()[port].xcvr_access(load_le<std::uint8_t>(body.data(), x::kBank),
                                             load_le<std::uint8_t>(body.data(), x::kPage), off, len, false, nullptr,
                                             payload, /*clear_latched=*/false);
        break;
      }
      case mb::Command::kPowerLimit: {  // an observer may read the limit, not change it
        namespace pl = mb::power_limit;
        if (body.size() == pl::kReqSize &&
            load_le<std::uint8_t>(body.data(), pl::kAction) != static_cast<std::uint8_t>(pl::Action::kGet)) {
          refused = fmt::format("0x{:04x} (set/reset)", opcode);
          return {};
        }
        std::lock_guard hl(handle_mu_);
        st = handle(cmd, body, payload);
        break;
      }
      default: refused = fmt::format("0x{:04x}", opcode); return {};
    }
    if (st != mb::Status::kOk) payload.clear();
  }
  return reply_message(opcode, seq, st, payload);
}

mb::Status Firmware::handle(mb::Command cmd, std::span<const std::byte> req, std::vector<std::byte>& rsp) {
  auto& sys = card_.system();
  const auto need = [&](std::size_t n) { return req.size() == n; };
  switch (cmd) {
    case mb::Command::kIdentify: {
      if (!need(0)) return mb::Status::kBadLength;
      namespace id = mb::identify;
      rsp.assign(id::kSize, std::byte{0});
      store_le<std::uint16_t>(rsp.data(), id::kVendorId, fw::pci::kVendorId);
      store_le<std::uint16_t>(rsp.data(), id::kDeviceId, fw::pci::kDeviceId);
      store_le<std::uint32_t>(rsp.data(), id::kFabricId, card_.fabric_id());
      store_le<std::uint64_t>(rsp.data(), id::kSerial, card_.bar0_read(regs::global::kSerial, 64));
      store_le<std::uint64_t>(rsp.data(), id::kHbmBytes, card_.config().hbm_bytes);
      store_le<std::uint8_t>(rsp.data(), id::kNumEngines, regs::kNumEngines);
      store_le<std::uint8_t>(rsp.data(), id::kQueuesPerEngine, regs::kQueuesPerEngine);
      store_le<std::uint8_t>(rsp.data(), id::kNumPorts, static_cast<std::uint8_t>(card_.config().num_ports));
      store_le<std::uint8_t>(rsp.data(), id::kLanesPerPort, regs::kLanesPerPort);
      put_str(rsp, id::kModel, 32, "NPO-REF-1 (emulated)");
      return mb::Status::kOk;
    }
    case mb::Command::kGetVersions: {
      if (!need(0)) return mb::Status::kBadLength;
      namespace v = mb::versions;
      rsp.assign(v::kSize, std::byte{0});
      // The running slot's version (mailbox.md §5): the factory version until an update.
      const std::uint32_t running = flash_.running_version();
      store_le<std::uint32_t>(rsp.data(), v::kFirmware, running);
      store_le<std::uint32_t>(rsp.data(), v::kInterface, regs::kInterfaceVersion);
      store_le<std::uint32_t>(rsp.data(), v::kProtocol, mb::kProtocolVersion);
      store_le<std::uint32_t>(rsp.data(), v::kBuildId, 0x20261129);
      put_str(rsp, v::kFirmwareString, 32,
              fmt::format("{}.{}.{}", running >> 16, (running >> 8) & 0xff, running & 0xff));
      return mb::Status::kOk;
    }
    case mb::Command::kReset: {
      if (!need(mb::reset::kSize)) return mb::Status::kBadLength;
      const auto scope = load_le<std::uint32_t>(req.data(), mb::reset::kScope);
      if (scope > 1) return mb::Status::kBadArgument;
      return mb::Status::kOk;  // the reset runs after the reply is posted (run_once)
    }
    case mb::Command::kHeartbeat: {
      namespace hb = mb::heartbeat;
      if (!need(hb::kReqSize)) return mb::Status::kBadLength;
      rsp.assign(hb::kRspSize, std::byte{0});
      store_le<std::uint64_t>(rsp.data(), hb::kCookie, load_le<std::uint64_t>(req.data(), hb::kCookie));
      store_le<std::uint64_t>(rsp.data(), hb::kUptimeNs, sys.sched.now_ns());
      store_le<std::uint32_t>(rsp.data(), hb::kCount, ++heartbeats_);
      return mb::Status::kOk;
    }
    case mb::Command::kXcvrRead:
    case mb::Command::kXcvrWrite: {
      namespace x = mb::xcvr;
      if (req.size() < x::kHdrSize) return mb::Status::kBadLength;
      const unsigned port = load_le<std::uint8_t>(req.data(), x::kPort);
      const unsigned bank = load_le<std::uint8_t>(req.data(), x::kBank);
      const unsigned page = load_le<std::uint8_t>(req.data(), x::kPage);
      const unsigned off = load_le<std::uint8_t>(req.data(), x::kOffset);
      const unsigned len = load_le<std::uint8_t>(req.data(), x::kLength);
      const bool write = cmd == mb::Command::kXcvrWrite;
      if (req.size() != x::kHdrSize + (write ? len : 0)) return mb::Status::kBadLength;
      if (port >= card_.config().num_ports || len == 0 || len > x::kMaxLength || off + len > 256) {
        return mb::Status::kBadArgument;
      }
      // The module model (port_cmis.cpp) applies CMIS read side effects (latched flags clear)
      // and write side effects (module and data path state machines).
      return card_.ports()[port].xcvr_access(bank, page, off, len, write, write ? req.data() + x::kData : nullptr, rsp);
    }
    case mb::Command::kLinkControl: {
      namespace l = mb::link;
      if (!need(l::kSize)) return mb::Status::kBadLength;
      const unsigned port = load_le<std::uint8_t>(req.data(), l::kPort);
      const unsigned action = load_le<std::uint8_t>(req.data(), l::kAction);
      const unsigned arg = load_le<std::uint8_t>(req.data(), l::kArg);
      if (port >= card_.config().num_ports || action >= l::kNumActions) return mb::Status::kBadArgument;
      namespace pr = regs::port;
      Port& pt = card_.ports()[port];
      std::uint32_t ctrl = pt.ctrl();
      switch (static_cast<l::Action>(action)) {
        case l::Action::kDown: ctrl = pr::kCtrlEnable.set(ctrl, 0); break;
        case l::Action::kUp: ctrl = pr::kCtrlEnable.set(ctrl, 1); break;
        case l::Action::kRetrain: ctrl = pr::kCtrlEnable.set(ctrl, 1) | pr::kCtrlTrain.mask(); break;
        case l::Action::kPrbsStart:
          if (arg > 6) return mb::Status::kBadArgument;
          ctrl = pr::kCtrlPrbsPattern.set(ctrl, arg) | pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask();
          break;
        case l::Action::kPrbsStop: ctrl &= ~(pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask()); break;
        case l::Action::kLoopbackOn:
        case l::Action::kLoopbackOff: {
          // ENABLE = 0, change LOOPBACK, then ENABLE restored (mailbox.md §3.6).
          const bool on = static_cast<l::Action>(action) == l::Action::kLoopbackOn;
          const std::uint32_t lb = on ? (ctrl | pr::kCtrlLoopback.mask()) : (ctrl & ~pr::kCtrlLoopback.mask());
          pt.set_ctrl(pr::kCtrlEnable.set(lb, 0));
          ctrl = lb;
          break;
        }
      }
      pt.set_ctrl(ctrl);
      rsp.assign(l::kRspSize, std::byte{0});
      store_le<std::uint32_t>(rsp.data(), l::kRspStatus, pt.status());
      return mb::Status::kOk;
    }
    case mb::Command::kTelemetry: {
      namespace t = mb::telemetry;
      if (!need(0) && !need(4)) return mb::Status::kBadLength;
      const unsigned np = card_.config().num_ports;
      rsp.assign(t::kPorts + np * t::kPortRecord, std::byte{0});
      store_le<std::uint64_t>(rsp.data(), t::kTimestampNs, sys.sched.now_ns());
      const PowerModel::Reading pw = card_.power().read();  // the same model as POWER_READ
      store_le<std::int16_t>(rsp.data(), t::kTempQ8, pw.temp_q8);
      store_le<std::uint32_t>(rsp.data(), t::kPowerMw, pw.power_mw);
      for (unsigned p = 0; p < np; ++p) {
        const std::size_t base = t::kPorts + p * t::kPortRecord;
        const Port::Telemetry pt = card_.ports()[p].telemetry();
        const Port::StatusAndFlaps sf = card_.ports()[p].status_and_flaps();
        store_le<std::uint32_t>(rsp.data(), base + t::kPortStatus, sf.status);
        store_le<std::uint32_t>(rsp.data(), base + t::kPortFlaps, sf.flaps);
        store_le<std::int16_t>(rsp.data(), base + t::kPortModTempQ8, pt.mod_temp_q8);
        store_le<std::uint16_t>(rsp.data(), base + t::kPortModVcc, pt.mod_vcc);
        store_le<std::uint32_t>(rsp.data(), base + t::kPortMaxBer, pt.max_ber);
      }
      return mb::Status::kOk;
    }
    case mb::Command::kErrorLogRead: {
      namespace e = mb::errlog;
      if (!need(e::kReqSize)) return mb::Status::kBadLength;
      const unsigned start = load_le<std::uint16_t>(req.data(), e::kStart);
      const unsigned max = load_le<std::uint16_t>(req.data(), e::kMax);
      std::lock_guard lock(log_mu_);
      const std::size_t total = log_.size();
      const std::size_t count = start >= total ? 0 : std::min<std::size_t>({max, total - start, e::kMaxPerReply});
      rsp.assign(e::kEntries + count * e::kEntrySize, std::byte{0});
      store_le<std::uint16_t>(rsp.data(), e::kTotal, static_cast<std::uint16_t>(total));
      store_le<std::uint16_t>(rsp.data(), e::kCount, static_cast<std::uint16_t>(count));
      for (std::size_t i = 0; i < count; ++i) {
        const auto& le = log_[start + i];
        const std::size_t b = e::kEntries + i * e::kEntrySize;
        store_le<std::uint64_t>(rsp.data(), b + e::kEntryTimestamp, le.ts);
        store_le<std::uint16_t>(rsp.data(), b + e::kEntryCode, le.code);
        store_le<std::uint8_t>(rsp.data(), b + e::kEntrySeverity, le.severity);
        store_le<std::uint8_t>(rsp.data(), b + e::kEntrySource, le.source);
        store_le<std::uint32_t>(rsp.data(), b + e::kEntryArg0, le.arg0);
        store_le<std::uint64_t>(rsp.data(), b + e::kEntryArg1, le.arg1);
        store_le<std::uint64_t>(rsp.data(), b + e::kEntryArg2, le.arg2);
      }
      return mb::Status::kOk;
    }
    case mb::Command::kPowerRead: {
      namespace pw = mb::power;
      if (!need(0)) return mb::Status::kBadLength;
      const PowerModel::Reading r = card_.power().read();
      const std::vector<PowerModel::PortPower> ports = card_.power().ports();
      const unsigned np = card_.config().num_ports;
      rsp.assign(pw::size(np), std::byte{0});
      store_le<std::uint64_t>(rsp.data(), pw::kTimestampNs, r.now_ns);
      store_le<std::uint32_t>(rsp.data(), pw::kPowerMw, r.power_mw);
      store_le<std::uint32_t>(rsp.data(), pw::kPowerAvgMw, r.power_avg_mw);
      store_le<std::uint64_t>(rsp.data(), pw::kEnergyMj, r.energy_mj);
      store_le<std::uint32_t>(rsp.data(), pw::kLimitMw, r.limit_mw);
      store_le<std::uint32_t>(rsp.data(), pw::kDefaultLimitMw, r.default_limit_mw);
      store_le<std::uint32_t>(rsp.data(), pw::kMinLimitMw, r.min_limit_mw);
      store_le<std::uint32_t>(rsp.data(), pw::kMaxLimitMw, r.max_limit_mw);
      store_le<std::uint32_t>(rsp.data(), pw::kThrottle, r.throttle);
      store_le<std::uint64_t>(rsp.data(), pw::kThrottledNs, r.throttled_ns);
      store_le<std::int16_t>(rsp.data(), pw::kTempQ8, r.temp_q8);
      store_le<std::uint8_t>(rsp.data(), pw::kEnginesActive, static_cast<std::uint8_t>(r.engines_active));
      store_le<std::uint8_t>(rsp.data(), pw::kNumPorts, static_cast<std::uint8_t>(np));
      store_le<std::uint32_t>(rsp.data(), pw::kIdleMw, r.idle_mw);
      store_le<std::uint32_t>(rsp.data(), pw::kDmaMw, r.dma_mw);
      store_le<std::uint32_t>(rsp.data(), pw::kSerdesMw, r.serdes_mw);
      store_le<std::uint32_t>(rsp.data(), pw::kModulesMw, r.modules_mw);
      for (unsigned p = 0; p < np && p < ports.size(); ++p) {
        const std::size_t b = pw::kPorts + p * pw::kPortRecord;
        const auto& pp = ports[p];
        const std::uint8_t flags = (pp.present ? pw::kPortPresent : 0) | (pp.low_power ? pw::kPortLowPower : 0);
        store_le<std::uint8_t>(rsp.data(), b + pw::kPortFlags, flags);
        store_le<std::uint8_t>(rsp.data(), b + pw::kPortPowerClass, pp.power_class);
        store_le<std::uint16_t>(rsp.data(), b + pw::kPortMaxPowerQ, pp.max_power_q);
        store_le<std::uint32_t>(rsp.data(), b + pw::kPortDrawMw, pp.draw_mw);
        store_le<std::int16_t>(rsp.data(), b + pw::kPortTempQ8, pp.temp_q8);
        store_le<std::uint8_t>(rsp.data(), b + pw::kPortTrainedLanes, pp.trained_lanes);
      }
      return mb::Status::kOk;
    }
    case mb::Command::kPowerLimit: {
      namespace pl = mb::power_limit;
      if (!need(pl::kReqSize)) return mb::Status::kBadLength;
      const auto action = load_le<std::uint8_t>(req.data(), pl::kAction);
      const auto mw = load_le<std::uint32_t>(req.data(), pl::kLimitMw);
      switch (static_cast<pl::Action>(action)) {
        case pl::Action::kGet:
          if (mw != 0) return mb::Status::kBadArgument;
          break;
        case pl::Action::kSet:
          if (!card_.power().set_limit(mw)) return mb::Status::kBadArgument;
          break;
        case pl::Action::kReset:
          if (mw != 0) return mb::Status::kBadArgument;
          card_.power().reset_limit();
          break;
        default: return mb::Status::kBadArgument;
      }
      rsp.assign(pl::kRspSize, std::byte{0});
      store_le<std::uint32_t>(rsp.data(), pl::kRspLimitMw, card_.power().limit_mw());
      store_le<std::uint32_t>(rsp.data(), pl::kRspDefaultMw, power::kDefaultLimitMw);
      store_le<std::uint32_t>(rsp.data(), pl::kRspMinMw, power::kMinLimitMw);
      store_le<std::uint32_t>(rsp.data(), pl::kRspMaxMw, power::kMaxLimitMw);
      return mb::Status::kOk;
    }
    case mb::Command::kErrorLogClear: {
      if (!need(0)) return mb::Status::kBadLength;
      std::lock_guard lock(log_mu_);
      log_.clear();
      return mb::Status::kOk;
    }
    case mb::Command::kFwQuery:
    case mb::Command::kFwBegin:
    case mb::Command::kFwWrite:
    case mb::Command::kFwFinish:
    case mb::Command::kFwActivate:
    case mb::Command::kFwCommit:
    case mb::Command::kFwAbort: {
      const mb::Status st = flash_.handle(cmd, req, rsp);
      if (cmd == mb::Command::kFwActivate && st == mb::Status::kOk) {
        const auto snap = flash_.snapshot();
        if (snap.rolled_back) {
          card_.log_event(fmt::format("firmware slot {} failed to boot; rolled back to slot {}",
                                      snap.committed == 0 ? 'B' : 'A', snap.committed == 0 ? 'A' : 'B'));
          log_error({sys.sched.now_ns(), 0x0002, 2, 0, snap.slots[snap.active].version, snap.active, 0});
        } else {
          card_.log_event(fmt::format("firmware restarted into slot {} on trial", snap.active == 0 ? 'A' : 'B'));
        }
        log_error({sys.sched.now_ns(), 0x0001, 0, 0, snap.slots[snap.active].version, 0, 0});
      }
      if (cmd == mb::Command::kFwCommit && st == mb::Status::kOk) card_.log_event("firmware slot committed");
      return st;
    }
    default: return mb::Status::kUnknownCommand;
  }
}

}  // namespace npo::emu
