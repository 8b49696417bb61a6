// SPDX-License-Identifier: Apache-2.0
// Invariants every decoded module must keep, whatever the input bytes; a broken one is a
// finding (trap), like a sanitizer report.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "npo/hal/xcvr_decode.hpp"

namespace npo_fuzz {

inline void require(bool ok) {
  if (!ok) __builtin_trap();
}

inline void finite_or_absent(const std::optional<double>& v) { require(!v || std::isfinite(*v)); }

/// Checks a successful decode; exercises the accessors a tool would call.
inline void check(const npo::Result<npo::xcvr::DecodedModule>& r) {
  if (!r) {
    const auto c = r.error().code();
    require(c == npo::Code::kInvalidArgument || c == npo::Code::kDataLoss);
    require(!r.error().to_string().empty());
    return;
  }
  const auto& m = *r;
  require(m.lanes.size() == m.media_lane_count && m.lanes.size() <= 8);
  finite_or_absent(m.temperature_c);
  finite_or_absent(m.supply_voltage_v);
  finite_or_absent(m.max_power_w);
  for (std::size_t i = 0; i < m.lanes.size(); ++i) {
    const auto& l = m.lanes[i];
    require(l.lane == i + 1);
    finite_or_absent(l.tx_bias_ma);
    finite_or_absent(l.tx_power_mw);
    finite_or_absent(l.rx_power_mw);
    finite_or_absent(l.tx_power_dbm);
    finite_or_absent(l.rx_power_dbm);
    // dBm only with a positive power.
    require(!l.tx_power_dbm || (l.tx_power_mw && *l.tx_power_mw > 0));
    require(!l.rx_power_dbm || (l.rx_power_mw && *l.rx_power_mw > 0));
    if (m.lane_flags) require(m.lane_flags->on_lane(l.lane) == l.flags);
    if (!m.monitors_valid) require(!l.tx_bias_ma && !l.tx_power_mw && !l.rx_power_mw);
  }
  if (m.lane_flags) {
    const unsigned mask = m.media_lane_count >= 8 ? 0xffu : (1u << m.media_lane_count) - 1u;
    for (auto b : m.lane_flags->bitmap) require((b & ~mask) == 0);
  }
  for (const auto* t : {&m.thresholds.temperature_c, &m.thresholds.supply_voltage_v, &m.thresholds.tx_power_mw,
                        &m.thresholds.tx_bias_ma, &m.thresholds.rx_power_mw}) {
    if (*t) {
      require(std::isfinite((*t)->high_alarm) && std::isfinite((*t)->low_alarm) && std::isfinite((*t)->high_warning) &&
              std::isfinite((*t)->low_warning));
    }
  }
  for (auto f : m.module_flags) require(!npo::xcvr::module_flag_name(f).empty());
  require(!m.identifier_name.empty());
  require(!npo::xcvr::spec_name(m.spec).empty());
}

/// Runs `decode` on a copy of the input whose byte 0 is forced to one of `ids` (chosen by the
/// input's own byte 0), so the fuzzer spends its time past the identifier check.
template <typename Decode, std::size_t N>
void run_with_identifier(const std::uint8_t* data, std::size_t size, const std::uint8_t (&ids)[N], Decode decode) {
  std::vector<std::byte> b(size);
  for (std::size_t i = 0; i < size; ++i) b[i] = static_cast<std::byte>(data[i]);
  if (!b.empty()) b[0] = static_cast<std::byte>(ids[data[0] % N]);
  check(decode(b));
  check(npo::xcvr::decode_module(b));
}

}  // namespace npo_fuzz
