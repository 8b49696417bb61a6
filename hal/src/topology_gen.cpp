// SPDX-License-Identifier: Apache-2.0
// Topology generators: full mesh, torus, hypercube, fat-tree through optical circuit switches,
// dragonfly (docs/topology.md "Generators"). No yaml-cpp.
#include "npo/hal/topology_gen.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "npo/hal/topology_graph.hpp"

namespace npo {

namespace {
std::unexpected<Error> bad(std::string msg) { return fail(Code::kInvalidArgument, std::move(msg)); }
}  // namespace

std::string_view fabric_kind_name(FabricKind k) noexcept {
  switch (k) {
    case FabricKind::kMesh: return "mesh";
    case FabricKind::kTorus2d: return "torus2d";
    case FabricKind::kTorus3d: return "torus3d";
    case FabricKind::kHypercube: return "hypercube";
    case FabricKind::kFatTree: return "fat-tree";
    case FabricKind::kDragonfly: return "dragonfly";
    case FabricKind::kPool: return "pool";
  }
  return "unknown";
}

Result<FabricKind> parse_fabric_kind(std::string_view n) {
  for (auto k : {FabricKind::kMesh, FabricKind::kTorus2d, FabricKind::kTorus3d, FabricKind::kHypercube,
                 FabricKind::kFatTree, FabricKind::kDragonfly, FabricKind::kPool}) {
    if (fabric_kind_name(k) == n) return k;
  }
  if (n == "torus" || n == "torus2") return FabricKind::kTorus2d;
  if (n == "torus3") return FabricKind::kTorus3d;
  if (n == "fattree" || n == "clos") return FabricKind::kFatTree;
  if (n == "full-mesh" || n == "fullmesh") return FabricKind::kMesh;
  return bad(fmt::format(
      "unknown fabric kind '{}' (accepted: mesh, torus2d, torus3d, hypercube, fat-tree, dragonfly, pool)", n));
}

Result<std::vector<unsigned>> parse_fabric_dims(std::string_view text) {
  std::vector<unsigned> d;
  const std::string_view orig = text;
  while (true) {
    const auto x = text.find_first_of("xX");
    const auto part = text.substr(0, x);
    unsigned v = 0;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || p != part.data() + part.size() || v == 0) {
      return bad(fmt::format("dims '{}': expected AxB or AxBxC with positive integers", orig));
    }
    d.push_back(v);
    if (x == std::string_view::npos) break;
    text = text.substr(x + 1);
  }
  if (d.size() < 2 || d.size() > 3) return bad(fmt::format("dims '{}': expected 2 or 3 dimensions", orig));
  return d;
}

