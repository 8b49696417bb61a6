// SPDX-License-Identifier: Apache-2.0
// tools/common: the backend a tool opens, the --backend option and the --log-level option,
// read the same way by every tool.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "npo/hal/error.hpp"

namespace npo::tools {

/// Environment variable naming the backend when --backend is not given.
inline constexpr const char* kBackendEnv = "NPO_BACKEND";

/// Environment variable naming the sysfs root the default's card discovery reads instead of
/// /sys (tests point it at a fake tree). It changes only which default is chosen: `vfio:all`
/// itself reads /sys.
inline constexpr const char* kSysfsRootEnv = "NPO_SYSFS_ROOT";

/// Where the backend URI of a tool came from.
enum class BackendSource : unsigned char {
  kOption,       ///< --backend
  kEnvironment,  ///< $NPO_BACKEND
  kCards,        ///< no choice given, NPO cards bound to vfio-pci: "vfio:all"
  kEmulator,     ///< no choice given, no card bound to vfio-pci: npo::kDefaultUri ("emu:mesh8")
};

/// A resolved backend URI and where it came from.
struct BackendChoice {
  std::string uri;
  BackendSource source = BackendSource::kOption;
};

/// The backend a tool opens: `given` (the --backend value, also when empty) if set, else
/// $NPO_BACKEND if set and not empty, else npo::default_uri() ("vfio:all" when an NPO card is
/// bound to vfio-pci under $NPO_SYSFS_ROOT, default /sys; else "emu:mesh8"). A bad URI is not
/// checked here: System::open reports it. Thread-safety: reads the environment and sysfs.
[[nodiscard]] BackendChoice resolve_backend(const std::optional<std::string>& given);

/// The one stderr line a tool prints when it falls back to the emulator with no choice given
/// (BackendSource::kEmulator): "TOOL: no NPO card is bound to vfio-pci; running on the emulator
/// (emu:mesh8); pass --backend to choose".
[[nodiscard]] std::string emulator_fallback_warning(std::string_view tool, std::string_view uri);

/// resolve_backend(given).uri; when that is the emulator fallback, first prints
/// emulator_fallback_warning(tool, uri) on stderr (never on stdout, so --json output stays one
/// JSON document). Every tool calls this once to choose its backend.
[[nodiscard]] std::string backend_uri(const std::optional<std::string>& given, std::string_view tool);

/// The URI a read-only tool (npo-smi, npo-link show/health/ddm/fec/events) opens: an
/// `emu-remote:` URI without a `mode=` option gets `mode=ro`, so the tool watches cards other
/// processes own without taking them (docs/spec/emud-protocol.md §2); `mode=rw` asks for the
/// owner's attach. Other URIs are returned unchanged.
[[nodiscard]] std::string observer_uri(const std::string& uri);

/// The URI a tool that changes some cards (npo-link train/prbs/--train, npo-dma-bench) opens:
/// an `emu-remote:` URI without `mode=`, `owner=` or `card=` gets `owner=K,L...` for `cards`, so only
/// those are attached as owner and the others read-only (a job holding them does not stop the
/// tool; the daemon's refusal names the card asked for). `cards` empty, or another backend:
/// `uri` unchanged. Thread-safety: pure function.
[[nodiscard]] std::string owner_uri(const std::string& uri, const std::vector<unsigned>& cards);

/// How --backend's help says the default (resolve_backend).
inline constexpr const char* kBackendDefaultHelp =
    "default: $NPO_BACKEND, else vfio:all when an NPO card is bound to vfio-pci, else emu:mesh8 (said on stderr)";

/// Adds the backend option `names` (e.g. "--backend" or "-b,--backend") with `help` to `app`,
/// bound to `given`; backend_uri(given, tool) then resolves the URI after parsing.
CLI::Option* add_backend_option(CLI::App& app, std::optional<std::string>& given, const std::string& names,
                                const std::string& help);

/// Adds --log-level (spdlog level names) bound to `level`; empty when not given.
CLI::Option* add_log_level_option(CLI::App& app, std::string& level);

/// The common logging options of every tool: --log-level and --log-format.
struct LogOptions {
  std::string level;            ///< spdlog level name; empty: NPO_LOG_LEVEL, else warn
  std::string format = "text";  ///< "text" or "json" (JSON lines, npo::log::json_line)
};

/// Adds --log-level (as add_log_level_option) and --log-format text|json (checked by CLI11)
/// bound to `options`.
void add_log_options(CLI::App& app, LogOptions& options);

/// Configures the library's logging with `options`. Errors: kInvalidArgument for an unknown
/// level or format name.
Result<void> configure_logging(const LogOptions& options);

/// Whether the tool logs JSON lines (--log-format json): its own event lines should then be
/// npo::log::json_line objects too.
[[nodiscard]] bool json_logs(const LogOptions& options) noexcept;

/// Configures the library's logging (npo::log::configure) with `level`, or with its defaults
/// (NPO_LOG_LEVEL, else warn) when `level` is empty. Errors: kInvalidArgument for an unknown
/// level name.
Result<void> configure_logging(const std::string& level);

}  // namespace npo::tools
