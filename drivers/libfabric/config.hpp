// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the one parser of the provider's environment variables (docs/libfabric.md
// "Environment variables") and its once-per-process notices on stderr.
//
// Every NPO_FI_* / FI_NPO_* variable is read through these functions: an unset or empty
// variable gives the documented default silently; a value that is not of the accepted form is
// reported once per process and variable (one stderr line and FI_LOG warn, as NPO_LOG_LEVEL's
// is) naming the variable, the value, the accepted form and the default used instead -- never
// a silent 0. Values are read at each call (tests change them between calls); only the report
// is once. Thread-safety: every function is safe from any thread.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace npo::fi {

/// Prints `line` (no trailing newline) to stderr and logs it at FI_LOG warn, the first time
/// `key` is seen in this process; later calls with the same key do nothing.
void notice_once(std::string_view key, const std::string& line);

/// A bad value of `var`: notice_once keyed by the variable and value, in the form
/// "npo: VAR='VALUE' is not valid (accepted: ACCEPTED); using DEFAULT".
void report_bad_env(const char* var, std::string_view value, std::string_view accepted, std::string_view fallback);

/// The decimal integer in `var` when it lies in [lo, hi] (leading '+' allowed, nothing after
/// the digits); unset -> nullopt silently; anything else -> reported, nullopt. The caller
/// uses its default for nullopt; `fallback` describes it in the report ("the default 5000").
std::optional<std::int64_t> env_int(const char* var, std::int64_t lo, std::int64_t hi, std::string_view fallback);

/// The value of `var` when it equals one of `choices` ignoring ASCII case, returned as that
/// choice (its spelling); unset -> nullopt silently; anything else -> reported, nullopt.
std::optional<std::string_view> env_choice(const char* var, std::initializer_list<std::string_view> choices,
                                           std::string_view fallback);

/// A switch: 1/on/yes/true -> true, 0/off/no/false -> false (ASCII case ignored); unset ->
/// nullopt silently; anything else -> reported, nullopt.
std::optional<bool> env_bool(const char* var, std::string_view fallback);

}  // namespace npo::fi
