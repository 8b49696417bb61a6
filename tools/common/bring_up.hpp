// SPDX-License-Identifier: Apache-2.0
// tools/common: the one fabric bring-up every tool calls (train the links, optionally
// program routes). One function, so the tools switch to a library call in one place.
#pragma once

#include <cstdint>
#include <expected>
#include <optional>
#include <string_view>

#include "npo/hal/bring_up.hpp"
#include "npo/hal/error.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/topology.hpp"

namespace npo::tools {

/// Default cap on a whole bring-up, ns of the platform clock (emulated time under
/// clock=virtual): 2 s, the library's bring_up_links default; npo-smi and npo-dma-bench use
/// it. npo-link passes its own 10 s explicitly (as it always did).
inline constexpr std::uint64_t kDefaultBringUpTimeoutNs = 2'000'000'000;

/// What bring_up does.
struct BringUpOptions {
  /// Cap on the whole bring-up, ns of the platform clock; ports still training then end with
  /// their stage's timeout code (a result, not an error).
  std::uint64_t timeout_ns = kDefaultBringUpTimeoutNs;
  /// Also discover the graph training exchanged, compute routes and program every card's
  /// route table (registers.md §8), so remote DMA reaches cards that are not neighbours.
  bool program_routes = false;
  /// false: train nothing, read the links as they are (npo::BringUpOptions::train): waits up
  /// to timeout_ns for ports still training, then discovers and computes.
  bool train = true;
};

/// Outcome of bring_up.
/// What the bring-up produced: per-port training results, the discovered graph and its routes
/// (npo::bring_up_fabric's result; routes are programmed only with program_routes).
using FabricUp = FabricBringUp;

/// A failed bring-up: the step that failed ("link bring-up" or "routing") and its error.
struct BringUpFailure {
  std::string_view step;
  Error error;
};

/// Enables and trains every port of every card of `system` (bring_up_links with
/// options.timeout_ns; with options.train false: none, the ports are read as they are), then
/// with options.program_routes runs route_fabric. Per-port training
/// failures are results in FabricUp::links. On a System whose cards are all attached read-only
/// nothing is trained (bring_up_fabric, npo/hal/bring_up.hpp). Errors: those of the library calls, tagged with the
/// step; kUnavailable "card removed" naming the card. Thread-safety: one bring-up per System at a time.
std::expected<FabricUp, BringUpFailure> bring_up(System& system, const BringUpOptions& options = {});

}  // namespace npo::tools
