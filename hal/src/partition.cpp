// SPDX-License-Identifier: Apache-2.0
// The partition manager: opening a pool, rebuilding the table from the journal and the
// switches, settling an interrupted change (npo/hal/partition.hpp). The changes themselves
// are in partition_ops.cpp.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "partition_impl.hpp"

namespace npo {

namespace {
std::unexpected<Error> bad(std::string msg) { return fail(Code::kInvalidArgument, std::move(msg)); }

using XcSet = std::set<std::pair<std::size_t, CrossConnect>>;  ///< (switch index, pair)

CrossConnect ordered(unsigned a, unsigned b) { return a < b ? CrossConnect{a, b} : CrossConnect{b, a}; }
}  // namespace

SwitchChange PartitionManager::Impl::change_of(const PartitionLink& l, bool add) const {
  const auto& ea = cable[l.a][l.port];
  const auto& eb = cable[l.b][l.port];
  const auto [x, y] = ordered(ea.port, eb.port);
  return SwitchChange{std::string(sw[ea.sw]->name()),
                      OcsChange{add ? OcsChange::Kind::kConnect : OcsChange::Kind::kDisconnect, x, y}};
}

std::vector<SwitchChange> PartitionManager::Impl::changes_of(const std::vector<PartitionLink>& removed,
                                                             const std::vector<PartitionLink>& added) const {
  std::vector<std::pair<std::uint32_t, SwitchChange>> dis, con;
  for (const auto& l : removed) dis.emplace_back(cable[l.a][l.port].sw, change_of(l, false));
  for (const auto& l : added) con.emplace_back(cable[l.a][l.port].sw, change_of(l, true));
  auto by_switch = [](const auto& p, const auto& q) {
    return std::tie(p.first, p.second.change.a) < std::tie(q.first, q.second.change.a);
  };
  std::sort(dis.begin(), dis.end(), by_switch);
  std::sort(con.begin(), con.end(), by_switch);
  std::vector<SwitchChange> out;
  for (auto& [s, c] : dis) out.push_back(std::move(c));
  for (auto& [s, c] : con) out.push_back(std::move(c));
  return out;
}

std::uint32_t PartitionManager::Impl::id_of(std::uint32_t card) const {
  if (card >= cards || owner[card].empty()) return 0;
  const auto it = parts.find(owner[card]);
  return it == parts.end() ? 0 : it->second.id;
}

Result<void> PartitionManager::Impl::enforce(const std::vector<CardPartitionId>& ids) {
  if (opt.enforcer == nullptr) return {};
  for (const auto& x : ids) {
    if (auto r = opt.enforcer->set_partition(x.card, x.id); !r) {
      return std::unexpected(std::move(r.error()).prefixed(fmt::format("card {}: set partition ID {}", x.card, x.id)));
    }
  }
  return {};
}

std::size_t PartitionManager::Impl::switch_index(std::string_view name) const {
  for (std::size_t i = 0; i < sw.size(); ++i) {
    if (sw[i]->name() == name) return i;
  }
  return sw.size();
}

void PartitionManager::Impl::fold(const detail::JournalIntent& in) {
  auto drop = [&](const std::string& name) {
    const auto it = parts.find(name);
    if (it == parts.end()) return;
    for (auto c : it->second.cards) {
      if (c < cards && owner[c] == name) owner[c].clear();
    }
    parts.erase(it);
  };
  for (const auto& n : in.remove) drop(n);
  for (const auto& p : in.upsert) {
    std::uint32_t id = p.id;
    if (id == 0) {  // a journal line from before partition IDs: keep the partition's, else a fresh one
      const auto it = parts.find(p.name);
      id = it != parts.end() && it->second.id != 0 ? it->second.id : next_id;
    }
    drop(p.name);
    for (auto c : p.cards) {
      if (c < cards) owner[c] = p.name;
    }
    parts[p.name] = p;
    parts[p.name].id = id;
    next_id = std::max(next_id, id + 1);
  }
  for (const auto& [c, h] : in.health) {
    if (c < cards) health[c] = h;
  }
  next_seq = std::max(next_seq, in.seq + 1);
}

namespace {

/// Reads every switch's cross-connects.
Result<XcSet> read_switches(const PartitionManager::Impl& m) {
  XcSet out;
  for (std::size_t i = 0; i < m.sw.size(); ++i) {
    auto xc = m.sw[i]->cross_connects();
    if (!xc) return std::unexpected(std::move(xc.error()).prefixed(fmt::format("switch {}", m.sw[i]->name())));
    for (const auto& p : *xc) out.emplace(i, ordered(p.first, p.second));
  }
  return out;
}

/// Settles the interrupted intent `in` (a prefix of its changes was applied, in order):
/// undoes (rolls back) or completes it against the switches' actual state `now`. Returns the
/// number of switch operations done.
Result<unsigned> settle(PartitionManager::Impl& m, const detail::JournalIntent& in, XcSet& now, bool finish) {
  unsigned ops = 0;
  auto step = [&](const SwitchChange& c, bool connect) -> Result<void> {
    const std::size_t s = m.switch_index(c.switch_name);
    if (s == m.sw.size()) return fail(Code::kDataLoss, fmt::format("journal names unknown switch '{}'", c.switch_name));
    const auto key = std::pair{s, ordered(c.change.a, c.change.b)};
    const bool present = now.contains(key);
    if (connect == present) return {};  // already as wanted
    auto r = connect ? m.sw[s]->connect(c.change.a, c.change.b) : m.sw[s]->disconnect(c.change.a);
    if (!r) {
      return std::unexpected(std::move(r.error()).prefixed(
          fmt::format("recovering '{}': {} {}", in.what, c.switch_name, ocs_change_text(c.change))));
    }
    ++ops;
    if (connect) {
      now.insert(key);
    } else {
      now.erase(key);
    }
    return {};
  };
  if (finish) {
    for (const auto& c : in.changes) {
      if (auto r = step(c, c.change.kind == OcsChange::Kind::kConnect); !r)
        return std::unexpected(std::move(r.error()));
    }
  } else {
    for (auto it = in.changes.rbegin(); it != in.changes.rend(); ++it) {
      if (auto r = step(*it, it->change.kind != OcsChange::Kind::kConnect); !r) {
        return std::unexpected(std::move(r.error()));
      }
    }
  }
  return ops;
}

/// Partitions "recovered<k>" from cross-connects found on the switches with no journal: one
/// per connected group of cards. Returns the intent that records them.
detail::JournalIntent recover_from_switches(PartitionManager::Impl& m, const XcSet& now) {
  // (switch, switch port) -> card
  std::vector<std::vector<std::uint32_t>> card_at(m.sw.size());
  for (std::size_t s = 0; s < m.sw.size(); ++s) card_at[s].assign(m.sw[s]->radix(), m.cards);
  for (std::uint32_t c = 0; c < m.cards; ++c) {
    for (unsigned p = 0; p < m.ports; ++p) card_at[m.cable[c][p].sw][m.cable[c][p].port] = c;
  }
  std::vector<std::uint32_t> parent(m.cards);
  std::iota(parent.begin(), parent.end(), 0u);
  auto find = [&](std::uint32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::vector<PartitionLink> links;
  for (const auto& [s, xc] : now) {
    const auto a = card_at[s][xc.first], b = card_at[s][xc.second];
    if (a >= m.cards || b >= m.cards || a == b) continue;
    links.push_back(a < b ? PartitionLink{a, b, m.pool.ports} : PartitionLink{b, a, m.pool.ports});
    // the port index of a link is the port cabled to switch s (the same on both cards)
    for (unsigned p = 0; p < m.ports; ++p) {
      if (m.cable[a][p].sw == s) links.back().port = p;
    }
    parent[find(a)] = find(b);
  }
  std::map<std::uint32_t, Partition> groups;
  for (const auto& l : links) {
    auto& g = groups[find(l.a)];
    g.links.push_back(l);
    g.cards.push_back(l.a);
    g.cards.push_back(l.b);
  }
  detail::JournalIntent in;
  in.what = "recover from switches";
  unsigned k = 0;
  for (auto& [root, g] : groups) {
    std::sort(g.cards.begin(), g.cards.end());
    g.cards.erase(std::unique(g.cards.begin(), g.cards.end()), g.cards.end());
    std::sort(g.links.begin(), g.links.end());
    while (m.parts.contains(fmt::format("recovered{}", k))) ++k;
    g.name = fmt::format("recovered{}", k++);
    g.shape = fmt::format("custom:{}", g.cards.size());
    g.id = m.next_id++;  // a fresh ID: the journal had none
    m.report.recovered.push_back(g.name);
    in.upsert.push_back(std::move(g));
  }
  return in;
}

Result<void> check_pool(PartitionManager::Impl& m, std::vector<OpticalCircuitSwitch*> switches) {
  const auto& pool = m.pool;
  if (auto r = validate_fabric_spec(pool); !r) return std::unexpected(std::move(Error(r.error())).prefixed("pool"));
  m.cards = pool.cards;
  m.ports = pool.ports;
  for (const auto& o : pool.overrides) {
    if (o.ports && *o.ports != pool.ports) return bad("pool: every card must have the same number of ports");
  }
  for (const auto& s : pool.switches) {
    auto it = std::find_if(switches.begin(), switches.end(), [&](auto* x) { return x && x->name() == s.name; });
    if (it == switches.end()) return bad(fmt::format("pool switch '{}' has no OpticalCircuitSwitch", s.name));
    if ((*it)->radix() < s.ports) {
      return bad(fmt::format("switch '{}': radix {} below the pool's {}", s.name, (*it)->radix(), s.ports));
    }
    m.sw.push_back(*it);
  }
  const PartitionManager::Impl::SwitchPort none{static_cast<std::uint32_t>(m.sw.size()), 0};
  m.cable.assign(m.cards, std::vector<PartitionManager::Impl::SwitchPort>(m.ports, none));
  for (const auto& c : pool.cables) {
    if (c.a.on_switch == c.b.on_switch) return bad("pool: every cable joins a card port and a switch port");
    const auto& card = c.a.on_switch ? c.b : c.a;
    const auto& sw = c.a.on_switch ? c.a : c.b;
    m.cable[card.node][card.port] = {sw.node, sw.port};
  }
  for (unsigned p = 0; p < m.ports; ++p) {
    for (std::uint32_t c = 0; c < m.cards; ++c) {
      if (m.cable[c][p].sw != m.cable[0][p].sw || m.cable[c][p].sw == m.sw.size()) {
        return bad(
            fmt::format("pool: port {} of every card must be cabled to one switch (card {} differs): "
                        "use generate_fabric(FabricKind::kPool, ...)",
                        p, c));
      }
    }
  }
  m.owner.assign(m.cards, "");
  m.health.assign(m.cards, CardHealth::kHealthy);
  return {};
}

Result<void> rebuild(PartitionManager::Impl& m) {
  auto opened = detail::Journal::open(m.opt.journal);
  if (!opened) return std::unexpected(std::move(opened.error()));
  m.journal = std::move(opened->first);
  auto& jc = opened->second;
  m.report.records = jc.lines;
  m.report.torn_tail = jc.torn_tail;
  const detail::JournalEntry* interrupted = nullptr;
  for (std::size_t i = 0; i < jc.entries.size(); ++i) {
    const auto& e = jc.entries[i];
    m.next_seq = std::max(m.next_seq, e.intent.seq + 1);
    // IDs are never reused, not even one of a change that was rolled back.
    for (const auto& p : e.intent.upsert) m.next_id = std::max(m.next_id, p.id + 1);
    if (e.outcome == detail::JournalOutcome::kApplied || e.outcome == detail::JournalOutcome::kFinished)
      m.fold(e.intent);
    if (e.outcome == detail::JournalOutcome::kNone) {
      if (i + 1 != jc.entries.size()) {
        return fail(Code::kDataLoss,
                    fmt::format("partition journal: change {} ('{}') has no outcome but is not the last", e.intent.seq,
                                e.intent.what));
      }
      interrupted = &e;
    }
  }
  auto now = read_switches(m);
  if (!now) return std::unexpected(std::move(now.error()));
  if (interrupted != nullptr) {
    const bool finish = m.opt.recovery == RecoveryPolicy::kFinish;
    auto ops = settle(m, interrupted->intent, *now, finish);
    if (!ops) return std::unexpected(std::move(ops.error()));
    if (auto r = m.journal.outcome(interrupted->intent.seq,
                                   finish ? detail::JournalOutcome::kFinished : detail::JournalOutcome::kRolledBack);
        !r) {
      return std::unexpected(std::move(r.error()));
    }
    if (finish) m.fold(interrupted->intent);
    m.report.interrupted = fmt::format("{} (seq {}): {} ({} switch operations)", interrupted->intent.what,
                                       interrupted->intent.seq, finish ? "finished" : "rolled back", *ops);
  }
  // The table's cross-connects against the switches'.
  XcSet expected;
  for (const auto& [name, p] : m.parts) {
    for (const auto& l : p.links) {
      const auto c = m.change_of(l, true);
      expected.emplace(m.switch_index(c.switch_name), CrossConnect{c.change.a, c.change.b});
    }
  }
  std::set<std::pair<std::size_t, unsigned>> busy;
  for (const auto& [s, xc] : *now) {
    busy.emplace(s, xc.first);
    busy.emplace(s, xc.second);
  }
  for (const auto& [s, xc] : expected) {
    if (now->contains({s, xc})) continue;
    const std::string what = fmt::format("{}:{}-{}", m.sw[s]->name(), xc.first, xc.second);
    if (busy.contains({s, xc.first}) || busy.contains({s, xc.second})) {
      return fail(Code::kDataLoss,
                  fmt::format("journalled cross-connect {} is missing and its ports hold others", what));
    }
    if (auto r = m.sw[s]->connect(xc.first, xc.second); !r) {
      return std::unexpected(std::move(r.error()).prefixed("restoring " + what));
    }
    m.report.restored.push_back(what);
  }
  std::erase_if(*now, [&](const auto& x) { return expected.contains(x); });
  if (jc.entries.empty() && !now->empty()) {
    auto in = recover_from_switches(m, *now);
    in.seq = m.next_seq;
    if (auto r = m.journal.intent(in); !r) return std::unexpected(std::move(r.error()));
    if (auto r = m.journal.outcome(in.seq, detail::JournalOutcome::kApplied); !r)
      return std::unexpected(std::move(r.error()));
    m.fold(in);
  } else {
    for (const auto& [s, xc] : *now)
      m.report.foreign.push_back(fmt::format("{}:{}-{}", m.sw[s]->name(), xc.first, xc.second));
  }
  if (m.opt.enforcer != nullptr) {  // every card's ID from the table: a crash may have left any
    std::vector<CardPartitionId> ids;
    for (std::uint32_t c = 0; c < m.cards; ++c) ids.push_back({c, m.id_of(c)});
    if (auto r = m.enforce(ids); !r) return std::unexpected(std::move(r.error()).prefixed("partition IDs"));
    m.report.ids_set = ids.size();
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<PartitionManager>> PartitionManager::open(const FabricSpec& pool,
                                                                 std::vector<OpticalCircuitSwitch*> switches,
                                                                 const PartitionOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto impl = std::make_unique<Impl>();
  impl->pool = pool;
  impl->opt = options;
  if (auto r = check_pool(*impl, std::move(switches)); !r) return std::unexpected(std::move(r.error()));
  if (auto r = rebuild(*impl); !r) return std::unexpected(std::move(r.error()).prefixed("partition manager: open"));
  impl->report.wall_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  return std::unique_ptr<PartitionManager>(new PartitionManager(std::move(impl)));
}

PartitionManager::PartitionManager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PartitionManager::~PartitionManager() = default;

std::vector<Partition> PartitionManager::list() const {
  std::lock_guard lock(impl_->mu);
  std::vector<Partition> out;
  for (const auto& [n, p] : impl_->parts) out.push_back(p);
  return out;
}

std::optional<Partition> PartitionManager::find(std::string_view name) const {
  std::lock_guard lock(impl_->mu);
  const auto it = impl_->parts.find(name);
  if (it == impl_->parts.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> PartitionManager::owner(std::uint32_t card) const {
  std::lock_guard lock(impl_->mu);
  if (card >= impl_->cards || impl_->owner[card].empty()) return std::nullopt;
  return impl_->owner[card];
}

CardHealth PartitionManager::health(std::uint32_t card) const {
  std::lock_guard lock(impl_->mu);
  return card < impl_->cards ? impl_->health[card] : CardHealth::kHealthy;
}

const RebuildReport& PartitionManager::rebuild_report() const noexcept { return impl_->report; }
unsigned PartitionManager::pool_cards() const noexcept { return impl_->cards; }
unsigned PartitionManager::pool_ports() const noexcept { return impl_->ports; }

}  // namespace npo
