// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the system -- cards, fabric, clock, workers, event log.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "card.hpp"
#include "fabric.hpp"
#include "hbm_windows.hpp"
#include "npo/emu/emulator.hpp"
#include "sched.hpp"
#include "shared_state.hpp"

namespace npo::emu {

class EmulatorImpl {
 public:
  explicit EmulatorImpl(SystemConfig cfg);
  ~EmulatorImpl();
  Result<void> init();
  /// The fd and offset another process maps to reach card `i`'s HBM.
  [[nodiscard]] std::pair<int, std::uint64_t> hbm_fd(std::uint32_t i) const noexcept {
    return card_memfds.empty() ? std::pair{memfd, i * hbm_stride} : std::pair{card_memfds[i], std::uint64_t{0}};
  }

  SystemConfig cfg;
  /// Every card's engine-visible state (shared_state.hpp), made before the cards: npo-emud
  /// shares it with the owners that run their cards' engines.
  std::unique_ptr<FabricState> fabric_state;
  Scheduler sched;
  WorkerPool workers;
  int memfd = -1;                ///< every card's HBM, unless cfg.hbm_fd_per_card
  std::vector<int> card_memfds;  ///< cfg.hbm_fd_per_card: card i's HBM alone
  std::byte* hbm_base = nullptr;
  std::uint64_t hbm_total = 0;
  std::uint64_t hbm_stride = 0;
  /// cfg.hbm_fd_per_card (npo-emud): every open window's range in a memfd of its own, so that
  /// an importer reaches that window alone (hbm_windows.hpp).
  std::unique_ptr<HbmWindows> hbm_windows;
  /// Each card's partition as fabric management set it (Emulator::set_partition). The copy in
  /// the shared engine state (CardState::partition) is what engines check; this one is the
  /// daemon's own, which no client can write: WINDOW_FD admits by it (spec §5.13).
  std::unique_ptr<std::atomic<std::uint32_t>[]> partition_of;
  std::vector<std::unique_ptr<Card>> cards;
  std::mt19937_64 rng;
  /// Mailbox requests rung and not yet handled by their card's firmware (Firmware). The
  /// virtual clock lets them finish before it moves emulated time (wait_mailboxes_idle): a
  /// firmware thread the OS did not run for a while (a loaded machine, sanitizers) must not
  /// turn into a mailbox timeout of emulated time.
  std::atomic<std::uint32_t> mailbox_inflight{0};
  /// Waits, in wall time, until mailbox_inflight is 0 or `cap_ns` passed.
  /// Thread-safety: any thread.
  void wait_mailboxes_idle(std::uint64_t cap_ns) const noexcept;
  /// Cables and optical switches (fabric.hpp); resolve_peer/channel_of read it.
  OpticalFabric fabric;

  /// Card by fabric ID, or null (card_index_of: fabric ID 0 maps beyond every system).
  Card* card_by_fabric_id(std::uint32_t fid) noexcept {
    const std::uint32_t i = card_index_of(fid);
    return i < cards.size() ? cards[i].get() : nullptr;
  }
  /// The card port at the far end of the light path from (card, port): a direct cable, or a
  /// path through optical-switch cross-connects (fabric.hpp). nullopt: no path.
  /// Thread-safety: any thread; the answer can change when a switch is reconfigured.
  [[nodiscard]] std::optional<PortRef> resolve_peer(std::uint32_t card, unsigned port) const;
  /// Channel parameters of the light path from (card, port): losses of every cable plus each
  /// switch's insertion loss, SNR penalties summed, dead lanes OR-ed; defaults when there is none.
  [[nodiscard]] ChannelParams channel_of(std::uint32_t card, unsigned port) const;
  void log(std::uint32_t card, const std::string& text);
  std::vector<std::string> log_lines() const;
  /// Arms a fault at its time.
  void fire(const Fault& f);

 private:
  mutable std::mutex log_mu_;
  std::vector<std::string> log_;
};

}  // namespace npo::emu
