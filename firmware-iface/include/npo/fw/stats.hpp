// SPDX-License-Identifier: Apache-2.0
// npo-hal firmware interface: the port statistics block the card writes to host memory
// when the host rings GLOBAL.STATS_CTRL (spec registers.md §7.5). One DMA per card gives a
// monitor every port and lane counter, status and DDM mirror without per-register MMIO
// round trips (what lets one LinkMonitor snapshot cover 1024 cards).
//
// Layout (little-endian, offsets in bytes):
//   [0, 64)                       StatsHeader
//   [64 + p * kPortRecordBytes)   PortRecord of port p, p < num_ports, each followed by
//                                 kLanesPerPort LaneRecords (physical lane order)
// The card writes the records first and the header's `seq` last (a release store), so a
// host that sees `seq` equal to what it rang reads a complete, consistent block: all
// counters of one port are sampled at one instant (unlike separate register reads).
#pragma once

#include <cstddef>
#include <cstdint>

#include "npo/fw/regs.hpp"

namespace npo::fw::stats {

/// "NPOS" little-endian.
inline constexpr std::uint32_t kMagic = 0x534f504e;
inline constexpr std::uint32_t kVersion = 1;

struct StatsHeader {
  std::uint32_t magic;      ///< kMagic
  std::uint32_t version;    ///< kVersion
  std::uint32_t num_ports;  ///< port records that follow
  std::uint32_t lanes_per_port;
  std::uint64_t timestamp_ns;  ///< GLOBAL.TIMESTAMP when the counters were sampled
  std::uint32_t fabric_id;
  std::uint32_t reserved0;
  std::uint8_t reserved[28];
  std::uint32_t seq;  ///< the value written to STATS_CTRL; written last
};
static_assert(sizeof(StatsHeader) == 64);

/// One lane: the LANE block registers (registers.md §7.3) and the DDM mirrors.
struct LaneRecord {
  std::uint64_t codewords;
  std::uint64_t corrected;
  std::uint64_t uncorrectable;
  std::uint64_t symbol_errors;
  std::uint64_t prbs_bits;
  std::uint64_t prbs_errors;
  std::uint64_t fec_bins[regs::kFecBins];
  std::uint32_t snr;          ///< LANE.SNR, signed 1/256 dB
  std::uint32_t tx_eq;        ///< LANE.TX_EQ
  std::uint32_t lane_status;  ///< LANE.LANE_STATUS
  std::uint32_t rx_power;     ///< LANE.RX_POWER, 0.1 uW
  std::uint32_t tx_power;     ///< LANE.TX_POWER, 0.1 uW
  std::uint32_t tx_bias;      ///< LANE.TX_BIAS, uA
  std::uint8_t reserved[8];
};
static_assert(sizeof(LaneRecord) == 208);

/// One port: the PORT block registers (registers.md §7.1).
struct PortRecord {
  std::uint32_t ctrl;
  std::uint32_t status;
  std::uint32_t lane_map;
  std::uint32_t speed;
  std::uint64_t neighbor;
  std::uint32_t train_count;
  std::uint32_t flap_count;
  std::uint32_t train_timeout;
  std::uint32_t event_status;
  std::uint32_t lane_enable;
  std::uint32_t train_result;
  std::uint32_t up_count;
  std::uint32_t coeff_updates;
  std::uint32_t prbs_lanes;
  std::uint32_t module_temp;  ///< signed 1/256 degC
  std::uint32_t module_vcc;   ///< 100 uV
  std::uint8_t reserved[4];
  LaneRecord lanes[regs::kLanesPerPort];
};
static_assert(sizeof(PortRecord) == 72 + 8 * 208);

inline constexpr std::size_t kHeaderBytes = sizeof(StatsHeader);
inline constexpr std::size_t kPortRecordBytes = sizeof(PortRecord);

/// Bytes of the stats block of a card with `num_ports` ports.
[[nodiscard]] constexpr std::size_t block_bytes(unsigned num_ports) noexcept {
  return kHeaderBytes + num_ports * kPortRecordBytes;
}
static_assert(block_bytes(regs::kMaxPorts) <= 64 * 1024);

}  // namespace npo::fw::stats
