// SPDX-License-Identifier: Apache-2.0
// The CMIS 5.2 module of a port: memory map (lower memory, pages 00h, 01h, 02h, 10h, 11h,
// and the CDB page 9Fh of port_cdb.cpp), module and data path state machines, monitors,
// XCVR_READ / XCVR_WRITE (mailbox.md §3.5).
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "card.hpp"
#include "port.hpp"
#include "port_internal.hpp"
#include "system.hpp"

namespace npo::emu {

using namespace portdef;  // NOLINT(google-build-using-namespace): the port model's own constants

std::uint8_t Port::module_state() const { return static_cast<std::uint8_t>((cmis_[0][kCmisModuleState] >> 1) & 7); }

void Port::set_module_state(std::uint8_t s) {
  auto& b = cmis_[0][kCmisModuleState];
  b = static_cast<std::uint8_t>((b & ~0x0e) | (s << 1));
  cmis_[0][kCmisModuleFlags] |= 0x01;  // L-ModuleStateChanged
}

void Port::build_cmis() {
  // A synthetic CMIS 5.2 8-lane 800G near-package-optics module: lower memory, pages 00h,
  // 01h, 02h (advertising and thresholds), 10h (controls), 11h (state, flags, monitors).
  // Identifier 0x18 (QSFP-DD, SFF-8024 Table 4-1): SFF-8024 has no code for a near-package
  // optical engine; the engine uses the QSFP-DD CMIS memory map and that code lets every
  // CMIS tool (ethtool, our decoder) read it.
  for (auto& pg : cmis_) pg.fill(0);
  auto& lo = cmis_[static_cast<unsigned>(CmisPage::kLower)];
  auto& p00 = cmis_[static_cast<unsigned>(CmisPage::k00)];
  auto& p01 = cmis_[static_cast<unsigned>(CmisPage::k01)];
  auto& p02 = cmis_[static_cast<unsigned>(CmisPage::k02)];
  auto& p10 = cmis_[static_cast<unsigned>(CmisPage::k10)];
  auto& p11 = cmis_[static_cast<unsigned>(CmisPage::k11)];
  lo[0] = kCmisIdentifierQsfpDd;
  lo[1] = 0x52;                                                                // CMIS revision 5.2
  lo[2] = 0x00;                                                                // paged memory
  lo[kCmisModuleState] = static_cast<std::uint8_t>((kModLowPwr << 1) | 0x01);  // LowPwr, IntL deasserted
  lo[kCmisGlobalCtrl] = kLowPwrRequestSw;  // the card holds modules in low power until a port is enabled
  lo[kCmisMediaType] = 0x02;               // SFF-8024 Table 4-2: single-mode fiber
  // Application 1: host 800GAUI-8 S C2M (SFF-8024 Table 4-5 code 51h), media 800GBASE-DR8
  // (Table 4-7 code 56h), 8 host and 8 media lanes, data path may start on host lane 1.
  lo[kCmisAppDesc + 0] = 0x51;
  lo[kCmisAppDesc + 1] = 0x56;
  lo[kCmisAppDesc + 2] = 0x88;
  lo[kCmisAppDesc + 3] = 0x01;
  lo[kCmisAppDesc + 4] = 0xff;  // end of the application list
  auto put_str = [](std::array<std::uint8_t, 128>& pg, unsigned off, unsigned len, std::string_view s) {
    for (unsigned i = 0; i < len; ++i) pg[off - 128 + i] = i < s.size() ? static_cast<std::uint8_t>(s[i]) : ' ';
  };
  p00[0] = kCmisIdentifierQsfpDd;
  put_str(p00, 129, 16, "NPO-EMU");
  put_str(p00, 148, 16, "NPO-800G-DR8-E");
  put_str(p00, 164, 2, "A1");
  put_str(p00, 166, 16, fmt::format("{:010X}P{:02d}", card_.serial() & 0xffffffffffULL, index_));
  put_str(p00, 182, 8, "261129");
  p00[200 - 128] = 0x7 << 5;  // power class 8
  p00[201 - 128] = 64;        // 16 W max, 0.25 W units
  p00[212 - 128] = 0x0d;      // media interface technology: 1310 nm EML
  p00[222 - 128] = page_checksum(p00, 128, 221);
  // Page 01h: advertising.
  p01[142 - 128] = 0x00;                                     // bank 0 only, no page 03h/05h/13h/16h/20h
  p01[144 - 128] = static_cast<std::uint8_t>((1 << 4) | 2);  // MaxDurationDPDeinit 1..5 ms, DPInit 5..10 ms
  p01[151 - 128] = 0x10;                                     // Rx power monitor: average power
  p01[157 - 128] = 0x00;                                     // no Tx flags
  p01[158 - 128] = 0x06;                                     // Rx LOS and Rx CDR LOL flags
  p01[159 - 128] = 0x03;                                     // temperature and Vcc monitors
  p01[160 - 128] = 0x07;                                     // Tx bias (x1: 2 µA LSB), Tx power, Rx power
  p01[167 - 128] = static_cast<std::uint8_t>((1 << 4) | 2);  // MaxDurationModulePwrDn 1..5 ms, PwrUp 5..10 ms
  p01[168 - 128] = 0x00;                                     // DPTxTurnOff/On < 1 ms
  p01[176 - 128] = 0x01;                                     // AppSel 1: media lanes start on lane 1
  p01[fw::cdb::kP01CdbSupport - 128] = 0x45;                 // one CDB instance, foreground, EPL A0h..AFh (cdb.md)
  p01[fw::cdb::kP01CdbRwLenExt - 128] = 14;                  // LPL accesses of 8 x 15 = 120 bytes
  cdb_publish_versions();                                    // lower 39/40, page 01h 128/129
  p01[255 - 128] = page_checksum(p01, 130, 254);
  // Page 02h: thresholds (high alarm, low alarm, high warning, low warning), big-endian.
  auto thr = [&p02](unsigned off, std::array<std::uint16_t, 4> v) {
    for (unsigned i = 0; i < 4; ++i) put_be16(p02, off + 2 * i, v[i]);
  };
  auto q8 = [](double c) { return static_cast<std::uint16_t>(static_cast<std::int16_t>(c * 256)); };
  thr(128, {q8(75), q8(-5), q8(70), q8(0)});  // °C
  thr(136, {36300, 29700, 34650, 31350});     // Vcc, 100 µV
  thr(176, {31623, 2512, 25119, 3162});       // Tx power, 0.1 µW: +5, -6, +4, -5 dBm
  thr(184, {7500, 1000, 6500, 1500});         // Tx bias, 2 µA: 15, 2, 13, 3 mA
  thr(192, {31623, 1259, 25119, 1585});       // Rx power: +5, -9, +4, -8 dBm
  p02[255 - 128] = page_checksum(p02, 128, 254);
  p10[kP10DpDeinit - 128] = 0xff;
  for (unsigned i = 0; i < 4; ++i) p11[kP11DpState - 128 + i] = (kDpDeactivated << 4) | kDpDeactivated;
  module_ready_ns_ = 0;
  dp_ready_ns_ = 0;
  dp_lanes_ = 0;
  dp_activated_ = false;
  if (module_seed_ != 0) return;  // seeds and lane physics are fixed at construction
  // (the far end reads module_seed without a lock: it must never change afterwards).
  module_seed_ = optics::mix_seed(sys_.cfg.seed, card_index_, index_, 0x4d4f44);
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    auto& lane = lanes_[l];
    optics::Rng r(optics::mix_seed(sys_.cfg.seed, card_index_, index_, 0x4c4e00 + l));
    lane.spread_db = (r.uniform() * 2.0 - 1.0) * optics::kLaneSpreadDb;
    lane.optimum = optics::tx_eq_optimum(r.next());
    lane.rng = optics::Rng(r.next());
    lane.ber_valid = false;
    lane.tx_offset_db = lane_tx_offset_db(module_seed_, l);
    lane.bias_offset_ma = lane_bias_offset_ma(module_seed_, l);
  }
}

