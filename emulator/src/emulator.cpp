// SPDX-License-Identifier: Apache-2.0
// The emulated system: cards in one memfd of HBM, the fabric's cables, clock, workers,
// fault scheduling and the event log.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "npo/hal/log.hpp"
#include "npo/hal/units.hpp"
#include "system.hpp"

namespace npo::emu {

namespace regs = fw::regs;

// ==== URI ===================================================================================

namespace {

constexpr std::string_view kForms =
    "emu:mesh8 (8 cards, every pair cabled), emu:N (N = 1..1024 cards, no cables), emu:file=PATH (topology "
    "file); options "
    "?clock=virtual|realtime&seed=N&hbm=BYTES[K|M|G]&ports=N&workers=1..4&scenario=PATH";

Result<std::uint64_t> parse_u64(std::string_view s, std::string_view what) {
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) {
    return fail(Code::kInvalidArgument, fmt::format("emulator URI: bad {} '{}'", what, s));
  }
  return v;
}

}  // namespace

Result<SystemConfig> parse_uri(std::string_view rest) {
  SystemConfig c;
  bool from_file = false;
  std::string_view opts;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    opts = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (rest == "mesh8" || rest.empty()) {
    c.name = "mesh8";
    c.num_cards = 8;
    for (std::uint32_t a = 0; a < 8; ++a) {
      for (std::uint32_t b = a + 1; b < 8; ++b) {
        // Port p of card a leads to the p-th other card (skipping itself).
        c.cables.push_back(Cable{a, b - 1, b, a});
      }
    }
  } else if (rest.starts_with("file=")) {
    // A topology file (docs/topology.md); options below apply on top of it.
    const std::string_view path = rest.substr(5);
    if (path.empty()) return fail(Code::kInvalidArgument, "emulator URI 'emu:file=': needs a path");
    auto spec = load_fabric_spec(std::filesystem::path(std::string(path)));
    if (!spec) return std::unexpected(std::move(Error(spec.error())).prefixed("emulator URI 'emu:file='"));
    auto fc = system_config_from_spec(*spec);
    if (!fc) return std::unexpected(fc.error());
    c = std::move(*fc);
    c.name = std::string(rest);
    from_file = true;
  } else {
    auto n = parse_u64(rest, "card count");
    if (!n) {
      return fail(Code::kInvalidArgument,
                  fmt::format("unknown emulator URI 'emu:{}'; accepted forms: {}", rest, kForms));
    }
    if (*n < 1 || *n > 1024) {
      return fail(Code::kInvalidArgument, fmt::format("emulator URI 'emu:{}': the card count must be 1..1024", rest));
    }
    c.name = std::string(rest);
    c.num_cards = static_cast<unsigned>(*n);
  }
  std::set<std::string> seen_keys;
  while (!opts.empty()) {
    const auto amp = opts.find('&');
    const std::string_view kv = opts.substr(0, amp);
    opts = amp == std::string_view::npos ? std::string_view{} : opts.substr(amp + 1);
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos)
      return fail(Code::kInvalidArgument, fmt::format("emulator URI option '{}' lacks '=': {}", kv, kForms));
    const std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (!seen_keys.insert(std::string(k)).second) {
      return fail(Code::kInvalidArgument, fmt::format("emulator URI option '{}' given twice", k));
    }
    if (from_file && k == "ports") {
      return fail(Code::kInvalidArgument,
                  "emulator URI option 'ports' does not combine with file=: the topology file's cabling sets it");
    }
    if (k == "clock") {
      if (v == "virtual")
        c.clock = ClockMode::kVirtual;
      else if (v == "realtime")
        c.clock = ClockMode::kRealtime;
      else
        return fail(Code::kInvalidArgument,
                    fmt::format("emulator URI: clock must be virtual or realtime, got '{}'", v));
    } else if (k == "seed") {
      auto s = parse_u64(v, "seed");
      if (!s) return std::unexpected(s.error());
      c.seed = *s;
    } else if (k == "hbm") {
      auto s = parse_bytes(v);
      if (!s) return fail(Code::kInvalidArgument, fmt::format("emulator URI: bad hbm size: {}", s.error().message()));
      c.card.hbm_bytes = *s;
      for (auto& pc : c.per_card) pc.hbm_bytes = *s;  // file=: overrides every card's HBM
    } else if (k == "ports") {
      auto s = parse_u64(v, "port count");
      if (!s) return std::unexpected(s.error());
      c.card.num_ports = static_cast<unsigned>(*s);
    } else if (k == "workers") {
      auto s = parse_u64(v, "worker count");
      if (!s) return std::unexpected(s.error());
      if (*s < 1 || *s > 4)
        return fail(Code::kInvalidArgument, fmt::format("emulator URI: workers={} must be 1..4", *s));
      c.workers = static_cast<unsigned>(*s);
    } else if (k == "scenario") {
      c.scenario = std::string(v);
    } else {
      return fail(Code::kInvalidArgument, fmt::format("unknown emulator URI option '{}'; accepted: {}", k, kForms));
    }
  }
  return c;
}

