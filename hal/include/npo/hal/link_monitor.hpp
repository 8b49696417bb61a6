// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: LinkMonitor -- one batched snapshot of every port and lane of every
// card (registers.md §7). Per-lane health verdicts (LaneHealth) arrive with the optics
// issue's channel model; the snapshot itself is real register data.
#pragma once

#include <cstdint>
#include <vector>

#include "npo/hal/error.hpp"
#include "npo/hal/port.hpp"

namespace npo {

class System;

/// Health verdict of a lane, combining pre-FEC BER, FEC bins, SNR and DDM with hysteresis.
enum class LaneHealth : std::uint8_t { kGood, kDegraded, kFailing, kDown };

/// One snapshot of all ports of all cards.
struct LinkSnapshot {
  std::uint64_t timestamp_ns = 0;
  struct CardPorts {
    std::uint32_t card = 0;
    std::vector<PortStatus> ports;
  };
  std::vector<CardPorts> cards;
};

/// Batched link monitoring. Thread-safety: one thread per LinkMonitor.
class LinkMonitor {
 public:
  explicit LinkMonitor(System& system) : system_(&system) {}
  /// Reads every port and lane of every card in one pass, card by card.
  /// Errors: kUnavailable (a card was removed).
  Result<LinkSnapshot> snapshot();

 private:
  System* system_;
};

}  // namespace npo
