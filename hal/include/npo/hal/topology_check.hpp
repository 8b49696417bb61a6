// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: discovery vs expected -- compares the fabric discovered from trained
// links (npo/hal/topology.hpp) with the cabling plan of a topology file (npo/hal/topology_plan.hpp)
// and names every difference: missing, miswired, degraded and unexpected links.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "npo/hal/topology.hpp"
#include "npo/hal/topology_plan.hpp"

namespace npo {

/// What is wrong with one link or card.
enum class LinkIssueKind : std::uint8_t {
  kMissing,         ///< the plan has a light path here; no link trained (dark or one-sided)
  kMiswired,        ///< the port's neighbour differs from the plan (expected and found end named)
  kDegraded,        ///< Up, with fewer lanes than the port's 8
  kUnexpected,      ///< a link trained where the plan has no light path
  kMissingCard,     ///< a card of the plan was not found
  kUnexpectedCard,  ///< a card was found that the plan does not have
};

/// "missing", "miswired", "degraded", "unexpected", "missing_card", "unexpected_card".
[[nodiscard]] std::string_view link_issue_name(LinkIssueKind k) noexcept;

/// One difference between plan and discovery.
struct LinkIssue {
  LinkIssueKind kind = LinkIssueKind::kMissing;
  CardPort at{};                       ///< the port (for card issues: port 0)
  std::optional<CardPort> expected{};  ///< far end per the plan (through switch cross-connects)
  std::optional<CardPort> found{};     ///< far end training found
  unsigned lanes = 0;                  ///< kDegraded: lanes Up
  std::string message;                 ///< one line naming both ends, e.g. "miswired: 3:1 expected 4:0, found 7:2"
};

/// The comparison. Value type.
struct TopologyCheck {
  unsigned expected_links = 0;    ///< card-to-card light paths in the plan
  unsigned up_as_planned = 0;     ///< of those, Up between the planned ports (degraded ones included)
  std::vector<LinkIssue> issues;  ///< sorted by kind, then port
  /// No issue at all.
  [[nodiscard]] bool ok() const noexcept { return issues.empty(); }
  /// Issues of one kind.
  [[nodiscard]] std::vector<LinkIssue> of(LinkIssueKind k) const;
};

/// Compares `found` (discover_topology) with the plan `expected`. Card i of the plan is the
/// card with fabric ID fabric_id_of(i). The expected neighbour of a card port follows the plan's cable and,
/// through optical switches, the cross-connects (trace_light_path). Each planned link is
/// reported once (at its lower end) unless its ends disagree, then each miswired end is named.
/// Precondition: `expected` validates. Pure function; thread-safe.
[[nodiscard]] TopologyCheck check_topology(const Topology& found, const FabricSpec& expected);

}  // namespace npo
