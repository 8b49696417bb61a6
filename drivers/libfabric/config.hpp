// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the provider's runtime parameters (docs/libfabric.md "Environment variables",
// fi_npo(7)) -- one table, defined with libfabric's fi_param_define and read through
// fi_param_get -- and the once-per-process notices on stderr.
//
// Every FI_NPO_* variable is read through these functions: an unset or empty variable gives
// the documented default silently; a value that is not of the accepted form is reported once
// per process and variable (one stderr line and FI_LOG warn, as NPO_LOG_LEVEL's is) naming
// the variable, the value, the accepted form and the default used instead -- never a silent
// 0. Values are read at each call (tests change them between calls); only the report is once.
// The pre-0.2 names NPO_FI_X are aliases of FI_NPO_X while FI_NPO_X is unset or empty, with a
// deprecation notice once per process; FI_NPO_X wins when both are set.
// Thread-safety: every function is safe from any thread.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <rdma/providers/fi_prov.h>

namespace npo::fi {

/// The provider's parameters; `param_table()[p]` describes `p`.
enum class Param : unsigned {
  kBackend,
  kCard,
  kFault,
  kFaultMs,
  kLayering,
  kPollBackoff,
  kRingLanes,
  kStallMs,
  kStats,
  kTrace,
  kTraceMax,
  kZeroCopy,
};

/// One parameter: libfabric's name (lower case; the variable is FI_NPO_<NAME>), its type for
/// fi_info -e, the help text fi_info -e and fi_npo(7) show (accepted form, unit, default),
/// the default as a bad value's report names it, and whether NPO_FI_<NAME> is an alias.
struct ParamSpec {
  Param id;
  const char* name;
  fi_param_type type;
  const char* help;
  const char* fallback;
  bool alias;
};

/// Every parameter, in Param order.
std::span<const ParamSpec> param_table();

/// The variable of `p`: "FI_NPO_FAULT_MS".
std::string param_var(Param p);

/// Defines every parameter with fi_param_define on `prov` (from fi_prov_ini, before the
/// provider is returned). Returns 0 or the first negative fi_errno.
int define_params(const fi_provider* prov);

/// Prints `line` (no trailing newline) to stderr and logs it at FI_LOG warn, the first time
/// `key` is seen in this process; later calls with the same key do nothing.
void notice_once(std::string_view key, const std::string& line);

/// A bad value of `var`: notice_once keyed by the variable and value, in the form
/// "npo: VAR='VALUE' is not valid (accepted: ACCEPTED); using DEFAULT".
void report_bad_env(const char* var, std::string_view value, std::string_view accepted, std::string_view fallback);

/// A set parameter: its value (non-empty) and the variable it came from (FI_NPO_X, or the
/// alias NPO_FI_X when FI_NPO_X is unset or empty).
struct ParamValue {
  const char* value;
  std::string var;
};

/// The value of `p` through fi_param_get, else its alias (deprecation notice once); nullopt
/// when neither is set or both are empty.
std::optional<ParamValue> param_value(Param p);

/// The string of `p` (param_value's value), or null.
const char* param_str(Param p);

/// True when FI_NPO_X (or the alias) is set, even empty.
bool param_present(Param p);

/// The decimal integer of `p` when it lies in [lo, hi] (leading '+' allowed, nothing after
/// the digits); unset -> nullopt silently; anything else -> reported, nullopt.
std::optional<std::int64_t> param_int(Param p, std::int64_t lo, std::int64_t hi);

/// The value of `p` when it equals one of `choices` ignoring ASCII case, returned as that
/// choice (its spelling); unset -> nullopt silently; anything else -> reported (naming
/// `fallback`, else the table's), nullopt.
std::optional<std::string_view> param_choice(Param p, std::initializer_list<std::string_view> choices,
                                             std::string_view fallback = {});

/// A switch: 1/on/yes/true -> true, 0/off/no/false -> false (ASCII case ignored); unset ->
/// nullopt silently; anything else -> reported, nullopt.
std::optional<bool> param_bool(Param p);

}  // namespace npo::fi
