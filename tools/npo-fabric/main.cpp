// SPDX-License-Identifier: Apache-2.0
// npo-fabric: the fabric manager of a disaggregated pool (docs/partitions.md). `serve` runs the
// daemon (a PartitionManager over npo-emud's switches, journal, CLI socket); the other
// subcommands are its CLI, one JSON-lines request each over the CLI socket.
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/cli.hpp"
#include "common/line_server.hpp"
#include "common/output.hpp"
#include "fabric.hpp"
#include "npo/hal/topology_file.hpp"
#include "npo/hal/topology_gen.hpp"

namespace npo::tools::fabric {

Result<std::vector<std::uint32_t>> parse_card_list(std::string_view text) {
  std::vector<std::uint32_t> out;
  auto num = [](std::string_view s) -> std::optional<std::uint32_t> {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
    return static_cast<std::uint32_t>(std::stoul(std::string(s)));
  };
  while (!text.empty()) {
    const auto comma = text.find(',');
    const auto item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const auto dash = item.find('-');
    const auto lo = num(item.substr(0, dash));
    const auto hi = dash == std::string_view::npos ? lo : num(item.substr(dash + 1));
    if (!lo || !hi || *hi < *lo || *hi - *lo > 4096)
      return fail(Code::kInvalidArgument, fmt::format("--cards: '{}' is not N or N-M (e.g. 0-63,70)", item));
    for (auto c = *lo; c <= *hi; ++c) out.push_back(c);
  }
  if (out.empty()) return fail(Code::kInvalidArgument, "--cards: empty list");
  return out;
}

}  // namespace npo::tools::fabric

namespace {
using nlohmann::json;
using namespace npo::tools::fabric;

/// Sends `req`, prints the reply (JSON with `as_json`, else a summary). Returns the exit status.
int call(const std::string& socket, const json& req, bool as_json) {
  auto reply = npo::tools::line_request(socket, req.dump());
  if (!reply) return npo::tools::fail("npo-fabric", reply.error());
  json j;
  try {
    j = json::parse(*reply);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npo-fabric: unreadable reply: %s\n", e.what());
    return 1;
  }
  if (j.contains("error")) {
    std::fprintf(stderr, "npo-fabric: %s: %s\n", j["error"].value("code", "?").c_str(),
                 j["error"].value("message", "?").c_str());
    return 1;
  }
  if (as_json) {
    std::puts(j.dump(2).c_str());
    return 0;
  }
  if (j.contains("partitions")) {
    std::printf("%-16s %6s %-14s %5s %5s  %s\n", "NAME", "ID", "SHAPE", "CARDS", "LINKS", "CARD LIST");
    for (const auto& p : j["partitions"]) {
      std::string list;
      for (const auto& c : p["cards"]) list += (list.empty() ? "" : ",") + std::to_string(c.get<unsigned>());
      std::printf("%-16s %6u %-14s %5zu %5zu  %s\n", p["name"].get<std::string>().c_str(), p["id"].get<unsigned>(),
                  p["shape"].get<std::string>().c_str(), p["cards"].size(), p["links"].size(), list.c_str());
    }
    for (const auto& [card, h] : j["health"].items())
      std::printf("card %s: %s\n", card.c_str(), h.get<std::string>().c_str());
    return 0;
  }
  if (j.contains("change")) {
    const auto& c = j["change"];
    std::printf("%s (journal seq %llu)\n", c["what"].get<std::string>().c_str(),
                static_cast<unsigned long long>(c["seq"].get<std::uint64_t>()));
    for (const auto& s : c["switch_ops"])
      std::printf("  %s %s\n", s["switch"].get<std::string>().c_str(), s["change"].get<std::string>().c_str());
    std::string ids;
    for (const auto& x : c["ids"]) ids += fmt::format(" {}={}", x["card"].get<unsigned>(), x["id"].get<unsigned>());
    std::printf("  %zu switch operations, links +%zu -%zu, partition IDs:%s\n", c["switch_ops"].size(),
                c["added"].size(), c["removed"].size(), ids.empty() ? " none" : ids.c_str());
    std::printf("  switches %.2f ms, links up %.1f ms, total %.1f ms\n", c["switch_ms"].get<double>(),
                c["links_up_ms"].get<double>(), c["wall_ms"].get<double>());
    if (c.contains("routes_ms")) {
      std::printf("  routes inside the partition %.1f ms later\n", c["routes_ms"].get<double>());
    } else if (c.contains("routes")) {
      std::printf("  routes: not programmed within 5 s (npo-emud --manage-links programs them)\n");
    }
    return 0;
  }
  std::puts("ok");
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"npo-fabric: partitions of a disaggregated pool (docs/partitions.md)"};
  npo::tools::add_version_flag(app, "npo-fabric");
  app.require_subcommand(1);
  std::string socket;
  std::string emud_dir;
  auto sock_opts = [&](CLI::App* sub) {
    sub->add_option("--socket", socket, "the daemon's CLI socket (default: DIR/npo-fabric.sock)");
    sub->add_option("--emud", emud_dir, "npo-emud's --socket-dir DIR");
  };
  ServeOptions so;
  auto* serve = app.add_subcommand("serve", "run the fabric manager daemon (foreground; SIGTERM stops it)");
  serve->add_option("--emud", so.emud_dir, "npo-emud's --socket-dir (its fabric.sock)")->required();
  serve->add_option("--journal", so.journal, "partition journal (JSON lines, fsync'd; created when missing)")
      ->required();
  serve->add_option("--socket", so.socket, "CLI socket, created 0600 (default DIR/npo-fabric.sock)");
  serve->add_option("--topology", so.topology,
                    "pool topology file (default: generate_fabric pool of the daemon's cards and switches)");
  serve->add_option("--link-timeout", so.link_timeout_s, "seconds to wait for added links to be Up (default 30)");
  serve->add_flag("--no-wait", so.no_wait, "do not wait for added links");

