// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: Port -- one optical port of a card and its lanes
// (docs/spec/registers.md §7). Status: the register snapshot is implemented; link
// training control arrives with the optics issue (kUnimplemented until then).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "npo/hal/error.hpp"

namespace npo {

class Device;
class System;

/// Port training state (docs/spec/registers.md §7.2).
enum class LinkState : std::uint8_t { kDisabled = 0, kModuleWait, kDataPathInit, kTraining, kFecLock, kUp, kFault };
[[nodiscard]] std::string_view link_state_name(LinkState s) noexcept;

/// Per-lane counters (docs/spec/registers.md §7.3). Counts since reset or clear.
struct LaneCounters {
  std::uint64_t codewords = 0;               ///< RS(544,514) codewords received
  std::uint64_t corrected = 0;               ///< codewords corrected (1..15 symbol errors)
  std::uint64_t uncorrectable = 0;           ///< codewords with > 15 symbol errors
  std::uint64_t symbol_errors = 0;           ///< symbols corrected
  std::array<std::uint64_t, 16> fec_bins{};  ///< codewords by symbol errors 0..15
  double snr_db = 0;                         ///< receiver SNR, dB
  /// Pre-FEC BER estimate = symbol_errors * 10 / (codewords * 5440); nullopt with no codewords.
  std::optional<double> pre_fec_ber;
};

/// A snapshot of one port.
struct PortStatus {
  unsigned port = 0;
  LinkState state = LinkState::kDisabled;
  bool link_up = false;
  bool fec_lock = false;
  bool module_present = false;
  unsigned lane_count = 0;
  std::uint8_t lanes_up = 0;        ///< bitmap over lanes
  std::uint32_t lane_rate_mbd = 0;  ///< per-lane signalling rate, Mbaud
  bool pam4 = false;
  std::optional<std::uint32_t> neighbor_fabric_id;  ///< learned in training
  std::optional<unsigned> neighbor_port;
  std::uint32_t train_count = 0;
  std::uint32_t flap_count = 0;
  std::vector<LaneCounters> lanes;
};

/// Enables (or disables) port `port`: with a module present the card then runs link
/// training (registers.md §7.2: ModuleWait -> DataPathInit -> Training -> FecLock -> Up, each
/// step with its published timeout and a budget of 3 training attempts before Fault).
/// Errors: kOutOfRange (port), kUnavailable (card removed). Thread-safety: safe from any thread.
Result<void> enable_port(Device& device, unsigned port, bool enable = true);

/// Outcome of bring_up_links.
struct LinkBringUp {
  unsigned ports_with_module = 0;  ///< cabled ports found
  unsigned up = 0;                 ///< of those, trained and Up
  unsigned failed = 0;             ///< in Fault, or not Up when the timeout expired
  std::uint64_t elapsed_ns = 0;
};

/// Enables every port with a module on every card of `system` at once and waits until each
/// is Up or in Fault, or `timeout_ns` passes. Errors: kUnavailable (a card was removed).
/// Links still training at the timeout are counted as failed, not an error.
Result<LinkBringUp> bring_up_links(System& system, std::uint64_t timeout_ns = 2'000'000'000);

/// Reads every register of port `port` of `device` in one pass.
/// Errors: kOutOfRange (port >= num_ports), kUnavailable (card removed).
/// Thread-safety: reads only; safe concurrently.
Result<PortStatus> read_port(Device& device, unsigned port);

}  // namespace npo
