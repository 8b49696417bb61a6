// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: topology and scenario files -- the one reader and writer of the YAML /
// JSON text form of a plan (npo/hal/topology_plan.hpp) and of scripted-fault scenarios.
// docs/topology.md is the format's reference. This is the only hal code that uses yaml-cpp
// (built as its own part so a library for real cards can leave it out).
// Hardened rules for every file read here: at most 16 MiB, one YAML document, a key given
// twice refused, non-finite numbers refused, names not in UTF-8 refused, unknown fields
// refused, and every error names the entry and field ("faults[2].at_ms: ...").
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "npo/hal/error.hpp"
#include "npo/hal/topology_plan.hpp"

namespace npo {

/// Largest topology or scenario file read (a 1024-card fat-tree in JSON is ~1 MB), bytes.
inline constexpr std::size_t kTopologyFileMaxBytes = std::size_t{16} << 20;

/// Parses a topology file's text (YAML, or JSON which YAML reads too) and validates the plan
/// (validate_fabric_spec); the `faults` entries are parsed (times, numbers, fields) but their
/// meaning is checked by the emulator (npo::emu::check_scenario). Errors: kInvalidArgument
/// naming the entry and field (syntax errors carry line:column).
Result<FabricSpec> parse_fabric_spec(std::string_view text);
/// Reads and parses a topology file (a regular file or a pipe, at most 16 MiB).
/// Errors: kNotFound/kPermissionDenied (open), kInvalidArgument for a directory or a larger
/// file, the errno of a failed read, else as parse_fabric_spec with the path as prefix.
Result<FabricSpec> load_fabric_spec(const std::filesystem::path& path);

/// Writes the spec as YAML (one line per cable) that parse_fabric_spec reads back equal.
[[nodiscard]] std::string to_yaml(const FabricSpec& spec);
/// Writes the spec as JSON (indent 2) that parse_fabric_spec reads back equal.
[[nodiscard]] std::string to_json(const FabricSpec& spec);

/// A scenario file (`scenario=PATH`, Emulator::load_scenario_text): scripted faults layered on
/// a plan. {seed?: N, faults: [...]}, fault entries as in a topology file's `faults`.
struct FabricScenario {
  std::optional<std::uint64_t> seed = std::nullopt;  ///< recorded for the reader; the URI's seed= rules
  std::vector<FabricFault> faults;
  friend bool operator==(const FabricScenario&, const FabricScenario&) = default;
};

/// Parses a scenario's text with the topology files' rules (one document, no duplicate or
/// unknown keys, finite numbers, times that fit 64-bit ns, at most one of at_ns/at_us/at_ms
/// and of duration_*). Fault kinds and targets are checked by the emulator.
/// Errors: kInvalidArgument prefixed "scenario: " and naming the entry and field.
Result<FabricScenario> parse_fabric_scenario(std::string_view text);
/// Reads (at most 16 MiB, as load_fabric_spec) and parses a scenario file.
/// Errors: as load_fabric_spec, then as parse_fabric_scenario with the path as prefix.
Result<FabricScenario> load_fabric_scenario(const std::filesystem::path& path);

}  // namespace npo
