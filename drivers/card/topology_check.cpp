// SPDX-License-Identifier: Apache-2.0
// drivers/card: discovery vs expected (npo/hal/topology_check.hpp).
#include "npo/hal/topology_check.hpp"

#include <algorithm>
#include <bit>
#include <map>
#include <set>

#include <fmt/format.h>

#include "npo/hal/topology_graph.hpp"

namespace npo {

std::string_view link_issue_name(LinkIssueKind k) noexcept {
  switch (k) {
    case LinkIssueKind::kMissing: return "missing";
    case LinkIssueKind::kMiswired: return "miswired";
    case LinkIssueKind::kDegraded: return "degraded";
    case LinkIssueKind::kUnexpected: return "unexpected";
    case LinkIssueKind::kMissingCard: return "missing_card";
    case LinkIssueKind::kUnexpectedCard: return "unexpected_card";
  }
  return "unknown";
}

std::vector<LinkIssue> TopologyCheck::of(LinkIssueKind k) const {
  std::vector<LinkIssue> v;
  for (const auto& i : issues) {
    if (i.kind == k) v.push_back(i);
  }
  return v;
}

namespace {

struct Seen {
  CardPort far;
  bool up = false;
  unsigned lanes = 0;
};

std::string name(const CardPort& p) { return fmt::format("{}:{}", p.card, p.port); }

}  // namespace

TopologyCheck check_topology(const Topology& found, const FabricSpec& plan) {
  TopologyCheck out;
  // What each port learned in training, from both ends of every reported link, named as the
  // plan names cards (card_index_of; fabric ID 0 maps to a card beyond the plan).
  auto cp = [](std::uint32_t fid, unsigned port) { return CardPort{card_index_of(fid), port}; };
  std::map<CardPort, Seen> seen;
  for (const auto& l : found.links) {
    const CardPort a = cp(l.a_fabric_id, l.a_port), b = cp(l.b_fabric_id, l.b_port);
    seen[a] = Seen{b, l.up, l.lanes};
    if (l.up) seen.emplace(b, Seen{a, true, l.lanes});  // one-sided links only speak for a
  }
  std::set<std::uint32_t> found_cards;
  for (auto fid : found.cards) found_cards.insert(card_index_of(fid));
  for (std::uint32_t c = 0; c < plan.cards; ++c) {
    if (!found_cards.contains(c)) {
      out.issues.push_back(
          LinkIssue{LinkIssueKind::kMissingCard, CardPort{c, 0}, std::nullopt, std::nullopt, 0,
                    fmt::format("missing card: card {} (fabric ID {}) not found", c, fabric_id_of(c))});
    }
  }
  for (auto c : found_cards) {
    if (c >= plan.cards) {
      out.issues.push_back(LinkIssue{
          LinkIssueKind::kUnexpectedCard, CardPort{c, 0}, std::nullopt, std::nullopt, 0,
          fmt::format("unexpected card: fabric ID {} is not in the plan ({} cards)", fabric_id_of(c), plan.cards)});
    }
  }
  // The plan's light paths, per card port (the graph module's index, built once).
  std::map<CardPort, FabricLightPath> planned;
  const LightPaths paths(plan);
  for (const auto& here : paths.cabled_card_ports()) {
    if (auto lp = paths.trace(here.card, here.port)) planned.emplace(here, *lp);
  }
  auto seen_at = [&](const CardPort& p) -> const Seen* {
    const auto it = seen.find(p);
    return it == seen.end() ? nullptr : &it->second;
  };
  for (const auto& [here, lp] : planned) {
    const CardPort there{lp.card, lp.port};
    const Seen* s = seen_at(here);
    if (s != nullptr && s->far != there) {
      out.issues.push_back(LinkIssue{LinkIssueKind::kMiswired, here, there, s->far, s->lanes,
                                     fmt::format("miswired: {} expected {}, found {}{}", name(here), name(there),
                                                 name(s->far), s->up ? "" : " (not up)")});
      continue;
    }
    if (there < here) continue;  // each planned link once, from its lower end
    ++out.expected_links;
    const Seen* t = seen_at(there);
    const bool here_ok = s != nullptr;  // s->far == there
    const bool there_ok = t != nullptr && t->far == here;
    if (!here_ok && !there_ok) {
      if (t == nullptr) {
        out.issues.push_back(LinkIssue{LinkIssueKind::kMissing, here, there, std::nullopt, 0,
                                       fmt::format("missing: {} <-> {} (no link trained)", name(here), name(there))});
      }
      continue;  // the far end is miswired: reported there
    }
    const Seen& v = here_ok ? *s : *t;
    if (!v.up || !here_ok || !there_ok) {
      out.issues.push_back(
          LinkIssue{LinkIssueKind::kMissing, here, there, here_ok ? s->far : std::optional<CardPort>{}, v.lanes,
                    fmt::format("missing: {} <-> {} (trained one-sided, not up)", name(here), name(there))});
      continue;
    }
    ++out.up_as_planned;
    if (v.lanes < kFabricLanesPerPort) {
      std::string planned_dead;
      if (lp.channel.dead_lanes != 0) {
        planned_dead = fmt::format(" (the plan marks {} lane(s) dead)", std::popcount(lp.channel.dead_lanes));
      }
      out.issues.push_back(LinkIssue{LinkIssueKind::kDegraded, here, there, there, v.lanes,
                                     fmt::format("degraded: {} <-> {} up with {}/{} lanes{}", name(here), name(there),
                                                 v.lanes, kFabricLanesPerPort, planned_dead)});
    }
  }
  for (const auto& [here, s] : seen) {
    if (planned.contains(here)) continue;
    if (s.up && !planned.contains(s.far) && s.far < here) continue;  // reported from the lower end
    out.issues.push_back(LinkIssue{LinkIssueKind::kUnexpected, here, std::nullopt, s.far, s.lanes,
                                   fmt::format("unexpected: {} <-> {} trained, the plan has no light path at {}{}",
                                               name(here), name(s.far), name(here), s.up ? "" : " (not up)")});
  }
  std::stable_sort(out.issues.begin(), out.issues.end(), [](const LinkIssue& x, const LinkIssue& y) {
    return std::pair(x.kind, x.at) < std::pair(y.kind, y.at);
  });
  return out;
}

}  // namespace npo