// ==== Faults ================================================================================

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
  for (auto k :
       {FaultKind::kIommuFault, FaultKind::kEngineHang, FaultKind::kCompletionError, FaultKind::kMailboxTimeout,
        FaultKind::kMailboxCorrupt, FaultKind::kSurpriseRemoval, FaultKind::kBerRamp, FaultKind::kLaneLoss,
        FaultKind::kFlapStorm, FaultKind::kModuleRemoval, FaultKind::kTrainingTimeout}) {
    if (fault_name(k) == name) return k;
  }
  return fail(Code::kInvalidArgument,
              fmt::format("unknown fault kind '{}' (accepted: iommu_fault, engine_hang, completion_error, "
                          "mailbox_timeout, mailbox_corrupt, surprise_removal, ber_ramp, lane_loss, flap_storm, "
                          "module_removal, training_timeout)",
                          name));
}

// ==== EmulatorImpl ==========================================================================

EmulatorImpl::EmulatorImpl(SystemConfig c)
    : cfg(std::move(c)), sched(cfg.clock), workers(std::clamp(cfg.workers, 1u, 4u)), rng(cfg.seed) {}

EmulatorImpl::~EmulatorImpl() {
  sched.stop();
  workers.stop();
  cards.clear();
  if (hbm_base != nullptr) ::munmap(hbm_base, hbm_total);
  if (memfd >= 0) ::close(memfd);
}

