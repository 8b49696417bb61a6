// SPDX-License-Identifier: Apache-2.0
#include "npo/hal/log.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace npo::log {
namespace {

constexpr std::array<std::string_view, kNumSubsystems> kNames = {
    "npo.core",   "npo.backend",  "npo.dma",  "npo.memory",   "npo.mailbox",
    "npo.optics", "npo.topology", "npo.vfio", "npo.emulator", "npo.tools"};

// Escapes a message for a JSON string value (RFC 8259 §7).
class JsonMsgFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    for (char c : msg.payload) {
      switch (c) {
        case '"': dest.append(std::string_view("\\\"")); break;
        case '\\': dest.append(std::string_view("\\\\")); break;
        case '\n': dest.append(std::string_view("\\n")); break;
        case '\r': dest.append(std::string_view("\\r")); break;
        case '\t': dest.append(std::string_view("\\t")); break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            fmt::format_to(std::back_inserter(dest), "\\u{:04x}", static_cast<unsigned>(c));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  [[nodiscard]] std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMsgFlag>();
  }
};

// Every logger writes to one dist_sink that lives as long as the process; configure()
// swaps the sinks inside it under the dist_sink's own lock, so reconfiguring while
// other threads log is safe. Logger levels are atomics inside spdlog.
struct State {
  std::mutex mu;
  std::shared_ptr<spdlog::sinks::dist_sink_mt> sink = std::make_shared<spdlog::sinks::dist_sink_mt>();
  std::array<std::atomic<spdlog::logger*>, kNumSubsystems> fast{};
  spdlog::level::level_enum level = spdlog::level::warn;
  Format format = Format::kText;
  std::array<std::shared_ptr<spdlog::logger>, kNumSubsystems> loggers;
  bool env_read = false;
};

State& state() {
  static State s;
  return s;
}

std::unique_ptr<spdlog::formatter> make_formatter(Format f) {
  if (f == Format::kJsonLines) {
    auto fmtr = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    fmtr->add_flag<JsonMsgFlag>('*').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","logger":"%n","msg":"%*"})");
    return fmtr;
  }
  auto fmtr = std::make_unique<spdlog::pattern_formatter>();
  { fmtr->set_pattern("[%H:%M:%S.%e] [%n] [%l] %v"); }
  return fmtr;
}

void apply_locked(State& s, spdlog::sink_ptr out) {
  if (out) {
    s.sink->set_sinks({std::move(out)});
  } else if (s.sink->sinks().empty()) {
    s.sink->set_sinks({std::make_shared<spdlog::sinks::stderr_sink_mt>()});
  }
  s.sink->set_formatter(make_formatter(s.format));
  for (unsigned i = 0; i < kNumSubsystems; ++i) {
    if (!s.loggers[i]) {
      s.loggers[i] = std::make_shared<spdlog::logger>(std::string(kNames[i]), s.sink);
      s.loggers[i]->flush_on(spdlog::level::warn);
    }
    s.loggers[i]->set_level(s.level);
    s.fast[i].store(s.loggers[i].get(), std::memory_order_release);
  }
}

void read_env_locked(State& s) {
  if (s.env_read) return;
  s.env_read = true;
  if (const char* env = std::getenv("NPO_LOG_LEVEL"); env != nullptr && *env != '\0') {
    if (auto lvl = parse_level(env)) s.level = *lvl;
  }
}

}  // namespace

std::string_view logger_name(Subsystem s) noexcept { return kNames[static_cast<unsigned>(s)]; }

Result<spdlog::level::level_enum> parse_level(std::string_view name) {
  using L = spdlog::level::level_enum;
  if (name == "trace") return L::trace;
  if (name == "debug") return L::debug;
  if (name == "info") return L::info;
  if (name == "warn" || name == "warning") return L::warn;
  if (name == "error" || name == "err") return L::err;
  if (name == "critical") return L::critical;
  if (name == "off") return L::off;
  return fail(Code::kInvalidArgument,
              fmt::format("unknown log level '{}' (accepted: trace, debug, info, warn, error, critical, off)", name));
}

Result<void> configure(const Options& options) {
  State& s = state();
  std::lock_guard lock(s.mu);
  read_env_locked(s);
  if (options.level) {
    auto lvl = parse_level(*options.level);
    if (!lvl) return std::unexpected(lvl.error());
    s.level = *lvl;
  }
  s.format = options.format;
  spdlog::sink_ptr out;
  if (!options.file.empty()) {
    try {
      out = std::make_shared<spdlog::sinks::basic_file_sink_mt>(options.file);
    } catch (const spdlog::spdlog_ex& e) {
      return fail(Code::kUnavailable, fmt::format("cannot open log file '{}': {}", options.file, e.what()));
    }
  } else {
    out = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  }
  apply_locked(s, std::move(out));
  return {};
}

spdlog::logger& get(Subsystem sub) {
  State& s = state();
  const auto i = static_cast<unsigned>(sub);
  // Fast path: loggers are created once and never destroyed while the process runs.
  if (auto* l = s.fast[i].load(std::memory_order_acquire); l != nullptr) return *l;
  std::lock_guard lock(s.mu);
  if (!s.loggers[i]) {
    read_env_locked(s);
    apply_locked(s, nullptr);
  }
  return *s.loggers[i];
}

}  // namespace npo::log
