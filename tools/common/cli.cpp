// SPDX-License-Identifier: Apache-2.0
#include "common/cli.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "npo/hal/version.hpp"

namespace npo::tools {

namespace {

/// Edit distance of `a` and `b` (insert, delete, substitute, swap of neighbours: one each).
std::size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

/// The candidate closest to `word` when it is a likely misspelling (at most 2 edits, fewer
/// than half its length), else empty.
std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = 3;
  for (const auto& c : candidates) {
    const std::size_t dd = distance(word, c);
    if (dd < best_d && dd * 2 < std::max(word.size(), c.size())) {
      best = c;
      best_d = dd;
    }
  }
  return best;
}

/// The deepest subcommand the parser entered ("fault" of `npo-emu fault`), or `app`.
CLI::App* deepest(CLI::App* app) {
  for (;;) {
    auto subs = app->get_subcommands();
    if (subs.empty()) return app;
    app = subs.front();
  }
}

/// "TOOL SUB SUB" for the messages.
std::string where(std::string_view tool, CLI::App* root, CLI::App* at) {
  std::vector<std::string> path;
  for (CLI::App* a = at; a != nullptr && a != root; a = a->get_parent()) path.push_back(a->get_name());
  std::string out(tool);
  for (auto it = path.rbegin(); it != path.rend(); ++it) out += " " + *it;
  return out;
}

std::vector<std::string> subcommand_names(CLI::App* app) {
  std::vector<std::string> out;
  for (auto* s : app->get_subcommands([](CLI::App*) { return true; })) out.push_back(s->get_name());
  return out;
}

/// The long and short names ("--card", "-o") of the options of `app`.
std::vector<std::string> option_names(const CLI::App* app) {
  std::vector<std::string> out;
  for (const auto* o : app->get_options()) {
    for (const auto& l : o->get_lnames()) out.push_back("--" + l);
    for (const auto& s : o->get_snames()) out.push_back("-" + s);
  }
  return out;
}

/// A subcommand of `app` (or deeper) that has option `name`, if any.
const CLI::App* owner_of(CLI::App* app, const std::string& name) {
  for (auto* s : app->get_subcommands([](CLI::App*) { return true; })) {
    const auto names = option_names(s);
    if (std::find(names.begin(), names.end(), name) != names.end()) return s;
    if (const auto* deeper = owner_of(s, name)) return deeper;
  }
  return nullptr;
}

/// "--card -1: expected a whole number >= 0" for CLI11's "Could not convert: --card = -1", or
/// empty when `what` is not that message.
std::string conversion_message(const CLI::App* at, std::string_view what) {
  constexpr std::string_view kHead = "Could not convert: ";
  const auto eq = what.find(" = ");
  if (!what.starts_with(kHead) || eq == std::string_view::npos) return {};
  const std::string name(what.substr(kHead.size(), eq - kHead.size()));
  const std::string value(what.substr(eq + 3));
  std::string type;
  for (const CLI::App* a = at; a != nullptr && type.empty(); a = a->get_parent()) {
    for (const auto* o : a->get_options()) {
      if (o->check_name(name)) type = o->get_type_name();
    }
  }
  const std::string expected = type == "UINT"    ? "a whole number >= 0"
                               : type == "INT"   ? "a whole number"
                               : type == "FLOAT" ? "a number"
                               : type.empty()    ? "a value of the option's type (see --help)"
                                                 : type;
  return fmt::format("{} {}: expected {}", name, value, expected);
}

/// The clear message for an argument the parser did not take, or empty.
std::string unexpected_message(std::string_view tool, CLI::App* root, CLI::App* at, const std::string& arg) {
  if (arg.starts_with("-") && arg.size() > 1) {
    const std::string name = arg.substr(0, arg.find('='));
    const auto names = option_names(at);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      if (at == root) {
        // `npo-link --backend X show`: the option is the subcommand's.
        const auto parsed = at->get_subcommands();
        const CLI::App* sub = parsed.empty() ? owner_of(at, name) : nullptr;
        if (!parsed.empty()) {
          const auto sub_names = option_names(parsed.front());
          if (std::find(sub_names.begin(), sub_names.end(), name) != sub_names.end()) sub = parsed.front();
        }
        if (sub != nullptr) {
          return fmt::format("option '{}' belongs to a subcommand: put it after it ({} {} {} ...)", name, tool,
                             sub->get_name(), name);
        }
      }
      // A misspelling of an option of the subcommand being parsed lands in the parent's list
      // when the subcommand falls through (npo-smi topo): suggest from the subcommands too.
      std::vector<std::string> known = names;
      for (CLI::App* s = at; !s->get_subcommands().empty();) {
        s = s->get_subcommands().front();
        const auto more = option_names(s);
        known.insert(known.end(), more.begin(), more.end());
      }
      const std::string guess = closest(name, known);
      return guess.empty() ? fmt::format("unknown option '{}' (see --help)", name)
                           : fmt::format("unknown option '{}' (did you mean '{}'?)", name, guess);
    }
    return {};
  }
  const auto subs = subcommand_names(at);
  if (!subs.empty() && at->get_subcommands().empty()) {
    const std::string guess = closest(arg, subs);
    return guess.empty() ? fmt::format("unknown subcommand '{}' (try: {})", arg, fmt::join(subs, ", "))
                         : fmt::format("unknown subcommand '{}' (did you mean '{}'? subcommands: {})", arg, guess,
                                       fmt::join(subs, ", "));
  }
  return fmt::format("unexpected argument '{}'", arg);
}

}  // namespace

