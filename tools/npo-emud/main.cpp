// SPDX-License-Identifier: Apache-2.0
// npo-emud: one emulated supernode shared by many processes (DESIGN.md "One supernode, many
// processes"). Builds the emulator of --topology with the real-time clock, serves every card
// on its own UNIX socket in --socket-dir (docs/spec/emud-protocol.md), trains every link and
// programs routes once before serving (like a subnet manager), prints one "ready"
// line and serves until SIGTERM/SIGINT. Runs in the foreground; tools/npo-emud/npo-emud.service
// is the systemd unit.
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/cli.hpp"
#include "common/output.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/emu/server.hpp"
#include "npo/hal/backend/registry.hpp"
#include "npo/hal/bring_up.hpp"
#include "npo/hal/system.hpp"

namespace {

void say(const std::string& line) {
  std::fputs(fmt::format("npo-emud: {}\n", line).c_str(), stdout);
  std::fflush(stdout);
}

/// "emu:mesh8?seed=2" / "mesh8" / "file=PATH" / "PATH" -> the part parse_uri takes.
std::string topology_rest(std::string t) {
  if (t.starts_with("emu:")) return t.substr(4);
  std::error_code ec;
  const auto q = t.find('?');
  if (std::filesystem::is_regular_file(t.substr(0, q), ec)) return "file=" + t;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"npo-emud: serve one emulated supernode to many processes (emu-remote:DIR)"};
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
  if (auto rc = npo::tools::parse_command_line(app, argc, argv, "npo-emud")) return *rc;

  // SIGTERM/SIGINT are taken by sigwait below; block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

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
  if (!cfg) return npo::tools::fail("npo-emud", cfg.error());
  if (cfg->clock != npo::emu::ClockMode::kRealtime) {
    return npo::tools::fail(
        "npo-emud", npo::Error(npo::Code::kInvalidArgument, "npo-emud runs the real-time clock: drop clock=virtual"));
  }
  cfg->hbm_fd_per_card = true;  // a client's aperture fd reaches its own card only
  auto emu = npo::emu::Emulator::create(*cfg);
  if (!emu) return npo::tools::fail("npo-emud", emu.error());
  unsigned up = 0, failed = 0;
  std::uint64_t unreachable = 0;
  if (!no_bring_up) {
    // Like a subnet manager: train every link and program routes once, in-process on the
    // emulator the daemon holds, before any socket exists (no client can race it).
    npo::backend::Registry local;
    (void)local.add(
        "emud-local", {"emud-local:"},
        [e = *emu](std::string_view, std::string_view uri) -> npo::Result<std::unique_ptr<npo::backend::Backend>> {
          return e->make_backend(std::string(uri));
        });
    auto sys = npo::System::open("emud-local:", {.registry = &local});
    if (!sys) return npo::tools::fail("npo-emud", std::move(sys.error()).prefixed("bring-up: open"));
    npo::BringUpOptions bo;
    bo.timeout_ns = 60'000'000'000;  // large fabrics train many ports at once on the real clock
    auto fab = npo::bring_up_fabric(**sys, bo);
    if (!fab) return npo::tools::fail("npo-emud", std::move(fab.error()).prefixed("bring-up"));
    up = fab->links.up;
    failed = fab->links.failed;
    unreachable = fab->unreachable_pairs;
  }
  auto server = npo::emu::Server::start(*emu, {.socket_dir = socket_dir, .log = say});
  if (!server) return npo::tools::fail("npo-emud", server.error());
  say(fmt::format("ready cards={} links_up={} links_failed={} unreachable_pairs={} socket_dir={} pid={}",
                  (*server)->card_count(), up, failed, unreachable, socket_dir, ::getpid()));

  int sig = 0;
  while (sigwait(&sigs, &sig) != 0) {
  }
  say(fmt::format("{} received, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT"));
  (*server)->stop();
  say("stopped; sockets removed");
  return 0;
}