namespace {

void add_cable(FabricSpec& s, FabricEnd a, FabricEnd b, const FabricChannel& ch) {
  s.cables.push_back(FabricCable{a, b, ch});
}
FabricEnd card_end(std::uint32_t c, unsigned p) { return FabricEnd{false, c, p}; }
FabricEnd sw_end(std::uint32_t s, unsigned p) { return FabricEnd{true, s, p}; }

Result<FabricSpec> gen_mesh(unsigned n, const FabricGenOptions& o) {
  const FabricChannel ch = o.channel.value_or(FabricChannel{});
  if (n > kFabricMaxCardPorts + 1) {
    return bad(fmt::format("mesh of {} cards needs {} ports per card; a card has at most {} (mesh fits 1..{} cards)", n,
                           n - 1, kFabricMaxCardPorts, kFabricMaxCardPorts + 1));
  }
  FabricSpec s;
  s.name = fmt::format("mesh {}", n);
  s.cards = n;
  s.ports = std::max(1u, n - 1);
  for (std::uint32_t a = 0; a < n; ++a) {
    for (std::uint32_t b = a + 1; b < n; ++b) add_cable(s, card_end(a, b - 1), card_end(b, a), ch);
  }
  return s;
}

std::vector<unsigned> near_cubic(unsigned n, unsigned k) {
  std::vector<unsigned> best;
  double best_score = 1e18;
  if (k == 2) {
    for (unsigned a = 1; a * a <= n; ++a) {
      if (n % a == 0) best = {a, n / a};
    }
    return best;
  }
  for (unsigned a = 1; a * a * a <= n; ++a) {
    if (n % a) continue;
    for (unsigned b = a; b * b <= n / a; ++b) {
      if ((n / a) % b) continue;
      const unsigned c = n / a / b;
      const double score = static_cast<double>(c) / a;
      if (score < best_score) {
        best_score = score;
        best = {a, b, c};
      }
    }
  }
  return best;
}

Result<FabricSpec> gen_torus(unsigned n, unsigned nd, const FabricGenOptions& o) {
  const FabricChannel ch = o.channel.value_or(FabricChannel{});
  std::vector<unsigned> dims = o.dims;
  if (dims.empty()) dims = near_cubic(n, nd);
  if (dims.size() != nd) {
    return bad(fmt::format("torus{}d needs {} dims, got {}", nd, nd, dims.size()));
  }
  std::uint64_t prod = 1;  // 64-bit: dims up to 2^32-1 each must not wrap to a matching count
  for (unsigned d : dims) prod = std::min<std::uint64_t>(prod * d, std::uint64_t{1} << 40);
  if (prod != n) {
    return bad(fmt::format("torus dims {} hold {} cards, not {}", fmt::join(dims, "x"), prod, n));
  }
  FabricSpec s;
  s.name = fmt::format("torus {}", fmt::join(dims, "x"));
  s.cards = n;
  s.ports = 2 * nd;
  std::vector<unsigned> stride(nd, 1);
  for (unsigned i = 1; i < nd; ++i) stride[i] = stride[i - 1] * dims[i - 1];
  for (std::uint32_t c = 0; c < n; ++c) {
    for (unsigned i = 0; i < nd; ++i) {
      const unsigned k = dims[i];
      const unsigned x = (c / stride[i]) % k;
      if (k == 1) continue;
      if (k == 2 && x == 1) continue;  // one link per pair when the ring has two cards
      const std::uint32_t next = c - x * stride[i] + ((x + 1) % k) * stride[i];
      add_cable(s, card_end(c, 2 * i), card_end(next, 2 * i + 1), ch);
    }
  }
  return s;
}

Result<FabricSpec> gen_hypercube(unsigned n, const FabricGenOptions& o) {
  const FabricChannel ch = o.channel.value_or(FabricChannel{});
  if (!std::has_single_bit(n)) {
    return bad(fmt::format("hypercube needs a power of two cards (2, 4, ..., 1024), got {}", n));
  }
  const unsigned d = static_cast<unsigned>(std::countr_zero(n));
  FabricSpec s;
  s.name = fmt::format("hypercube {}", d);
  s.cards = n;
  s.ports = std::max(1u, d);
  for (std::uint32_t c = 0; c < n; ++c) {
    for (unsigned i = 0; i < d; ++i) {
      const std::uint32_t p = c ^ (1u << i);
      if (c < p) add_cable(s, card_end(c, i), card_end(p, i), ch);
    }
  }
  return s;
}

Result<FabricSpec> gen_fat_tree(unsigned n, const FabricGenOptions& o) {
  const FabricChannel ch = o.channel.value_or(FabricChannel{0.5, 0.0, 0});
  const unsigned u = o.card_uplinks ? o.card_uplinks : 4;
  const unsigned rl = o.leaf_radix ? o.leaf_radix : 32;
  if (u > kFabricMaxCardPorts) return bad(fmt::format("fat-tree: {} uplinks per card; a card has at most 16 ports", u));
  if (rl % 2 || rl < 2 * u) {
    return bad(
        fmt::format("fat-tree: leaf radix {} must be even and >= 2 x uplinks ({}): half the ports face cards, "
                    "half face spines",
                    rl, 2 * u));
  }
  const unsigned down = rl / 2;
  if (down % u) {
    return bad(
        fmt::format("fat-tree: a leaf's {} card-facing ports are not a multiple of {} uplinks per card", down, u));
  }
  const unsigned per_leaf = down / u;
  if (n % per_leaf || n / per_leaf < 2) {
    return bad(
        fmt::format("fat-tree: {} cards do not fill 2 or more leaves of {} cards (leaf radix {}, {} uplinks); "
                    "use a multiple of {} cards, at least {}",
                    n, per_leaf, rl, u, per_leaf, 2 * per_leaf));
  }
  const unsigned leaves = n / per_leaf;
  unsigned ppl = 1;  // ports of each spine per leaf
  if (o.spine_radix) {
    if (o.spine_radix % leaves || down % (o.spine_radix / leaves)) {
      return bad(
          fmt::format("fat-tree: spine radix {} must be a multiple k of the {} leaves with k dividing the {} "
                      "up ports of a leaf (e.g. {})",
                      o.spine_radix, leaves, down, leaves));
    }
    ppl = o.spine_radix / leaves;
  }
  const unsigned spines = down / ppl;
  const unsigned rs = leaves * ppl;
  if (rs > kFabricMaxSwitchPorts) {
    return bad(fmt::format("fat-tree: spine radix {} exceeds {}", rs, kFabricMaxSwitchPorts));
  }
  FabricSpec s;
  s.name = fmt::format("fat-tree {} cards, {} leaves x{}, {} spines x{}", n, leaves, rl, spines, rs);
  s.cards = n;
  s.ports = u;
  for (unsigned l = 0; l < leaves; ++l) {
    FabricSwitch sw{fmt::format("leaf{}", l), rl, o.switch_insertion_loss_db, {}};
    // Down port d to up port (d + l) mod down: rotating by the leaf index mixes which card of
    // the far leaf a light path reaches, so the circuit graph is connected.
    for (unsigned d = 0; d < down; ++d) sw.cross_connects.emplace_back(d, down + (d + l) % down);
    s.switches.push_back(std::move(sw));
  }
  // Spines: up index k pairs the leaves by a pseudo-random perfect matching (seeded,
  // deterministic; odd leaf counts leave one leaf idle per k). Random matchings make the
  // circuit graph an expander: connected with a small diameter. Of 8 seeds the one with the
  // smallest circuit diameter is kept.
  const std::size_t first_spine = s.switches.size();
  auto add_spines = [&](std::uint64_t seed) {
    s.switches.resize(first_spine);
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    auto next = [&x]() {  // splitmix64: the same numbers on every platform
      std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      return z ^ (z >> 31);
    };
    std::vector<std::vector<unsigned>> match(down);  // per up index k: leaves in pairing order
    for (auto& m : match) {
      m.resize(leaves);
      std::iota(m.begin(), m.end(), 0u);
      for (unsigned i = leaves - 1; i > 0; --i) std::swap(m[i], m[next() % (i + 1)]);
    }
    for (unsigned sp = 0; sp < spines; ++sp) {
      FabricSwitch sw{fmt::format("spine{}", sp), rs, o.switch_insertion_loss_db, {}};
      for (unsigned j = 0; j < ppl; ++j) {
        const auto& m = match[sp * ppl + j];  // the leaves' up port index using this spine port
        for (unsigned i = 0; i + 1 < leaves; i += 2) sw.cross_connects.emplace_back(m[i] * ppl + j, m[i + 1] * ppl + j);
      }
      s.switches.push_back(std::move(sw));
    }
  };
  for (std::uint32_t c = 0; c < n; ++c) {
    const unsigned l = c / per_leaf, local = c % per_leaf;
    for (unsigned j = 0; j < u; ++j) add_cable(s, card_end(c, j), sw_end(l, local * u + j), ch);
  }
  for (unsigned l = 0; l < leaves; ++l) {
    for (unsigned k = 0; k < down; ++k) {
      const unsigned sp = k / ppl, j = k % ppl;
      add_cable(s, sw_end(l, down + k), sw_end(leaves + sp, l * ppl + j), ch);
    }
  }
  std::uint64_t best_seed = 0;
  int best_diameter = -1;
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    add_spines(seed);
    const int d = analyze_fabric(s, FabricView::kCircuit).diameter;
    if (d >= 0 && (best_diameter < 0 || d < best_diameter)) {
      best_diameter = d;
      best_seed = seed;
    }
  }
  add_spines(best_seed);
  return s;
}

