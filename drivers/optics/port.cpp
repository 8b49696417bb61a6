// SPDX-License-Identifier: Apache-2.0
// drivers/optics: port register snapshots (one decode path for registers and the stats DMA
// block), port control, PRBS tests and raw transceiver access.
#include "npo/hal/port.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "card/access.hpp"
#include "card/mailbox.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/backend.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/transceiver.hpp"
#include "npo/hal/xcvr_decode.hpp"
#include "optics/port_record.hpp"

namespace npo {

namespace regs = fw::regs;
namespace pr = fw::regs::port;
namespace mb = fw::mbox;
namespace st = fw::stats;

std::string_view link_state_name(LinkState s) noexcept {
  switch (s) {
    case LinkState::kDisabled: return "disabled";
    case LinkState::kModuleWait: return "module_wait";
    case LinkState::kDataPathInit: return "datapath_init";
    case LinkState::kTraining: return "training";
    case LinkState::kFecLock: return "fec_lock";
    case LinkState::kUp: return "up";
    case LinkState::kFault: return "fault";
  }
  return "unknown";
}

double PortStatus::speed_gbps() const noexcept {
  if (lane_count == 0 || lane_rate_mbd == 0) return 0;
  // Line rate less RS(544,514) (514/544) and 256b/257b (256/257): 8 x 53125 Mbd PAM4 ->
  // 850 Gb/s line -> 800 Gb/s payload (registers.md §7.1).
  const double line = static_cast<double>(lane_rate_mbd) * 1e-3 * (pam4 ? 2.0 : 1.0) * lane_count;
  const double payload = line * (514.0 / 544.0) * (256.0 / 257.0);
  return std::round(payload * 1000.0) / 1000.0;
}

namespace optics {

void read_port_record(backend::Mmio& m, unsigned p, unsigned lanes, st::PortRecord& rec, bool counters) {
  rec.ctrl = m.read32(regs::port_reg(p, pr::kCtrl));
  rec.status = m.read32(regs::port_reg(p, pr::kStatus));
  rec.lane_map = m.read32(regs::port_reg(p, pr::kLaneMap));
  rec.speed = m.read32(regs::port_reg(p, pr::kSpeed));
  rec.neighbor = m.read64(regs::port_reg(p, pr::kNeighbor));
  rec.train_count = m.read32(regs::port_reg(p, pr::kTrainCount));
  rec.flap_count = m.read32(regs::port_reg(p, pr::kFlapCount));
  rec.train_timeout = m.read32(regs::port_reg(p, pr::kTrainTimeout));
  rec.event_status = m.read32(regs::port_reg(p, pr::kEventStatus));
  rec.lane_enable = m.read32(regs::port_reg(p, pr::kLaneEnable));
  rec.train_result = m.read32(regs::port_reg(p, pr::kTrainResult));
  rec.up_count = m.read32(regs::port_reg(p, pr::kUpCount));
  rec.coeff_updates = m.read32(regs::port_reg(p, pr::kCoeffUpdates));
  rec.prbs_lanes = m.read32(regs::port_reg(p, pr::kPrbsLanes));
  rec.module_temp = m.read32(regs::port_reg(p, pr::kModuleTemp));
  rec.module_vcc = m.read32(regs::port_reg(p, pr::kModuleVcc));
  if (!counters) return;
  namespace ln = pr::lane;
  for (unsigned l = 0; l < lanes && l < regs::kLanesPerPort; ++l) {
    auto& r = rec.lanes[l];
    // The card does not snapshot a lane's counters (registers.md §7.3): read the parts before
    // their totals (bins, then SYMBOL_ERRORS, CORRECTED, UNCORRECTABLE, CODEWORDS last), so the
    // free-running counters never show a bin above CORRECTED or a sum above CODEWORDS.
    for (unsigned b = 0; b < regs::kFecBins; ++b) r.fec_bins[b] = m.read64(regs::lane_reg(p, l, ln::kFecBin0 + b * 8));
    r.symbol_errors = m.read64(regs::lane_reg(p, l, ln::kSymbolErrors));
    r.corrected = m.read64(regs::lane_reg(p, l, ln::kCorrected));
    r.uncorrectable = m.read64(regs::lane_reg(p, l, ln::kUncorrectable));
    r.codewords = m.read64(regs::lane_reg(p, l, ln::kCodewords));
    r.prbs_errors = m.read64(regs::lane_reg(p, l, ln::kPrbsErrors));
    r.prbs_bits = m.read64(regs::lane_reg(p, l, ln::kPrbsBits));
    r.snr = m.read32(regs::lane_reg(p, l, ln::kSnr));
    r.tx_eq = m.read32(regs::lane_reg(p, l, ln::kTxEq));
    r.lane_status = m.read32(regs::lane_reg(p, l, ln::kLaneStatus));
    r.rx_power = m.read32(regs::lane_reg(p, l, ln::kRxPower));
    r.tx_power = m.read32(regs::lane_reg(p, l, ln::kTxPower));
    r.tx_bias = m.read32(regs::lane_reg(p, l, ln::kTxBias));
  }
}

PortStatus decode_port_record(const st::PortRecord& rec, unsigned port, unsigned lanes) {
  PortStatus ps;
  ps.port = port;
  const std::uint32_t s = rec.status;
  const unsigned state = pr::kStatusState.get(s);
  ps.state = state <= static_cast<unsigned>(LinkState::kFault) ? static_cast<LinkState>(state) : LinkState::kFault;
  ps.link_up = pr::kStatusLinkUp.get(s) != 0;
  ps.fec_lock = pr::kStatusFecLock.get(s) != 0;
  ps.module_present = pr::kStatusModulePresent.get(s) != 0;
  ps.lane_count = pr::kStatusLaneCount.get(s);
  ps.lanes_up = static_cast<std::uint8_t>(pr::kStatusLanesUp.get(s));
  ps.lane_rate_mbd = pr::kSpeedMbdPerLane.get(rec.speed);
  ps.pam4 = pr::kSpeedModulation.get(rec.speed) == 1;
  if (pr::kNeighborValid.get(rec.neighbor)) {
    ps.neighbor_fabric_id = static_cast<std::uint32_t>(pr::kNeighborFabricId.get(rec.neighbor));
    ps.neighbor_port = static_cast<unsigned>(pr::kNeighborPort.get(rec.neighbor));
  }
  ps.train_count = rec.train_count;
  ps.flap_count = rec.flap_count;
  ps.enabled = pr::kCtrlEnable.get(rec.ctrl) != 0;
  ps.loopback = pr::kCtrlLoopback.get(rec.ctrl) != 0;
  ps.prbs_generating = pr::kCtrlPrbsGen.get(rec.ctrl) != 0;
  ps.prbs_checking = pr::kCtrlPrbsCheck.get(rec.ctrl) != 0;
  ps.prbs_host_side = pr::kCtrlPrbsSide.get(rec.ctrl) != 0;
  if (const unsigned pat = pr::kCtrlPrbsPattern.get(rec.ctrl); pat <= static_cast<unsigned>(PrbsPattern::kPrbs13)) {
    ps.prbs_pattern = static_cast<PrbsPattern>(pat);
  }
  for (unsigned n = 0; n < ps.lane_map.size(); ++n) {
    const unsigned phys = (rec.lane_map >> (4 * n)) & 0xfu;
    ps.lane_map[n] = phys < regs::kLanesPerPort ? static_cast<std::uint8_t>(phys) : kUnusedLane;
  }
  ps.lane_enable = static_cast<std::uint8_t>(pr::kLaneEnableMask.get(rec.lane_enable));
  // An empty mask is no configuration a card accepts (reset value 0xFF, set_lane_enable
  // refuses 0): a card without LANE_ENABLE reads 0 there and uses every lane.
  if (ps.lane_enable == 0) ps.lane_enable = static_cast<std::uint8_t>(lanes >= 8 ? 0xff : (1u << lanes) - 1);
  ps.train_result.code = static_cast<std::uint8_t>(pr::kTrainResultCode.get(rec.train_result));
  const unsigned ts = pr::kTrainResultState.get(rec.train_result);
  ps.train_result.state =
      ts <= static_cast<unsigned>(LinkState::kFault) ? static_cast<LinkState>(ts) : LinkState::kFault;
  ps.train_result.failed_lanes = static_cast<std::uint8_t>(pr::kTrainResultLanes.get(rec.train_result));
  ps.train_result.attempt = pr::kTrainResultAttempt.get(rec.train_result);
  ps.up_count = rec.up_count;
  ps.coeff_updates = rec.coeff_updates;
  ps.events.link_up = pr::kEventLinkUp.get(rec.event_status) != 0;
  ps.events.link_down = pr::kEventLinkDown.get(rec.event_status) != 0;
  ps.events.train_fail = pr::kEventTrainFail.get(rec.event_status) != 0;
  ps.events.module_change = pr::kEventModuleChange.get(rec.event_status) != 0;
  ps.prbs_lanes = static_cast<std::uint8_t>(rec.prbs_lanes);
  if (ps.module_present) {
    ps.module_temp_c = static_cast<double>(static_cast<std::int32_t>(rec.module_temp)) / 256.0;
    ps.module_vcc_v = static_cast<double>(rec.module_vcc) * 1e-4;
  }
  ps.lanes.resize(lanes);
  for (unsigned l = 0; l < lanes && l < regs::kLanesPerPort; ++l) {
    const auto& r = rec.lanes[l];
    auto& lc = ps.lanes[l];
    lc.codewords = r.codewords;
    lc.corrected = r.corrected;
    lc.uncorrectable = r.uncorrectable;
    lc.symbol_errors = r.symbol_errors;
    lc.prbs_bits = r.prbs_bits;
    lc.prbs_errors = r.prbs_errors;
    std::copy(std::begin(r.fec_bins), std::end(r.fec_bins), lc.fec_bins.begin());
    lc.snr_db = static_cast<double>(static_cast<std::int32_t>(r.snr)) / 256.0;
    lc.signal = pr::lane::kLaneStatusSignal.get(r.lane_status) != 0;
    lc.cdr_lock = pr::lane::kLaneStatusCdrLock.get(r.lane_status) != 0;
    lc.prbs_lock = pr::lane::kLaneStatusPrbsLock.get(r.lane_status) != 0;
    lc.tx_eq.pre = static_cast<std::int8_t>(pr::lane::kTxEqPre.get(r.tx_eq));
    lc.tx_eq.main = pr::lane::kTxEqMain.get(r.tx_eq);
    lc.tx_eq.post = static_cast<std::int8_t>(pr::lane::kTxEqPost.get(r.tx_eq));
    lc.rx_power_mw = static_cast<double>(r.rx_power) * 1e-4;  // 0.1 uW units
    lc.tx_power_mw = static_cast<double>(r.tx_power) * 1e-4;
    lc.rx_power_dbm = xcvr::mw_to_dbm(lc.rx_power_mw);
    lc.tx_power_dbm = xcvr::mw_to_dbm(lc.tx_power_mw);
    lc.tx_bias_ma = static_cast<double>(r.tx_bias) * 1e-3;  // uA
    // registers.md §7.3: 5440 bits per codeword, one bit per corrected symbol, 16 symbols per
    // uncorrectable codeword.
    if (lc.codewords > 0) {
      lc.pre_fec_ber = (static_cast<double>(lc.symbol_errors) + 16.0 * static_cast<double>(lc.uncorrectable)) /
                       (5440.0 * static_cast<double>(lc.codewords));
    }
  }
  return ps;
}

}  // namespace optics

namespace {
Result<void> check_port(const DeviceInfo& info, unsigned port) {
  if (port >= info.num_ports) {
    return fail(Code::kOutOfRange,
                fmt::format("port {} outside 0..{}", port, info.num_ports == 0 ? 0 : info.num_ports - 1),
                {.card = info.index, .port = port});
  }
  return {};
}
}  // namespace

Result<PortStatus> read_port(Device& device, unsigned port) {
  const auto impl = card::access(device);
  const auto& info = impl.info;
  if (auto r = check_port(info, port); !r) return std::unexpected(r.error());
  st::PortRecord rec{};
  optics::read_port_record(*impl.bar0, port, info.lanes_per_port, rec);
  if (rec.status == 0xffffffffu && impl.bar0->read32(regs::global::kMagic) == 0xffffffffu) {
    return fail(Code::kUnavailable, "card removed", {.card = info.index, .port = port});
  }
  return optics::decode_port_record(rec, port, info.lanes_per_port);
}

Result<void> enable_port(Device& device, unsigned port, bool enable) {
  const auto impl = card::access(device);
  const auto& info = impl.info;
  if (auto r = check_port(info, port); !r) return r;
  backend::Mmio& m = *impl.bar0;
  const std::uint32_t ctrl = m.read32(regs::port_reg(port, pr::kCtrl));
  if (ctrl == 0xffffffffu) return fail(Code::kUnavailable, "card removed", {.card = info.index, .port = port});
  m.write32(regs::port_reg(port, pr::kCtrl), pr::kCtrlEnable.set(ctrl, enable ? 1 : 0));
  return {};
}

Result<void> retrain_port(Device& device, unsigned port) {
  const auto impl = card::access(device);
  if (auto r = check_port(impl.info, port); !r) return r;
  backend::Mmio& m = *impl.bar0;
  const std::uint32_t ctrl = m.read32(regs::port_reg(port, pr::kCtrl));
  if (ctrl == 0xffffffffu) return fail(Code::kUnavailable, "card removed", {.card = impl.info.index, .port = port});
  m.write32(regs::port_reg(port, pr::kCtrl), ctrl | pr::kCtrlTrain.mask());
  return {};
}

Result<void> set_lane_enable(Device& device, unsigned port, std::uint8_t mask) {
  const auto impl = card::access(device);
  if (auto r = check_port(impl.info, port); !r) return r;
  if (mask == 0) return fail(Code::kInvalidArgument, "LANE_ENABLE of 0 lanes", {.card = impl.info.index, .port = port});
  impl.bar0->write32(regs::port_reg(port, pr::kLaneEnable), pr::kLaneEnableMask.make(mask));
  return {};
}

Result<std::vector<std::byte>> read_module_image(Device& device, unsigned port) {
  std::vector<std::byte> img(256);
  if (auto r = read_transceiver(device, port, 0, 0, 0, std::span(img).first(128)); !r)
    return std::unexpected(r.error());
  if (auto r = read_transceiver(device, port, 0, 0, 128, std::span(img).subspan(128, 128)); !r) {
    return std::unexpected(r.error());
  }
  for (std::uint8_t page : {0x01, 0x02, 0x10, 0x11}) {
    std::array<std::byte, 128> up{};
    if (!read_transceiver(device, port, 0, page, 128, up)) break;
    img.insert(img.end(), up.begin(), up.end());
  }
  return img;
}

// ---- PRBS (registers.md §7.3) ------------------------------------------------------------

std::string_view prbs_pattern_name(PrbsPattern p) noexcept {
  switch (p) {
    case PrbsPattern::kPrbs7: return "PRBS7";
    case PrbsPattern::kPrbs9: return "PRBS9";
    case PrbsPattern::kPrbs11: return "PRBS11";
    case PrbsPattern::kPrbs15: return "PRBS15";
    case PrbsPattern::kPrbs23: return "PRBS23";
    case PrbsPattern::kPrbs31: return "PRBS31";
    case PrbsPattern::kPrbs13: return "PRBS13";
  }
  return "unknown";
}

Result<PrbsPattern> parse_prbs_pattern(std::string_view name) {
  std::string up(name);
  for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (unsigned i = 0; i <= 6; ++i) {
    const auto p = static_cast<PrbsPattern>(i);
    if (prbs_pattern_name(p) == up) return p;
  }
  return fail(
      Code::kInvalidArgument,
      fmt::format("unknown PRBS pattern '{}' (accepted: PRBS7, PRBS9, PRBS11, PRBS13, PRBS15, PRBS23, PRBS31)", name));
}

namespace {
struct PrbsEnd {
  Device* dev = nullptr;
  std::uint32_t card = 0;
  unsigned port = 0;
  std::vector<std::uint64_t> bits0{};
  std::vector<std::uint64_t> errs0{};
};
}  // namespace

Result<std::vector<PrbsPortResult>> run_prbs(System& system, std::uint32_t card, unsigned port,
                                             const PrbsOptions& options) {
  if (card >= system.device_count()) {
    return fail(Code::kOutOfRange, fmt::format("card {} outside 0..{}", card, system.device_count() - 1),
                {.card = card});
  }
  std::vector<PrbsEnd> ends;
  {
    Device& dev = system.device(card);
    auto ps = read_port(dev, port);
    if (!ps) return std::unexpected(ps.error());
    ends.push_back({.dev = &dev, .card = card, .port = port});
    if (ps->neighbor_fabric_id && ps->neighbor_port) {
      auto peer = system.device_by_fabric_id(*ps->neighbor_fabric_id);
      if (peer && (*peer != &dev || *ps->neighbor_port != port)) {
        ends.push_back({.dev = *peer, .card = (*peer)->info().index, .port = *ps->neighbor_port});
      }
    }
  }
  const std::uint32_t mode = pr::kCtrlPrbsPattern.make(static_cast<std::uint32_t>(options.pattern)) |
                             pr::kCtrlPrbsSide.make(options.host_side ? 1 : 0);
  const std::uint32_t run_bits = pr::kCtrlPrbsGen.mask() | pr::kCtrlPrbsCheck.mask();
  const std::uint32_t keep = pr::kCtrlEnable.mask() | pr::kCtrlLoopback.mask();
  // Pattern and side first, then generator and checker (§7.4); counters are read before and
  // after instead of cleared, so FEC history kept by monitors survives.
  for (auto& e : ends) {
    backend::Mmio& m = *card::access(*e.dev).bar0;
    const unsigned lanes = e.dev->info().lanes_per_port;
    m.write32(regs::port_reg(e.port, pr::kPrbsLanes), options.lanes);
    const std::uint32_t ctrl = m.read32(regs::port_reg(e.port, pr::kCtrl));
    if (ctrl == 0xffffffffu) return fail(Code::kUnavailable, "card removed", {.card = e.card, .port = e.port});
    m.write32(regs::port_reg(e.port, pr::kCtrl), (ctrl & keep) | mode);
    for (unsigned l = 0; l < lanes; ++l) {
      e.bits0.push_back(m.read64(regs::lane_reg(e.port, l, pr::lane::kPrbsBits)));
      e.errs0.push_back(m.read64(regs::lane_reg(e.port, l, pr::lane::kPrbsErrors)));
    }
  }
  for (auto& e : ends) {
    backend::Mmio& m = *card::access(*e.dev).bar0;
    const std::uint32_t ctrl = m.read32(regs::port_reg(e.port, pr::kCtrl));
    m.write32(regs::port_reg(e.port, pr::kCtrl), ctrl | run_bits);
  }
  auto& clock = card::clock_of(system);
  clock.sleep_until(clock.now_ns() + options.duration_ns);
  std::vector<PrbsPortResult> out;
  for (auto& e : ends) {
    backend::Mmio& m = *card::access(*e.dev).bar0;
    PrbsPortResult r{.card = e.card, .port = e.port};
    for (unsigned l = 0; l < e.bits0.size(); ++l) {
      if (((options.lanes >> l) & 1u) == 0) continue;
      PrbsLane pl;
      pl.lane = l;
      pl.bits = m.read64(regs::lane_reg(e.port, l, pr::lane::kPrbsBits)) - e.bits0[l];
      pl.errors = m.read64(regs::lane_reg(e.port, l, pr::lane::kPrbsErrors)) - e.errs0[l];
      pl.locked = pr::lane::kLaneStatusPrbsLock.get(m.read32(regs::lane_reg(e.port, l, pr::lane::kLaneStatus))) != 0;
      if (pl.bits > 0) pl.ber = static_cast<double>(pl.errors) / static_cast<double>(pl.bits);
      r.lanes.push_back(pl);
    }
    out.push_back(std::move(r));
  }
  for (auto& e : ends) {
    backend::Mmio& m = *card::access(*e.dev).bar0;
    const std::uint32_t ctrl = m.read32(regs::port_reg(e.port, pr::kCtrl));
    m.write32(regs::port_reg(e.port, pr::kCtrl), ctrl & ~run_bits);
  }
  return out;
}

namespace {
Result<void> check_xcvr_args(const DeviceInfo& info, unsigned port, std::uint8_t offset, std::size_t len) {
  if (port >= info.num_ports) {
    return fail(Code::kOutOfRange, fmt::format("port {} outside 0..{}", port, info.num_ports - 1),
                {.card = info.index, .port = port});
  }
  if (len == 0 || len > mb::xcvr::kMaxLength || offset + len > 256) {
    return fail(
        Code::kOutOfRange,
        fmt::format("transceiver access of {} bytes at offset {}: need 1..128 bytes within 0..255", len, offset),
        {.card = info.index, .port = port});
  }
  return {};
}
}  // namespace

Result<void> read_transceiver(Device& device, unsigned port, std::uint8_t bank, std::uint8_t page, std::uint8_t offset,
                              std::span<std::byte> out) {
  const auto impl = card::access(device);
  if (auto r = check_xcvr_args(impl.info, port, offset, out.size()); !r) return r;
  std::array<std::byte, mb::xcvr::kHdrSize> req{};
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kPort, static_cast<std::uint8_t>(port));
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kBank, bank);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kPage, page);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kOffset, offset);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kLength, static_cast<std::uint8_t>(out.size()));
  auto r = impl.mailbox->call(mb::Command::kXcvrRead, req);
  if (!r) return std::unexpected(Error(r.error()).with({.port = port}));
  if (r->size() != out.size()) {
    return fail(Code::kInternal, fmt::format("XCVR_READ returned {} bytes, asked {}", r->size(), out.size()),
                {.card = impl.info.index, .port = port});
  }
  std::copy(r->begin(), r->end(), out.begin());
  return {};
}

Result<void> write_transceiver(Device& device, unsigned port, std::uint8_t bank, std::uint8_t page, std::uint8_t offset,
                               std::span<const std::byte> data) {
  const auto impl = card::access(device);
  if (auto r = check_xcvr_args(impl.info, port, offset, data.size()); !r) return r;
  std::vector<std::byte> req(mb::xcvr::kHdrSize + data.size());
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kPort, static_cast<std::uint8_t>(port));
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kBank, bank);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kPage, page);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kOffset, offset);
  fw::store_le<std::uint8_t>(req.data(), mb::xcvr::kLength, static_cast<std::uint8_t>(data.size()));
  std::copy(data.begin(), data.end(), req.begin() + mb::xcvr::kData);
  auto r = impl.mailbox->call(mb::Command::kXcvrWrite, req);
  if (!r) return std::unexpected(Error(r.error()).with({.port = port}));
  return {};
}

}  // namespace npo