  std::string name, shape, cards_text, to, health_text;
  std::uint32_t card = 0, failed = 0;
  std::optional<std::uint32_t> spare;
  bool as_json = false;
  auto* create = app.add_subcommand("create", "create a partition");
  create->add_option("name", name)->required();
  create->add_option("--cards", cards_text, "cards, e.g. 0-63,70 (alone: a ring over them)");
  create->add_option("--shape", shape, "mesh:N, ring:N, torus2d:AxB, torus3d:AxBxC");
  sock_opts(create);
  auto* destroy = app.add_subcommand("destroy", "destroy a partition");
  destroy->add_option("name", name)->required();
  sock_opts(destroy);
  auto* list = app.add_subcommand("list", "list the partitions");
  list->add_flag("--json", as_json, "JSON");
  sock_opts(list);
  auto* move = app.add_subcommand("move", "move a card into a ring or mesh partition (or out: --to '')");
  move->add_option("card", card)->required();
  move->add_option("--to", to, "partition (empty: the free pool)")->required();
  sock_opts(move);
  auto* swap = app.add_subcommand("swap", "replace a failed card of a partition (marks it failed first)");
  swap->add_option("name", name)->required();
  swap->add_option("--failed", failed)->required();
  swap->add_option("--spare", spare, "the replacement (default: the lowest free spare, else healthy card)");
  sock_opts(swap);
  auto* health = app.add_subcommand("health", "set a card's health");
  health->add_option("card", card)->required();
  health->add_option("state", health_text)->required()->check(CLI::IsMember({"healthy", "spare", "failed"}));
  sock_opts(health);
  unsigned pool_cards = 16, pool_ports = 4;
  auto* pool = app.add_subcommand("pool-spec", "print a pool topology (YAML) for npo-emud --topology");
  pool->add_option("--cards", pool_cards, "cards")->required();
  pool->add_option("--ports", pool_ports, "ports per card (= switches)")->required();
  for (auto* s : {create, destroy, list, move, swap, health})
    s->add_flag("--json-reply", as_json, "print the JSON reply");
  if (auto rc = npo::tools::parse_command_line(app, argc, argv, "npo-fabric")) return *rc;

  if (serve->parsed()) return npo::tools::fabric::serve(so);
  if (pool->parsed()) {
    auto spec = npo::generate_fabric(npo::FabricKind::kPool, pool_cards, {.pool_ports = pool_ports});
    if (!spec) return npo::tools::fail("npo-fabric", spec.error());
    std::fputs(npo::to_yaml(*spec).c_str(), stdout);
    return 0;
  }
  if (socket.empty()) {
    if (emud_dir.empty()) {
      if (const char* d = std::getenv("NPO_EMUD_DIR")) emud_dir = d;
    }
    if (emud_dir.empty()) {
      std::fprintf(stderr, "npo-fabric: give --socket PATH or --emud DIR (or set NPO_EMUD_DIR)\n");
      return npo::tools::kExitUsage;
    }
    socket = (std::filesystem::path(emud_dir) / "npo-fabric.sock").string();
  }
  json req;
  if (create->parsed()) {
    req = {{"op", "create"}, {"name", name}};
    if (!shape.empty()) req["shape"] = shape;
    if (!cards_text.empty()) {
      auto cards = parse_card_list(cards_text);
      if (!cards) return npo::tools::fail("npo-fabric", cards.error()), npo::tools::kExitUsage;
      req["cards"] = *cards;
    }
    if (shape.empty() && cards_text.empty()) {
      std::fprintf(stderr, "npo-fabric: create: give --cards or --shape\n");
      return npo::tools::kExitUsage;
    }
  } else if (destroy->parsed()) {
    req = {{"op", "destroy"}, {"name", name}};
  } else if (list->parsed()) {
    req = {{"op", "list"}};
  } else if (move->parsed()) {
    req = {{"op", "move"}, {"card", card}, {"to", to}};
  } else if (swap->parsed()) {
    req = {{"op", "swap"}, {"name", name}, {"failed", failed}};
    if (spare) req["spare"] = *spare;
  } else if (health->parsed()) {
    req = {{"op", "health"}, {"card", card}, {"health", health_text}};
  }
  return call(socket, req, as_json);
}