Result<void> EmulatorImpl::init() {
  if (cfg.num_cards < 1 || cfg.num_cards > 1024) {
    return fail(Code::kInvalidArgument, fmt::format("emulator: {} cards; must be 1..1024", cfg.num_cards));
  }
  if (cfg.card.hbm_bytes < (1u << 20) || cfg.card.hbm_bytes % 4096 != 0 || cfg.card.hbm_bytes > (64ULL << 30)) {
    return fail(
        Code::kInvalidArgument,
        fmt::format("emulator: HBM size {} bytes; must be a multiple of 4 KiB in [1 MiB, 64 GiB]", cfg.card.hbm_bytes));
  }
  if (cfg.card.num_ports < 1 || cfg.card.num_ports > regs::kMaxPorts) {
    return fail(Code::kInvalidArgument,
                fmt::format("emulator: {} ports per card; must be 1..{}", cfg.card.num_ports, regs::kMaxPorts));
  }
  // Per-card overrides (topology files): same rules as `card`; HBM slots are sized for the largest.
  if (!cfg.per_card.empty() && cfg.per_card.size() != cfg.num_cards) {
    return fail(Code::kInvalidArgument,
                fmt::format("emulator: per_card has {} entries for {} cards", cfg.per_card.size(), cfg.num_cards));
  }
  std::uint64_t hbm_max = cfg.card.hbm_bytes;
  std::vector<unsigned> ports_of(cfg.num_cards, cfg.card.num_ports);
  for (std::size_t i = 0; i < cfg.per_card.size(); ++i) {
    const auto& pc = cfg.per_card[i];
    if (pc.hbm_bytes < (1u << 20) || pc.hbm_bytes % 4096 != 0 || pc.hbm_bytes > (64ULL << 30) || pc.num_ports < 1 ||
        pc.num_ports > regs::kMaxPorts) {
      return fail(Code::kInvalidArgument, fmt::format("emulator: card {}: HBM {} bytes / {} ports out of range", i,
                                                      pc.hbm_bytes, pc.num_ports));
    }
    hbm_max = std::max(hbm_max, pc.hbm_bytes);
    ports_of[i] = pc.num_ports;
  }
  if (auto r = fabric.build(cfg, ports_of); !r) return r;
  // All cards' HBM lives in one memfd so a window can be handed to another process as
  // (fd, offset). Pages are touched only when used.
  hbm_stride = (hbm_max + 0x1fffff) & ~std::uint64_t{0x1fffff};
  hbm_total = hbm_stride * cfg.num_cards;
  memfd = ::memfd_create("npo-emu-hbm", MFD_CLOEXEC);
  if (memfd < 0) return fail_errno(errno, "emulator: memfd_create for HBM");
  if (::ftruncate(memfd, static_cast<off_t>(hbm_total)) != 0) {
    return fail_errno(errno, fmt::format("emulator: ftruncate HBM memfd to {} bytes", hbm_total));
  }
  void* p = ::mmap(nullptr, hbm_total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, memfd, 0);
  if (p == MAP_FAILED) return fail_errno(errno, fmt::format("emulator: mmap {} bytes of HBM", hbm_total));
  hbm_base = static_cast<std::byte*>(p);
  cards.reserve(cfg.num_cards);
  for (std::uint32_t i = 0; i < cfg.num_cards; ++i) {
    const std::uint64_t serial = rng();
    cards.push_back(std::make_unique<Card>(*this, i, cfg.per_card.empty() ? cfg.card : cfg.per_card[i], serial,
                                           hbm_base + i * hbm_stride, i * hbm_stride));
  }
  // Every card port with a light path (direct cable or through switch cross-connects) gets
  // its module and far end; ports whose light ends at an idle switch port stay dark.
  for (std::uint32_t c = 0; c < cfg.num_cards; ++c) {
    for (unsigned port = 0; port < ports_of[c]; ++port) {
      if (const auto peer = fabric.resolve(c, port)) cards[c]->attach_cable(port, peer->card, peer->port);
    }
  }
  return {};
}

void EmulatorImpl::log(std::uint32_t card, const std::string& text) {
  std::string line = fmt::format("t={} card={} {}", sched.now_ns(), card, text);
  npo::log::get(npo::log::Subsystem::kEmulator).debug("{}", line);
  std::lock_guard lock(log_mu_);
  log_.push_back(std::move(line));
}

std::vector<std::string> EmulatorImpl::log_lines() const {
  std::lock_guard lock(log_mu_);
  return log_;
}

