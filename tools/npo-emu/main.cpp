// SPDX-License-Identifier: Apache-2.0
// npo-emu: the emulator's companion tool. `topo generate KIND --cards N ...` writes a topology
// file (docs/topology.md) for one of the generators; `topo check FILE` validates a file and
// prints its size and graph properties (degree, diameter, bisection, switch radix), and checks
// its scripted faults as the emulator would schedule them (npo::emu::check_scenario).
// Uses the public npo-hal API and the emulator's control surface (npo/emu/emulator.hpp).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/backend.hpp"
#include "common/cli.hpp"
#include "common/output.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/fw/emud.hpp"
#include "npo/hal/error.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/topology_file.hpp"
#include "npo/hal/topology_gen.hpp"
#include "npo/hal/topology_graph.hpp"
#include "npo/hal/units.hpp"

namespace {

using nlohmann::json;

int die(const npo::Error& e) { return npo::tools::fail("npo-emu", e); }

/// One round trip on card `card`'s socket of an npo-emud: a read-only VERSION, then `msg`
/// (docs/spec/emud-protocol.md). Errors: kUnavailable (no daemon), the daemon's error reply.
npo::Result<void> send_fault(const std::string& dir, unsigned card, std::span<const std::byte> msg) {
  namespace emud = npo::fw::emud;
  const std::string path = fmt::format("{}/{}{}{}", dir, emud::kSocketPrefix, card, emud::kSocketSuffix);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) return npo::fail(npo::Code::kInvalidArgument, path + ": path too long");
  std::memcpy(sa.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    if (fd >= 0) ::close(fd);
    return npo::fail(npo::Code::kUnavailable, fmt::format("{}: no npo-emud serves card {} there", path, card));
  }
  auto round_trip = [fd](std::span<const std::byte> out) -> npo::Result<void> {
    if (::send(fd, out.data(), out.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(out.size())) {
      return npo::fail(npo::Code::kUnavailable, "npo-emud closed the connection");
    }
    pollfd p{fd, POLLIN, 0};
    std::array<std::byte, emud::kMaxMessage> in{};
    const ssize_t n = ::poll(&p, 1, 5000) > 0 ? ::recv(fd, in.data(), in.size(), 0) : -1;
    if (n < static_cast<ssize_t>(emud::hdr::kBytes))
      return npo::fail(npo::Code::kUnavailable, "npo-emud did not answer");
    const std::span<const std::byte> r(in.data(), static_cast<std::size_t>(n));
    if ((emud::load<std::uint32_t>(r, emud::hdr::kFlags) & emud::kFlagError) != 0) {
      const auto code = emud::load<std::uint32_t>(r, emud::hdr::kError);
      return npo::fail(
          code >= 1 && code <= 15 ? static_cast<npo::Code>(code) : npo::Code::kUnknown,
          std::string(reinterpret_cast<const char*>(r.data()) + emud::hdr::kBytes, r.size() - emud::hdr::kBytes));
    }
    return {};
  };
  std::array<std::byte, emud::hdr::kBytes + emud::version::kBytes> v{};
  emud::store<std::uint16_t>(v, emud::hdr::kCommand, static_cast<std::uint16_t>(emud::Command::kVersion));
  emud::store<std::uint32_t>(v, emud::hdr::kSize, static_cast<std::uint32_t>(v.size()));
  std::span<std::byte> vb(v.data() + emud::hdr::kBytes, emud::version::kBytes);
  emud::store<std::uint16_t>(vb, emud::version::kMajor, emud::kVersionMajor);
  emud::store<std::uint32_t>(vb, emud::version::kFlags, emud::version::kAttachReadOnly);
  emud::store<std::uint32_t>(vb, emud::version::kPid, static_cast<std::uint32_t>(::getpid()));
  auto r = round_trip(v);
  if (r) r = round_trip(msg);
  ::close(fd);
  return r;
}

std::string dist(const std::map<unsigned, unsigned>& m) {
  std::string s;
  for (const auto& [k, n] : m) s += fmt::format("{}{}x{}", s.empty() ? "" : ", ", n, k);
  return s.empty() ? "-" : s;
}

json dist_json(const std::map<unsigned, unsigned>& m) {
  json j = json::object();
  for (const auto& [k, n] : m) j[std::to_string(k)] = n;
  return j;
}

json props_json(const npo::FabricProperties& p) {
  return {{"card_degrees", dist_json(p.card_degrees)},
          {"switch_radixes", dist_json(p.switch_radixes)},
          {"switch_degrees", dist_json(p.switch_degrees)},
          {"edges", p.edges},
          {"diameter", p.diameter},
          {"bisection_width", p.bisection_width},
          {"bisection_exact", p.bisection_exact}};
}

void print_props(const char* title, const npo::FabricProperties& p, bool switches) {
  std::printf("%s\n", title);
  std::printf("  links           %u\n", p.edges);
  std::printf("  card degree     %s  (cards x degree)\n", dist(p.card_degrees).c_str());
  if (switches) std::printf("  switch degree   %s  (switches x cabled ports)\n", dist(p.switch_degrees).c_str());
  std::printf("  diameter        %s\n", p.diameter < 0 ? "disconnected" : std::to_string(p.diameter).c_str());
  std::printf("  bisection       %u links (%s)\n", p.bisection_width,
              p.bisection_exact ? "exact" : "heuristic upper bound");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"npo-emu: topology files for the npo-hal emulator (docs/topology.md); faults into a running npo-emud"};
  npo::tools::add_version_flag(app, "npo-emu");
  app.require_subcommand(1);
  // --log-level/--log-format anywhere on the line (subcommands pass unknown options up).
  npo::tools::LogOptions log;
  npo::tools::add_log_options(app, log);
  app.fallthrough();
  auto* topo = app.add_subcommand("topo", "topology files: generate, check");
  topo->require_subcommand(1);

