// SPDX-License-Identifier: Apache-2.0
// npo-link: what the subcommands share. main.cpp parses the command line and dispatches to
// one file per subcommand (decode, show, fec, ddm, train, prbs, health); ports.cpp holds the
// port views show and fec share, including the one place that reads raw port register words.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

/// Cap on the bring-up npo-link runs before a live subcommand when links are down: 10 s of
/// platform clock (npo-link always waited this long; the tools' default is 2 s).
inline constexpr std::uint64_t kBringUpTimeoutNs = 10'000'000'000;

/// Options every live subcommand takes.
struct Common {
  std::optional<std::string> backend;  ///< --backend; unset: $NPO_BACKEND, else emu:mesh8
  bool json = false;
  double watch = 0;    ///< seconds between repeats; 0: run once
  unsigned count = 0;  ///< repeats with --watch; 0: until interrupted
  bool all = false;    ///< include ports without a module
};

/// Prints "npo-link: WHAT: ERROR" to stderr; returns 1.
int report(const Error& e, std::string_view what);

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
/// Whether a port is listed: with a module, or every port with --all.
[[nodiscard]] bool listed(const Common& c, const PortStatus& ps);
/// Prints the JSON of show and fec: {backend, timestamp_ns, interval_ns, ports}.
void print_ports_json(System& sys, const LinkSnapshot& snap, const Common& c);
/// With no row printed, says why on stderr (e.g. emu:N, which has no cables).
void say_if_empty(std::size_t rows);

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
/// `ddm [--card N] [--port P]`: each live module decoded over the mailbox, and the card's DDM mirrors.
int ddm_once(System& sys, const Common& c, std::optional<unsigned> card, std::optional<unsigned> port);
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
