// SPDX-License-Identifier: Apache-2.0
// npo-fabric serve: the fabric manager daemon over npo-emud's fabric socket.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "common/json_request.hpp"
#include "common/line_server.hpp"
#include "common/output.hpp"
#include "fabric.hpp"
#include "npo/emu/remote_fabric.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/topology_file.hpp"
#include "npo/hal/topology_gen.hpp"

namespace npo::tools::fabric {

namespace {
using nlohmann::json;

void say(const std::string& line) {
  std::fputs(fmt::format("npo-fabric: {}\n", line).c_str(), stdout);
  std::fflush(stdout);
}

json partition_json(const Partition& p) {
  json links = json::array();
  for (const auto& l : p.links) links.push_back({l.a, l.b, l.port});
  return {{"name", p.name}, {"id", p.id}, {"shape", p.shape}, {"cards", p.cards}, {"links", links}};
}

CardHealth health_of(std::string_view s, bool& ok) {
  ok = true;
  if (s == "healthy") return CardHealth::kHealthy;
  if (s == "spare") return CardHealth::kSpare;
  if (s == "failed") return CardHealth::kFailed;
  ok = false;
  return CardHealth::kHealthy;
}
}  // namespace

json change_json(const PartitionChange& c, double wall_ms) {
  json ops = json::array(), added = json::array(), removed = json::array(), ids = json::array();
  for (const auto& s : c.changes) ops.push_back({{"switch", s.switch_name}, {"change", ocs_change_text(s.change)}});
  for (const auto& l : c.added) added.push_back({l.a, l.b, l.port});
  for (const auto& l : c.removed) removed.push_back({l.a, l.b, l.port});
  for (const auto& x : c.ids) ids.push_back({{"card", x.card}, {"id", x.id}});
  return {{"what", c.what},
          {"seq", c.seq},
          {"switch_ops", ops},
          {"added", added},
          {"removed", removed},
          {"ids", ids},
          {"switch_ms", static_cast<double>(c.switch_ns) / 1e6},
          {"links_up_ms", static_cast<double>(c.links_up_ns) / 1e6},
          {"wall_ms", wall_ms}};
}

namespace {
/// Waits until every card of the partitions holding a card of `touched` routes to exactly the
/// other live cards of its partition. Returns the wait in ms, or nullopt on timeout.
std::optional<double> wait_routes(PartitionManager& m, RouteSource& rs, const std::set<std::uint32_t>& touched,
                                  int timeout_ms) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    bool ok = true;
    auto cards = rs.cards();
    if (!cards) return std::nullopt;
    for (const auto& p : m.list()) {
      if (std::none_of(p.cards.begin(), p.cards.end(), [&](std::uint32_t c) { return touched.contains(c); })) continue;
      for (const auto c : p.cards) {
        if (c >= cards->size() || (*cards)[c].second) continue;  // removed: routed around
        std::set<std::uint32_t> want;
        for (const auto o : p.cards) {
          if (o != c && o < cards->size() && !(*cards)[o].second) want.insert((*cards)[o].first);
        }
        auto r = rs.routes(c);
        if (!r || std::set<std::uint32_t>(r->begin(), r->end()) != want) ok = false;
        if (!ok) break;
      }
      if (!ok) break;
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ok) return ms;
    if (ms > timeout_ms) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}
}  // namespace

