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

#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

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
  std::string socket_group;
  std::string socket_mode;
  app.add_option("--socket-group", socket_group,
                 "group owning the socket directory and card sockets, so its members (not only the daemon's user) "
                 "can connect");
  app.add_option("--socket-mode", socket_mode, "octal mode of the card sockets, e.g. 0660 (default: from the umask)");
  CLI11_PARSE(app, argc, argv);
  std::optional<gid_t> gid;
  if (!socket_group.empty()) {
    const group* g = ::getgrnam(socket_group.c_str());
    if (g == nullptr) {
      std::fprintf(stderr, "npo-emud: --socket-group %s: no such group\n", socket_group.c_str());
      return 2;
    }
    gid = g->gr_gid;
  }
  std::optional<mode_t> mode;
  if (!socket_mode.empty()) {
    unsigned m = 0;
    const auto [p, ec] = std::from_chars(socket_mode.data(), socket_mode.data() + socket_mode.size(), m, 8);
    if (ec != std::errc{} || p != socket_mode.data() + socket_mode.size() || m > 0777) {
      std::fprintf(stderr, "npo-emud: --socket-mode %s: expected an octal mode such as 0660\n", socket_mode.c_str());
      return 2;
    }
    mode = static_cast<mode_t>(m);
  }

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
  // Who may connect: the directory must be searchable and each socket writable by the group.
  if (gid || mode) {
    std::vector<std::string> paths{socket_dir};
    for (std::size_t k = 0; k < (*server)->card_count(); ++k)
      paths.push_back(fmt::format("{}/card-{}.sock", socket_dir, k));
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (gid && ::chown(paths[i].c_str(), static_cast<uid_t>(-1), *gid) != 0) {
        return npo::tools::fail(
            "npo-emud", npo::Error(npo::Code::kPermissionDenied, fmt::format("chown {} to group {}: {}", paths[i],
                                                                             socket_group, std::strerror(errno))));
      }
      if (mode) {
        // The directory needs search (x) for whoever may open a socket in it.
        const mode_t dir_mode = 0700 | ((*mode & 0060) != 0 ? 0050 : 0) | ((*mode & 0006) != 0 ? 0005 : 0);
        const mode_t m = i == 0 ? dir_mode : *mode;
        if (::chmod(paths[i].c_str(), m) != 0) {
          return npo::tools::fail("npo-emud", npo::Error(npo::Code::kPermissionDenied,
                                                         fmt::format("chmod {}: {}", paths[i], std::strerror(errno))));
        }
      }
    }
  }
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