void Port::refresh_cmis(std::uint64_t now) {
  auto& lo = cmis_[0];
  auto& p11 = cmis_[static_cast<unsigned>(CmisPage::k11)];
  if (module_state() == kModPwrUp && now >= module_ready_ns_) set_module_state(kModReady);
  const double t = optics::module_temperature_c(module_seed_, pub_power_on_ns_.load(), now);
  const auto tq = static_cast<std::int16_t>(std::lround(std::clamp(t, -127.0, 127.0) * 256.0));
  lo[kCmisTemp] = static_cast<std::uint8_t>(static_cast<std::uint16_t>(tq) >> 8);
  lo[kCmisTemp + 1] = static_cast<std::uint8_t>(static_cast<std::uint16_t>(tq) & 0xff);
  const std::uint16_t vcc = clamp_u16(optics::module_vcc_v(module_seed_, now) * 1e4);
  lo[kCmisVcc] = static_cast<std::uint8_t>(vcc >> 8);
  lo[kCmisVcc + 1] = static_cast<std::uint8_t>(vcc & 0xff);
  const LinkView v = link_view(now);
  const std::uint8_t tx = static_cast<std::uint8_t>(pub_.load() >> kPubTxShift);
  for (unsigned l = 0; l < regs::kLanesPerPort; ++l) {
    std::uint8_t dps = kDpDeactivated;
    if ((dp_lanes_ >> l) & 1u) dps = now >= dp_ready_ns_ ? kDpActivated : kDpInit;
    auto& b = p11[kP11DpState - 128 + l / 2];
    b = static_cast<std::uint8_t>(l % 2 == 0 ? ((b & 0xf0) | dps) : ((b & 0x0f) | (dps << 4)));
    const bool on = ((tx >> l) & 1u) != 0;
    const auto& lane = lanes_[l];
    put_be16(p11, kP11TxPower + 2 * l,
             on ? clamp_u16(optics::dbm_to_mw(optics::tx_power_dbm(t, lane.tx_offset_db)) * 1e4) : 0);
    put_be16(p11, kP11TxBias + 2 * l,
             on ? clamp_u16(optics::tx_bias_ma(t, lane.bias_offset_ma) * 500.0) : 0);  // 2 µA LSB
    const bool sig = lane_signal(l, now, v);
    if (sig) (void)lane_ber(l, now, v);  // refreshes rx_mw_cache
    put_be16(p11, kP11RxPower + 2 * l, sig ? clamp_u16(lane.rx_mw_cache * 1e4) : 0);
    if (!sig && ((dp_lanes_ >> l) & 1u) && now >= dp_ready_ns_) {
      p11[kP11RxLos - 128] |= static_cast<std::uint8_t>(1u << l);
      p11[kP11RxLol - 128] |= static_cast<std::uint8_t>(1u << l);
    }
  }
}