unsigned dragonfly_ports(unsigned g, unsigned a) { return (a - 1) + (g - 1 + a - 1) / a; }

Result<FabricSpec> gen_dragonfly(unsigned n, const FabricGenOptions& o) {
  const FabricChannel ch = o.channel.value_or(FabricChannel{});
  unsigned g = o.groups;
  if (g == 0) {
    unsigned best = 0, best_ports = ~0u;
    for (unsigned cand = 2; cand <= n; ++cand) {
      if (n % cand) continue;
      const unsigned p = dragonfly_ports(cand, n / cand);
      if (p <= best_ports) {  // ties: more groups
        best_ports = p;
        best = cand;
      }
    }
    g = best;
  }
  if (n < 2) return bad(fmt::format("dragonfly needs at least 2 cards (2 groups of 1), got {}", n));
  if (g < 2 || n % g) {
    return bad(fmt::format("dragonfly: {} groups must be >= 2 and divide {} cards", g, n));
  }
  const unsigned a = n / g;
  const unsigned h = (g - 1 + a - 1) / a;
  const unsigned ports = (a - 1) + h;
  if (ports > kFabricMaxCardPorts) {
    return bad(
        fmt::format("dragonfly: {} groups of {} cards need {} local + {} global = {} ports per card (max {}); "
                    "one global link per group pair fits about 730 cards at most",
                    g, a, a - 1, h, ports, kFabricMaxCardPorts));
  }
  FabricSpec s;
  s.name = fmt::format("dragonfly {} groups x {} cards, {} global ports", g, a, h);
  s.cards = n;
  s.ports = std::max(1u, ports);
  for (unsigned grp = 0; grp < g; ++grp) {
    for (unsigned x = 0; x < a; ++x) {
      for (unsigned y = x + 1; y < a; ++y) {
        add_cable(s, card_end(grp * a + x, y - 1), card_end(grp * a + y, x), ch);
      }
    }
  }
  std::vector<unsigned> next(g, 0);  // next free global slot per group: card slot % a, port a-1 + slot / a
  for (unsigned x = 0; x < g; ++x) {
    for (unsigned y = x + 1; y < g; ++y) {
      const unsigned sx = next[x]++, sy = next[y]++;
      add_cable(s, card_end(x * a + sx % a, a - 1 + sx / a), card_end(y * a + sy % a, a - 1 + sy / a), ch);
    }
  }
  return s;
}

