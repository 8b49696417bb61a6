// SPDX-License-Identifier: Apache-2.0
// npo-link: what the subcommands share. main.cpp parses the command line and dispatches to
// one file per subcommand (decode, show, fec, ddm, train, prbs, health); ports.cpp holds the
// port views show and fec share, including the one place that reads raw port register words.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "npo/hal/error.hpp"
#include "npo/hal/link_health.hpp"
#include "npo/hal/link_monitor.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/xcvr_decode.hpp"

namespace npo::tools::link {

/// Program name in messages.
inline constexpr std::string_view kTool = "npo-link";

/// Cap on the bring-up of `--train` (and of prbs / train with a port): 10 s of platform clock
/// (npo-link always waited this long; the tools' default is 2 s).
inline constexpr std::uint64_t kBringUpTimeoutNs = 10'000'000'000;

/// Exit statuses of the live subcommands (documented in tools/README.md, like the
/// `mlxlink`/`nvidia-smi` statuses scripts test): the worst state of a selected port decides.
inline constexpr int kExitHealthy = 0;   ///< every selected port HEALTHY (or DISABLED: no module, by host)
inline constexpr int kExitError = 1;     ///< the tool could not do its job (backend, card, read errors)
inline constexpr int kExitUsage = 2;     ///< bad command line (refused before any card is touched)
inline constexpr int kExitDegraded = 3;  ///< a selected port is DEGRADED, none FAILED
inline constexpr int kExitFailed = 4;    ///< a selected port is FAILED (or held down, or its card removed)

/// Views with more selected ports than this list only the ports that are not HEALTHY (and
/// the summary) unless --full, --card, --port or --state is given: a 1024-card supernode's
/// 6,000 healthy lines hide the one that matters.
inline constexpr std::size_t kFullListMax = 256;

/// Options every live subcommand takes.
struct Common {
  std::optional<std::string> backend;  ///< --backend; unset: tools/common resolve_backend
  bool json = false;
  double watch = 0;               ///< seconds between repeats; 0: run once
  unsigned count = 0;             ///< repeats with --watch; 0: until interrupted
  bool all = false;               ///< include ports without a module
  bool train = false;             ///< --train: train every port first (else the views only read)
  bool full = false;              ///< --full: list every selected port, also past kFullListMax
  std::vector<unsigned> cards;    ///< --card: only these cards (empty: all)
  std::vector<unsigned> ports;    ///< --port: only these ports (empty: all)
  std::vector<PortState> states;  ///< --state: only ports in these states (empty: all)
  mutable unsigned frame = 0;     ///< watch frame being printed (0: the first)
  /// show --interval: seconds between the snapshots of the first frame, which samples as many
  /// intervals as the lane verdicts' hysteresis needs (LinkMonitor::sample; kSampleIntervalS).
  double interval = 0;
  [[nodiscard]] bool filtered() const { return !cards.empty() || !ports.empty() || !states.empty(); }
};

/// Default seconds between the snapshots a one-shot `show` / `events` (and each watch's first
/// frame) samples: 2 intervals (HealthLimits::worsen_intervals), so 1 s in all.
inline constexpr double kSampleIntervalS = 0.5;

/// The first frame's snapshot: LinkMonitor::sample (a verdict of now, lane BERs over the last
/// interval) with intervals of `interval_s` (0: kSampleIntervalS, or the --watch period when
/// shorter); later watch frames take one snapshot (the interval since the previous frame).
[[nodiscard]] Result<LinkSnapshot> frame_snapshot(LinkMonitor& mon, const Common& c, double interval_s);

/// Prints "npo-link: WHAT: ERROR" to stderr; returns kExitError.
int report(const Error& e, std::string_view what);

// ---- Selection, summary, exit status (ports.cpp) -------------------------------------------

/// Parses a --state value (HEALTHY, DEGRADED, FAILED, DISABLED; any case).
[[nodiscard]] std::optional<PortState> parse_state(std::string_view name);
/// Whether card `card` passes --card.
[[nodiscard]] bool card_selected(const Common& c, std::uint32_t card);
/// Whether a port passes --card, --port and --state and is listed (a module, a module that
/// was removed, or every port with --all).
[[nodiscard]] bool selected(const Common& c, std::uint32_t card, const PortStatus& ps, const PortHealth& h);

/// Walks the selected cards and ports of `snap` in card, then port order: `on_removed(card)`
/// for a selected card that is gone, `on_port(card, status, health)` for each selected port.
/// With `brief`, HEALTHY ports are not visited but counted. Returns how many were skipped so.
std::size_t for_each_selected(
    const LinkSnapshot& snap, const Common& c, bool brief, const std::function<void(std::uint32_t card)>& on_removed,
    const std::function<void(std::uint32_t card, const PortStatus& ps, const PortHealth& h)>& on_port);

/// What the one-line summary counts over the selected ports.
struct Summary {
  std::size_t ports = 0;
  std::array<std::size_t, 4> by_state{};  ///< indexed by PortState
  std::optional<double> worst_ber;        ///< worst lane of a port whose link is up
  std::uint32_t worst_card = 0;
  unsigned worst_port = 0, worst_lane = 0;
  std::size_t flapped = 0;    ///< ports with FLAP_COUNT > 0 (left Up since reset)
  std::size_t held_down = 0;  ///< DISABLED ports the flap policy holds down (counted as failed)
  std::uint32_t most_flaps = 0, flap_card = 0;
  unsigned flap_port = 0;
  std::vector<std::uint32_t> removed_cards;  ///< selected cards that are gone
  void add(std::uint32_t card, const PortStatus& ps, const PortHealth& h);
  void add_removed(std::uint32_t card) { removed_cards.push_back(card); }
  /// "56 ports: 54 HEALTHY, 1 DEGRADED, 1 FAILED, 0 DISABLED; worst lane 3.10e-04 (card 1 port 2
  /// lane 2); 2 ports flapped since reset (most: card 0 port 1, 9 flaps)[; card 2 REMOVED]".
  [[nodiscard]] std::string line() const;
  [[nodiscard]] nlohmann::json to_json() const;
  /// kExitHealthy, kExitDegraded or kExitFailed.
  [[nodiscard]] int exit_status() const;
};
/// Summary of the selected ports of a snapshot.
[[nodiscard]] Summary summarize(const LinkSnapshot& snap, const Common& c);
/// Whether the text view lists only the ports that are not HEALTHY (see kFullListMax).
[[nodiscard]] bool brief_view(const Common& c, const Summary& s);

// ---- Watch frames (ports.cpp) ----------------------------------------------------------------

/// With --watch (text): "--- frame N  2026-12-01T13:40:01.123Z  platform clock 1.200000 s ---".
void print_frame_header(const Common& c, std::string_view sub, std::uint64_t platform_ns);
/// Prints a JSON document: pretty once, one compact line per frame with --watch (JSON Lines),
/// with "time" (UTC wall clock) added under --watch.
void print_doc(const Common& c, nlohmann::json j);
/// Prints `legend` once per run (the first frame).
void print_legend_once(const Common& c, std::string_view legend);
/// Prints a hint to stderr when no selected port with a module is enabled (an in-process
/// emu: backend starts every process with its links down).
void hint_if_untrained(const LinkSnapshot& snap, const Common& c);

// ---- Port registers: the one place the tool interprets raw PortStatus words (ports.cpp) ---

/// Whether the port has a module but is not Up (disabled, training, or in Fault), so the
/// links need a bring-up before the port can be shown.
[[nodiscard]] bool needs_bring_up(const PortStatus& ps);
/// Whether the host allows physical lane `lane` (PORT.LANE_ENABLE).
[[nodiscard]] bool lane_enabled(const PortStatus& ps, unsigned lane);
/// Whether physical lane `lane` has signal and CDR lock (STATUS.LANES_UP).
[[nodiscard]] bool lane_cdr_locked(const PortStatus& ps, unsigned lane);
/// Whether physical lane `lane` carries the link: the port is Up and the lane is one of the
/// lanes in use (npo::lanes_in_use).
[[nodiscard]] bool lane_carries_link(const PortStatus& ps, unsigned lane);

// ---- Port views shared by show and fec (ports.cpp) ----------------------------------------

/// Card index of a fabric ID, if the card is in this system.
[[nodiscard]] std::optional<std::uint32_t> card_of(System& sys, std::optional<std::uint32_t> fid);
/// A BER as "1.23e-08", "-" when unknown.
[[nodiscard]] std::string ber_text(const std::optional<double>& b);
/// The BER to show for a lane: over the last interval when the monitor has one, else since clear.
[[nodiscard]] std::optional<double> lane_ber(const PortStatus& ps, const PortHealth& h, unsigned lane);
/// The worst lane's BER of an Up port over its enabled lanes; nullopt when not Up.
[[nodiscard]] std::optional<double> worst_ber(const PortStatus& ps, const PortHealth& h);
/// Prints the JSON of show and fec: {backend, timestamp_ns, interval_ns, ports, removed_cards,
/// summary}; returns the exit status (Summary::exit_status).
int print_ports_json(System& sys, const LinkSnapshot& snap, const Common& c);
/// With no row printed, says why on stderr (e.g. emu:N, which has no cables).
void say_if_empty(std::size_t rows);
/// Ports of the selected cards that the default view leaves out because they have no module
/// (0 with --all or --port, which list them).
[[nodiscard]] std::size_t count_without_module(const LinkSnapshot& snap, const Common& c);
/// With `n` != 0, the footer line "N ports without a module not listed (--all shows them)".
void say_if_without_module(std::size_t n);

// ---- Transceivers (decode.cpp), also used by ddm ------------------------------------------

/// Optical power as "0.5012 mW / -3.00 dBm", "not reported" or "... no light (dBm undefined)".
[[nodiscard]] std::string power_text(const std::optional<double>& mw, const std::optional<double>& dbm);
/// Everything decode_module found, as JSON.
[[nodiscard]] nlohmann::json module_json(const xcvr::DecodedModule& m);

// ---- Subcommands: each prints its output and returns the exit status ---------------------

/// `decode FILE [--json]`: a transceiver EEPROM dump, ethtool-like or JSON.
int decode(const std::string& file, bool as_json);
/// `show`: one line per port (state, speed, lanes, neighbour, worst-lane BER, reason).
int show_once(System& sys, LinkMonitor& mon, const Common& c);
/// `fec`: FEC counters and symbol-error bins per lane.
int fec_once(System& sys, LinkMonitor& mon, const Common& c);
/// `ddm [--card N] [--port P]`: each live module decoded over the mailbox with its thresholds
/// and raised flags, and the card's DDM mirrors. A module that goes away is reported, not an error.
int ddm_once(System& sys, LinkMonitor& mon, const Common& c);
/// `events`: state changes and faults (LinkEvent) as they happen, one line (or JSON object) each.
int events_once(System& sys, LinkMonitor& mon, const Common& c);
/// `train [--card N [--port P]]`: retrain (one link, both ends, or every port) and print the stages.
int train_once(System& sys, const Common& c, std::optional<unsigned> card, std::optional<unsigned> port);

/// Options of `prbs`.
struct PrbsArgs {
  std::string pattern = "PRBS31";
  double seconds = 1.0;
  std::string side = "media";
  unsigned card = 0;
  unsigned port = 0;
  unsigned lanes = 0xff;
};
/// `prbs`: a PRBS test on both ends of a link, per-lane bits/errors/BER.
int prbs_once(System& sys, const Common& c, const PrbsArgs& a);
/// `health --interval S`: lane verdicts with reasons between two snapshots S seconds apart.
int health_once(System& sys, LinkMonitor& mon, const Common& c, double interval);

}  // namespace npo::tools::link
