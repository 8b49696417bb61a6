// SPDX-License-Identifier: Apache-2.0
// npo-hal: logging on spdlog, one logger per subsystem.
//
// Loggers are named "npo.<subsystem>" and share one sink (stderr by default).
// The level comes from LogOptions, else from the NPO_LOG_LEVEL environment variable
// (trace, debug, info, warn, error, critical, off), else "warn". Format is either
// human text or JSON lines for ELK/Loki (one object per record: time, level, logger, card,
// port, lane, queue, code, message; docs/observability.md §Logs).
#pragma once

#include <cstdint>
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

/// The fields of one JSON log line that come from its message: the number after the first
/// whole word `card`, `port`, `lane`, `queue` followed by '=' or a space ("card=3" as
/// npo::Error::to_string writes it, "card 3" as the library's messages do), and `code=WORD` or else the first
/// npo::Error code name followed by ": " (e.g. "unavailable: ..."). Unset when the message has none. Thread-safety:
/// pure function.
struct LineFields {
  std::optional<std::uint64_t> card, port, lane, queue;
  std::optional<std::string> code;
};
[[nodiscard]] LineFields extract_fields(std::string_view message);

/// One JSON log line without the newline: {"time":"RFC 3339 UTC with microseconds","level",
/// "logger","card","port","lane","queue","code","message"}; the fields from extract_fields
/// are null when absent; `message` is escaped (RFC 8259 §7; bytes that are not UTF-8 pass
/// through unchanged). `time_ns`: ns since the Unix epoch (system clock). The same line the
/// JSON sink writes, for programs that print events themselves (npo-emud).
/// Thread-safety: pure function.
[[nodiscard]] std::string json_line(std::uint64_t time_ns, std::string_view level, std::string_view logger,
                                    std::string_view message);

/// Parses a level name ("warn" or "warning", ...). Errors: kInvalidArgument.
Result<spdlog::level::level_enum> parse_level(std::string_view name);

}  // namespace npo::log