Result<FabricSpec> gen_pool(unsigned n, const FabricGenOptions& o) {
  const FabricChannel ch = o.channel.value_or(FabricChannel{0.5, 0.0, 0});
  const unsigned p = o.pool_ports ? o.pool_ports : 8;
  if (p > kFabricMaxCardPorts) {
    return bad(fmt::format("pool: {} ports per card; a card has at most {} (one switch per port index)", p,
                           kFabricMaxCardPorts));
  }
  FabricSpec s;
  s.name = fmt::format("pool {} cards x {} ports, {} switches of radix {}", n, p, p, n);
  s.cards = n;
  s.ports = p;
  for (unsigned i = 0; i < p; ++i)
    s.switches.push_back(FabricSwitch{fmt::format("ocs{}", i), n, o.switch_insertion_loss_db, {}});
  for (unsigned i = 0; i < p; ++i) {
    for (std::uint32_t c = 0; c < n; ++c) add_cable(s, card_end(c, i), sw_end(i, c), ch);
  }
  return s;
}

}  // namespace

Result<FabricSpec> generate_fabric(FabricKind kind, unsigned cards, const FabricGenOptions& o) {
  if (cards < 1 || cards > kFabricMaxCards) {
    return bad(fmt::format("{}: {} cards outside 1..{}", fabric_kind_name(kind), cards, kFabricMaxCards));
  }
  Result<FabricSpec> s;
  switch (kind) {
    case FabricKind::kMesh: s = gen_mesh(cards, o); break;
    case FabricKind::kTorus2d: s = gen_torus(cards, 2, o); break;
    case FabricKind::kTorus3d: s = gen_torus(cards, 3, o); break;
    case FabricKind::kHypercube: s = gen_hypercube(cards, o); break;
    case FabricKind::kFatTree: s = gen_fat_tree(cards, o); break;
    case FabricKind::kDragonfly: s = gen_dragonfly(cards, o); break;
    case FabricKind::kPool: s = gen_pool(cards, o); break;
  }
  if (!s) return s;
  s->hbm_bytes = o.hbm_bytes;
  if (auto r = validate_fabric_spec(*s); !r) {
    return std::unexpected(std::move(Error(r.error())).prefixed("generated fabric invalid"));
  }
  return s;
}

}  // namespace npo