  auto* gen = topo->add_subcommand("generate", "write a generated topology file to stdout (or -o FILE)");
  std::string kind_s, dims_s, format = "yaml", out_path, hbm_s = "64M";
  unsigned cards = 0, leaf_radix = 0, spine_radix = 0, uplinks = 0, groups = 0, pool_ports = 0;
  gen->add_option("kind", kind_s, "mesh | torus2d | torus3d | hypercube | fat-tree | dragonfly | pool")->required();
  gen->add_option("--cards,-n", cards, "number of cards, 1..1024")->required();
  auto* o_dims = gen->add_option("--dims", dims_s, "torus dimensions AxB or AxBxC (default: near-square / near-cubic)");
  auto* o_leaf = gen->add_option("--leaf-radix", leaf_radix, "fat-tree: ports per leaf switch (default 32)");
  auto* o_spine = gen->add_option("--spine-radix", spine_radix,
                                  "fat-tree: ports per spine switch, a multiple of the leaves (default: one per leaf)");
  auto* o_up = gen->add_option("--uplinks", uplinks, "fat-tree: ports per card cabled to its leaf (default 4)");
  auto* o_groups = gen->add_option("--groups", groups, "dragonfly: number of groups (default: fewest ports per card)");
  auto* o_ports = gen->add_option("--ports", pool_ports,
                                  "pool: ports per card, 1..16, one optical switch per port index (default 8)");
  gen->add_option("--hbm", hbm_s, "HBM per card in the file, BYTES[K|M|G] in [1M, 64G], e.g. 64M, 1G (default 64M)");
  gen->add_option("--format", format, "yaml | json (default yaml)")->check(CLI::IsMember({"yaml", "json"}));
  gen->add_option("-o,--output", out_path, "write to FILE instead of stdout");

  auto* chk = topo->add_subcommand("check", "validate a topology file and print its graph properties");
  std::string in_path;
  bool as_json = false;
  chk->add_option("file", in_path, "topology file (YAML or JSON)")->required();
  chk->add_flag("--json", as_json, "print the properties as JSON");

