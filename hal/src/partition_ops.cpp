// SPDX-License-Identifier: Apache-2.0
// The partition manager's changes: create, destroy, move, swap, health -- each computes its
// minimal cross-connect changes, journals the intent, applies it on the switches, journals the
// outcome and waits for the added links (npo/hal/partition.hpp).
#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "npo/hal/system.hpp"
#include "partition_impl.hpp"

namespace npo {

namespace {
std::unexpected<Error> bad(std::string msg) { return fail(Code::kInvalidArgument, std::move(msg)); }

PartitionLink norm(std::uint32_t a, std::uint32_t b, unsigned port) {
  return a < b ? PartitionLink{a, b, port} : PartitionLink{b, a, port};
}

/// Links of `shape` placed on `cards` (position i = cards[i]), sorted.
Result<std::vector<PartitionLink>> placed(const PartitionShape& shape, const std::vector<std::uint32_t>& cards,
                                          unsigned ports) {
  auto links = shape_links(shape, ports);
  if (!links) return std::unexpected(std::move(links.error()));
  for (auto& l : *links) l = norm(cards[l.a], cards[l.b], l.port);
  std::sort(links->begin(), links->end());
  return links;
}

/// Links of `shape` on `cards` keeping every link of `old` whose card pair the shape still
/// joins (same port), the new pairs on the first port index free on both cards; when that
/// greedy colouring fails, the shape's own colouring. Sorted.
Result<std::vector<PartitionLink>> relinked(const PartitionShape& shape, const std::vector<std::uint32_t>& cards,
                                            const std::vector<PartitionLink>& old, unsigned ports) {
  auto fresh = placed(shape, cards, ports);
  if (!fresh) return fresh;
  std::multiset<std::pair<std::uint32_t, std::uint32_t>> want;
  for (const auto& l : *fresh) want.emplace(l.a, l.b);
  std::vector<PartitionLink> out;
  std::map<std::uint32_t, std::uint32_t> used;  // card -> bitmap of ports in use
  for (const auto& l : old) {
    const auto it = want.find({l.a, l.b});
    if (it == want.end()) continue;
    want.erase(it);
    out.push_back(l);
    used[l.a] |= 1u << l.port;
    used[l.b] |= 1u << l.port;
  }
  for (const auto& [a, b] : want) {
    const std::uint32_t busy = used[a] | used[b];
    unsigned p = 0;
    while (p < ports && ((busy >> p) & 1u) != 0) ++p;
    if (p == ports) return fresh;  // greedy stuck: the shape's colouring, all links re-made
    out.push_back(PartitionLink{a, b, p});
    used[a] |= 1u << p;
    used[b] |= 1u << p;
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Elements of `a` not in `b` (both sorted).
std::vector<PartitionLink> minus(const std::vector<PartitionLink>& a, const std::vector<PartitionLink>& b) {
  std::vector<PartitionLink> out;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

bool valid_name(std::string_view n) {
  return !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}

std::uint64_t since(std::chrono::steady_clock::time_point t0) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}
}  // namespace

Result<PartitionChange> PartitionManager::Impl::commit(detail::JournalIntent in, std::vector<PartitionLink> added,
                                                       std::vector<PartitionLink> removed) {
  if (!poisoned.empty()) {
    return fail(Code::kFailedPrecondition,
                fmt::format("partition manager: an earlier change was left half-applied ({}); reopen the manager to "
                            "recover it",
                            poisoned));
  }
  in.seq = next_seq++;
  in.changes = changes_of(removed, added);
  // Partition IDs after the change: joining cards (a new nonzero ID) are set before any link
  // moves, leaving cards (to 0) after their links are gone.
  std::map<std::uint32_t, std::uint32_t> after;
  for (const auto& n : in.remove) {
    if (const auto it = parts.find(n); it != parts.end())
      for (auto c : it->second.cards) after[c] = 0;
  }
  for (const auto& p : in.upsert) {
    if (const auto it = parts.find(p.name); it != parts.end())
      for (auto c : it->second.cards) after[c] = 0;
  }
  for (const auto& p : in.upsert) {
    for (auto c : p.cards) after[c] = p.id;
  }
  std::vector<CardPartitionId> join, leave, undo_join;
  for (const auto& [c, id] : after) {
    const auto old = id_of(c);
    if (id == old) continue;
    (id != 0 ? join : leave).push_back({c, id});
    if (id != 0) undo_join.push_back({c, old});
  }
  if (auto r = journal.intent(in); !r) return std::unexpected(std::move(r.error()));
  PartitionChange out;
  out.seq = journal.enabled() ? in.seq : 0;
  out.what = in.what;
  out.changes = in.changes;
  out.added = std::move(added);
  out.removed = std::move(removed);
  // One batch per switch, in journal order (all disconnects, then all connects).
  struct Batch {
    std::size_t sw;
    std::vector<OcsChange> changes;
  };
  std::vector<Batch> batches;
  for (const auto& c : in.changes) {
    const std::size_t s = switch_index(c.switch_name);
    const bool connect = c.change.kind == OcsChange::Kind::kConnect;
    if (batches.empty() || batches.back().sw != s ||
        (batches.back().changes.back().kind == OcsChange::Kind::kConnect) != connect) {
      batches.push_back({s, {}});
    }
    batches.back().changes.push_back(c.change);
  }
  auto roll_back = [&](Error err) -> std::unexpected<Error> {
    (void)enforce(undo_join);
    if (auto w = journal.outcome(in.seq, detail::JournalOutcome::kRolledBack); !w) {
      poisoned = in.what;
      return std::unexpected(std::move(w.error()).prefixed(fmt::format("{} failed and was undone, but", in.what)));
    }
    return std::unexpected(std::move(err));
  };
  if (auto r = enforce(join); !r) return roll_back(std::move(r.error()).prefixed(in.what));
  out.ids = join;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < batches.size(); ++i) {
    auto r = sw[batches[i].sw]->apply(batches[i].changes);
    if (r) continue;
    Error err = std::move(r.error());
    bool undone = err.code() != Code::kAborted;  // apply undoes its own batch unless kAborted
    for (std::size_t j = i; j-- > 0 && undone;) {
      std::vector<OcsChange> inverse;
      for (auto it = batches[j].changes.rbegin(); it != batches[j].changes.rend(); ++it) {
        inverse.push_back(
            OcsChange{it->kind == OcsChange::Kind::kConnect ? OcsChange::Kind::kDisconnect : OcsChange::Kind::kConnect,
                      it->a, it->b});
      }
      undone = sw[batches[j].sw]->apply(inverse).has_value();
    }
    if (undone)
      return roll_back(
          std::move(err).prefixed(fmt::format("{}: switch {}, undone", in.what, sw[batches[i].sw]->name())));
    poisoned = in.what;
    return fail(Code::kAborted,
                fmt::format("{}: switch {} failed ({}) and the change could not be undone: the "
                            "switches hold part of it; reopen the manager to settle it from the journal",
                            in.what, sw[batches[i].sw]->name(), err.to_string()));
  }
  out.switch_ns = since(t0);
  if (auto w = journal.outcome(in.seq, detail::JournalOutcome::kApplied); !w) {
    poisoned = in.what;
    return std::unexpected(std::move(w.error()).prefixed(fmt::format("{} applied, but", in.what)));
  }
  fold(in);
  if (auto r = enforce(leave); !r)
    return std::unexpected(std::move(r.error()).prefixed(fmt::format("{} applied, but", in.what)));
  out.ids.insert(out.ids.end(), leave.begin(), leave.end());
  if (opt.system != nullptr && !out.added.empty()) {
    auto waited = wait_links_up(*opt.system, out.added, opt.link_timeout_ns, opt.link_poll_ns);
    if (!waited) return std::unexpected(std::move(waited.error()).prefixed(fmt::format("{} applied, but", in.what)));
    out.links_up_ns = *waited;
  }
  return out;
}

Result<PartitionChange> PartitionManager::create(std::string_view name, std::string_view shape_text,
                                                 const std::vector<std::uint32_t>& cards) {
  std::lock_guard lock(impl_->mu);
  auto& m = *impl_;
  if (!valid_name(name)) return bad(fmt::format("partition name '{}': 1..64 of [A-Za-z0-9._-]", name));
  if (m.parts.contains(name)) return fail(Code::kAlreadyExists, fmt::format("partition '{}' exists", name));
  auto shape = parse_partition_shape(shape_text);
  if (!shape) return std::unexpected(std::move(shape.error()));
  if (shape->kind == PartitionShape::Kind::kCustom)
    return bad("create: a custom shape cannot be created, only recovered");
  const unsigned n = shape->cards();
  std::vector<std::uint32_t> chosen = cards;
  if (chosen.empty()) {
    for (std::uint32_t c = 0; c < m.cards && chosen.size() < n; ++c) {
      if (m.owner[c].empty() && m.health[c] == CardHealth::kHealthy) chosen.push_back(c);
    }
    if (chosen.size() < n) {
      return fail(Code::kResourceExhausted, fmt::format("create {}: {} needs {} cards, {} free healthy (not spare)",
                                                        name, shape->text(), n, chosen.size()));
    }
  } else {
    if (chosen.size() != n) {
      return bad(fmt::format("create {}: {} holds {} cards, {} given", name, shape->text(), n, chosen.size()));
    }
    std::set<std::uint32_t> seen;
    for (auto c : chosen) {
      if (c >= m.cards) return bad(fmt::format("create {}: card {} beyond the pool ({} cards)", name, c, m.cards));
      if (!seen.insert(c).second) return bad(fmt::format("create {}: card {} given twice", name, c));
      if (!m.owner[c].empty()) {
        return fail(Code::kFailedPrecondition,
                    fmt::format("create {}: card {} is in partition '{}'", name, c, m.owner[c]));
      }
      if (m.health[c] == CardHealth::kFailed) {
        return fail(Code::kFailedPrecondition, fmt::format("create {}: card {} is failed", name, c));
      }
    }
  }
  auto links = placed(*shape, chosen, m.ports);
  if (!links) return std::unexpected(std::move(links.error()).prefixed(fmt::format("create {}", name)));
  detail::JournalIntent in;
  in.what = fmt::format("create {} {}", name, shape->text());
  Partition p{std::string(name), shape->text(), chosen, *links, m.next_id++};
  for (auto c : chosen) {
    if (m.health[c] == CardHealth::kSpare) in.health.emplace_back(c, CardHealth::kHealthy);
  }
  in.upsert.push_back(std::move(p));
  return m.commit(std::move(in), std::move(*links), {});
}

Result<PartitionChange> PartitionManager::destroy(std::string_view name) {
  std::lock_guard lock(impl_->mu);
  auto& m = *impl_;
  const auto it = m.parts.find(name);
  if (it == m.parts.end()) return fail(Code::kNotFound, fmt::format("destroy: no partition '{}'", name));
  detail::JournalIntent in;
  in.what = fmt::format("destroy {}", name);
  in.remove.emplace_back(name);
  return m.commit(std::move(in), {}, it->second.links);
}

Result<PartitionChange> PartitionManager::move(std::uint32_t card, std::string_view to) {
  std::lock_guard lock(impl_->mu);
  auto& m = *impl_;
  if (card >= m.cards) return bad(fmt::format("move: card {} beyond the pool ({} cards)", card, m.cards));
  if (m.health[card] == CardHealth::kFailed)
    return fail(Code::kFailedPrecondition, fmt::format("move: card {} is failed", card));
  if (m.owner[card] == to) {
    return fail(Code::kFailedPrecondition,
                fmt::format("move: card {} is already in '{}'", card, to.empty() ? "(free)" : to));
  }
  if (!to.empty() && !m.parts.contains(to)) return fail(Code::kNotFound, fmt::format("move: no partition '{}'", to));
  detail::JournalIntent in;
  in.what = fmt::format("move {} {} -> {}", card, m.owner[card].empty() ? "(free)" : m.owner[card],
                        to.empty() ? "(free)" : to);
  std::vector<PartitionLink> before, after;
  // Resizes partition `name` to `cards`.
  auto resize = [&](const std::string& name, std::vector<std::uint32_t> cards) -> Result<void> {
    const Partition& p = m.parts.at(name);
    auto shape = parse_partition_shape(p.shape);
    if (!shape) return std::unexpected(std::move(shape.error()));
    if (shape->kind != PartitionShape::Kind::kRing && shape->kind != PartitionShape::Kind::kMesh) {
      return fail(
          Code::kFailedPrecondition,
          fmt::format("move: partition '{}' is a {}, whose size cannot change (only ring and mesh)", name, p.shape));
    }
    shape->dims = {static_cast<unsigned>(cards.size())};
    if (cards.empty()) {
      in.remove.push_back(name);
      before.insert(before.end(), p.links.begin(), p.links.end());
      return {};
    }
    auto links = relinked(*shape, cards, p.links, m.ports);
    if (!links) return std::unexpected(std::move(links.error()).prefixed(fmt::format("move into '{}'", name)));
    before.insert(before.end(), p.links.begin(), p.links.end());
    after.insert(after.end(), links->begin(), links->end());
    in.upsert.push_back(Partition{name, shape->text(), std::move(cards), std::move(*links), p.id});
    return {};
  };
  if (!m.owner[card].empty()) {
    auto cards = m.parts.at(m.owner[card]).cards;
    std::erase(cards, card);
    if (auto r = resize(m.owner[card], std::move(cards)); !r) return std::unexpected(std::move(r.error()));
  }
  if (!to.empty()) {
    auto cards = m.parts.at(std::string(to)).cards;
    cards.push_back(card);
    if (auto r = resize(std::string(to), std::move(cards)); !r) return std::unexpected(std::move(r.error()));
  }
  if (m.health[card] == CardHealth::kSpare && !to.empty()) in.health.emplace_back(card, CardHealth::kHealthy);
  std::sort(before.begin(), before.end());
  std::sort(after.begin(), after.end());
  auto removed = minus(before, after);
  auto added = minus(after, before);
  return m.commit(std::move(in), std::move(added), std::move(removed));
}

Result<PartitionChange> PartitionManager::swap(std::uint32_t failed, std::optional<std::uint32_t> spare) {
  std::lock_guard lock(impl_->mu);
  auto& m = *impl_;
  if (failed >= m.cards) return bad(fmt::format("swap: card {} beyond the pool ({} cards)", failed, m.cards));
  if (m.health[failed] != CardHealth::kFailed) {
    return fail(Code::kFailedPrecondition,
                fmt::format("swap: card {} is not marked failed (set_health first)", failed));
  }
  if (m.owner[failed].empty())
    return fail(Code::kFailedPrecondition, fmt::format("swap: card {} is in no partition", failed));
  std::uint32_t s = m.cards;
  if (spare) {
    if (*spare >= m.cards) return bad(fmt::format("swap: spare {} beyond the pool ({} cards)", *spare, m.cards));
    if (!m.owner[*spare].empty() || m.health[*spare] == CardHealth::kFailed) {
      return fail(Code::kFailedPrecondition, fmt::format("swap: card {} is not a free healthy card", *spare));
    }
    s = *spare;
  } else {
    for (auto want : {CardHealth::kSpare, CardHealth::kHealthy}) {
      for (std::uint32_t c = 0; c < m.cards && s == m.cards; ++c) {
        if (m.owner[c].empty() && m.health[c] == want) s = c;
      }
    }
    if (s == m.cards)
      return fail(Code::kResourceExhausted, fmt::format("swap {}: no free spare or healthy card", failed));
  }
  Partition p = m.parts.at(m.owner[failed]);
  std::vector<PartitionLink> removed, added;
  for (auto& l : p.links) {
    if (l.a != failed && l.b != failed) continue;
    removed.push_back(l);
    l = norm(l.a == failed ? s : l.a, l.b == failed ? s : l.b, l.port);  // same port index, new card
    added.push_back(l);
  }
  std::sort(p.links.begin(), p.links.end());
  std::replace(p.cards.begin(), p.cards.end(), failed, s);
  detail::JournalIntent in;
  in.what = fmt::format("swap {} -> {} in {}", failed, s, p.name);
  if (m.health[s] == CardHealth::kSpare) in.health.emplace_back(s, CardHealth::kHealthy);
  in.upsert.push_back(std::move(p));
  std::sort(removed.begin(), removed.end());
  std::sort(added.begin(), added.end());
  return m.commit(std::move(in), std::move(added), std::move(removed));
}

Result<void> PartitionManager::set_health(std::uint32_t card, CardHealth h) {
  std::lock_guard lock(impl_->mu);
  auto& m = *impl_;
  if (card >= m.cards) return bad(fmt::format("set_health: card {} beyond the pool ({} cards)", card, m.cards));
  if (m.health[card] == h) return {};
  detail::JournalIntent in;
  in.what = fmt::format("health {} {}", card, card_health_name(h));
  in.health.emplace_back(card, h);
  auto r = m.commit(std::move(in), {}, {});
  if (!r) return std::unexpected(std::move(r.error()));
  return {};
}

}  // namespace npo
