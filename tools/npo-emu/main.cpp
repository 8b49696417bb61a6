// SPDX-License-Identifier: Apache-2.0
// npo-emu: the emulator's companion tool. `topo generate KIND --cards N ...` writes a topology
// file (docs/topology.md) for one of the generators; `topo check FILE` validates a file and
// prints its size and graph properties (degree, diameter, bisection, switch radix), and checks
// its scripted faults as the emulator would schedule them (npo::emu::check_scenario).
// Uses the public npo-hal API and the emulator's control surface (npo/emu/emulator.hpp).
#include <charconv>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/output.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/hal/error.hpp"
#include "npo/hal/topology_file.hpp"
#include "npo/hal/topology_gen.hpp"
#include "npo/hal/topology_graph.hpp"
#include "npo/hal/units.hpp"

namespace {

using nlohmann::json;

int die(const npo::Error& e) { return npo::tools::fail("npo-emu", e); }

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
  CLI::App app{"npo-emu: topology files for the npo-hal emulator (docs/topology.md)"};
  app.require_subcommand(1);
  auto* topo = app.add_subcommand("topo", "topology files: generate, check");
  topo->require_subcommand(1);

  auto* gen = topo->add_subcommand("generate", "write a generated topology file to stdout (or -o FILE)");
  std::string kind_s, dims_s, format = "yaml", out_path, hbm_s = "64M";
  unsigned cards = 0, leaf_radix = 0, spine_radix = 0, uplinks = 0, groups = 0;
  gen->add_option("kind", kind_s, "mesh | torus2d | torus3d | hypercube | fat-tree | dragonfly")->required();
  gen->add_option("--cards,-n", cards, "number of cards, 1..1024")->required();
  auto* o_dims = gen->add_option("--dims", dims_s, "torus dimensions AxB or AxBxC (default: near-square / near-cubic)");
  auto* o_leaf = gen->add_option("--leaf-radix", leaf_radix, "fat-tree: ports per leaf switch (default 32)");
  auto* o_spine = gen->add_option("--spine-radix", spine_radix,
                                  "fat-tree: ports per spine switch, a multiple of the leaves (default: one per leaf)");
  auto* o_up = gen->add_option("--uplinks", uplinks, "fat-tree: ports per card cabled to its leaf (default 4)");
  auto* o_groups = gen->add_option("--groups", groups, "dragonfly: number of groups (default: fewest ports per card)");
  gen->add_option("--hbm", hbm_s, "HBM per card in the file, BYTES[K|M|G] in [1M, 64G], e.g. 64M, 1G (default 64M)");
  gen->add_option("--format", format, "yaml | json (default yaml)")->check(CLI::IsMember({"yaml", "json"}));
  gen->add_option("-o,--output", out_path, "write to FILE instead of stdout");

  auto* chk = topo->add_subcommand("check", "validate a topology file and print its graph properties");
  std::string in_path;
  bool as_json = false;
  chk->add_option("file", in_path, "topology file (YAML or JSON)")->required();
  chk->add_flag("--json", as_json, "print the properties as JSON");

  CLI11_PARSE(app, argc, argv);

  if (gen->parsed()) {
    auto kind = npo::parse_fabric_kind(kind_s);
    if (!kind) return die(kind.error());
    // Options of another kind are refused, not ignored; an explicit 0 is not "the default".
    const bool torus = *kind == npo::FabricKind::kTorus2d || *kind == npo::FabricKind::kTorus3d;
    const bool fat = *kind == npo::FabricKind::kFatTree;
    for (auto [o, fits, what] : {std::tuple{o_dims, torus, "torus2d and torus3d"}, std::tuple{o_leaf, fat, "fat-tree"},
                                 std::tuple{o_spine, fat, "fat-tree"}, std::tuple{o_up, fat, "fat-tree"},
                                 std::tuple{o_groups, *kind == npo::FabricKind::kDragonfly, "dragonfly"}}) {
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
    npo::FabricGenOptions o;
    if (!dims_s.empty()) {
      auto d = npo::parse_fabric_dims(dims_s);
      if (!d) return die(d.error());
      o.dims = *d;
    }
    o.leaf_radix = leaf_radix;
    o.spine_radix = spine_radix;
    o.card_uplinks = uplinks;
    o.groups = groups;
    {
      auto hbm = npo::parse_bytes(hbm_s);  // digits only: "-1" and " 1" are refused, K/M/G never overflow
      if (!hbm) {
        std::fprintf(stderr, "npo-emu: --hbm: %s\n", hbm.error().message().c_str());
        return 2;
      }
      o.hbm_bytes = *hbm;
    }
    auto spec = npo::generate_fabric(*kind, cards, o);
    if (!spec) return die(spec.error());
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
