// SPDX-License-Identifier: Apache-2.0
// Emulator internals: scripted faults, the scenario layered on a topology plan. One validator
// for every way a fault arrives -- Emulator::inject, scenario files and text (read by the
// topology files' parser, npo/hal/topology_file.hpp), a topology file's `faults`, and
// check_scenario for `npo-emu topo check`. docs/topology.md "Scenarios".
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "npo/emu/emulator.hpp"
#include "npo/hal/topology_plan.hpp"

namespace npo::emu {

/// What a fault may target: the cards of the system and each card's port count.
struct FaultTargets {
  std::vector<unsigned> ports_of;  ///< per card index: optical ports; size = cards
  /// Targets of a plan.
  static FaultTargets of(const FabricSpec& plan);
  /// Targets of a system configuration.
  static FaultTargets of(const SystemConfig& cfg);
};

/// Why a fault cannot be scheduled: the code (kOutOfRange for a target beyond the system,
/// kInvalidArgument otherwise), the field at fault ("card", "port", ...) and the reason.
struct FaultProblem {
  Code code = Code::kInvalidArgument;
  std::string field;
  std::string text;
};

/// The one fault validator: card, engine, queue, port and lane within the system, the fields
/// the kind needs, count >= 1, a finite value (ber_ramp: in (0, 0.5)). nullopt: schedulable.
[[nodiscard]] std::optional<FaultProblem> fault_problem(const Fault& f, const FaultTargets& targets);

/// The faults of scenario entries, every one checked: kind known and fault_problem clean.
/// Errors: kInvalidArgument "faults[i].FIELD: reason" for the first bad entry.
Result<std::vector<Fault>> faults_of_entries(std::span<const FabricFault> entries, const FaultTargets& targets);

/// faults_of_entries(plan.faults, FaultTargets::of(plan)).
Result<std::vector<Fault>> faults_of_plan(const FabricSpec& plan);

}  // namespace npo::emu
