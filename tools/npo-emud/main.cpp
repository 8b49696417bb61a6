// SPDX-License-Identifier: Apache-2.0
// npo-emud: one emulated supernode shared by many processes (DESIGN.md "One supernode, many
// processes"). Builds the emulator of --topology with the real-time clock, serves every card
// on its own UNIX socket in --socket-dir (docs/spec/emud-protocol.md), trains every link and
// programs routes once before serving (like a subnet manager), prints one "ready"
// line and serves until SIGTERM/SIGINT. Runs in the foreground; tools/npo-emud/npo-emud.service.in
// is the systemd unit.
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/backend.hpp"
#include "common/cli.hpp"
#include "common/json_request.hpp"
#include "common/output.hpp"
#include "common/trace.hpp"
#include "fabric_service.hpp"
#include "link_manager.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/emu/server.hpp"
#include "npo/hal/backend/registry.hpp"
#include "npo/hal/bring_up.hpp"
#include "npo/hal/link_monitor.hpp"
#include "npo/hal/log.hpp"
#include "npo/hal/system.hpp"

namespace {

/// --log-format json: the daemon's own lines are JSON objects too (npo::log::json_line).
bool g_json_lines = false;
/// --trace: client attach/detach and injected faults as instants on the card's track.
npo::tools::TraceWriter* g_trace = nullptr;

/// Trace track of a card's client and fault events.
std::uint32_t card_tid(std::uint64_t card) { return static_cast<std::uint32_t>(500'000 + card); }

void say(const std::string& line) {
  if (g_trace != nullptr) {
    // The server's lines: "connect card=K ...", "disconnect card=K ...", "fault KIND card=K ...".
    const auto f = npo::log::extract_fields(line);
    const auto space = line.find(' ');
    const std::string first = line.substr(0, space);
    if (f.card && (first == "connect" || first == "disconnect" || first == "fault")) {
      const std::string name =
          first == "fault" ? "fault " + line.substr(space + 1, line.find(' ', space + 1) - space - 1) : first;
      g_trace->instant(name, first == "fault" ? "fault" : "client", card_tid(*f.card), g_trace->now_ns(),
                       {{"line", line}});
    }
  }
  if (g_json_lines) {
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    std::fputs((npo::log::json_line(static_cast<std::uint64_t>(ns), "info", "npo-emud", line) + "\n").c_str(), stdout);
  } else {
    std::fputs(fmt::format("npo-emud: {}\n", line).c_str(), stdout);
  }
  std::fflush(stdout);
}

/// "0-3,6" -> {0, 1, 2, 3, 6}; nullopt when malformed (an empty item, a reversed range).
std::optional<std::vector<unsigned>> card_list(std::string_view text) {
  std::vector<unsigned> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const auto dash = item.find('-');
    unsigned lo = 0, hi = 0;
    const auto num = [](std::string_view t, unsigned& v) {
      return !t.empty() && std::from_chars(t.data(), t.data() + t.size(), v).ptr == t.data() + t.size();
    };
    if (!num(item.substr(0, dash), lo)) return std::nullopt;
    hi = lo;
    if (dash != std::string_view::npos && (!num(item.substr(dash + 1), hi) || hi < lo || hi - lo > 4096)) {
      return std::nullopt;
    }
    for (unsigned c = lo; c <= hi; ++c) out.push_back(c);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) return std::nullopt;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

/// "emu:mesh8?seed=2" / "mesh8" / "file=PATH" / "PATH" -> the part parse_uri takes.
std::string topology_rest(std::string t) {
  if (t.starts_with("emu:")) return t.substr(4);
  std::error_code ec;
  const auto q = t.find('?');
  const std::string path = t.substr(0, q);
  if (std::filesystem::is_regular_file(path, ec)) return "file=" + t;
  // A name that looks like a file (a '/' or a topology file's extension) but is none: read
  // it as one, so the error says the file is missing, not "unknown emulator URI".
  if (path.find('/') != std::string::npos || path.ends_with(".yaml") || path.ends_with(".yml") ||
      path.ends_with(".json"))
    return "file=" + t;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"npo-emud: serve one emulated supernode to many processes (emu-remote:DIR)"};
  npo::tools::add_version_flag(app, "npo-emud");
  std::string topology;
  std::string socket_dir;
  bool no_bring_up = false;
  app.add_option("--topology", topology,
                 "emulator URI or topology file: emu:mesh8, emu:N, emu:file=PATH or PATH, with ?seed=, hbm=, "
                 "scenario=, ports= as for emu:")
      ->required();
  app.add_option("--socket-dir", socket_dir, "directory for card-<K>.sock (created; a stale one is reused)")
      ->required();
  app.add_flag("--no-bring-up", no_bring_up, "leave links down and routes unprogrammed (tests)");
  bool manage_links = false;
  app.add_flag("--manage-links", manage_links,
               "while serving, retrain links that go down, as a subnet manager does (a dead lane is dropped: the "
               "link comes back narrower, DEGRADED); 5 downs in 60 s leave a port down; when the Up ports change "
               "for good, reprogram every card's routes around the links that are down");
  npo::tools::LogOptions log;
  npo::tools::add_log_options(app, log);
  std::string trace_path;
  npo::tools::add_trace_option(app, trace_path,
                               "link training stages of every port at bring-up, link up / training failed, link state "
                               "changes (polled every 100 ms), client attach and detach, injected faults (written "
                               "at shutdown)");
  std::string engine = "inline";
  app.add_option("--engine", engine,
                 "who runs a DMA queue's engine for a client that does not run its own card's engines (an owner "
                 "does by default: emu-remote's engine=local, protocol §5.12): inline (the session thread that "
                 "receives the client's doorbell, no cross-thread wake-up; the default) or workers (the emulator's "
                 "worker threads, as in process)")
      ->check(CLI::IsMember({"inline", "workers"}));
  std::string session_cpus = "client";
  app.add_option("--session-cpus", session_cpus,
                 "where a connection's session thread runs: client (on the CPUs its client is bound to, when the "
                 "client is bound, as mpirun binds ranks: a doorbell then wakes a thread on the ringer's own CPU; the "
                 "default) or any (wherever the kernel schedules it)")
      ->check(CLI::IsMember({"client", "any"}));
  std::string socket_group;
  std::string socket_mode;
  app.add_option("--socket-group", socket_group,
                 "group owning the socket directory and card sockets, so its members (not only the daemon's user) "
                 "can connect");
  app.add_option("--socket-mode", socket_mode, "octal mode of the card sockets, e.g. 0660 (default: from the umask)");
  std::vector<std::string> partitions;
  app.add_option("--partition", partitions,
                 "CARDS=ID: put cards CARDS (e.g. 0-3,6) in partition ID at start (GLOBAL.PARTITION, registers.md "
                 "§3.8: remote ops and window imports cross no partition boundary); repeatable");
  if (auto rc = npo::tools::parse_command_line(app, argc, argv, "npo-emud")) return *rc;
  std::optional<gid_t> gid;
  if (!socket_group.empty()) {
    const group* g = ::getgrnam(socket_group.c_str());
    if (g == nullptr) {
      std::fprintf(stderr, "npo-emud: --socket-group %s: no such group\n", socket_group.c_str());
      return npo::tools::kExitUsage;
    }
    gid = g->gr_gid;
  }
  std::optional<mode_t> mode;
  if (!socket_mode.empty()) {
    unsigned m = 0;
    const auto [p, ec] = std::from_chars(socket_mode.data(), socket_mode.data() + socket_mode.size(), m, 8);
    if (ec != std::errc{} || p != socket_mode.data() + socket_mode.size() || m > 0777) {
      std::fprintf(stderr, "npo-emud: --socket-mode %s: expected an octal mode such as 0660\n", socket_mode.c_str());
      return npo::tools::kExitUsage;
    }
    mode = static_cast<mode_t>(m);
  }
  npo::tools::TraceWriter trace(trace_path);
  if (trace.enabled()) {
    g_trace = &trace;
    trace.process_name("npo-emud");
  }
  if (auto r = npo::tools::configure_logging(log); !r) return npo::tools::fail("npo-emud", r.error());
  g_json_lines = npo::tools::json_logs(log);

  // SIGTERM/SIGINT are taken by sigwait below; block them before any thread starts.
  sigset_t sigs = npo::tools::block_termination_signals();

  // One fd per card (HBM memfd, socket) and per client connection: lift the soft limit.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
  // Another backend's URI (emu-remote:DIR, vfio:all) is not a topology: say so instead of
  // reading it as "emu:emu-remote:DIR".
  if (const auto colon = topology.find(':'); colon != std::string::npos && !topology.starts_with("emu:")) {
    std::error_code ec;
    const std::string scheme = topology.substr(0, colon);
    if (scheme.find('/') == std::string::npos &&
        !std::filesystem::is_regular_file(topology.substr(0, topology.find('?')), ec)) {
      std::fprintf(stderr,
                   "npo-emud: --topology %s: '%s:' is not an emulator topology; give emu:mesh8, emu:N, "
                   "emu:file=PATH or a topology file PATH\n",
                   topology.c_str(), scheme.c_str());
      return 2;
    }
  }
  auto cfg = npo::emu::parse_uri(topology_rest(topology));
  if (!cfg) {
    // A malformed topology is a bad command line (2, as npo-smi --backend emu:mesh9); a file
    // that is missing or cannot be read is 1, as for every tool's backend.
    (void)npo::tools::fail("npo-emud", cfg.error());
    return npo::tools::open_failure_status(cfg.error());
  }
  if (cfg->clock != npo::emu::ClockMode::kRealtime) {
    (void)npo::tools::fail(
        "npo-emud", npo::Error(npo::Code::kInvalidArgument, "npo-emud runs the real-time clock: drop clock=virtual"));
    return npo::tools::kExitUsage;
  }
  cfg->hbm_fd_per_card = true;  // a client's aperture fd reaches its own card only
  cfg->inline_doorbells = engine == "inline";
  auto emu = npo::emu::Emulator::create(*cfg);
  if (!emu) return npo::tools::fail("npo-emud", emu.error());
  for (const auto& spec : partitions) {
    const auto eq = spec.rfind('=');
    std::uint32_t id = 0;
    const char* end = spec.data() + spec.size();
    const auto cards = eq == std::string::npos ? std::nullopt : card_list(spec.substr(0, eq));
    const bool id_ok =
        eq != std::string::npos && eq + 1 < spec.size() && std::from_chars(spec.data() + eq + 1, end, id).ptr == end;
    if (!cards || !id_ok) {
      std::fprintf(stderr, "npo-emud: --partition %s: expected CARDS=ID, e.g. 0-3,6=7 (%s)\n", spec.c_str(),
                   !cards ? "CARDS is not a list of cards and ranges" : "ID is not a whole number");
      return npo::tools::kExitUsage;
    }
    for (unsigned c : *cards) {
      if (auto r = (*emu)->set_partition(c, id); !r) {
        std::fprintf(stderr, "npo-emud: --partition %s: %s\n", spec.c_str(), r.error().message().c_str());
        return npo::tools::kExitUsage;
      }
    }
  }
  unsigned up = 0, failed = 0;
  std::uint64_t unreachable = 0;
  // The daemon's own in-process view of its cards: for the bring-up, and with --trace for the
  // link monitor below (register reads only; it never changes a link).
  npo::backend::Registry local;
  (void)local.add(
      "emud-local", {"emud-local:"},
      [e = *emu](std::string_view, std::string_view uri) -> npo::Result<std::unique_ptr<npo::backend::Backend>> {
        return e->make_backend(std::string(uri));
      });
  std::unique_ptr<npo::System> local_sys;
  if (!no_bring_up || trace.enabled() || manage_links) {
    auto sys = npo::System::open("emud-local:", {.registry = &local});
    if (!sys) return npo::tools::fail("npo-emud", std::move(sys.error()).prefixed("bring-up: open"));
    local_sys = std::move(*sys);
    for (std::size_t c = 0; c < local_sys->device_count(); ++c)
      trace.thread_name(card_tid(c), fmt::format("card {} clients and faults", c), static_cast<int>(card_tid(c)));
  }
  if (!no_bring_up) {
    // Like a subnet manager: train every link and program routes once, in-process on the
    // emulator the daemon holds, before any socket exists (no client can race it).
    npo::BringUpOptions bo;
    bo.timeout_ns = 60'000'000'000;  // large fabrics train many ports at once on the real clock
    const std::uint64_t bring_up_ns = trace.now_ns();
    auto fab = npo::bring_up_fabric(*local_sys, bo);
    if (!fab) return npo::tools::fail("npo-emud", std::move(fab.error()).prefixed("bring-up"));
    npo::tools::trace_training(trace, fab->links, bring_up_ns);
    up = fab->links.up;
    failed = fab->links.failed;
    unreachable = fab->unreachable_pairs;
  }
  if (!trace.enabled() && !manage_links) local_sys.reset();  // nothing to watch: closed before serving

  // --trace: link state changes (port states, lane verdicts, modules, cards) as LinkMonitor
  // sees them every kMonitorPeriod, as instants on the port's (or the card's) track.
  constexpr auto kMonitorPeriod = std::chrono::milliseconds(100);
  std::atomic<bool> stop_monitor{false};
  std::thread monitor;
  if (local_sys) {
    monitor = std::thread([&] {
      npo::LinkMonitorOptions mo;
      mo.enforce_flap_policy = false;
      mo.use_stats_dma = false;  // no DMA map next to the clients' maps on the cards
      npo::LinkMonitor mon(*local_sys, mo);
      while (!stop_monitor.load(std::memory_order_acquire)) {
        if (auto snap = mon.snapshot()) {
          for (const auto& e : snap->events) {
            const bool bad =
                e.to == "FAILED" || e.to == "DOWN" || e.to == "FAILING" || e.to == "removed" || e.to == "fault";
            const std::uint32_t tid = e.port ? npo::tools::port_tid(e.card, *e.port) : card_tid(e.card);
            trace.instant(fmt::format("{} {}", e.what, e.to), bad ? "link,fault" : "link", tid, trace.now_ns(),
                          {{"card", e.card},
                           {"port", e.port ? nlohmann::json(*e.port) : nlohmann::json(nullptr)},
                           {"lane", e.lane ? nlohmann::json(*e.lane) : nlohmann::json(nullptr)},
                           {"from", e.from},
                           {"to", e.to},
                           {"reason", e.reason}});
          }
        }
        for (int i = 0; i < 10 && !stop_monitor.load(std::memory_order_acquire); ++i)
          std::this_thread::sleep_for(kMonitorPeriod / 10);
      }
    });
  }
  auto server = npo::emu::Server::start(
      *emu, {.socket_dir = socket_dir, .log = say, .follow_client_cpus = session_cpus == "client"});
  if (!server) return npo::tools::fail("npo-emud", server.error());
  // Who may connect: the directory must be searchable and each socket writable by the group.
  // A failure returns after the --trace monitor thread is joined (a joinable thread would abort).
  const auto stop_and_fail = [&](npo::Error error) {
    stop_monitor.store(true, std::memory_order_release);
    if (monitor.joinable()) monitor.join();
    return npo::tools::fail("npo-emud", std::move(error));
  };
  if (gid || mode) {
    std::vector<std::string> paths{socket_dir};
    for (std::size_t k = 0; k < (*server)->card_count(); ++k)
      paths.push_back(fmt::format("{}/card-{}.sock", socket_dir, k));
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (gid && ::chown(paths[i].c_str(), static_cast<uid_t>(-1), *gid) != 0) {
        return stop_and_fail(npo::Error(npo::Code::kPermissionDenied, fmt::format("chown {} to group {}: {}", paths[i],
                                                                                  socket_group, std::strerror(errno))));
      }
      if (mode) {
        // The directory needs search (x) for whoever may open a socket in it.
        const mode_t dir_mode = 0700 | ((*mode & 0060) != 0 ? 0050 : 0) | ((*mode & 0006) != 0 ? 0005 : 0);
        const mode_t m = i == 0 ? dir_mode : *mode;
        if (::chmod(paths[i].c_str(), m) != 0) {
          return stop_and_fail(
              npo::Error(npo::Code::kPermissionDenied, fmt::format("chmod {}: {}", paths[i], std::strerror(errno))));
        }
      }
    }
  }
  // Fabric management (docs/spec/fabric-mgmt.md): always served, mode 0600, same uid or root.
  auto fabric = npo::tools::start_fabric_service(*emu, std::filesystem::path(socket_dir) / "fabric.sock", say);
  if (!fabric) return stop_and_fail(std::move(fabric.error()).prefixed("fabric socket"));
  std::unique_ptr<npo::tools::LinkManager> manager;
  if (manage_links) manager = std::make_unique<npo::tools::LinkManager>(*local_sys, say);
  say(fmt::format("ready cards={} links_up={} links_failed={} unreachable_pairs={} socket_dir={} pid={}",
                  (*server)->card_count(), up, failed, unreachable, socket_dir, ::getpid()));

  int sig = 0;
  while (sigwait(&sigs, &sig) != 0) {
  }
  say(fmt::format("{} received, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT"));
  manager.reset();
  fabric->reset();
  stop_monitor.store(true, std::memory_order_release);
  if (monitor.joinable()) monitor.join();
  (*server)->stop();
  say("stopped; sockets removed");
  g_trace = nullptr;
  if (auto w = trace.write({{"tool", "npo-emud"}, {"topology", topology}}); !w)
    return npo::tools::fail("npo-emud", w.error());
  return 0;
}
