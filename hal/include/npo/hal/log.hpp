// SPDX-License-Identifier: Apache-2.0
// npo-hal: logging on spdlog, one logger per subsystem.
//
// Loggers are named "npo.<subsystem>" and share one sink (stderr by default).
// The level comes from LogOptions, else from the NPO_LOG_LEVEL environment variable
// (trace, debug, info, warn, error, critical, off), else "warn". Format is either
// human text or JSON lines (one object per record: ts, level, logger, msg).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <spdlog/logger.h>

#include "npo/hal/error.hpp"

namespace npo::log {

/// The library's subsystems; each has its own logger.
enum class Subsystem : unsigned {
  kCore,
  kBackend,
  kDma,
  kMemory,
  kMailbox,
  kOptics,
  kTopology,
  kVfio,
  kEmulator,
  kTools
};
inline constexpr unsigned kNumSubsystems = 10;

/// Name of a subsystem's logger, e.g. "npo.dma".
[[nodiscard]] std::string_view logger_name(Subsystem s) noexcept;

enum class Format { kText, kJsonLines };

struct Options {
  /// Level name; unset: NPO_LOG_LEVEL or "warn".
  std::optional<std::string> level{};
  Format format = Format::kText;
  /// Path of a file to append to; empty: stderr.
  std::string file{};
};

/// (Re)configures every npo logger. Errors: kInvalidArgument for an unknown level name
/// (the message lists the accepted names); kUnavailable when the file cannot be opened.
/// Thread-safety: safe to call concurrently with logging; calls themselves are serialised.
Result<void> configure(const Options& options);

/// The logger of a subsystem, created on first use with the current configuration.
/// Never null. Thread-safety: safe from any thread.
[[nodiscard]] spdlog::logger& get(Subsystem s);

/// Parses a level name ("warn" or "warning", ...). Errors: kInvalidArgument.
Result<spdlog::level::level_enum> parse_level(std::string_view name);

}  // namespace npo::log
