// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the environment parser and once-per-process notices (config.hpp).
#include "config.hpp"

#include <cctype>
#include <charconv>
#include <set>

#include "provider.hpp"

namespace npo::fi {

namespace {
bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}
}  // namespace

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

std::optional<std::int64_t> env_int(const char* var, std::int64_t lo, std::int64_t hi, std::string_view fallback) {
  const char* v = env(var);
  if (!v) return std::nullopt;
  std::string_view s(v);
  std::string_view digits = s.starts_with('+') ? s.substr(1) : s;
  std::int64_t out = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  if (!digits.empty() && ec == std::errc{} && end == digits.data() + digits.size() && out >= lo && out <= hi)
    return out;
  report_bad_env(var, s, "an integer " + std::to_string(lo) + ".." + std::to_string(hi), fallback);
  return std::nullopt;
}

std::optional<std::string_view> env_choice(const char* var, std::initializer_list<std::string_view> choices,
                                           std::string_view fallback) {
  const char* v = env(var);
  if (!v) return std::nullopt;
  std::string accepted;
  for (std::string_view c : choices) {
    if (iequals(v, c)) return c;
    if (!accepted.empty()) accepted += ", ";
    accepted += c;
  }
  report_bad_env(var, v, accepted, fallback);
  return std::nullopt;
}

std::optional<bool> env_bool(const char* var, std::string_view fallback) {
  const char* v = env(var);
  if (!v) return std::nullopt;
  for (std::string_view t : {"1", "on", "yes", "true"})
    if (iequals(v, t)) return true;
  for (std::string_view f : {"0", "off", "no", "false"})
    if (iequals(v, f)) return false;
  report_bad_env(var, v, "1, on, yes, true or 0, off, no, false", fallback);
  return std::nullopt;
}

}  // namespace npo::fi