fw::mbox::Status Port::xcvr_access(unsigned bank, unsigned page, unsigned off, unsigned len, bool write,
                                   const std::byte* in, std::vector<std::byte>& out, bool clear_latched) {
  namespace mb = fw::mbox;
  std::lock_guard lock(mu_);
  if (!cabled_) return mb::Status::kNoModule;
  int slot = -1;
  switch (page) {
    case 0x00: slot = 1; break;
    case 0x01: slot = 2; break;
    case 0x02: slot = 3; break;
    case 0x10: slot = 4; break;
    case 0x11: slot = 5; break;
    default: break;
  }
  // CDB instance 1 (port_cdb.cpp): page 9Fh and the EPL pages A0h..AFh.
  const bool epl_page = page >= fw::cdb::kEplFirstPage && page <= fw::cdb::kEplLastPage && bank == 0;
  const bool cdb_page = (page == fw::cdb::kPage && bank == 0) || epl_page;
  if (off + len > 128 && ((slot < 0 && !cdb_page) || bank != 0)) return mb::Status::kPageNotSupported;
  if (epl_page && off + len > 128 && !fw_.epl) fw_.epl = std::make_shared<ModuleFirmware::EplPages>();
  auto& upper = epl_page && off + len > 128           ? (*fw_.epl)[page - fw::cdb::kEplFirstPage]
                : page == fw::cdb::kPage && bank == 0 ? fw_.page
                                                      : cmis_[static_cast<unsigned>(std::max(slot, 0))];
  auto byte = [&](unsigned a) -> std::uint8_t& { return a < 128 ? cmis_[0][a] : upper[a - 128]; };
  const std::uint64_t now = sys_.sched.now_ns();
  if (!write) {
    auto& p11 = cmis_[static_cast<unsigned>(CmisPage::k11)];
    constexpr unsigned kLatched = kP11FlagsLast - kP11FlagsFirst + 1;
    std::array<std::uint8_t, kLatched> held{};
    std::uint8_t held8 = 0;
    if (!clear_latched) {
      // An observer's peek: it sees the conditions this refresh finds (latches cleared for
      // the refresh), and the owner's latches are put back, plus whatever the refresh latched.
      held8 = std::exchange(cmis_[0][kCmisModuleFlags], std::uint8_t{0});
      for (unsigned i = 0; i < kLatched; ++i) held[i] = std::exchange(p11[kP11FlagsFirst - 128 + i], std::uint8_t{0});
    }
    refresh_cmis(now);
    for (unsigned i = 0; i < len; ++i) out.push_back(static_cast<std::byte>(byte(off + i)));
    if (!clear_latched) {
      cmis_[0][kCmisModuleFlags] |= held8;
      for (unsigned i = 0; i < kLatched; ++i) p11[kP11FlagsFirst - 128 + i] |= held[i];
      return mb::Status::kOk;
    }
    // Latched flags clear on read (mailbox.md §3.5): lower byte 8 and page 11h 134..152.
    for (unsigned i = 0; i < len; ++i) {
      const unsigned a = off + i;
      if (a == kCmisModuleFlags || (a >= 128 && page == 0x11 && a >= kP11FlagsFirst && a <= kP11FlagsLast)) byte(a) = 0;
    }
    return mb::Status::kOk;
  }
  bool cdb_write = false;
  for (unsigned i = 0; i < len; ++i) {
    const unsigned a = off + i;
    if (a == 126 || a == 127) return mb::Status::kBadArgument;
    // CdbStatus and the firmware revisions (37..40) belong to the module.
    const bool writable = (a >= 26 && a < 126 && (a < fw::cdb::kLowerStatus || a > fw::cdb::kLowerActiveFwMinor)) ||
                          (a >= 128 && (page == 0x10 || cdb_page));
    if (!writable) return mb::Status::kReadOnly;
    cdb_write = cdb_write || (a >= 128 && cdb_page);
  }
  // While a CDB command runs, page 9Fh belongs to the module (cdb.md §2): the write is refused.
  if (cdb_write && (cmis_[0][fw::cdb::kLowerStatus] & fw::cdb::kStatusBusy) != 0) return mb::Status::kBusy;
  const std::uint8_t old26 = cmis_[0][kCmisGlobalCtrl];
  for (unsigned i = 0; i < len; ++i) byte(off + i) = static_cast<std::uint8_t>(in[i]);
  // Writing the command ID's low byte (129) triggers the command, at the end of the access.
  if (cdb_write && !epl_page && off <= fw::cdb::kCmdId + 1 && off + len > fw::cdb::kCmdId + 1) cdb_trigger(now);
  cmis_[0][kCmisGlobalCtrl] &= static_cast<std::uint8_t>(~0x08);  // SoftwareReset self-clears
  const std::uint8_t new26 = cmis_[0][kCmisGlobalCtrl];
  if ((old26 ^ new26) & kLowPwrRequestSw) {
    card_.log_event(fmt::format("port={} module LowPwrRequestSW={}", index_, (new26 & kLowPwrRequestSw) ? 1 : 0));
    module_power((new26 & kLowPwrRequestSw) != 0, now);
  }
  return mb::Status::kOk;
}

void Port::module_power(bool low_power, std::uint64_t now) {
  refresh_cmis(now);
  const std::uint8_t ms = module_state();
  if (low_power) {
    if (ms == kModLowPwr) return;
    set_module_state(kModLowPwr);
    dp_lanes_ = 0;
    dp_activated_ = false;
    module_ready_ns_ = 0;
    // The port loses its data path: back to ModuleWait (the firmware leaves the host's
    // low-power request alone, so the port waits there, and faults after t_module).
    if (state_ != LinkState::kDisabled && state_ != LinkState::kModuleWait && state_ != LinkState::kFault) {
      train_start_ns_ = now;
      enter(LinkState::kModuleWait, kTModuleNs);
    }
    return;
  }
  if (ms == kModLowPwr) {
    set_module_state(kModPwrUp);
    module_ready_ns_ = now + kModulePwrUpNs;
    if (state_ == LinkState::kModuleWait) {
      const std::uint64_t epoch = epoch_;
      sys_.sched.schedule_in(kModulePwrUpNs + kFirmwarePollNs, [this, epoch](std::uint64_t) { step(epoch); });
    }
  }
}

}  // namespace npo::emu