std::string handle(PartitionManager& m, std::string_view line, RouteSource* routes, int route_timeout_ms) {
  auto parsed = parse_request(line);
  if (!parsed) return error_reply(parsed.error());
  const json& req = *parsed;
  try {
    const auto op = req.at("op").get<std::string>();
    const auto t0 = std::chrono::steady_clock::now();
    auto done = [&](Result<PartitionChange> r) {
      if (!r) return error_reply(r.error());
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      say(fmt::format("{}: {} switch operations, {} links added, {} removed, {:.1f} ms", r->what, r->changes.size(),
                      r->added.size(), r->removed.size(), ms));
      json change = change_json(*r, ms);
      std::set<std::uint32_t> touched;
      for (const auto& l : r->added) touched.insert({l.a, l.b});
      for (const auto& l : r->removed) touched.insert({l.a, l.b});
      if (routes != nullptr && op != "destroy" && !touched.empty()) {
        if (const auto w = wait_routes(m, *routes, touched, route_timeout_ms)) {
          change["routes_ms"] = *w;
          say(fmt::format("{}: routes inside every touched partition after {:.1f} ms more", r->what, *w));
        } else {
          change["routes"] = "pending";
          say(fmt::format("{}: routes not programmed within {} ms (is npo-emud running with --manage-links?)", r->what,
                          route_timeout_ms));
        }
      }
      return json{{"ok", true}, {"change", change}}.dump();
    };
    if (op == "list") {
      json parts = json::array(), health = json::object();
      for (const auto& p : m.list()) parts.push_back(partition_json(p));
      for (std::uint32_t c = 0; c < m.pool_cards(); ++c) {
        if (m.health(c) != CardHealth::kHealthy) health[std::to_string(c)] = std::string(card_health_name(m.health(c)));
      }
      return json{
          {"partitions", parts}, {"health", health}, {"pool_cards", m.pool_cards()}, {"pool_ports", m.pool_ports()}}
          .dump();
    }
    if (op == "create") {
      const auto name = req.at("name").get<std::string>();
      auto cards = req.value("cards", std::vector<std::uint32_t>{});
      std::string shape = req.value("shape", std::string{});
      if (shape.empty()) {
        if (cards.empty()) return error_reply(Code::kInvalidArgument, "create: give a shape or cards");
        shape = fmt::format("ring:{}", cards.size());  // cards alone: a ring over them
      }
      return done(m.create(name, shape, cards));
    }
    if (op == "destroy") return done(m.destroy(req.at("name").get<std::string>()));
    if (op == "move") return done(m.move(req.at("card").get<std::uint32_t>(), req.value("to", std::string{})));
    if (op == "swap") {
      std::optional<std::uint32_t> spare;
      if (req.contains("spare") && !req.at("spare").is_null()) spare = req.at("spare").get<std::uint32_t>();
      if (req.contains("name")) {
        const auto p = m.find(req.at("name").get<std::string>());
        if (!p)
          return error_reply(Code::kNotFound,
                             fmt::format("swap: no partition '{}'", req.at("name").get<std::string>()));
        const auto failed = req.at("failed").get<std::uint32_t>();
        if (std::find(p->cards.begin(), p->cards.end(), failed) == p->cards.end())
          return error_reply(Code::kFailedPrecondition, fmt::format("swap: card {} is not in '{}'", failed, p->name));
      }
      const auto failed = req.at("failed").get<std::uint32_t>();
      if (spare) {  // refused before anything is marked
        const bool in_use = std::ranges::any_of(
            m.list(), [&](const Partition& p) { return std::ranges::find(p.cards, *spare) != p.cards.end(); });
        if (*spare >= m.pool_cards() || in_use || m.health(*spare) == CardHealth::kFailed) {
          return error_reply(Code::kFailedPrecondition,
                             fmt::format("swap: card {} is not a free healthy card (nothing changed)", *spare));
        }
      }
      const CardHealth before = failed < m.pool_cards() ? m.health(failed) : CardHealth::kHealthy;
      if (before != CardHealth::kFailed) {  // the CLI's swap marks it failed first
        if (auto r = m.set_health(failed, CardHealth::kFailed); !r) return error_reply(r.error());
      }
      auto r = m.swap(failed, spare);
      if (!r && before != CardHealth::kFailed) (void)m.set_health(failed, before);  // refused: as it was
      return done(std::move(r));
    }
    if (op == "health") {
      bool ok = false;
      const auto h = health_of(req.at("health").get<std::string>(), ok);
      if (!ok) return error_reply(Code::kInvalidArgument, "health: healthy, spare or failed");
      const auto card = req.at("card").get<std::uint32_t>();
      if (auto r = m.set_health(card, h); !r) return error_reply(r.error());
      say(fmt::format("health {} {}", card, card_health_name(h)));
      return json{{"ok", true}}.dump();
    }
    return error_reply(Code::kInvalidArgument,
                       fmt::format("unknown op '{}' (create, destroy, list, move, swap, health)", op));
  } catch (const std::exception& e) {
    return error_reply(Code::kInvalidArgument, fmt::format("bad request: {}", e.what()));
  }
}

