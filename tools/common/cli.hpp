// SPDX-License-Identifier: Apache-2.0
// tools/common: the one place a tool's command line is parsed and a bad one is reported.
// Every tool exits 2 on a bad command line (CLI11's own codes, 104..114, are not exit
// statuses scripts can rely on), with one clear "TOOL: WHAT" line on stderr.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "npo/hal/error.hpp"

namespace npo::tools {

/// Exit status of every tool for a bad command line (or a malformed backend URI).
inline constexpr int kExitUsage = 2;

/// Parses `argv` into `app`. Returns nullopt when the tool should go on; otherwise the exit
/// status to return at once: 0 after --help / --version (printed to stdout), kExitUsage after
/// printing "TOOL[ SUB]: MESSAGE" and "Run with --help for more information." to stderr.
/// The message replaces CLI11's misleading ones: an unknown subcommand is
/// "unknown subcommand 'shwo' (did you mean 'show'? subcommands: ...)", a misspelled option
/// "unknown option '--topolgy' (did you mean '--topology'?)" (instead of "--topology is
/// required"), an option given before the subcommand it belongs to says where it goes.
/// Thread-safety: not thread-safe (prints).
[[nodiscard]] std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv,
                                                    std::string_view tool);

/// The --version line of `tool`: "TOOL (npo-hal) X.Y.Z" with the headers' version
/// (NPO_HAL_VERSION_STRING, from the top-level CMakeLists.txt's project version), then
/// " (git COMMIT)" when the library was built from a git checkout, and
/// "; libnpo-hal A.B.C loaded" when the shared library found at run time is another version.
[[nodiscard]] std::string version_text(std::string_view tool);

/// Adds `--version` to `app` (CLI11's set_version_flag): prints version_text(tool) to stdout
/// and exits 0 (through parse_command_line). Every tool calls it once on its root App.
void add_version_flag(CLI::App& app, std::string_view tool);

/// The exit status for System::open's `error`: kExitUsage for a malformed backend URI
/// (kInvalidArgument: unknown scheme, bad option, missing directory), else 1.
[[nodiscard]] int open_failure_status(const Error& error);

}  // namespace npo::tools