void EmulatorImpl::fire(const Fault& f) {
  Card& c = *cards[f.card];
  std::string where;
  if (f.engine) where += fmt::format(" engine={}", *f.engine);
  if (f.queue) where += fmt::format(" queue={}", *f.queue);
  if (f.port) where += fmt::format(" port={}", *f.port);
  if (f.lane) where += fmt::format(" lane={}", *f.lane);
  std::string extra;
  if (f.value != 0) extra += fmt::format(" value={:g}", f.value);
  if (f.duration_ns != 0) extra += fmt::format(" duration_ns={}", f.duration_ns);
  log(f.card, fmt::format("fault {}{} count={}{}", fault_name(f.kind), where, f.count, extra));
  switch (f.kind) {
    case FaultKind::kIommuFault: c.inject_iommu_faults(f.count); break;
    case FaultKind::kEngineHang: {
      const unsigned e = f.engine.value_or(0);
      for (unsigned q = 0; q < regs::kQueuesPerEngine; ++q) {
        if (f.queue && *f.queue != q) continue;
        const unsigned qi = e * regs::kQueuesPerEngine + q;
        c.queue(qi).inject_hang(sched.now_ns());
        // Watchdog: if the queue still has work and no progress after watchdog_ns, flag it.
        const std::uint32_t head = c.queue(qi).sq_head();
        sched.schedule_in(cfg.watchdog_ns, [this, &c, qi, head](std::uint64_t) {
          auto& qm = c.queue(qi);
          if (qm.hung() && qm.pending() && qm.sq_head() == head) {
            log(c.index(), fmt::format("watchdog engine_hang queue={}", qi));
            c.firmware().log_error({sched.now_ns(), 0x0101, 2, 1, qi, head, 0});
            c.set_error(regs::global::kErrEngineHang.mask());
          }
        });
      }
      break;
    }
    case FaultKind::kCompletionError: {
      const unsigned e = f.engine.value_or(0);
      for (unsigned q = 0; q < regs::kQueuesPerEngine; ++q) {
        if (f.queue && *f.queue != q) continue;
        c.queue(e * regs::kQueuesPerEngine + q).inject_completion_errors(f.count);
      }
      break;
    }
    case FaultKind::kMailboxTimeout: c.firmware().inject_timeout(f.count); break;
    case FaultKind::kMailboxCorrupt: c.firmware().inject_corrupt(f.count); break;
    case FaultKind::kSurpriseRemoval: c.remove(); break;
    case FaultKind::kBerRamp:
    case FaultKind::kLaneLoss:
    case FaultKind::kFlapStorm:
    case FaultKind::kModuleRemoval:
    case FaultKind::kTrainingTimeout: c.inject_link_fault(f); break;
  }
}

std::optional<PortRef> EmulatorImpl::resolve_peer(std::uint32_t card, unsigned port) const {
  return fabric.resolve(card, port);
}

ChannelParams EmulatorImpl::channel_of(std::uint32_t card, unsigned port) const { return fabric.channel(card, port); }

// ==== Emulator ==============================================================================

Emulator::Emulator(std::unique_ptr<EmulatorImpl> impl) : impl_(std::move(impl)) {}
Emulator::~Emulator() = default;

Result<std::shared_ptr<Emulator>> Emulator::create(const SystemConfig& config) {
  auto impl = std::make_unique<EmulatorImpl>(config);
  if (auto r = impl->init(); !r) return std::unexpected(r.error());
  std::shared_ptr<Emulator> emu(new Emulator(std::move(impl)));
  for (const auto& f : config.faults) {  // scripted faults of a topology file
    if (auto r = emu->inject(f); !r) return std::unexpected(std::move(Error(r.error())).prefixed("topology faults"));
  }
  if (!config.scenario.empty()) {
    if (auto r = emu->load_scenario_file(config.scenario); !r) return std::unexpected(r.error());
  }
  npo::log::get(npo::log::Subsystem::kEmulator)
      .info("emulator '{}' up: {} cards, {} MiB HBM each, {} cables, {} clock, seed {}", config.name, config.num_cards,
            config.card.hbm_bytes >> 20, config.cables.size(),
            config.clock == ClockMode::kVirtual ? "virtual" : "realtime", config.seed);
  return emu;
}

const SystemConfig& Emulator::config() const noexcept { return impl_->cfg; }
std::size_t Emulator::card_count() const noexcept { return impl_->cards.size(); }
Card& Emulator::card(std::size_t index) noexcept { return *impl_->cards[index]; }
std::uint64_t Emulator::now_ns() const noexcept { return impl_->sched.now_ns(); }

Result<void> Emulator::advance(std::uint64_t ns) {
  if (impl_->sched.mode() != ClockMode::kVirtual) {
    return fail(Code::kFailedPrecondition, "emulator: advance() needs the virtual clock (URI option clock=virtual)");
  }
  impl_->sched.advance(ns);
  return {};
}

