// SPDX-License-Identifier: Apache-2.0
// Emulator internals shared by the port model's sources (port.cpp, port_channel.cpp,
// port_cmis.cpp): state machine timings (registers.md §7.2), the published state word, CMIS
// 5.2 byte addresses the module model uses, and what the receivers of a port see.
// Not for use outside the port model.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "npo/fw/regs.hpp"
#include "optics.hpp"
#include "port.hpp"

namespace npo::emu::portdef {

namespace regs = fw::regs;
namespace pr = regs::port;
namespace ln = regs::port::lane;
using regs::port::LinkState;

inline constexpr std::uint64_t kMsNs = 1'000'000;
inline constexpr std::uint64_t kModulePwrUpNs = 8 * kMsNs;   // page 01h byte 167 advertises 5..10 ms (code 2)
inline constexpr std::uint64_t kDpInitNs = 8 * kMsNs;        // page 01h byte 144 advertises 5..10 ms (code 2)
inline constexpr std::uint64_t kFirmwarePollNs = 1 * kMsNs;  // firmware reads the module state
inline constexpr std::uint64_t kTrainNs = 20 * kMsNs;        // one training exchange round
inline constexpr std::uint64_t kFecLockNs = 2 * kMsNs;       // alignment-marker lock on a clean lane
inline constexpr std::uint64_t kFecPollNs = 10 * kMsNs;
inline constexpr std::uint64_t kTModuleNs = 5000 * kMsNs;         // §7.2 t_module
inline constexpr std::uint64_t kTDataPathNs = 2000 * kMsNs;       // §7.2 t_datapath
inline constexpr std::uint64_t kTFecNs = 100 * kMsNs;             // §7.2 t_fec
inline constexpr std::uint32_t kTrainAttempts = 3;                // §7.2 N_attempts
inline constexpr std::uint64_t kLinkLossDebounceNs = 10 * kMsNs;  // §7.2 link-loss debounce
inline constexpr std::uint8_t kAppLanes = 0xff;                   // AppSel 1: 8 host + 8 media lanes
inline constexpr std::uint64_t kForever = ~std::uint64_t{0};

// Published state word (Port::published()).
inline constexpr std::uint32_t kPubRxReady = 1u << 4;
inline constexpr unsigned kPubTxShift = 8;
inline constexpr unsigned kPubEnableShift = 16;
inline constexpr std::uint32_t kPubPrbsGen = 1u << 24;
inline constexpr unsigned kPubPatternShift = 25;

// CMIS 5.2 byte addresses used by the model (lower memory / upper page offsets 128..255).
inline constexpr unsigned kCmisModuleState = 3;  // bits 3:1
inline constexpr unsigned kCmisModuleFlags = 8;  // bit 0: L-ModuleStateChanged (latched)
inline constexpr unsigned kCmisTemp = 14;
inline constexpr unsigned kCmisVcc = 16;
inline constexpr unsigned kCmisGlobalCtrl = 26;  // bit 4 LowPwrRequestSW, bit 3 SoftwareReset
inline constexpr std::uint8_t kLowPwrRequestSw = 0x10;
inline constexpr unsigned kCmisMediaType = 85;
inline constexpr unsigned kCmisAppDesc = 86;
inline constexpr std::uint8_t kModLowPwr = 1, kModPwrUp = 2, kModReady = 3;
inline constexpr std::uint8_t kDpDeactivated = 1, kDpInit = 2, kDpActivated = 4;
// Page 10h.
inline constexpr unsigned kP10DpDeinit = 128;
inline constexpr unsigned kP10ApplyDpInit = 143;
inline constexpr unsigned kP10DpConfig = 145;  // 8 lanes: AppSel 7:4, DataPathID 3:1
// Page 11h.
inline constexpr unsigned kP11DpState = 128;     // 4 bytes, nibble per lane (lane 1 = low nibble of 128)
inline constexpr unsigned kP11FlagsFirst = 134;  // latched flags 134..152 clear on read
inline constexpr unsigned kP11FlagsLast = 152;
inline constexpr unsigned kP11RxLos = 147;
inline constexpr unsigned kP11RxLol = 148;
inline constexpr unsigned kP11TxPower = 154;
inline constexpr unsigned kP11TxBias = 170;
inline constexpr unsigned kP11RxPower = 186;
inline constexpr unsigned kP11ConfigStatus = 202;  // 4 bytes, nibble per lane: 1 = ConfigSuccess
inline constexpr unsigned kP11ActiveSet = 206;     // 8 lanes: AppSel 7:4, DataPathID 3:1

inline bool training_like(LinkState s) {
  return s == LinkState::kTraining || s == LinkState::kFecLock || s == LinkState::kUp;
}
inline std::uint32_t sat_inc(std::uint32_t v) { return v == 0xffffffffu ? v : v + 1; }
inline void put_be16(std::array<std::uint8_t, 128>& pg, unsigned off, std::uint16_t v) {
  pg[off - 128] = static_cast<std::uint8_t>(v >> 8);
  pg[off - 127] = static_cast<std::uint8_t>(v & 0xff);
}
inline std::uint16_t clamp_u16(double v) { return static_cast<std::uint16_t>(std::clamp(v + 0.5, 0.0, 65535.0)); }
inline double lane_tx_offset_db(std::uint64_t module_seed, unsigned l) {
  return (optics::Rng(optics::mix_seed(module_seed, l, 1)).uniform() - 0.5) * 0.3;  // ±0.15 dB
}
inline double lane_bias_offset_ma(std::uint64_t module_seed, unsigned l) {
  return (optics::Rng(optics::mix_seed(module_seed, l, 2)).uniform() - 0.5) * 0.6;
}
inline std::uint8_t page_checksum(const std::array<std::uint8_t, 128>& pg, unsigned first, unsigned last) {
  unsigned sum = 0;
  for (unsigned i = first; i <= last; ++i) sum += pg[i - 128];
  return static_cast<std::uint8_t>(sum & 0xff);
}

inline constexpr std::uint8_t kCmisIdentifierQsfpDd = 0x18;  // SFF-8024 Table 4-1

}  // namespace npo::emu::portdef

namespace npo::emu {

/// What the receivers of a port see (Port::link_view): peer, channel, far transmitter.
struct Port::LinkView {
  bool has_peer = false;
  bool loopback = false;
  std::uint32_t pub = 0;      ///< far end's published word
  std::uint8_t far_tx = 0;    ///< lanes the far transmitter drives
  std::uint8_t far_prbs = 0;  ///< lanes the far end transmits PRBS on
  std::uint32_t peer_fabric_id = 0;
  unsigned peer_port = 0;
  ChannelParams ch{};
  double far_temp_c = 25.0;  ///< far module temperature (its Tx power follows it)
  std::uint64_t far_seed = 0;
};

}  // namespace npo::emu
