// SPDX-License-Identifier: Apache-2.0
// Scripted faults: kinds, the one validator, scenario loading (docs/topology.md "Scenarios").
#include "scenario.hpp"

#include <cmath>

#include <fmt/format.h>

#include "npo/fw/regs.hpp"
#include "npo/hal/topology_file.hpp"
#include "system.hpp"

namespace npo::emu {

namespace regs = fw::regs;

namespace {
constexpr FaultKind kKinds[] = {FaultKind::kIommuFault,     FaultKind::kEngineHang,     FaultKind::kCompletionError,
                                FaultKind::kMailboxTimeout, FaultKind::kMailboxCorrupt, FaultKind::kSurpriseRemoval,
                                FaultKind::kBerRamp,        FaultKind::kLaneLoss,       FaultKind::kFlapStorm,
                                FaultKind::kModuleRemoval,  FaultKind::kTrainingTimeout};

bool is_link_fault(FaultKind k) {
  return k == FaultKind::kBerRamp || k == FaultKind::kLaneLoss || k == FaultKind::kFlapStorm ||
         k == FaultKind::kModuleRemoval || k == FaultKind::kTrainingTimeout;
}
}  // namespace

std::string_view fault_name(FaultKind k) noexcept {
  switch (k) {
    case FaultKind::kIommuFault: return "iommu_fault";
    case FaultKind::kEngineHang: return "engine_hang";
    case FaultKind::kCompletionError: return "completion_error";
    case FaultKind::kMailboxTimeout: return "mailbox_timeout";
    case FaultKind::kMailboxCorrupt: return "mailbox_corrupt";
    case FaultKind::kSurpriseRemoval: return "surprise_removal";
    case FaultKind::kBerRamp: return "ber_ramp";
    case FaultKind::kLaneLoss: return "lane_loss";
    case FaultKind::kFlapStorm: return "flap_storm";
    case FaultKind::kModuleRemoval: return "module_removal";
    case FaultKind::kTrainingTimeout: return "training_timeout";
  }
  return "unknown";
}

Result<FaultKind> parse_fault_kind(std::string_view name) {
  for (auto k : kKinds) {
    if (fault_name(k) == name) return k;
  }
  std::string list;
  for (auto k : kKinds) list += fmt::format("{}{}", list.empty() ? "" : ", ", fault_name(k));
  return fail(Code::kInvalidArgument, fmt::format("unknown fault kind '{}' (accepted: {})", name, list));
}

FaultTargets FaultTargets::of(const FabricSpec& plan) {
  FaultTargets t;
  t.ports_of.resize(plan.cards);
  for (std::uint32_t c = 0; c < plan.cards; ++c) t.ports_of[c] = plan.ports_of(c);
  return t;
}

FaultTargets FaultTargets::of(const SystemConfig& cfg) {
  FaultTargets t;
  t.ports_of.assign(cfg.num_cards, cfg.card.num_ports);
  for (std::size_t i = 0; i < cfg.per_card.size() && i < t.ports_of.size(); ++i)
    t.ports_of[i] = cfg.per_card[i].num_ports;
  return t;
}

std::optional<FaultProblem> fault_problem(const Fault& f, const FaultTargets& targets) {
  const auto name = fault_name(f.kind);
  const std::size_t cards = targets.ports_of.size();
  auto out_of_range = [](std::string field, std::string text) {
    return FaultProblem{Code::kOutOfRange, std::move(field), std::move(text)};
  };
  auto invalid = [](std::string field, std::string text) {
    return FaultProblem{Code::kInvalidArgument, std::move(field), std::move(text)};
  };
  if (f.card >= cards) {
    return out_of_range("card", cards == 0 ? fmt::format("card {}: the system has no card", f.card)
                                           : fmt::format("card {} outside 0..{}", f.card, cards - 1));
  }
  if (f.engine && *f.engine >= regs::kNumEngines) {
    return out_of_range("engine", fmt::format("engine {} outside 0..{}", *f.engine, regs::kNumEngines - 1));
  }
  if (f.queue && *f.queue >= regs::kQueuesPerEngine) {
    return out_of_range("queue", fmt::format("queue {} outside 0..{}", *f.queue, regs::kQueuesPerEngine - 1));
  }
  const unsigned nports = targets.ports_of[f.card];
  if (f.port && *f.port >= nports) {
    return out_of_range("port",
                        fmt::format("port {} beyond card {} ({} ports: 0..{})", *f.port, f.card, nports, nports - 1));
  }
  if (f.lane && *f.lane >= regs::kLanesPerPort) {
    return out_of_range("lane", fmt::format("{} outside 0..{}", *f.lane, regs::kLanesPerPort - 1));
  }
  if (f.count == 0) return invalid("count", "must be >= 1");
  if (!std::isfinite(f.value)) return invalid("value", fmt::format("{} must be finite", f.value));
  if (is_link_fault(f.kind) && !f.port) return invalid("port", fmt::format("{} needs a port", name));
  if (f.kind == FaultKind::kLaneLoss && !f.lane) return invalid("lane", fmt::format("{} needs a lane", name));
  if ((f.kind == FaultKind::kEngineHang || f.kind == FaultKind::kCompletionError) && !f.engine) {
    return invalid("engine", fmt::format("{} needs an engine", name));
  }
  if (f.kind == FaultKind::kBerRamp && !(f.value > 0.0 && f.value < 0.5)) {
    return invalid("value", fmt::format("(final pre-FEC BER) {} must be in (0, 0.5)", f.value));
  }
  return std::nullopt;
}

Result<std::vector<Fault>> faults_of_entries(std::span<const FabricFault> entries, const FaultTargets& targets) {
  std::vector<Fault> out;
  out.reserve(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    auto kind = parse_fault_kind(e.kind);
    if (!kind) return fail(Code::kInvalidArgument, fmt::format("faults[{}].kind: {}", i, kind.error().message()));
    const Fault f{e.at_ns, *kind, e.card, e.engine, e.queue, e.port, e.lane, e.count, e.value, e.duration_ns};
    if (const auto p = fault_problem(f, targets)) {
      return fail(Code::kInvalidArgument, fmt::format("faults[{}].{}: {}", i, p->field, p->text));
    }
    out.push_back(f);
  }
  return out;
}

Result<std::vector<Fault>> faults_of_plan(const FabricSpec& plan) {
  return faults_of_entries(plan.faults, FaultTargets::of(plan));
}

Result<void> check_scenario(const FabricSpec& plan) {
  auto f = faults_of_plan(plan);
  if (!f) return std::unexpected(f.error());
  return {};
}

// ==== Emulator: faults and scenarios ==========================================================

Result<void> Emulator::inject(const Fault& fault) {
  if (const auto p = fault_problem(fault, FaultTargets::of(impl_->cfg))) {
    return fail(p->code, fmt::format("fault {}: {}: {}", fault_name(fault.kind), p->field, p->text));
  }
  EmulatorImpl* s = impl_.get();
  s->sched.schedule_at(fault.at_ns, [s, fault](std::uint64_t) { s->fire(fault); });
  return {};
}

Result<void> Emulator::load_scenario_text(std::string_view text) {
  auto sc = parse_fabric_scenario(text);
  if (!sc) return std::unexpected(sc.error());
  auto faults = faults_of_entries(sc->faults, FaultTargets::of(impl_->cfg));
  if (!faults) return std::unexpected(std::move(Error(faults.error())).prefixed("scenario"));
  for (const auto& f : *faults) {
    if (auto r = inject(f); !r) return r;
  }
  return {};
}

Result<void> Emulator::load_scenario_file(const std::filesystem::path& path) {
  auto sc = load_fabric_scenario(path);
  if (!sc) return std::unexpected(sc.error());
  auto faults = faults_of_entries(sc->faults, FaultTargets::of(impl_->cfg));
  if (!faults) {
    return std::unexpected(std::move(Error(faults.error())).prefixed(fmt::format("{}: scenario", path.string())));
  }
  for (const auto& f : *faults) {
    if (auto r = inject(f); !r) return r;
  }
  return {};
}

}  // namespace npo::emu