namespace {
Result<void> validate_fault(const EmulatorImpl& s, const Fault& f) {
  if (f.card >= s.cards.size()) {
    return fail(Code::kOutOfRange,
                fmt::format("fault {}: card {} outside 0..{}", fault_name(f.kind), f.card, s.cards.size() - 1));
  }
  if (f.engine && *f.engine >= regs::kNumEngines) {
    return fail(Code::kOutOfRange,
                fmt::format("fault {}: engine {} outside 0..{}", fault_name(f.kind), *f.engine, regs::kNumEngines - 1));
  }
  if (f.queue && *f.queue >= regs::kQueuesPerEngine) {
    return fail(Code::kOutOfRange, fmt::format("fault {}: queue {} outside 0..{}", fault_name(f.kind), *f.queue,
                                               regs::kQueuesPerEngine - 1));
  }
  const unsigned nports = s.cfg.per_card.empty() ? s.cfg.card.num_ports : s.cfg.per_card[f.card].num_ports;
  if (f.port && *f.port >= nports) {
    return fail(Code::kOutOfRange,
                fmt::format("fault {}: port {} outside 0..{}", fault_name(f.kind), *f.port, nports - 1));
  }
  if (f.lane && *f.lane >= regs::kLanesPerPort) {
    return fail(Code::kOutOfRange,
                fmt::format("fault {}: lane {} outside 0..{}", fault_name(f.kind), *f.lane, regs::kLanesPerPort - 1));
  }
  if ((f.kind == FaultKind::kEngineHang || f.kind == FaultKind::kCompletionError) && !f.engine) {
    return fail(Code::kInvalidArgument, fmt::format("fault {} needs an engine", fault_name(f.kind)));
  }
  if (f.count == 0)
    return fail(Code::kInvalidArgument, fmt::format("fault {}: count must be >= 1", fault_name(f.kind)));
  // Link faults (emulator.hpp FaultKind kBerRamp .. kTrainingTimeout).
  const bool link = f.kind == FaultKind::kBerRamp || f.kind == FaultKind::kLaneLoss ||
                    f.kind == FaultKind::kFlapStorm || f.kind == FaultKind::kModuleRemoval ||
                    f.kind == FaultKind::kTrainingTimeout;
  if (link && !f.port) return fail(Code::kInvalidArgument, fmt::format("fault {} needs a port", fault_name(f.kind)));
  if (f.kind == FaultKind::kLaneLoss && !f.lane) {
    return fail(Code::kInvalidArgument, fmt::format("fault {} needs a lane", fault_name(f.kind)));
  }
  if (f.kind == FaultKind::kBerRamp && !(f.value > 0.0 && f.value < 0.5)) {
    return fail(Code::kInvalidArgument,
                fmt::format("fault {}: value (final pre-FEC BER) {} must be in (0, 0.5)", fault_name(f.kind), f.value));
  }
  return {};
}
}  // namespace

Result<void> Emulator::inject(const Fault& fault) {
  if (auto r = validate_fault(*impl_, fault); !r) return r;
  EmulatorImpl* s = impl_.get();
  s->sched.schedule_at(fault.at_ns, [s, fault](std::uint64_t) { s->fire(fault); });
  return {};
}