  auto* flt = app.add_subcommand("fault", "inject a fault into a running npo-emud (every kind of scenario files)");
  std::string sock_dir, fkind;
  unsigned fcard = 0;
  std::optional<unsigned> fport, flane, fengine, fqueue;
  unsigned fcount = 1;
  double fvalue = 0, fduration_ms = 0, fdelay_ms = 0;
  flt->add_option("--socket-dir", sock_dir, "the daemon's socket directory")->required();
  flt->add_option("--kind", fkind,
                  "iommu_fault, engine_hang, completion_error, mailbox_timeout, mailbox_corrupt, "
                  "surprise_removal, ber_ramp, lane_loss, flap_storm, module_removal, training_timeout")
      ->required();
  flt->add_option("--card", fcard, "card index")->required();
  flt->add_option("--port", fport, "port (link faults)");
  flt->add_option("--lane", flane, "lane (lane_loss; ber_ramp optional)");
  flt->add_option("--engine", fengine, "engine (DMA faults)");
  flt->add_option("--queue", fqueue, "queue within the engine");
  flt->add_option("--count", fcount, "accesses/ops/requests/drops affected (default 1)");
  flt->add_option("--value", fvalue, "kind-specific magnitude (ber_ramp: final pre-FEC BER)");
  flt->add_option("--duration-ms", fduration_ms, "kind-specific duration, ms");
  flt->add_option("--delay-ms", fdelay_ms, "fire this long from now (default 0: at once)");

  if (auto rc = npo::tools::parse_command_line(app, argc, argv, "npo-emu")) return *rc;
  if (auto r = npo::tools::configure_logging(log); !r) {
    std::fprintf(stderr, "npo-emu: %s\n", r.error().to_string().c_str());
    return 2;
  }

