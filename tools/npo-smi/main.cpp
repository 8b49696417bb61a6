// SPDX-License-Identifier: Apache-2.0
// npo-smi: lists the NPO cards a backend exposes, with identity, BARs, NUMA node, HBM,
// PCIe link and firmware read from each card. Uses only the public npo-hal API.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/backend.hpp"
#include "common/bring_up.hpp"
#include "common/cli.hpp"
#include "common/output.hpp"
#include "npo/hal/hal.hpp"

namespace {

using npo::tools::Column;
using npo::tools::fail;
using npo::tools::print_json;
using npo::tools::Table;

/// Program name in messages.
constexpr std::string_view kTool = "npo-smi";

std::string human_bytes(std::uint64_t b) {
  if (b >= (1ULL << 30) && b % (1ULL << 30) == 0) return fmt::format("{} GiB", b >> 30);
  if (b >= (1ULL << 20) && b % (1ULL << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= (1ULL << 10) && b % (1ULL << 10) == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

std::string bar_role(const npo::BarInfo& b) {
  switch (b.index) {
    case 0: return "control registers";
    case 2: return "HBM aperture";
    case 4: return "MSI-X table";
    default: return "";
  }
}

nlohmann::json card_json(const npo::DeviceInfo& d) {
  nlohmann::json bars = nlohmann::json::array();
  for (const auto& b : d.bars) {
    bars.push_back({{"index", b.index},
                    {"size_bytes", b.size},
                    {"prefetchable", b.prefetchable},
                    {"is_64bit", b.is_64bit},
                    {"role", bar_role(b)}});
  }
  return {
      {"index", d.index},
      {"removed", d.removed},
      {"bdf", d.bdf},
      {"vendor_id", d.vendor_id},
      {"device_id", d.device_id},
      {"pci_id", fmt::format("{:04x}:{:04x}", d.vendor_id, d.device_id)},
      {"numa_node", d.numa_node},
      {"iommu_group", d.iommu_group},
      {"driver", d.driver},
      {"model", d.model},
      {"serial", fmt::format("{:016x}", d.serial)},
      {"fabric_id", d.fabric_id},
      {"hbm_bytes", d.hbm_bytes},
      {"engines", d.num_engines},
      {"queues_per_engine", d.queues_per_engine},
      {"ports", d.num_ports},
      {"lanes_per_port", d.lanes_per_port},
      {"max_transfer_bytes", d.max_transfer_bytes},
      {"pcie",
       {{"max_gts", d.pcie.max_gts}, {"max_width", d.pcie.max_width}, {"gts", d.pcie.gts}, {"width", d.pcie.width}}},
      {"firmware_version", d.firmware.firmware},
      {"interface_version", fmt::format("{}.{}.{}", d.firmware.interface >> 16, (d.firmware.interface >> 8) & 0xff,
                                        d.firmware.interface & 0xff)},
      {"bars", bars}};
}

/// Link class of card i -> card j for the matrix: X itself, L<h> for h hops over trained
/// links (L1xk: k parallel direct links; a trailing '*' marks a direct link that trained
/// narrower than the others), '-' unreachable.
std::string link_class(const npo::Topology& t, const npo::RouteTable& rt, std::size_t i, std::size_t j, bool compact) {
  if (i == j) return "X";
  const int h = rt.hops(t.cards[i], t.cards[j]);
  if (h < 0) return "-";
  if (h > 1) return compact ? fmt::format("{}", h) : fmt::format("L{}", h);
  unsigned par = 0;
  unsigned min_lanes = ~0u;
  unsigned max_lanes = 0;
  for (const auto& l : t.links) {
    if (!l.up) continue;
    if ((l.a_fabric_id == t.cards[i] && l.b_fabric_id == t.cards[j]) ||
        (l.a_fabric_id == t.cards[j] && l.b_fabric_id == t.cards[i])) {
      ++par;
      min_lanes = std::min(min_lanes, l.lanes);
      max_lanes = std::max(max_lanes, l.lanes);
    }
  }
  const std::string narrow = min_lanes < max_lanes || (par > 0 && min_lanes < 8) ? "*" : "";
  if (compact) return fmt::format("{}{}", par > 1 ? "1=" : "1", narrow);
  return fmt::format("{}{}", par > 1 ? fmt::format("L1x{}", par) : "L1", narrow);
}

/// `npo-smi topo`: reads every port as it is (with --train: first trains every link with a
/// module), discovers the graph from the identities training exchanged, computes routes, then
/// prints a card x card matrix of hops (like nvidia-smi topo -m; compact up to 64 cards,
/// summarised beyond), or JSON.
/// Exit status of `topo --expect PLAN` when the discovered cabling differs from the plan.
constexpr int kExitMismatch = 3;
/// Exit status of the card list when a card was removed (as npo-link's).
constexpr int kExitRemoved = 4;

/// `topo --expect PLAN`: the discovered fabric against a topology file (check_topology),
/// every missing, miswired, degraded and unexpected link and card, one per line (or JSON).
/// Returns 0 on a match, kExitMismatch otherwise, 1 when the plan cannot be read.
int check_expected(const npo::Topology& found, const std::string& plan_path, bool json, nlohmann::json* out) {
  auto plan = npo::load_fabric_spec(plan_path);
  if (!plan) return fail(kTool, fmt::format("--expect {}", plan_path), plan.error());
  const npo::TopologyCheck chk = npo::check_topology(found, *plan);
  // A plan for another fabric size (torus64.yaml against mesh8) is said first: every
  // difference listed after it follows from that.
  const std::size_t fabric_cards = found.cards.size();
  const std::string size_mismatch =
      plan->cards == fabric_cards
          ? std::string()
          : fmt::format("the plan has {} cards ({} cables), the fabric has {}: is this the plan of this fabric?",
                        plan->cards, plan->cables.size(), fabric_cards);
  if (json) {
    nlohmann::json issues = nlohmann::json::array();
    for (const auto& i : chk.issues) {
      issues.push_back({{"kind", std::string(npo::link_issue_name(i.kind))},
                        {"card", i.at.card},
                        {"port", i.at.port},
                        {"message", i.message}});
    }
    (*out)["expect"] = {{"plan", plan_path},
                        {"expected_links", chk.expected_links},
                        {"up_as_planned", chk.up_as_planned},
                        {"plan_cards", plan->cards},
                        {"plan_cables", plan->cables.size()},
                        {"fabric_cards", fabric_cards},
                        {"ok", chk.ok()},
                        {"issues", issues}};
  } else {
    fmt::print("\nExpected cabling ({}): {} of {} planned links Up as planned; {}\n", plan_path, chk.up_as_planned,
               chk.expected_links,
               chk.ok() ? std::string("the fabric matches the plan")
                        : fmt::format("{} difference{}:", chk.issues.size(), chk.issues.size() == 1 ? "" : "s"));
    if (!size_mismatch.empty()) fmt::print("  {}\n", size_mismatch);
    for (const auto& i : chk.issues) fmt::print("  {}\n", i.message);
  }
  return chk.ok() ? 0 : kExitMismatch;
}

/// Slurm hostlist expression of `prefix` + each index: "npo[0-3,5]" (Slurm's hostlist
/// syntax, slurm.conf(5) "NodeName"); a single index is written without brackets.
std::string slurm_hostlist(const std::string& prefix, std::vector<std::size_t> idx) {
  std::sort(idx.begin(), idx.end());
  if (idx.size() == 1) return fmt::format("{}{}", prefix, idx[0]);
  std::string ranges;
  for (std::size_t i = 0; i < idx.size();) {
    std::size_t j = i;
    while (j + 1 < idx.size() && idx[j + 1] == idx[j] + 1) ++j;
    if (!ranges.empty()) ranges += ',';
    ranges += j == i ? fmt::format("{}", idx[i]) : fmt::format("{}-{}", idx[i], idx[j]);
    i = j + 1;
  }
  return fmt::format("{}[{}]", prefix, ranges);
}

/// Nominal payload rate of a link of `lanes` lanes, Gb/s (registers.md §7.1: 8 lanes = 800 Gb/s).
double link_gbps(unsigned lanes) { return 100.0 * lanes; }

/// `topo --format slurm`: a topology.conf for Slurm's tree plugin (topology.conf(5)): cards
/// grouped into leaf "switches" of at most `group` cards that are close on the fabric (a
/// breadth-first walk over Up links from the lowest card not yet placed), and a root switch
/// over the leaves when there is more than one. Node names are `prefix` + card index.
/// With `partition`, only the cards whose GLOBAL.PARTITION (registers.md §3.8) is that ID.
std::string slurm_topology(npo::System& s, const npo::Topology& t, const std::string& prefix, unsigned group,
                           std::optional<std::uint32_t> partition) {
  std::map<std::uint32_t, std::size_t> index;  // fabric ID -> card index
  for (std::size_t i = 0; i < s.device_count(); ++i) {
    if (partition && (s.device(i).info().removed || s.device(i).partition().value_or(0) != *partition)) continue;
    index[s.device(i).info().fabric_id] = i;
  }
  std::map<std::uint32_t, std::vector<std::uint32_t>> adj;
  for (const auto& l : t.links) {
    if (!l.up || l.a_fabric_id == l.b_fabric_id) continue;
    adj[l.a_fabric_id].push_back(l.b_fabric_id);
    adj[l.b_fabric_id].push_back(l.a_fabric_id);
  }
  for (auto& [k, v] : adj) std::sort(v.begin(), v.end());
  std::vector<std::vector<std::size_t>> groups;
  std::map<std::uint32_t, bool> placed;
  for (const auto& [fid, idx] : index) {
    if (placed[fid]) continue;
    std::vector<std::size_t> g;
    std::vector<std::uint32_t> queue{fid};
    placed[fid] = true;
    for (std::size_t q = 0; q < queue.size() && g.size() < group; ++q) {
      g.push_back(index[queue[q]]);
      for (auto nb : adj[queue[q]]) {
        if (index.count(nb) != 0 && !placed[nb] && queue.size() < group) {
          placed[nb] = true;
          queue.push_back(nb);
        }
      }
    }
    // Cards queued but not taken (the group filled up) go back to the pool.
    for (std::size_t q = g.size(); q < queue.size(); ++q) placed[queue[q]] = false;
    groups.push_back(std::move(g));
  }
  std::string out = fmt::format(
      "# Slurm topology.conf (TopologyPlugin=topology/tree) written by npo-smi {} from backend {}\n"
      "# {} cards in {} leaf switch{} of <= {} cards close on the optical fabric; nodes are {}<card index>.\n",
      npo::kVersion, s.uri(), index.size(), groups.size(), groups.size() == 1 ? "" : "es", group, prefix);
  std::vector<std::size_t> leaves;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    out += fmt::format("SwitchName=leaf{} Nodes={}\n", g, slurm_hostlist(prefix, groups[g]));
    leaves.push_back(g);
  }
  if (groups.size() > 1) out += fmt::format("SwitchName=root Switches={}\n", slurm_hostlist("leaf", leaves));
  return out;
}

/// `topo --format json`: the discovered graph for schedulers: nodes (cards) and edges (card
/// pairs joined by Up links) with lanes, bandwidth and a routing weight (800 Gb/s / the
/// pair's bandwidth: 1 for one full 8-lane link, less for parallel links, more for degraded).
nlohmann::json graph_json(npo::System& s, const npo::Topology& t) {
  std::map<std::uint32_t, std::size_t> index;
  nlohmann::json nodes = nlohmann::json::array();
  for (std::size_t i = 0; i < s.device_count(); ++i) {
    const auto& d = s.device(i).info();
    index[d.fabric_id] = i;
    nodes.push_back({{"id", i},
                     {"card", i},
                     {"fabric_id", d.fabric_id},
                     {"bdf", d.bdf},
                     {"serial", fmt::format("{:016x}", d.serial)}});
  }
  struct Pair {
    unsigned links = 0;
    unsigned lanes = 0;
  };
  std::map<std::pair<std::size_t, std::size_t>, Pair> pairs;
  for (const auto& l : t.links) {
    if (!l.up || index.count(l.a_fabric_id) == 0 || index.count(l.b_fabric_id) == 0) continue;
    auto a = index[l.a_fabric_id];
    auto b = index[l.b_fabric_id];
    if (a == b) continue;
    if (a > b) std::swap(a, b);
    auto& p = pairs[{a, b}];
    ++p.links;
    p.lanes += l.lanes;
  }
  nlohmann::json edges = nlohmann::json::array();
  for (const auto& [k, p] : pairs) {
    const double gbps = link_gbps(p.lanes);
    edges.push_back({{"source", k.first},
                     {"target", k.second},
                     {"links", p.links},
                     {"lanes", p.lanes},
                     {"bandwidth_gbps", gbps},
                     {"weight", gbps > 0 ? link_gbps(8) / gbps : 0.0}});
  }
  return {{"directed", false}, {"uri", s.uri()}, {"nodes", nodes}, {"edges", edges}};
}

/// Options of `topo` beyond --json/--expect.
struct TopoFormat {
  std::string format = "table";  ///< table | json (graph) | slurm
  std::string slurm_prefix = "npo";
  unsigned slurm_group = 8;
  std::optional<std::uint32_t> partition;  ///< slurm: only the cards of this partition ID
};

/// Whether `s` is attached read-only (emu-remote mode=ro): every card is then.
bool observer(npo::System& s) { return s.device_count() != 0 && s.device(0).info().read_only; }

int topo(npo::System& s, bool json, const std::string& expect, const TopoFormat& tf, bool train) {
  // Reading never changes a link: only --train trains; without it the ports are read as they
  // are (ports still training are waited for). Routes are computed here from the discovered
  // graph, not programmed into the cards.
  auto fabric = npo::tools::bring_up(
      s, {.timeout_ns = npo::tools::kDefaultBringUpTimeoutNs, .program_routes = false, .train = train});
  if (!fabric) {
    const npo::Error& e = fabric.error().error;
    if (e.code() == npo::Code::kUnavailable && e.context().card && e.message() == "card removed") {
      // A removed card answers nothing: no graph can be discovered through it (the card list
      // still shows the others; exit 4 as there).
      const unsigned k = *e.context().card;
      std::fprintf(stderr,
                   "npo-smi topo: card %u (%s) was removed, so the fabric cannot be discovered: `npo-smi` lists the "
                   "cards that remain\n",
                   k, k < s.device_count() ? s.device(k).info().bdf.c_str() : "?");
      return kExitRemoved;
    }
    return fail(kTool, fabric.error().step, e);
  }
  const npo::LinkBringUp& up = fabric->links;
  const npo::Topology* t = &fabric->topology;
  const npo::RouteTable* rt = &fabric->routes;
  const std::size_t n = t->cards.size();
  // The in-process emulator starts every process with its links down: say (on stderr, in
  // every format) why no link shows and how to train (npo-link's hint_if_untrained says the same).
  const bool no_link_up = !train && up.up == 0 && up.ports_with_module != 0;
  if (no_link_up) {
    fmt::print(stderr, "npo-smi topo: no link is up: {}; add --train to train them\n",
               s.uri().starts_with("emu:") ? "the in-process emulator starts with its links down"
                                           : "topo only reads the links, it does not train them");
  }
  if (tf.format == "slurm") {
    if (tf.partition) {  // a prolog must not install an empty topology.conf for a partition that is not there
      std::size_t members = 0;
      for (std::size_t i = 0; i < s.device_count(); ++i) {
        members += !s.device(i).info().removed && s.device(i).partition().value_or(0) == *tf.partition ? 1 : 0;
      }
      if (members == 0) {
        fmt::print(stderr, "npo-smi topo: no card is in partition {} (npo-fabric list shows the IDs{})\n",
                   *tf.partition, *tf.partition == 0 ? "; 0 is the free cards' ID" : "");
        return 1;
      }
    }
    std::fputs(slurm_topology(s, *t, tf.slurm_prefix, tf.slurm_group, tf.partition).c_str(), stdout);
    return 0;
  }
  if (tf.format == "json") {
    print_json(graph_json(s, *t));
    return 0;
  }
  // RouteTable::diameter() is over reachable pairs only: count the unreachable ones so a
  // disconnected fabric is not reported with a small finite diameter.
  const std::size_t unreachable = rt->unreachable_pairs();
  if (json) {
    nlohmann::json cards = nlohmann::json::array();
    for (std::size_t i = 0; i < s.device_count(); ++i) {
      const auto& d = s.device(i).info();
      cards.push_back({{"index", d.index}, {"fabric_id", d.fabric_id}, {"bdf", d.bdf}, {"ports", d.num_ports}});
    }
    nlohmann::json links = nlohmann::json::array();
    for (const auto& l : t->links) {
      links.push_back({{"a", {{"fabric_id", l.a_fabric_id}, {"port", l.a_port}}},
                       {"b", {{"fabric_id", l.b_fabric_id}, {"port", l.b_port}}},
                       {"state", l.up ? "up" : "down"},
                       {"lanes", l.lanes}});
    }
    nlohmann::json hops = nlohmann::json::array();
    for (std::size_t i = 0; i < n; ++i) {
      nlohmann::json row = nlohmann::json::array();
      for (std::size_t j = 0; j < n; ++j) row.push_back(rt->hops(t->cards[i], t->cards[j]));
      hops.push_back(std::move(row));
    }
    nlohmann::json out = {{"uri", s.uri()},
                          {"training",
                           {{"trained", train},
                            {"ports_with_module", up.ports_with_module},
                            {"up", up.up},
                            {"failed", up.failed},
                            {"read_only_observer", observer(s)},
                            {"elapsed_ms", static_cast<double>(up.elapsed_ns) / 1e6}}},
                          {"cards", cards},
                          {"links", links},
                          {"diameter", rt->diameter()},
                          {"connected", unreachable == 0},
                          {"unreachable_pairs", unreachable},
                          {"hops", hops}};
    int rc = 0;
    if (!expect.empty()) rc = check_expected(*t, expect, true, &out);
    if (rc != 1) print_json(out);
    return rc;
  }
  // The plan check is printed after the matrix (or summary); its status is the exit status.
  const auto finish = [&] { return expect.empty() ? 0 : check_expected(*t, expect, false, nullptr); };
  if (up.up < up.ports_with_module && !no_link_up) {
    if (observer(s) || !train) {
      fmt::print(stderr, "npo-smi: {} of {} ports with a module are not Up ({})\n", up.ports_with_module - up.up,
                 up.ports_with_module,
                 observer(s) ? "read-only observer: nothing was trained" : "read as they are: --train trains them");
    } else {
      fmt::print(stderr, "npo-smi: {} of {} ports with a module did not train Up\n", up.ports_with_module - up.up,
                 up.ports_with_module);
    }
  }
  unsigned up_links = 0;
  for (const auto& l : t->links) up_links += l.up ? 1 : 0;
  const std::string diameter =
      unreachable == 0 ? fmt::format("diameter {} hops", rt->diameter())
                       : fmt::format(
                             "DISCONNECTED ({} of {} ordered card pairs unreachable; diameter {} hops among the "
                             "reachable)",
                             unreachable, n * (n - 1), rt->diameter());
  // Partitions (registers.md §3.8) are isolated on purpose: say so next to the verdict.
  std::set<std::uint32_t> parts;
  for (std::size_t i = 0; i < s.device_count(); ++i) {
    if (auto p = s.device(i).partition(); p && *p != 0 && !s.device(i).info().removed) parts.insert(*p);
  }
  const std::string partitioned =
      unreachable == 0 || parts.empty()
          ? std::string()
          : fmt::format(
                "\n  the cards are in {} partition{} (IDs {}): pairs across partitions and free cards are "
                "unreachable by design (npo-fabric list)",
                parts.size(), parts.size() == 1 ? "" : "s", fmt::join(parts, ", "));
  // A read-only observer (emu-remote mode=ro) trains nothing, with --train too: its writes are
  // dropped, so the bring-up only waited for the links the owner trained. Without --train
  // nothing is trained anywhere: the ports are read as they are.
  const std::string training =
      observer(s) ? fmt::format("{} of {} ports with a module Up (read-only observer: trained nothing)", up.up,
                                up.ports_with_module)
      : train     ? fmt::format("{} of {} ports with a module trained Up in {:.1f} ms", up.up, up.ports_with_module,
                                static_cast<double>(up.elapsed_ns) / 1e6)
                  : fmt::format("{} of {} ports with a module Up (read, not trained)", up.up, up.ports_with_module);
  fmt::print("npo-smi topo  backend {}  {} cards  {} links Up; {}  {}{}\n\n", s.uri(), n, up_links, training, diameter,
             partitioned);
  if (n <= 64) {
    const bool compact = n > 16;
    const unsigned w = n > 32 ? 3 : (compact ? 4 : 6);
    const Table matrix(std::vector<Column>(n + 1, Column{.header = "", .width = w, .before = ""}));
    const auto name = [&](std::size_t c) { return compact ? fmt::format("{}", c) : fmt::format("C{}", c); };
    std::vector<std::string> cells{""};
    for (std::size_t j = 0; j < n; ++j) cells.push_back(name(j));
    std::fputs(matrix.row_of(cells).c_str(), stdout);
    for (std::size_t i = 0; i < n; ++i) {
      cells = {name(i)};
      for (std::size_t j = 0; j < n; ++j) cells.push_back(link_class(*t, *rt, i, j, compact));
      std::fputs(matrix.row_of(cells).c_str(), stdout);
    }
    fmt::print(
        "\n{}: card n (fabric ID n+1). X: itself. {}: reachable in h hops over trained optical links ({}: a direct\n"
        "link; {}: parallel links; *: a direct link that trained with fewer than 8 lanes). -: unreachable.\n"
        "Discovered from the identities exchanged in link training; hops are the routes the cards use.\n",
        compact ? "Row/column n" : "Cn", compact ? "h" : "Lh", compact ? "1" : "L1", compact ? "1=" : "L1xk");
    return finish();
  }
  // Beyond 64 cards: the degree distribution, the hop histogram and the farthest pair.
  std::map<unsigned, std::size_t> degree;
  {
    std::map<std::uint32_t, unsigned> deg;
    for (const auto& l : t->links) {
      if (!l.up) continue;
      ++deg[l.a_fabric_id];
      ++deg[l.b_fabric_id];
    }
    for (const auto c : t->cards) ++degree[deg[c]];
  }
  std::map<int, std::size_t> hist;
  std::pair<std::uint32_t, std::uint32_t> far{0, 0};
  int far_h = -1;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const int h = rt->hops(t->cards[i], t->cards[j]);
      ++hist[h];
      if (h > far_h) {
        far_h = h;
        far = {t->cards[i], t->cards[j]};
      }
    }
  }
  fmt::print("{} cards: too many for a matrix (--json has the full hop matrix).\n\nCards by Up links (degree):\n", n);
  for (const auto& [d, c] : degree) fmt::print("  {:>3} links: {} cards\n", d, c);
  fmt::print("\nOrdered card pairs by hop count:\n");
  for (const auto& [h, c] : hist) {
    fmt::print("  {:>8}: {} pairs\n", h < 0 ? std::string("unreach") : fmt::format("{} hops", h), c);
  }
  if (far_h > 0) {
    fmt::print("\nFarthest pair: fabric ID {} -> {} ({} hops, {} equal-cost paths)\n", far.first, far.second, far_h,
               rt->path_count(far.first, far.second));
  }
  return finish();
}

/// Options of `npo-smi power`.
struct PowerArgs {
  std::optional<unsigned> card;
  std::optional<double> limit_w;
  bool reset = false;
};

nlohmann::json power_json(const npo::PowerReading& p) {
  return {{"power_w", p.power_mw / 1000.0},
          {"power_avg_w", p.power_avg_mw / 1000.0},
          {"energy_j", static_cast<double>(p.energy_mj) / 1000.0},
          {"limit_w", p.limit_mw / 1000.0},
          {"default_limit_w", p.default_limit_mw / 1000.0},
          {"min_limit_w", p.min_limit_mw / 1000.0},
          {"max_limit_w", p.max_limit_mw / 1000.0},
          {"throttled", p.throttled()},
          {"throttle_reasons", p.throttle_reasons},
          {"throttled_s", static_cast<double>(p.throttled_ns) / 1e9},
          {"temp_c", p.temp_c},
          {"dma_w", p.dma_mw / 1000.0},
          {"serdes_w", p.serdes_mw / 1000.0},
          {"modules_w", p.modules_mw / 1000.0}};
}

/// `npo-smi power`: power, 1 s average, energy, limit (default, range), throttling and die
/// temperature per card (mailbox POWER_READ); with --card N --limit W or --reset, changes the
/// card's enforced limit first (POWER_LIMIT). Exit 0; 1 when a card fails or refuses the limit
/// (out of range: the message names the range); 2 for a card that is not present.
int power(npo::System& s, const PowerArgs& a, bool json) {
  if (a.card && *a.card >= s.device_count()) {
    std::fprintf(stderr, "npo-smi power: card %u not present (%zu card%s)\n", *a.card, s.device_count(),
                 s.device_count() == 1 ? "" : "s");
    return npo::tools::kExitUsage;
  }
  if (a.card && (a.limit_w || a.reset)) {
    auto& d = s.device(*a.card);
    auto r = a.reset ? d.reset_power_limit()
                     : d.set_power_limit(static_cast<std::uint32_t>(std::llround(*a.limit_w * 1000.0)));
    if (!r) return fail(kTool, a.reset ? "power --reset" : "power --limit", r.error());
  }
  int status = 0;
  nlohmann::json cards = nlohmann::json::array();
  using Align = Column::Align;
  const Table t({{"CARD", 4, Align::kLeft, ""},
                 {"POWER", 9},
                 {"AVG 1s", 9},
                 {"ENERGY", 12},
                 {"LIMIT", 9},
                 {"DEFAULT", 9},
                 {"RANGE", 15},
                 {"TEMP", 7},
                 {"MODULES", 14},
                 {"THROTTLE", 0, Align::kLeft}});
  if (!json) t.print_header();
  for (std::size_t i = 0; i < s.device_count(); ++i) {
    if (a.card && i != *a.card) continue;
    auto& d = s.device(i);
    if (d.info().removed) {
      if (!json) t.print_row(d.info().index, "-", "-", "-", "-", "-", "-", "-", "-", "REMOVED");
      status = kExitRemoved;
      continue;
    }
    auto p = d.power();
    if (!p) {
      status = fail(kTool, fmt::format("card {}: power", d.info().index), p.error());
      continue;
    }
    // the optical modules' cages (CMIS power class, draw): a module that cannot be read is left out
    auto mp = d.module_power();
    std::size_t present = 0;
    double draw_w = 0;
    nlohmann::json modules = nlohmann::json::array();
    if (mp) {
      for (const auto& m : *mp) {
        if (!m.present) continue;
        ++present;
        draw_w += m.draw_mw / 1000.0;
        nlohmann::json j = {{"port", m.port},
                            {"power_class", m.power_class},
                            {"max_power_w", m.max_power_w},
                            {"draw_w", m.draw_mw / 1000.0},
                            {"low_power", m.low_power}};
        j["temp_c"] = m.temp_c ? nlohmann::json(*m.temp_c) : nlohmann::json(nullptr);
        modules.push_back(j);
      }
    }
    if (json) {
      nlohmann::json c = power_json(*p);
      c["index"] = d.info().index;
      c["modules"] = mp ? modules : nlohmann::json(nullptr);
      cards.push_back(c);
      continue;
    }
    t.print_row(d.info().index, fmt::format("{:.1f} W", p->power_mw / 1000.0),
                fmt::format("{:.1f} W", p->power_avg_mw / 1000.0),
                fmt::format("{:.1f} J", static_cast<double>(p->energy_mj) / 1000.0),
                fmt::format("{:.1f} W", p->limit_mw / 1000.0), fmt::format("{:.1f} W", p->default_limit_mw / 1000.0),
                fmt::format("{:.0f}..{:.0f} W", p->min_limit_mw / 1000.0, p->max_limit_mw / 1000.0),
                fmt::format("{:.1f} C", p->temp_c), mp ? fmt::format("{} x, {:.1f} W", present, draw_w) : "-",
                p->throttled() ? fmt::format("power_limit ({:.1f} s)", static_cast<double>(p->throttled_ns) / 1e9)
                               : fmt::format("- ({:.1f} s)", static_cast<double>(p->throttled_ns) / 1e9));
  }
  if (json) {
    print_json({{"cards", cards}});
  } else {
    fmt::print(
        "\nPOWER: the last 10 ms; AVG 1s: what the limit bounds (over it the card throttles its DMA engines);\n"
        "ENERGY since power-on; TEMP: die; MODULES: optical modules plugged and their cages' draw (per module,\n"
        "with power class and temperature: --json, or `npo-link ddm`). Set with `npo-smi power --card N --limit W`, "
        "undo with --reset.\n");
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "npo-smi: list NPO accelerator cards (identity, BARs, NUMA, HBM, PCIe, firmware); `topo` shows the fabric"};
  npo::tools::add_version_flag(app, kTool);
  std::optional<std::string> backend;
  bool json = false;
  npo::tools::LogOptions log;
  npo::tools::add_backend_option(
      app, backend, "-b,--backend",
      std::string("backend URI: emu:mesh8, emu:N, emu:file=PATH, emu-remote:DIR (a running npo-emud), vfio:all, "
                  "vfio:BDF (") +
          npo::tools::kBackendDefaultHelp + ")");
  app.add_flag("--json", json,
               "print one JSON object (cards: a 'cards' array; topo: 'cards', 'links', 'hops', 'diameter', "
               "'connected')");
  npo::tools::add_log_options(app, log);
  auto* topo_cmd = app.add_subcommand(
      "topo", "show the card x card hop matrix of the fabric discovered from the optical links as they are");
  topo_cmd->add_flag("--json", json, "print {cards, links, hops, diameter, connected} as JSON");
  bool train = false;
  topo_cmd->add_flag("--train", train,
                     "train every link with a module first (as `npo-link show --train`); without it topo only reads. "
                     "An in-process emu: backend starts every process with its links down");
  std::string expect;
  topo_cmd->add_option("--expect", expect,
                       "check the discovered cabling against this topology file (YAML/JSON): every missing, miswired, "
                       "degraded or unexpected link; exit status 3 on a mismatch");
  TopoFormat tf;
  topo_cmd
      ->add_option("--format", tf.format,
                   "table (default) | json: graph of cards and links with weights, for schedulers | slurm: a "
                   "topology.conf for Slurm's tree plugin")
      ->check(CLI::IsMember({"table", "json", "slurm"}));
  topo_cmd->add_option("--slurm-node-prefix", tf.slurm_prefix, "with --format slurm: node name prefix (default npo)");
  topo_cmd->add_option("--partition", tf.partition,
                       "with --format slurm: only the cards whose partition ID (PART, GLOBAL.PARTITION) is this "
                       "(npo-fabric list shows the IDs); read from the cards, so no fabric manager is needed");
  topo_cmd->add_option("--slurm-switch-size", tf.slurm_group, "with --format slurm: cards per leaf switch (default 8)")
      ->check(CLI::Range(1u, 1024u));
  topo_cmd->fallthrough();  // `npo-smi topo --backend X` works like `npo-smi --backend X topo`
  auto* power_cmd = app.add_subcommand(
      "power",
      "card power now and over 1 s, energy, power limit (default, range), throttling, die temperature; "
      "--card N --limit W sets the enforced limit, --reset restores the default");
  PowerArgs pa;
  power_cmd->add_option("--card", pa.card, "only this card (required with --limit / --reset)");
  auto* lim =
      power_cmd->add_option("--limit", pa.limit_w, "set the enforced power limit, W")->check(CLI::PositiveNumber);
  auto* rst = power_cmd->add_flag("--reset", pa.reset, "restore the default power limit");
  lim->excludes(rst);
  power_cmd->add_flag("--json", json, "print {cards: [{index, power_w, power_avg_w, energy_j, limit_w, ...}]}");
  power_cmd->fallthrough();
  if (auto rc = npo::tools::parse_command_line(app, argc, argv, "npo-smi")) return *rc;

  if (auto r = npo::tools::configure_logging(log); !r) {
    fail(kTool, r.error());
    return 2;
  }
  // npo-smi only reads: on emu-remote it attaches read-only unless the URI says mode=rw;
  // `topo --train` changes the links, so it attaches as owner (as `npo-link show --train`).
  const std::string given_uri = npo::tools::backend_uri(backend, kTool);
  const bool trains = topo_cmd->parsed() && train;
  // `power --limit/--reset` changes the card: owner attach, as `topo --train`.
  const bool sets_limit = power_cmd->parsed() && (pa.limit_w || pa.reset);
  if (sets_limit && !pa.card) {
    std::fprintf(stderr, "npo-smi power: --limit and --reset need --card N\nRun with --help for more information.\n");
    return npo::tools::kExitUsage;
  }
  const std::string uri = trains || sets_limit ? given_uri : npo::tools::observer_uri(given_uri);
  auto sys = npo::System::open(uri);
  if (!sys) {
    fail(kTool, fmt::format("cannot open '{}'", uri), sys.error());
    return npo::tools::open_failure_status(sys.error());
  }
  auto& s = **sys;
  if (topo_cmd->parsed()) return topo(s, json, expect, tf, train);
  if (power_cmd->parsed()) return power(s, pa, json);
  // A card already removed when we opened it (DeviceInfo::removed) is listed and exits 4, as
  // npo-link does for a removed card.
  std::string removed;
  std::size_t live = s.device_count();
  for (std::size_t i = 0; i < s.device_count(); ++i) {
    if (!s.device(i).info().removed) continue;
    removed += fmt::format("; card {} REMOVED", s.device(i).info().index);
    --live;
  }
  const int status = removed.empty() ? 0 : kExitRemoved;
  if (json) {
    nlohmann::json cards = nlohmann::json::array();
    for (std::size_t i = 0; i < s.device_count(); ++i) {
      auto j = card_json(s.device(i).info());
      // GLOBAL.PARTITION now (registers.md §3.8); null for a removed card.
      auto part = s.device(i).info().removed
                      ? npo::Result<std::uint32_t>(std::unexpected(npo::Error(npo::Code::kUnavailable, "removed")))
                      : s.device(i).partition();
      j["partition"] = part ? nlohmann::json(*part) : nlohmann::json(nullptr);
      cards.push_back(std::move(j));
    }
    nlohmann::json out = {{"version", std::string(npo::kVersion)},
                          {"backend", std::string(s.backend_name())},
                          {"uri", s.uri()},
                          {"cards", cards}};
    print_json(out);
    return status;
  }
  fmt::print("npo-smi {}  backend {} ({})  {} card{}\n\n", npo::kVersion, s.uri(), s.backend_name(), s.device_count(),
             s.device_count() == 1 ? "" : "s");
  using Align = Column::Align;
  const Table cards({{"CARD", 4, Align::kLeft, ""},
                     {"BDF", 12, Align::kLeft},
                     {"PCI ID", 9, Align::kLeft},
                     {"FABRIC", 6},
                     {"PART", 4},
                     {"NUMA", 4},
                     {"HBM", 8},
                     {"PCIe", 10, Align::kLeft},
                     {"FIRMWARE", 8, Align::kLeft},
                     {"SERIAL", 16, Align::kLeft},
                     {"MODEL", 0, Align::kLeft}});
  cards.print_header();
  for (std::size_t i = 0; i < s.device_count(); ++i) {
    const auto& d = s.device(i).info();
    if (d.removed) {
      cards.print_row(d.index, d.bdf, fmt::format("{:04x}:{:04x}", d.vendor_id, d.device_id), "-", "-", d.numa_node,
                      "-", "-", "-", "-", "REMOVED (config space reads ffff:ffff)");
      continue;
    }
    const auto part = s.device(i).partition();
    cards.print_row(d.index, d.bdf, fmt::format("{:04x}:{:04x}", d.vendor_id, d.device_id), d.fabric_id,
                    part ? std::to_string(*part) : std::string("?"), d.numa_node, human_bytes(d.hbm_bytes),
                    fmt::format("{:g}GT/s x{}", d.pcie.gts, d.pcie.width), d.firmware.firmware,
                    fmt::format("{:016x}", d.serial), d.model);
  }
  std::size_t first_live = 0;
  while (first_live < s.device_count() && s.device(first_live).info().removed) ++first_live;
  if (!removed.empty()) fmt::print("\n{} of {} cards present{}\n", live, s.device_count(), removed);
  if (first_live < s.device_count()) {
    const auto& d = s.device(first_live).info();
    fmt::print("\nEach card: {} DMA engines x {} queues, {} optical ports x {} lanes, max {} per descriptor.\n",
               d.num_engines, d.queues_per_engine, d.num_ports, d.lanes_per_port, human_bytes(d.max_transfer_bytes));
    std::string bars;
    for (const auto& b : d.bars) {
      bars += fmt::format("{}BAR{} {} {}{}", bars.empty() ? "" : ", ", b.index, human_bytes(b.size), bar_role(b),
                          b.prefetchable ? " (prefetchable)" : "");
    }
    fmt::print("BARs: {}.\n", bars);
  }
  fmt::print(
      "\nFABRIC: the card's identity on the optical fabric (BAR0 FABRIC_ID). PART: its partition (BAR0 PARTITION, set "
      "by\n"
      "the fabric manager; 0 unassigned): remote DMA reaches only cards of the same partition. NUMA: the node the "
      "backend reports (the\n"
      "emulator spreads cards over 2 nodes). HBM: device memory (BAR0 HBM_SIZE,\n"
      "confirmed by firmware IDENTIFY). PCIe: negotiated link (LnkSta). FIRMWARE: mailbox GET_VERSIONS.\n");
  if (!removed.empty()) fmt::print("Exit status 4: a card was removed.\n");
  return status;
}
