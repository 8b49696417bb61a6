// SPDX-License-Identifier: Apache-2.0
#include "npo/hal/log.hpp"

#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>

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

// Appends `v` escaped for a JSON string value (RFC 8259 §7).
void append_escaped(std::string& dest, std::string_view v) {
  for (char c : v) {
    switch (c) {
      case '"': dest += "\\\""; break;
      case '\\': dest += "\\\\"; break;
      case '\n': dest += "\\n"; break;
      case '\r': dest += "\\r"; break;
      case '\t': dest += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          fmt::format_to(std::back_inserter(dest), "\\u{:04x}", static_cast<unsigned>(c));
        } else {
          dest.push_back(c);
        }
    }
  }
}

// Whether `key=` starts at `pos` of `m` as a whole token (start, or after a non-identifier).
bool token_at(std::string_view m, std::size_t pos) {
  if (pos == 0) return true;
  const char b = m[pos - 1];
  return !(std::isalnum(static_cast<unsigned char>(b)) != 0 || b == '_' || b == '.');
}

// The number after the first whole-word `key` followed by '=' or ' ' ("card=3", "card 3").
std::optional<std::uint64_t> find_number(std::string_view m, std::string_view key) {
  for (std::size_t pos = m.find(key); pos != std::string_view::npos; pos = m.find(key, pos + 1)) {
    const std::size_t after = pos + key.size();
    if (!token_at(m, pos) || after + 1 >= m.size() || (m[after] != '=' && m[after] != ' ')) continue;
    const char* first = m.data() + after + 1;
    const char* last = m.data() + m.size();
    std::uint64_t v = 0;
    auto r = std::from_chars(first, last, v);
    if (r.ec == std::errc() && r.ptr != first) return v;
  }
  return std::nullopt;
}

// Formats every record as json_line.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(msg.time.time_since_epoch()).count();
    const auto lvl = spdlog::level::to_string_view(msg.level);
    const std::string line = json_line(static_cast<std::uint64_t>(ns), std::string_view(lvl.data(), lvl.size()),
                                       std::string_view(msg.logger_name.data(), msg.logger_name.size()),
                                       std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(line.data(), line.data() + line.size());
    dest.push_back('\n');
  }
  [[nodiscard]] std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
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
  std::string env_error;  // NPO_LOG_LEVEL held no level: said once, by the first apply
};

State& state() {
  static State s;
  return s;
}

std::unique_ptr<spdlog::formatter> make_formatter(Format f) {
  if (f == Format::kJsonLines) return std::make_unique<JsonFormatter>();
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
    if (auto lvl = parse_level(env)) {
      s.level = *lvl;
    } else {
      s.env_error = "NPO_LOG_LEVEL: " + lvl.error().message() + "; logging at 'warn'";
    }
  }
}

// After an apply: a bad NPO_LOG_LEVEL is reported once, on the core logger (a typo must not
// silently leave the level at its default).
void report_env_error_locked(State& s) {
  if (s.env_error.empty()) return;
  s.loggers[0]->warn("{}", s.env_error);
  s.env_error.clear();
}

}  // namespace

LineFields extract_fields(std::string_view m) {
  LineFields f;
  f.card = find_number(m, "card");
  f.port = find_number(m, "port");
  f.lane = find_number(m, "lane");
  f.queue = find_number(m, "queue");
  for (std::size_t pos = m.find("code="); pos != std::string_view::npos; pos = m.find("code=", pos + 1)) {
    if (!token_at(m, pos)) continue;
    std::size_t e = pos + 5;
    while (e < m.size() && (std::isalnum(static_cast<unsigned char>(m[e])) != 0 || m[e] == '_')) ++e;
    if (e > pos + 5) {
      f.code = std::string(m.substr(pos + 5, e - pos - 5));
      return f;
    }
  }
  // An npo::Error in the message: "<code_name>: ..." (Error::to_string).
  std::size_t best = std::string_view::npos;
  for (unsigned c = 1; c <= static_cast<unsigned>(Code::kDataLoss); ++c) {
    const std::string key = fmt::format("{}: ", code_name(static_cast<Code>(c)));
    for (std::size_t pos = m.find(key); pos != std::string_view::npos; pos = m.find(key, pos + 1)) {
      if (!token_at(m, pos)) continue;
      if (pos < best) {
        best = pos;
        f.code = std::string(code_name(static_cast<Code>(c)));
      }
      break;
    }
  }
  return f;
}

std::string json_line(std::uint64_t time_ns, std::string_view level, std::string_view logger,
                      std::string_view message) {
  const std::time_t secs = static_cast<std::time_t>(time_ns / 1'000'000'000ULL);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  std::string out =
      fmt::format(R"({{"time":"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z","level":")", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (time_ns % 1'000'000'000ULL) / 1000);
  append_escaped(out, level);
  out += R"(","logger":")";
  append_escaped(out, logger);
  out += '"';
  const LineFields f = extract_fields(message);
  auto num = [&out](std::string_view key, const std::optional<std::uint64_t>& v) {
    out += fmt::format(R"(,"{}":)", key);
    out += v ? fmt::format("{}", *v) : std::string("null");
  };
  num("card", f.card);
  num("port", f.port);
  num("lane", f.lane);
  num("queue", f.queue);
  out += R"(,"code":)";
  if (f.code) {
    out += '"';
    append_escaped(out, *f.code);
    out += '"';
  } else {
    out += "null";
  }
  out += R"(,"message":")";
  append_escaped(out, message);
  out += "\"}";
  return out;
}

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
  report_env_error_locked(s);
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
    report_env_error_locked(s);
  }
  return *s.loggers[i];
}

}  // namespace npo::log