std::optional<int> parse_command_line(CLI::App& app, int argc, const char* const* argv, std::string_view tool) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success& e) {  // --help, --help-all, --version: printed to stdout, exit 0
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    CLI::App* at = deepest(&app);
    std::string msg;
    // An argument nobody took explains the error better than CLI11's text: a misspelled
    // option makes it say "--topology is required", a misspelled subcommand "A subcommand
    // is required".
    // Options shared through fallthrough (--log-format after the subcommand) send an argument
    // nobody took up to the parent's list: judge it first as the deepest subcommand's.
    const CLI::App* deep = at;
    for (CLI::App* a = at; a != nullptr && msg.empty(); a = a->get_parent()) {
      for (const auto& arg : a->remaining()) {
        msg = unexpected_message(tool, &app, at, arg);
        if (msg.empty() && a != deep) {
          msg = unexpected_message(tool, &app, a, arg);
          if (!msg.empty()) at = a;
        }
        if (!msg.empty()) break;
      }
    }
    if (msg.empty() && at->get_require_subcommand_min() > 0 && at->get_subcommands().empty()) {
      msg = fmt::format("a subcommand is required (try: {})", fmt::join(subcommand_names(at), ", "));
    }
    if (msg.empty()) msg = conversion_message(at, e.what());
    if (msg.empty()) msg = e.what();
    fmt::print(stderr, "{}: {}\nRun with --help for more information.\n", where(tool, &app, at), msg);
    return kExitUsage;
  }
}

std::string version_text(std::string_view tool) {
  const npo::Version lib = npo::version();
  std::string out = fmt::format("{} (npo-hal) {}", tool, NPO_HAL_VERSION_STRING);
  if (!lib.commit.empty()) out += fmt::format(" (git {})", lib.commit);
  if (lib.string != NPO_HAL_VERSION_STRING) out += fmt::format("; libnpo-hal {} loaded", lib.string);
  return out;
}

void add_version_flag(CLI::App& app, std::string_view tool) {
  app.set_version_flag("--version", version_text(tool), "print the version (npo-hal and its git commit) and exit");
}

int open_failure_status(const Error& error) { return error.code() == Code::kInvalidArgument ? kExitUsage : 1; }

}  // namespace npo::tools
