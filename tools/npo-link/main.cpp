// SPDX-License-Identifier: Apache-2.0
// npo-link: optical link tool. `decode FILE` decodes a transceiver EEPROM dump (raw bytes as
// `ethtool -m IF raw on` writes them, `ethtool -m IF hex on` text, or a tests/data/eeprom .hex
// file) into an ethtool-like listing or JSON. The link subcommands (show, ddm, fec, prbs, train,
// health) work on live cards of a backend (default: vfio:all when cards are bound to vfio-pci,
// else emu:mesh8). Uses only the public npo-hal API.
// This file parses the command line, refuses bad numbers, brings links up and dispatches; each
// subcommand is in its own file (link.hpp lists them).
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/backend.hpp"
#include "common/bring_up.hpp"
#include "common/cli.hpp"
#include "link.hpp"

namespace {

namespace link = npo::tools::link;
using link::Common;

void add_common(CLI::App* s, Common& c) {
  npo::tools::add_backend_option(*s, c.backend, "--backend",
                                 std::string("backend URI: emu:mesh8, emu:N, emu:file=PATH, emu-remote:DIR (a running "
                                             "npo-emud), vfio:all, vfio:BDF (") +
                                     npo::tools::kBackendDefaultHelp + ")");
  s->add_flag("--json", c.json, "print JSON");
  s->add_option("--watch", c.watch,
                "repeat every SECONDS > 0 until interrupted (on the emulator's virtual clock, waiting advances time)");
  s->add_option("--count", c.count, "with --watch: stop after N >= 1 repeats");
}

/// The fleet options of the views: --card, --port, --state filters, --full, --train.
void add_fleet(CLI::App* s, Common& c, std::vector<std::string>& states) {
  s->add_option("--card", c.cards, "only these cards (N or N,M,...)")->delimiter(',');
  s->add_option("--port", c.ports, "only these ports (P or P,Q,...), of every selected card")->delimiter(',');
  s->add_option("--state", states, "only ports in these states: HEALTHY, DEGRADED, FAILED, DISABLED (comma list)")
      ->delimiter(',');
  s->add_flag("--full", c.full, "list every selected port (past 256 ports the default is the ports not HEALTHY)");
  s->add_flag("--train", c.train,
              "train every port first (as `npo-link train`); without it the command only reads. An in-process "
              "emu: backend starts every process with its links down");
}

/// Brings links up when a port with a module is not Up (as `npo-smi topo` does).
npo::Result<void> ensure_up(npo::System& sys, npo::LinkMonitor& mon) {
  bool need = false;
  for (std::size_t c = 0; c < sys.device_count() && !need; ++c) {
    for (unsigned p = 0; p < sys.device(c).port_count(); ++p) {
      auto ps = npo::read_port(sys.device(c), p);
      if (!ps) return std::unexpected(ps.error());
      if (link::needs_bring_up(*ps)) need = true;
    }
  }
  if (!need) return {};
  auto up = npo::tools::bring_up(sys, {.timeout_ns = link::kBringUpTimeoutNs, .program_routes = false});
  if (!up) return std::unexpected(up.error().error);
  mon.note_training(up->links.ports);
  return {};
}

/// Repeats `body` per --watch / --count. A watch goes on whatever the links do (a port that
/// fails is what it is watching); it stops on a tool error. Returns the last frame's status.
int repeat(const Common& c, npo::LinkMonitor& mon, const std::function<int()>& body) {
  for (unsigned i = 0;; ++i) {
    c.frame = i;
    const int rc = body();
    if (rc == link::kExitError || rc == link::kExitUsage || c.watch <= 0) return rc;
    if (c.count != 0 && i + 1 >= c.count) return rc;
    std::fflush(stdout);
    mon.sleep_ns(static_cast<std::uint64_t>(c.watch * 1e9));
  }
}

/// A time option: finite, > 0 and at most a day (a negative, NaN or huge value would wrap when
/// converted to nanoseconds). Prints the error and returns false otherwise.
bool check_seconds(const char* sub, const char* name, double v) {
  if (std::isfinite(v) && v > 0 && v <= 86400.0) return true;
  std::fprintf(stderr, "npo-link %s: %s %g: expected seconds in (0, 86400]\n", sub, name, v);
  return false;
}

/// Whether every --card and --port names a card / port of `sys` (of `card`, or of every
/// selected card that was not removed before the open). Prints "npo-link SUB: card 8 not present (8 cards)" otherwise.
bool check_selection(const char* sub, npo::System& sys, const Common& c, std::optional<unsigned> card,
                     std::optional<unsigned> port) {
  const std::size_t ncards = sys.device_count();
  std::vector<unsigned> cards = c.cards;
  if (card) cards.push_back(*card);
  for (unsigned k : cards) {
    if (k >= ncards) {
      std::fprintf(stderr, "npo-link %s: card %u not present (%zu card%s)\n", sub, k, ncards, ncards == 1 ? "" : "s");
      return false;
    }
  }
  std::vector<unsigned> ports = c.ports;
  if (port) ports.push_back(*port);
  if (ports.empty()) return true;
  // The ports of the selected cards (every card when none is selected).
  std::vector<unsigned> checked = cards;
  if (checked.empty()) {
    for (std::size_t k = 0; k < ncards; ++k) checked.push_back(static_cast<unsigned>(k));
  }
  for (unsigned p : ports) {
    for (unsigned k : checked) {
      // A card removed before the open has no ports to check: it is shown REMOVED (exit 4).
      if (sys.device(k).info().removed) continue;
      const unsigned n = sys.device(k).port_count();
      if (p >= n) {
        std::fprintf(stderr, "npo-link %s: port %u not present (card %u has %u port%s)\n", sub, p, k, n,
                     n == 1 ? "" : "s");
        return false;
      }
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"npo-link: optical links and transceivers of NPO cards"};
  npo::tools::add_version_flag(app, "npo-link");
  app.require_subcommand(1);
  // --log-level/--log-format anywhere on the line (subcommands pass unknown options up).
  npo::tools::LogOptions log;
  npo::tools::add_log_options(app, log);
  app.fallthrough();

  auto* dec = app.add_subcommand("decode", "decode a transceiver EEPROM dump (raw, ethtool -m hex, or .hex file)");
  std::string file;
  bool as_json = false;
  dec->add_option("FILE", file, "dump file")->required();
  dec->add_flag("--json", as_json, "print one JSON object");

  Common c;
  auto* show = app.add_subcommand("show", "one line per port: state, reason, speed, lanes, neighbour, worst-lane BER");
  auto* ddm = app.add_subcommand("ddm", "decode each live module over the mailbox (CMIS) and the card's DDM mirrors");
  auto* fec = app.add_subcommand("fec", "FEC counters and symbol-error bins per lane");
  auto* prbs = app.add_subcommand("prbs", "PRBS test on both ends of a link, per-lane bits/errors/BER");
  auto* train = app.add_subcommand("train", "retrain and print the supervisor's per-stage times and result codes");
  auto* health = app.add_subcommand("health", "lane verdicts with reasons over an interval between two snapshots");
  auto* events = app.add_subcommand(
      "events",
      "link event log: state changes, lane verdicts, modules and cards removed (with --watch: as they happen)");
  for (auto* s : {show, ddm, fec, prbs, train, health, events}) add_common(s, c);
  for (auto* s : {show, fec, train, health}) s->add_flag("--all", c.all, "include ports without a module");
  std::vector<std::string> states;
  for (auto* s : {show, ddm, fec, health, events}) add_fleet(s, c, states);
  link::PrbsArgs pa;
  double interval = 1.0;
  std::optional<unsigned> card, port;
  prbs->add_option("--pattern", pa.pattern, "PRBS7, PRBS9, PRBS11, PRBS13, PRBS15, PRBS23, PRBS31 (default PRBS31)");
  prbs->add_option("--seconds", pa.seconds, "checking time in seconds > 0 (platform clock; default 1)");
  prbs->add_option("--side", pa.side, "media (over the fibre, default) or host (card <-> module)");
  prbs->add_option("--lanes", pa.lanes, "PRBS_LANES bitmap 0x01..0xff (default 0xff)");
  prbs->add_option("--card", card, "card index (default 0)");
  prbs->add_option("--port", port, "port (default 0)");
  train->add_option("--card", card, "card index (with --port: that link, both ends; neither: every port)");
  train->add_option("--port", port, "port (default 0 when --card is given)");
  health->add_option("--interval", interval,
                     "seconds > 0 between the snapshots (platform clock; default 1): a run samples 2 intervals");
  show->add_option(
      "--interval", c.interval,
      "seconds > 0 between the snapshots the first frame samples (platform clock; default 0.5, or the --watch "
      "period when shorter): 2 "
      "intervals, so a lane bad now is reported now and WORST-BER is the last interval's");

  if (auto rc = npo::tools::parse_command_line(app, argc, argv, "npo-link")) return *rc;
  if (auto r = npo::tools::configure_logging(log); !r) {
    std::fprintf(stderr, "npo-link: %s\n", r.error().to_string().c_str());
    return 2;
  }
  if (dec->parsed()) return link::decode(file, as_json);

  // Bad numbers are refused before any card is touched.
  const char* sub = app.get_subcommands().front()->get_name().c_str();
  auto* parsed = app.get_subcommands().front();
  if (parsed->count("--watch") != 0 && !check_seconds(sub, "--watch", c.watch)) return 2;
  if (parsed->count("--count") != 0) {
    if (parsed->count("--watch") == 0) {
      std::fprintf(stderr, "npo-link %s: --count needs --watch\n", sub);
      return 2;
    }
    if (c.count == 0) {
      std::fprintf(stderr, "npo-link %s: --count 0: expected N >= 1 (omit --count to repeat until interrupted)\n", sub);
      return 2;
    }
  }
  if (prbs->parsed()) {
    if (!check_seconds(sub, "--seconds", pa.seconds)) return 2;
    if (pa.lanes == 0 || pa.lanes > 0xff) {
      std::fprintf(stderr, "npo-link prbs: --lanes 0x%x: expected a bitmap of lanes 0..7, 0x01..0xff\n", pa.lanes);
      return 2;
    }
  }
  if (health->parsed() && !check_seconds(sub, "--interval", interval)) return 2;
  if (show->parsed() && show->count("--interval") != 0 && !check_seconds(sub, "--interval", c.interval)) return 2;
  for (const auto& st : states) {
    auto ps = link::parse_state(st);
    if (!ps) {
      std::fprintf(stderr, "npo-link %s: --state %s: expected HEALTHY, DEGRADED, FAILED or DISABLED\n", sub,
                   st.c_str());
      return 2;
    }
    c.states.push_back(*ps);
  }

  // The views only read: on emu-remote they attach read-only (watching cards another process
  // owns) unless they train (--train) or the URI says mode=rw; prbs and train need the owner.
  const bool reads_only = !c.train && !prbs->parsed() && !train->parsed();
  std::string uri = npo::tools::backend_uri(c.backend, link::kTool);
  const std::string given_uri = uri;
  const bool one_link = (train->parsed() && (card || port)) || prbs->parsed();
  if (reads_only) {
    uri = npo::tools::observer_uri(uri);
  } else if (one_link) {
    // Owner of the card asked for only (prbs: card 0 by default); the others are watched
    // read-only, so a job holding them does not stop the tool and a refusal names this card
    // (tools/common owner_uri). The link's far end is added below when it is free.
    uri = npo::tools::owner_uri(uri, {card.value_or(0)});
  } else if (!train->parsed()) {
    uri = npo::tools::owner_uri(uri, c.cards);  // --train with --card
  }
  auto sys = npo::System::open(uri);
  if (!sys) {
    link::report(sys.error(), uri);
    return npo::tools::open_failure_status(sys.error());  // 2: a malformed URI
  }
  if (one_link && uri != given_uri) {
    // The far end of the link (learned in its last training): owned too when no other
    // process holds it (prbs checks it, train retrains both ends); else say who holds it and
    // go on from this end.
    const unsigned ci = card.value_or(0), pi = port.value_or(0);
    if (ci < (*sys)->device_count() && pi < (*sys)->device(ci).port_count()) {
      auto ps = npo::read_port((*sys)->device(ci), pi);
      // (a plain index, kNoCard when unknown: an optional here trips g++ 12's
      // -Wmaybe-uninitialized in the sanitizer builds)
      constexpr unsigned kNoCard = ~0u;
      unsigned far = kNoCard;
      if (ps) {
        if (auto nc = link::card_of(**sys, ps->neighbor_fabric_id)) far = *nc;
      }
      if (far == kNoCard && ps && ps->state == npo::LinkState::kFault) {
        // PORT.NEIGHBOR is cleared whenever a port starts training (registers.md §7.1), so a
        // port that failed its retries no longer names its far end. Its far end failed too
        // (a link is down at both ends): when exactly one port of another card is in Fault,
        // that is it.
        std::vector<std::pair<unsigned, unsigned>> faulted;
        for (unsigned k = 0; k < (*sys)->device_count(); ++k) {
          if (k == ci) continue;
          for (unsigned q = 0; q < (*sys)->device(k).port_count(); ++q) {
            auto o = npo::read_port((*sys)->device(k), q);
            if (o && o->state == npo::LinkState::kFault) faulted.emplace_back(k, q);
          }
        }
        if (faulted.size() == 1) {
          far = faulted.front().first;
          std::fprintf(stderr,
                       "npo-link %s: card %u port %u has no trained neighbour; its far end is taken to be card %u port "
                       "%u, the only other port in Fault\n",
                       sub, ci, pi, faulted.front().first, faulted.front().second);
        }
      }
      if (far == kNoCard) {
        // No far end known (several ports in Fault): say how to own it too.
        std::fprintf(stderr,
                     "npo-link %s: the far end of card %u port %u is not known (the port has no trained neighbour); "
                     "only card %u is owned, so the far end is not %s. To own both ends, name both cards: "
                     "--backend '%s' with F the far end's card\n",
                     sub, ci, pi, ci, prbs->parsed() ? "checked" : "retrained", (uri + ",F").c_str());
      }
      if (far != kNoCard && far != ci) {
        // The first attach ends before the second asks for the far end (a card has one owner).
        const std::string both = npo::tools::owner_uri(given_uri, {ci, far});
        sys->reset();
        auto wide = npo::System::open(both);
        if (wide) {
          sys = std::move(wide);
        } else {
          std::fprintf(stderr, "npo-link %s: far end card %u of card %u port %u is not available as owner (%s)\n", sub,
                       far, ci, pi, wide.error().to_string().c_str());
          sys = npo::System::open(uri);
          if (!sys) {
            link::report(sys.error(), uri);
            return npo::tools::open_failure_status(sys.error());
          }
        }
      }
    }
  }
  npo::System& s = **sys;
  // A card or port that does not exist is a bad command line, not an empty selection.
  if (!check_selection(sub, s, c, card, port)) return link::kExitUsage;
  // `health` also judges the modules' DDM (thresholds, Rx LOS, Tx fault) over the mailbox.
  npo::LinkMonitorOptions mo;
  mo.check_module_ddm = health->parsed();
  // Reading never changes a link: the views report a flapping port, they do not take it down
  // (the flap policy is the bring-up's / a daemon's).
  mo.enforce_flap_policy = false;
  npo::LinkMonitor mon(s, mo);
  // Reading never changes a link: show, fec, health, ddm and events train only when asked to
  // (--train). prbs (a test that retrains the link anyway) and `train` with a port need the
  // neighbour known, so they bring links up first when they are down.
  if (c.train || prbs->parsed() || (train->parsed() && (card || port))) {
    if (auto r = ensure_up(s, mon); !r) return link::report(r.error(), "link bring-up");
  }
  if (show->parsed()) return repeat(c, mon, [&] { return link::show_once(s, mon, c); });
  if (fec->parsed()) return repeat(c, mon, [&] { return link::fec_once(s, mon, c); });
  if (ddm->parsed()) return repeat(c, mon, [&] { return link::ddm_once(s, mon, c); });
  if (health->parsed()) return repeat(c, mon, [&] { return link::health_once(s, mon, c, interval); });
  if (events->parsed()) return repeat(c, mon, [&] { return link::events_once(s, mon, c); });
  if (train->parsed()) return repeat(c, mon, [&] { return link::train_once(s, c, card, port); });
  if (prbs->parsed()) {
    pa.card = card.value_or(0);
    pa.port = port.value_or(0);
    return repeat(c, mon, [&] { return link::prbs_once(s, c, pa); });
  }
  return 2;
}
