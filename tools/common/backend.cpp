// SPDX-License-Identifier: Apache-2.0
#include "common/backend.hpp"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "npo/hal/log.hpp"
#include "npo/hal/system.hpp"

namespace npo::tools {

BackendChoice resolve_backend(const std::optional<std::string>& given) {
  if (given) return {*given, BackendSource::kOption};
  const char* env = std::getenv(kBackendEnv);
  if (env != nullptr && *env != '\0') return {env, BackendSource::kEnvironment};
  const char* root = std::getenv(kSysfsRootEnv);
  std::string uri = npo::default_uri(root != nullptr && *root != '\0' ? root : "/sys");
  const BackendSource source = uri == npo::kDefaultUri ? BackendSource::kEmulator : BackendSource::kCards;
  return {std::move(uri), source};
}

std::string emulator_fallback_warning(std::string_view tool, std::string_view uri) {
  return fmt::format("{}: no NPO card is bound to vfio-pci; running on the emulator ({}); pass --backend to choose",
                     tool, uri);
}

std::string backend_uri(const std::optional<std::string>& given, std::string_view tool) {
  BackendChoice choice = resolve_backend(given);
  if (choice.source == BackendSource::kEmulator) {
    fmt::print(stderr, "{}\n", emulator_fallback_warning(tool, choice.uri));
  }
  return std::move(choice.uri);
}

std::string observer_uri(const std::string& uri) {
  if (!uri.starts_with("emu-remote:")) return uri;
  const auto q = uri.find('?');
  if (q != std::string::npos &&
      (uri.find("?mode=", q) != std::string::npos || uri.find("&mode=", q) != std::string::npos))
    return uri;
  return uri + (q == std::string::npos ? "?mode=ro" : "&mode=ro");
}

std::string owner_uri(const std::string& uri, const std::vector<unsigned>& cards) {
  if (!uri.starts_with("emu-remote:") || cards.empty()) return uri;
  const auto q = uri.find('?');
  if (q != std::string::npos) {
    for (const char* k : {"mode=", "owner=", "card="}) {
      if (uri.find(std::string("?") + k, q) != std::string::npos ||
          uri.find(std::string("&") + k, q) != std::string::npos)
        return uri;
    }
  }
  std::string list;
  for (unsigned k : cards) list += (list.empty() ? "" : ",") + std::to_string(k);
  return uri + (q == std::string::npos ? "?owner=" : "&owner=") + list;
}

CLI::Option* add_backend_option(CLI::App& app, std::optional<std::string>& given, const std::string& names,
                                const std::string& help) {
  return app.add_option(names, given, help);
}

CLI::Option* add_log_level_option(CLI::App& app, std::string& level) {
  return app.add_option("--log-level", level,
                        "trace|debug|info|warn|error|critical|off (default: NPO_LOG_LEVEL or warn)");
}

Result<void> configure_logging(const std::string& level) {
  npo::log::Options lo;
  if (!level.empty()) lo.level = level;
  return npo::log::configure(lo);
}

}  // namespace npo::tools

namespace npo::tools {

void add_log_options(CLI::App& app, LogOptions& options) {
  add_log_level_option(app, options.level);
  app.add_option("--log-format", options.format,
                 "text (default) or json: one JSON object per log line (time, level, logger, card, port, lane, "
                 "queue, code, message) for ELK/Loki")
      ->check(CLI::IsMember({"text", "json"}));
}

Result<void> configure_logging(const LogOptions& options) {
  if (options.format != "text" && options.format != "json") {
    return fail(Code::kInvalidArgument, "unknown log format '" + options.format + "' (accepted: text, json)");
  }
  npo::log::Options lo;
  if (!options.level.empty()) lo.level = options.level;
  lo.format = options.format == "json" ? npo::log::Format::kJsonLines : npo::log::Format::kText;
  return npo::log::configure(lo);
}

bool json_logs(const LogOptions& options) noexcept { return options.format == "json"; }

}  // namespace npo::tools