  if (flt->parsed()) {
    // Exit status (tools/README "npo-emu fault"): 2 for a request that cannot be right
    // whatever the daemon holds (unknown kind, a field out of its range, a missing field) or
    // names a card or port the daemon does not have, checked before anything is sent; 1 when
    // the daemon is not there or refuses a well-formed request (a link fault on a port
    // without a module: nothing there to act on).
    auto usage = [](const std::string& what) {
      std::fprintf(stderr, "npo-emu fault: %s\n", what.c_str());
      return npo::tools::kExitUsage;
    };
    auto kind = npo::emu::parse_fault_kind(fkind);
    if (!kind) return usage(kind.error().message());
    // ber_ramp's magnitude has no default: without --value the daemon would refuse "value 0".
    if (*kind == npo::emu::FaultKind::kBerRamp && flt->count("--value") == 0) {
      return usage("--kind ber_ramp needs --value (the final pre-FEC BER, in (0, 0.5), e.g. 1e-4)");
    }
    // Times: finite, >= 0, at most 2^62 ns (the protocol's bound, docs/spec/emud-protocol.md).
    constexpr double kMaxMs = static_cast<double>(1ULL << 62) / 1e6;
    for (auto [name, v] : {std::pair{"--duration-ms", fduration_ms}, std::pair{"--delay-ms", fdelay_ms}}) {
      if (!std::isfinite(v) || v < 0) return usage(fmt::format("{} {}: must be a finite number >= 0", name, v));
      if (v > kMaxMs) return usage(fmt::format("{} {}: too large (at most {:.0f} ms)", name, v, kMaxMs));
    }
    // Every other field as the emulator checks a scenario entry (range, finite value, the
    // fields the kind needs); the port against the daemon's card below.
    {
      npo::FabricSpec one;
      const unsigned card = std::min(fcard, 1023u);  // the card's existence is the daemon's (below)
      one.cards = card + 1;
      one.ports = 16;
      npo::FabricFault e;
      e.kind = fkind;
      e.card = card;
      e.engine = fengine;
      e.queue = fqueue;
      e.port = fport ? std::optional<unsigned>(std::min(*fport, 15u)) : std::nullopt;
      e.lane = flane;
      e.count = fcount;
      e.value = fvalue;
      one.faults.push_back(e);
      if (auto r = npo::emu::check_scenario(one); !r) {
        std::string m = r.error().message();
        if (m.starts_with("faults[0].")) m = "--" + m.substr(10);
        return usage(m);
      }
    }
    // The card as a read-only observer (it takes nothing from the card's owner): does the
    // daemon have the card and the port, and is there a module for a link fault to act on.
    {
      auto sys = npo::System::open(fmt::format("emu-remote:{}?card={}&mode=ro", sock_dir, fcard));
      if (!sys) {
        if (sys.error().code() == npo::Code::kNotFound) return usage(sys.error().message());
        return die(sys.error());
      }
      if ((*sys)->device_count() == 1 && fport) {
        const unsigned nports = (*sys)->device(0).port_count();
        if (*fport >= nports) {
          return usage(fmt::format("port {} not present (card {} has {} ports)", *fport, fcard, nports));
        }
        auto ps = npo::read_port((*sys)->device(0), *fport);
        if (ps && !ps->module_present) {
          if (*kind == npo::emu::FaultKind::kModuleRemoval) {
            std::fprintf(stderr, "npo-emu fault: card %u port %u has no module: nothing to remove\n", fcard, *fport);
          } else {
            std::fprintf(stderr,
                         "npo-emu fault: card %u port %u has no module: a %s there has nothing to act on (no "
                         "module, no cable, no link)\n",
                         fcard, *fport, fkind.c_str());
          }
          return 1;
        }
      }
    }
    namespace emud = npo::fw::emud;
    namespace f = emud::fault;
    std::array<std::byte, emud::hdr::kBytes + f::kBytes> m{};
    std::span<std::byte> b(m.data() + emud::hdr::kBytes, f::kBytes);
    emud::store<std::uint16_t>(m, emud::hdr::kMsgId, 1);
    emud::store<std::uint16_t>(m, emud::hdr::kCommand, static_cast<std::uint16_t>(emud::Command::kInjectFault));
    emud::store<std::uint32_t>(m, emud::hdr::kSize, static_cast<std::uint32_t>(m.size()));
    emud::store<std::uint64_t>(b, f::kDelayNs, static_cast<std::uint64_t>(fdelay_ms * 1e6));
    emud::store<std::uint32_t>(b, f::kKind, static_cast<std::uint32_t>(*kind));
    emud::store<std::uint32_t>(b, f::kCard, fcard);
    emud::store<std::uint32_t>(b, f::kEngine, fengine.value_or(f::kNone));
    emud::store<std::uint32_t>(b, f::kQueue, fqueue.value_or(f::kNone));
    emud::store<std::uint32_t>(b, f::kPort, fport.value_or(f::kNone));
    emud::store<std::uint32_t>(b, f::kLane, flane.value_or(f::kNone));
    emud::store<std::uint32_t>(b, f::kCount, fcount);
    emud::store<double>(b, f::kValue, fvalue);
    emud::store<std::uint64_t>(b, f::kDurationNs, static_cast<std::uint64_t>(fduration_ms * 1e6));
    auto r = send_fault(sock_dir, fcard, m);
    if (!r) return die(r.error());
    std::printf("injected %s into card %u of %s\n", fkind.c_str(), fcard, sock_dir.c_str());
    return 0;
  }

