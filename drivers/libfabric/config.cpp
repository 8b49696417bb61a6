// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the parameter table, its fi_param_define / fi_param_get, the value parsers and
// the once-per-process notices (config.hpp).
#include "config.hpp"

#include <cctype>
#include <charconv>
#include <set>

#include "provider.hpp"

namespace npo::fi {

namespace {

// The one table of the provider's parameters (docs/libfabric.md "Environment variables" and
// docs/man/fi_npo.7 list the same; ctest fi_params checks all three agree). help: what
// fi_info -e prints after "npo: ".
constexpr ParamSpec kParams[] = {
    {Param::kBackend, "backend", FI_PARAM_STRING,
     "Backend URI: emu-remote:DIR (an npo-emud), emu:TOPOLOGY (an emulator inside the process) or vfio:... "
     "(real cards) (default: NPO_BACKEND, else emu-remote:/run/npo-emud if that directory exists, else vfio:all)",
     "the default", true},
    {Param::kCard, "card", FI_PARAM_INT,
     "Use only card K: an integer 0..65535 (default: a free card, claimed for the process; inside a parallel "
     "job the local rank's first)",
     "a free card (the local rank's first inside a parallel job)", false},
    {Param::kFault, "fault", FI_PARAM_STRING,
     "What a fault does: abort (print npo: fatal and end the process) or report (on the EQ only) "
     "(default: abort inside a parallel job, else report)",
     "the default report", true},
    {Param::kFaultMs, "fault_ms", FI_PARAM_INT,
     "How long a peer may keep failing before it is a fault: an integer 1..86400000, in ms (default: 5000)",
     "the default 5000", true},
    {Param::kLayering, "layering", FI_PARAM_BOOL,
     "Let utility providers (ofi_rxd) layer on the DGRAM core: 1, on, yes, true or 0, off, no, false (default: off)",
     "the default off", true},
    {Param::kPollBackoff, "poll_backoff", FI_PARAM_STRING,
     "What an empty CQ poll does after 64 in a row: yield (also 1, on: sched_yield for 20 ms, then sleep), "
     "sleep (1 us) or 0, off (spin) (default: yield)",
     "the default yield", true},
    {Param::kRingLanes, "ring_lanes", FI_PARAM_INT,
     "Lanes per receive ring: an integer 1..4096 (default: 4 per card + 4, at least 64)",
     "the default (4 per card + 4, at least 64)", true},
    {Param::kStallMs, "stall_ms", FI_PARAM_INT,
     "Diagnostic: after this long without a completion or an arrival, log the endpoint's state once (warn "
     "level): an integer 0..86400000, in ms, 0 off (default: 0)",
     "the default 0 (off)", true},
    {Param::kStats, "stats", FI_PARAM_BOOL,
     "Print each domain's one-sided op counters and DMA figures to stderr when it closes: 1, on, yes, true or "
     "0, off, no, false (default: off)",
     "the default off", true},
    {Param::kTrace, "trace", FI_PARAM_STRING,
     "Write a trace-event JSON file of the process's DMA ops, messages and faults: a file path, %p the pid, "
     "%r the MPI rank (default: unset, no trace)",
     "no trace", true},
    {Param::kTraceMax, "trace_max", FI_PARAM_SIZE_T,
     "Events kept per process with FI_NPO_TRACE: an integer 0..1099511627776 (default: 1000000)", "the default 1000000",
     true},
    {Param::kZeroCopy, "zero_copy", FI_PARAM_BOOL,
     "Rendezvous chunks read in place from the sender's buffer (off: staged by a CPU copy): 1, on, yes, true "
     "or 0, off, no, false (default: on)",
     "the default on", true},
};
static_assert(std::size(kParams) == static_cast<unsigned>(Param::kZeroCopy) + 1);

constexpr bool table_in_order() {
  for (unsigned i = 0; i < std::size(kParams); ++i)
    if (static_cast<unsigned>(kParams[i].id) != i) return false;
  return true;
}
static_assert(table_in_order(), "kParams is indexed by Param");

const ParamSpec& spec(Param p) { return kParams[static_cast<unsigned>(p)]; }

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string alias_var(Param p) { return "NPO_FI_" + upper(spec(p).name); }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// FI_NPO_X through fi_param_get: null when unset or empty. A STRING parameter's value is
// fi_param_get's; the others' typed value (libfabric parses an INT with strtol, "abc" as 0) is
// replaced by the text itself, which the callers parse strictly.
const char* get_new(Param p) {
  const ParamSpec& s = spec(p);
  const std::string var = param_var(p);
  union {
    char* str;
    int i;
    std::size_t z;
  } out{};
  const int rc = fi_param_get(&g_provider, s.name, &out);
  const char* v = nullptr;
  if (rc == -FI_ENODATA) return nullptr;
  if (rc == 0 && s.type == FI_PARAM_STRING)
    v = out.str;
  else  // set (a bool libfabric cannot parse: -FI_EINVAL), or not defined (no fi_prov_ini ran)
    v = std::getenv(var.c_str());
  return (v && *v) ? v : nullptr;
}

}  // namespace

std::span<const ParamSpec> param_table() { return kParams; }

std::string param_var(Param p) { return "FI_NPO_" + upper(spec(p).name); }

int define_params(const fi_provider* prov) {
  for (const ParamSpec& s : kParams) {
    const int rc = fi_param_define(prov, s.name, s.type, "%s", s.help);
    if (rc != 0) return rc;
  }
  return 0;
}

void notice_once(std::string_view key, const std::string& line) {
  // Static objects, not heap ones: libfabric unloads the module at fi_fini (its destructors
  // run then), and a heap set left behind would be a leak under LeakSanitizer.
  static std::mutex mu;
  static std::set<std::string, std::less<>> seen;
  {
    std::lock_guard lk(mu);
    if (!seen.emplace(key).second) return;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  warn(FI_LOG_CORE, line);
}

void report_bad_env(const char* var, std::string_view value, std::string_view accepted, std::string_view fallback) {
  std::string key = std::string("env:") + var + "=" + std::string(value);
  notice_once(key, "npo: " + std::string(var) + "='" + std::string(value) +
                       "' is not valid (accepted: " + std::string(accepted) + "); using " + std::string(fallback));
}

std::optional<ParamValue> param_value(Param p) {
  if (const char* v = get_new(p)) return ParamValue{v, param_var(p)};
  if (!spec(p).alias) return std::nullopt;
  const std::string old = alias_var(p);
  const char* v = std::getenv(old.c_str());
  if (!v) return std::nullopt;
  notice_once("alias:" + old,
              "npo: " + old + " is deprecated; use " + param_var(p) + " (" + old + " is accepted until 0.2)");
  if (!*v) return std::nullopt;
  return ParamValue{v, old};
}

const char* param_str(Param p) {
  auto v = param_value(p);
  return v ? v->value : nullptr;
}

bool param_present(Param p) {
  if (std::getenv(param_var(p).c_str())) return true;
  return spec(p).alias && std::getenv(alias_var(p).c_str());
}

std::optional<std::int64_t> param_int(Param p, std::int64_t lo, std::int64_t hi) {
  auto pv = param_value(p);
  if (!pv) return std::nullopt;
  std::string_view s(pv->value);
  std::string_view digits = s.starts_with('+') ? s.substr(1) : s;
  std::int64_t out = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  if (!digits.empty() && ec == std::errc{} && end == digits.data() + digits.size() && out >= lo && out <= hi)
    return out;
  report_bad_env(pv->var.c_str(), s, "an integer " + std::to_string(lo) + ".." + std::to_string(hi), spec(p).fallback);
  return std::nullopt;
}

std::optional<std::string_view> param_choice(Param p, std::initializer_list<std::string_view> choices,
                                             std::string_view fallback) {
  auto pv = param_value(p);
  if (!pv) return std::nullopt;
  std::string accepted;
  for (std::string_view c : choices) {
    if (iequals(pv->value, c)) return c;
    if (!accepted.empty()) accepted += ", ";
    accepted += c;
  }
  report_bad_env(pv->var.c_str(), pv->value, accepted, fallback.empty() ? spec(p).fallback : fallback);
  return std::nullopt;
}

std::optional<bool> param_bool(Param p) {
  auto pv = param_value(p);
  if (!pv) return std::nullopt;
  for (std::string_view t : {"1", "on", "yes", "true"})
    if (iequals(pv->value, t)) return true;
  for (std::string_view f : {"0", "off", "no", "false"})
    if (iequals(pv->value, f)) return false;
  report_bad_env(pv->var.c_str(), pv->value, "1, on, yes, true or 0, off, no, false", spec(p).fallback);
  return std::nullopt;
}

}  // namespace npo::fi