Result<void> Emulator::load_scenario_text(std::string_view text) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return fail(Code::kInvalidArgument, fmt::format("scenario: not YAML/JSON: {}", e.what()));
  }
  std::vector<Fault> faults;
  try {
    if (!root.IsMap()) return fail(Code::kInvalidArgument, "scenario: top level must be a map with 'faults'");
    const auto list = root["faults"];
    if (!list || !list.IsSequence()) return fail(Code::kInvalidArgument, "scenario: 'faults' must be a list");
    std::size_t i = 0;
    for (const auto& n : list) {
      auto bad = [i](std::string_view what) {
        return fail(Code::kInvalidArgument, fmt::format("scenario: faults[{}]: {}", i, what));
      };
      if (!n.IsMap()) return bad("entry must be a map");
      for (const auto& kv : n) {
        static constexpr std::string_view kKeys[] = {"at_ns",  "at_us",       "at_ms",       "kind",       "card",
                                                     "engine", "queue",       "port",        "lane",       "count",
                                                     "value",  "duration_ns", "duration_us", "duration_ms"};
        const auto key = kv.first.as<std::string>();
        if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
          return bad(fmt::format("unknown field '{}'", key));
        }
      }
      Fault f;
      if (n["at_ns"])
        f.at_ns = n["at_ns"].as<std::uint64_t>();
      else if (n["at_us"])
        f.at_ns = n["at_us"].as<std::uint64_t>() * 1'000;
      else if (n["at_ms"])
        f.at_ns = n["at_ms"].as<std::uint64_t>() * 1'000'000;
      else
        return bad("needs at_ns, at_us or at_ms");
      if (!n["kind"]) return bad("needs 'kind'");
      auto kind = parse_fault_kind(n["kind"].as<std::string>());
      if (!kind) return bad(kind.error().message());
      f.kind = *kind;
      if (!n["card"]) return bad("needs 'card'");
      f.card = n["card"].as<std::uint32_t>();
      if (n["engine"]) f.engine = n["engine"].as<unsigned>();
      if (n["queue"]) f.queue = n["queue"].as<unsigned>();
      if (n["port"]) f.port = n["port"].as<unsigned>();
      if (n["lane"]) f.lane = n["lane"].as<unsigned>();
      if (n["count"]) f.count = n["count"].as<std::uint32_t>();
      if (n["value"]) f.value = n["value"].as<double>();
      if (n["duration_ns"])
        f.duration_ns = n["duration_ns"].as<std::uint64_t>();
      else if (n["duration_us"])
        f.duration_ns = n["duration_us"].as<std::uint64_t>() * 1'000;
      else if (n["duration_ms"])
        f.duration_ns = n["duration_ms"].as<std::uint64_t>() * 1'000'000;
      if (auto r = validate_fault(*impl_, f); !r) return bad(r.error().message());
      faults.push_back(f);
      ++i;
    }
  } catch (const YAML::Exception& e) {
    return fail(Code::kInvalidArgument, fmt::format("scenario: bad value: {}", e.what()));
  }
  for (const auto& f : faults) {
    if (auto r = inject(f); !r) return r;
  }
  return {};
}

Result<void> Emulator::load_scenario_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return fail_errno(errno == 0 ? ENOENT : errno, fmt::format("scenario file '{}'", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  if (auto r = load_scenario_text(ss.str()); !r) {
    return std::unexpected(std::move(Error(r.error())).prefixed(path.string()));
  }
  return {};
}

std::vector<std::string> Emulator::event_log() const { return impl_->log_lines(); }

// ==== Optical switches ======================================================================

namespace {
/// Tells the cards whose light path changed: the new far end is attached, and an Up link
/// whose far end changed or went dark drops and retrains (Card::light_path_changed). Logged per changed port so replays
/// stay byte-identical.
void apply_fabric_changes(EmulatorImpl& s, std::string_view what, const std::vector<OpticalFabric::Change>& changes) {
  for (const auto& ch : changes) {
    if (ch.peer) {
      s.log(ch.port.card, fmt::format("fabric {} port={} light path now to card={} port={}", what, ch.port.port,
                                      ch.peer->card, ch.peer->port));
      s.cards[ch.port.card]->attach_cable(ch.port.port, ch.peer->card, ch.peer->port);
    } else {
      s.log(ch.port.card, fmt::format("fabric {} port={} light path now dark", what, ch.port.port));
    }
    s.cards[ch.port.card]->light_path_changed(ch.port.port);
  }
}
}  // namespace

Result<void> Emulator::connect(std::string_view name, unsigned a, unsigned b) {
  auto changes = impl_->fabric.connect(name, a, b);
  if (!changes) return std::unexpected(changes.error());
  apply_fabric_changes(*impl_, fmt::format("connect {}:{}-{}", name, a, b), *changes);
  return {};
}

Result<void> Emulator::disconnect(std::string_view name, unsigned port) {
  auto changes = impl_->fabric.disconnect(name, port);
  if (!changes) return std::unexpected(changes.error());
  apply_fabric_changes(*impl_, fmt::format("disconnect {}:{}", name, port), *changes);
  return {};
}

Result<std::vector<std::pair<unsigned, unsigned>>> Emulator::cross_connects(std::string_view name) const {
  return impl_->fabric.cross_connects(name);
}

}  // namespace npo::emu
