// SPDX-License-Identifier: Apache-2.0
#include "fabric_service.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/json_request.hpp"
#include "npo/hal/topology_plan.hpp"

namespace npo::tools {

namespace {
using nlohmann::json;

/// An unsigned field of `j` below 2^32. Throws std::invalid_argument naming it.
std::uint32_t u32(const json& j, const char* key) {
  if (!j.contains(key)) throw std::invalid_argument(fmt::format("missing field '{}'", key));
  const auto& v = j.at(key);
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > 0xffffffffu)
    throw std::invalid_argument(fmt::format("field '{}': an unsigned 32-bit number", key));
  return static_cast<std::uint32_t>(v.get<std::uint64_t>());
}
}  // namespace

FabricService::FabricService(std::shared_ptr<emu::Emulator> emulator) : emu_(std::move(emulator)) {
  for (auto& s : emu::EmulatedOcs::open_all(emu_)) {
    order_.emplace_back(s->name());
    switches_.emplace(std::string(s->name()), std::move(s));
  }
}

std::string FabricService::handle(std::string_view line) {
  auto parsed = parse_request(line);
  if (!parsed) return error_reply(parsed.error());
  const json& req = *parsed;
  try {
    const auto op = req.at("op").get<std::string>();
    auto find_switch = [&]() -> emu::EmulatedOcs* {
      if (!req.contains("switch") || !req.at("switch").is_string()) throw std::invalid_argument("missing 'switch'");
      const auto it = switches_.find(req.at("switch").get<std::string>());
      return it == switches_.end() ? nullptr : it->second.get();
    };
    if (op == "switches") {
      json out = json::array();
      for (const auto& n : order_) out.push_back({{"name", n}, {"radix", switches_.at(n)->radix()}});
      return json{{"switches", out}}.dump();
    }
    if (op == "cross_connects") {
      auto* s = find_switch();
      if (s == nullptr) return error_reply(Code::kNotFound, fmt::format("no switch '{}'", req.at("switch").dump()));
      auto xc = s->cross_connects();
      if (!xc) return error_reply(xc.error());
      json out = json::array();
      for (const auto& [a, b] : *xc) out.push_back({a, b});
      return json{{"switch", s->name()}, {"cross_connects", out}}.dump();
    }
    if (op == "apply") {
      auto* s = find_switch();
      if (s == nullptr) return error_reply(Code::kNotFound, fmt::format("no switch '{}'", req.at("switch").dump()));
      if (!req.contains("changes") || !req.at("changes").is_array())
        return error_reply(Code::kInvalidArgument, "apply: 'changes' is an array");
      std::vector<OcsChange> changes;
      for (const auto& c : req.at("changes")) {
        if (!c.is_object() || !c.contains("kind") || !c.at("kind").is_string())
          return error_reply(Code::kInvalidArgument,
                             "apply: each change is {\"kind\":\"connect|disconnect\",\"a\",\"b\"}");
        const auto kind = c.at("kind").get<std::string>();
        if (kind != "connect" && kind != "disconnect")
          return error_reply(Code::kInvalidArgument, fmt::format("apply: unknown kind '{}'", kind));
        changes.push_back(
            {kind == "connect" ? OcsChange::Kind::kConnect : OcsChange::Kind::kDisconnect, u32(c, "a"), u32(c, "b")});
      }
      if (auto r = s->apply(changes); !r) return error_reply(r.error());  // checked before any port moves
      if (say_) say_(fmt::format("fabric apply switch={} changes={}", s->name(), changes.size()));
      return json{{"ok", true}, {"applied", changes.size()}}.dump();
    }
    if (op == "set_partition") {
      const auto card = u32(req, "card"), id = u32(req, "id");
      if (auto r = emu_->set_partition(card, id); !r) return error_reply(r.error());
      if (say_) say_(fmt::format("fabric partition card={} id={}", card, id));
      return json{{"ok", true}}.dump();
    }
    if (op == "partition") {
      const auto card = u32(req, "card");
      auto p = emu_->partition(card);
      if (!p) return error_reply(p.error());
      return json{{"card", card}, {"partition", *p}}.dump();
    }
    if (op == "routes") {
      const auto card = u32(req, "card");
      auto r = emu_->routes(card);
      if (!r) return error_reply(r.error());
      json out = json::array();
      for (const auto& [f, v] : *r) out.push_back({{"fabric_id", f}, {"port_mask", v & 0xffffu}});
      return json{{"card", card}, {"routes", out}}.dump();
    }
    if (op == "cards") {
      json out = json::array();
      for (std::uint32_t c = 0; c < emu_->card_count(); ++c) {
        out.push_back({{"index", c},
                       {"fabric_id", fabric_id_of(c)},
                       {"partition", emu_->partition(c).value_or(0)},
                       {"removed", emu_->removed(c).value_or(false)}});
      }
      return json{{"cards", out}}.dump();
    }
    return error_reply(
        Code::kInvalidArgument,
        fmt::format("unknown op '{}' (switches, cross_connects, apply, set_partition, partition, cards, routes)", op));
  } catch (const std::exception& e) {
    return error_reply(Code::kInvalidArgument, e.what());
  }
}

Result<std::unique_ptr<LineServer>> start_fabric_service(std::shared_ptr<emu::Emulator> emulator,
                                                         const std::filesystem::path& socket,
                                                         std::function<void(const std::string&)> say) {
  auto service = std::make_shared<FabricService>(std::move(emulator));
  service->set_log(say);
  return LineServer::start(
      socket, [service](std::string_view line) { return service->handle(line); }, std::move(say));
}

}  // namespace npo::tools
