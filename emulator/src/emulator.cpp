// SPDX-License-Identifier: Apache-2.0
// The emulated system: cards in one memfd of HBM, the fabric's cables, clock, workers,
// fault firing and the event log. URIs: config.cpp; fault validation and scenarios: scenario.cpp.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "npo/hal/log.hpp"
#include "system.hpp"

namespace npo::emu {

namespace regs = fw::regs;

// ==== EmulatorImpl ==========================================================================

EmulatorImpl::EmulatorImpl(SystemConfig c)
    : cfg(std::move(c)),
      sched(cfg.clock),
      workers(std::clamp(cfg.workers, 1u, 4u), 50'000, cfg.inline_doorbells),
      rng(cfg.seed) {}

EmulatorImpl::~EmulatorImpl() {
  sched.stop();
  workers.stop();
  cards.clear();
  if (hbm_base != nullptr) ::munmap(hbm_base, hbm_total);
  if (memfd >= 0) ::close(memfd);
  for (int fd : card_memfds) ::close(fd);
}

Result<void> EmulatorImpl::init() {
  if (cfg.num_cards < 1 || cfg.num_cards > 1024) {
    return fail(Code::kInvalidArgument, fmt::format("emulator: {} cards; must be 1..1024", cfg.num_cards));
  }
  // Per-card overrides (topology files): HBM slots are sized for the largest card.
  if (!cfg.per_card.empty() && cfg.per_card.size() != cfg.num_cards) {
    return fail(Code::kInvalidArgument,
                fmt::format("emulator: per_card has {} entries for {} cards", cfg.per_card.size(), cfg.num_cards));
  }
  std::uint64_t hbm_max = cfg.card.hbm_bytes;
  std::vector<unsigned> ports_of(cfg.num_cards, cfg.card.num_ports);
  for (std::size_t i = 0; i < cfg.per_card.size(); ++i) {
    hbm_max = std::max(hbm_max, cfg.per_card[i].hbm_bytes);
    ports_of[i] = cfg.per_card[i].num_ports;
  }
  // The system as a topology plan: one validator (sizes, HBM, ports, cables, switches) and the
  // graph module's light paths wire the cards.
  if (auto r = fabric.build(plan_of(cfg)); !r) return r;
  // All cards' HBM lives in one memfd so a window can be handed to another process as
  // (fd, offset). Pages are touched only when used.
  hbm_stride = (hbm_max + 0x1fffff) & ~std::uint64_t{0x1fffff};
  hbm_total = hbm_stride * cfg.num_cards;
  if (cfg.hbm_fd_per_card) {
    // One memfd per card, mapped side by side: an fd handed to one card's client reaches that
    // card's HBM only (npo-emud).
    void* p = ::mmap(nullptr, hbm_total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return fail_errno(errno, fmt::format("emulator: reserve {} bytes of HBM", hbm_total));
    hbm_base = static_cast<std::byte*>(p);
    for (std::uint32_t i = 0; i < cfg.num_cards; ++i) {
      const int fd = ::memfd_create("npo-emu-hbm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      if (fd < 0) return fail_errno(errno, "emulator: memfd_create for HBM");
      card_memfds.push_back(fd);
      // Sealed: the owner that maps it cannot shrink it under the daemon (a SIGBUS here).
      if (::ftruncate(fd, static_cast<off_t>(hbm_stride)) != 0 ||
          ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        return fail_errno(errno, fmt::format("emulator: HBM memfd of {} bytes (ftruncate, seal)", hbm_stride));
      }
      if (::mmap(hbm_base + i * hbm_stride, hbm_stride, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
                 fd, 0) == MAP_FAILED) {
        return fail_errno(errno, fmt::format("emulator: mmap HBM of card {}", i));
      }
    }
  }
  if (!cfg.hbm_fd_per_card) {
    memfd = ::memfd_create("npo-emu-hbm", MFD_CLOEXEC);
    if (memfd < 0) return fail_errno(errno, "emulator: memfd_create for HBM");
    if (::ftruncate(memfd, static_cast<off_t>(hbm_total)) != 0) {
      return fail_errno(errno, fmt::format("emulator: ftruncate HBM memfd to {} bytes", hbm_total));
    }
    void* p = ::mmap(nullptr, hbm_total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, memfd, 0);
    if (p == MAP_FAILED) return fail_errno(errno, fmt::format("emulator: mmap {} bytes of HBM", hbm_total));
    hbm_base = static_cast<std::byte*>(p);
  }
  auto fs = FabricState::create(cfg.num_cards, cfg.hbm_fd_per_card);
  if (!fs) return fail(fs.error().code(), fmt::format("emulator: {}", fs.error().message()));
  fabric_state = std::move(*fs);
  partition_of = std::make_unique<std::atomic<std::uint32_t>[]>(cfg.num_cards);
  if (cfg.hbm_fd_per_card) {
    hbm_windows = std::make_unique<HbmWindows>(hbm_base, hbm_stride, card_memfds, *fabric_state,
                                               static_cast<std::uint32_t>(::getpid()));
  }
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

void EmulatorImpl::wait_mailboxes_idle(std::uint64_t cap_ns) const noexcept {
  if (mailbox_inflight.load() == 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(cap_ns);
  for (unsigned i = 0; mailbox_inflight.load() != 0; ++i) {
    if (std::chrono::steady_clock::now() >= until) return;
    if (i < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
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

Result<void> Emulator::set_partition(std::uint32_t card, std::uint32_t id) {
  if (card >= impl_->cards.size()) {
    return fail(Code::kOutOfRange, fmt::format("card {} past the supernode's {} cards", card, impl_->cards.size()));
  }
  impl_->partition_of[card].store(id, std::memory_order_release);
  const std::uint32_t was = impl_->fabric_state->card(card).partition.exchange(id, std::memory_order_acq_rel);
  if (was != id) impl_->log(card, fmt::format("partition card={} id={} was={}", card, id, was));
  return {};
}

Result<std::uint32_t> Emulator::partition(std::uint32_t card) const {
  if (card >= impl_->cards.size()) {
    return fail(Code::kOutOfRange, fmt::format("card {} past the supernode's {} cards", card, impl_->cards.size()));
  }
  return impl_->partition_of[card].load(std::memory_order_acquire);
}

Result<std::vector<std::pair<std::uint32_t, std::uint32_t>>> Emulator::routes(std::uint32_t card) {
  if (card >= impl_->cards.size()) {
    return fail(Code::kOutOfRange, fmt::format("card {} past the supernode's {} cards", card, impl_->cards.size()));
  }
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  for (std::uint32_t f = 1; f < regs::kRouteEntries; ++f) {
    const auto v = static_cast<std::uint32_t>(impl_->cards[card]->bar0_read(regs::route_reg(f), 4));
    if ((v & 0x8000'0000u) != 0) out.emplace_back(f, v);
  }
  return out;
}

Result<bool> Emulator::removed(std::uint32_t card) const {
  if (card >= impl_->cards.size()) {
    return fail(Code::kOutOfRange, fmt::format("card {} past the supernode's {} cards", card, impl_->cards.size()));
  }
  return impl_->cards[card]->removed();
}

}  // namespace npo::emu