  if (gen->parsed()) {
    // A value the generator refuses (unknown kind, a size that does not fit the kind, bad
    // dims) is a bad command line: exit 2 (tools/README), not 1.
    auto refused = [](const npo::Error& e) {
      if (e.code() != npo::Code::kInvalidArgument && e.code() != npo::Code::kOutOfRange) return die(e);
      std::fprintf(stderr, "npo-emu: %s\n", e.to_string().c_str());
      return npo::tools::kExitUsage;
    };
    auto kind = npo::parse_fabric_kind(kind_s);
    if (!kind) return refused(kind.error());
    // Options of another kind are refused, not ignored; an explicit 0 is not "the default".
    const bool torus = *kind == npo::FabricKind::kTorus2d || *kind == npo::FabricKind::kTorus3d;
    const bool fat = *kind == npo::FabricKind::kFatTree;
    for (auto [o, fits, what] : {std::tuple{o_dims, torus, "torus2d and torus3d"}, std::tuple{o_leaf, fat, "fat-tree"},
                                 std::tuple{o_spine, fat, "fat-tree"}, std::tuple{o_up, fat, "fat-tree"},
                                 std::tuple{o_groups, *kind == npo::FabricKind::kDragonfly, "dragonfly"},
                                 std::tuple{o_ports, *kind == npo::FabricKind::kPool, "pool"}}) {
      if (o->count() == 0) continue;
      if (!fits) {
        std::fprintf(stderr, "npo-emu: %s applies to %s only, not %s\n", o->get_name().c_str(), what,
                     std::string(npo::fabric_kind_name(*kind)).c_str());
        return 2;
      }
      if (o != o_dims && o->as<unsigned>() == 0) {
        std::fprintf(stderr, "npo-emu: %s 0: expected a positive number (omit it for the default)\n",
                     o->get_name().c_str());
        return 2;
      }
    }
    if (pool_ports > npo::kFabricMaxCardPorts) {
      std::fprintf(stderr, "npo-emu: --ports %u: a card has 1..%u ports (one switch per port index)\n", pool_ports,
                   npo::kFabricMaxCardPorts);
      return 2;
    }
    npo::FabricGenOptions o;
    if (!dims_s.empty()) {
      auto d = npo::parse_fabric_dims(dims_s);
      if (!d) return refused(d.error());
      o.dims = *d;
    }
    o.leaf_radix = leaf_radix;
    o.spine_radix = spine_radix;
    o.card_uplinks = uplinks;
    o.groups = groups;
    o.pool_ports = pool_ports;
    {
      auto hbm = npo::parse_bytes(hbm_s);  // digits only: "-1" and " 1" are refused, K/M/G never overflow
      if (!hbm) {
        std::fprintf(stderr, "npo-emu: --hbm: %s\n", hbm.error().message().c_str());
        return 2;
      }
      o.hbm_bytes = *hbm;
    }
    auto spec = npo::generate_fabric(*kind, cards, o);
    if (!spec) return refused(spec.error());
    const std::string text = format == "json" ? npo::to_json(*spec) : npo::to_yaml(*spec);
    if (out_path.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      std::ofstream out(out_path);
      out << text;
      if (!out) {
        std::fprintf(stderr, "npo-emu: cannot write '%s'\n", out_path.c_str());
        return 1;
      }
    }
    return 0;
  }

  if (chk->parsed()) {
    auto spec = npo::load_fabric_spec(in_path);
    if (!spec) return die(spec.error());
    // The faults are the emulator's: the same validator emu:file= applies.
    if (auto r = npo::emu::check_scenario(*spec); !r) {
      return die(std::move(npo::Error(r.error())).prefixed(in_path));
    }
    const auto phys = npo::analyze_fabric(*spec, npo::FabricView::kPhysical);
    const auto circ = npo::analyze_fabric(*spec, npo::FabricView::kCircuit);
    if (as_json) {
      json j{{"file", in_path},
             {"name", spec->name},
             {"valid", true},
             {"cards", spec->cards},
             {"switches", spec->switches.size()},
             {"cables", spec->cables.size()},
             {"faults", spec->faults.size()},
             {"physical", props_json(phys)},
             {"circuit", props_json(circ)}};
      npo::tools::print_json(j);  // a file name need not be UTF-8: print_json replaces bad bytes
      return 0;
    }
    std::printf("%s: valid\n", in_path.c_str());
    std::printf("  name            %s\n", spec->name.c_str());
    std::printf("  cards           %u (%u ports, %s HBM each%s)\n", spec->cards, spec->ports,
                fmt::format("{} MiB", spec->hbm_bytes >> 20).c_str(),
                spec->overrides.empty() ? "" : fmt::format("; {} overridden", spec->overrides.size()).c_str());
    std::string radix;
    for (const auto& [r, n] : phys.switch_radixes)
      radix += fmt::format("{}{} of radix {}", radix.empty() ? "" : ", ", n, r);
    std::printf("  switches        %zu%s\n", spec->switches.size(), radix.empty() ? "" : (" (" + radix + ")").c_str());
    std::printf("  cables          %zu\n", spec->cables.size());
    std::printf("  faults          %zu\n", spec->faults.size());
    if (!spec->switches.empty()) {
      print_props("physical graph (cards and switches, cables as links)", phys, true);
      print_props("circuit graph (card-to-card light paths through the cross-connects)", circ, false);
    } else {
      print_props("graph (cards, cables as links)", phys, false);
    }
    return 0;
  }
  return 2;
}