namespace {
/// RouteSource over npo-emud's fabric socket ({"op":"routes"}, {"op":"cards"}).
class RemoteRoutes final : public RouteSource {
 public:
  explicit RemoteRoutes(emu::RemoteFabric& f) : f_(f) {}
  Result<std::vector<std::uint32_t>> routes(std::uint32_t card) override {
    auto line = f_.request(json{{"op", "routes"}, {"card", card}}.dump());
    if (!line) return std::unexpected(line.error());
    const json j = json::parse(*line, nullptr, false);
    if (j.is_discarded() || !j.contains("routes")) return fail(Code::kInternal, "routes: a malformed reply");
    std::vector<std::uint32_t> out;
    for (const auto& e : j.at("routes")) out.push_back(e.value("fabric_id", 0u));
    return out;
  }
  Result<std::vector<std::pair<std::uint32_t, bool>>> cards() override {
    auto c = f_.cards();
    if (!c) return std::unexpected(c.error());
    std::vector<std::pair<std::uint32_t, bool>> out;
    for (const auto& x : *c) out.emplace_back(x.fabric_id, x.removed);
    return out;
  }

 private:
  emu::RemoteFabric& f_;
};
}  // namespace

int serve(const ServeOptions& o) {
  sigset_t sigs = block_termination_signals();
  const auto t0 = std::chrono::steady_clock::now();
  auto remote = emu::RemoteFabric::open(o.emud_dir);
  if (!remote) return fail("npo-fabric", remote.error());
  auto cards = (*remote)->cards();
  if (!cards) return fail("npo-fabric", "cards", cards.error());
  const auto switches = (*remote)->switches();
  Result<FabricSpec> spec = o.topology.empty()
                                ? generate_fabric(FabricKind::kPool, static_cast<unsigned>(cards->size()),
                                                  {.pool_ports = static_cast<unsigned>(switches.size())})
                                : load_fabric_spec(o.topology);
  if (!spec) return fail("npo-fabric", "pool", spec.error());
  // Observer view of the cards for the link waits: register reads only (mode=ro); npo-emud
  // --manage-links trains the ports the switches light.
  std::unique_ptr<System> sys;
  if (!o.no_wait) {
    auto s = System::open(fmt::format("emu-remote:{}?mode=ro", o.emud_dir));
    if (!s) return fail("npo-fabric", "open the cards (emu-remote mode=ro)", s.error());
    sys = std::move(*s);
  }
  PartitionOptions po;
  po.journal = o.journal;
  po.system = sys.get();
  po.enforcer = remote->get();
  po.link_timeout_ns = static_cast<std::uint64_t>(o.link_timeout_s * 1e9);
  po.link_poll_ns = 10'000'000;
  auto m = PartitionManager::open(*spec, switches, po);
  if (!m) return fail("npo-fabric", m.error());
  const auto& rr = (*m)->rebuild_report();
  const double open_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  say(
      fmt::format("rebuild: {} journal records{}, {} partitions, {} recovered, {} restored, {} foreign, {} IDs set, "
                  "rebuild {:.1f} ms, start {:.1f} ms{}",
                  rr.records, rr.torn_tail ? " (torn tail cut)" : "", (*m)->list().size(), rr.recovered.size(),
                  rr.restored.size(), rr.foreign.size(), rr.ids_set, static_cast<double>(rr.wall_ns) / 1e6, open_ms,
                  rr.interrupted ? "; interrupted: " + *rr.interrupted : ""));
  const std::filesystem::path sock =
      o.socket.empty() ? std::filesystem::path(o.emud_dir) / "npo-fabric.sock" : std::filesystem::path(o.socket);
  PartitionManager& mgr = **m;
  RemoteRoutes rsrc(**remote);
  auto server = LineServer::start(
      sock, [&mgr, &rsrc](std::string_view line) { return handle(mgr, line, &rsrc); }, say);
  if (!server) return fail("npo-fabric", "CLI socket", server.error());
  say(fmt::format("ready pool_cards={} pool_ports={} socket={} pid={}", mgr.pool_cards(), mgr.pool_ports(),
                  sock.string(), ::getpid()));
  int sig = 0;
  while (sigwait(&sigs, &sig) != 0) {
  }
  say("stopping");
  server->reset();
  return 0;
}

}  // namespace npo::tools::fabric
