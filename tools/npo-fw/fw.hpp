// SPDX-License-Identifier: Apache-2.0
// npo-fw: what main.cpp (the dispatcher) and the subcommand files share. Each file adds its
// subcommands to the root App and returns how to run them; main.cpp parses and runs the one
// given. card.cpp: the card's own firmware (query, update, commit, rollback, sign, verify, keygen).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "npo/hal/error.hpp"

namespace npo::tools::fw {

inline constexpr const char* kTool = "npo-fw";

/// Exit statuses (docs/firmware.md "npo-fw"): 0 done, 1 refused or failed (the card runs the
/// image it ran before), 2 bad command line, 3 the new image did not come up and the card
/// rolled back to the old one.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitRolledBack = 3;

/// One subcommand: its App and what runs it once parsed.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

/// Adds query, update, commit, rollback, sign, verify and keygen (card.cpp) to `app`.
void add_card_commands(CLI::App& app, std::vector<Command>& out);

/// Adds `module query` and `module update` (module_cli.cpp: a transceiver's firmware through
/// CMIS CDB, from a signed image whose target is a module) to `app`.
void add_module_commands(CLI::App& app, std::vector<Command>& out);

/// The whole file at `path`. Errors: kNotFound (cannot stat), kOutOfRange (more than `max`
/// bytes: an image is at most 16 MiB, reading a bigger one whole proves nothing and costs
/// memory), kDataLoss (read failed). (card.cpp)
Result<std::vector<std::byte>> read_file(const std::string& path, std::uintmax_t max);

}  // namespace npo::tools::fw
