// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: backend choice and the process-wide state (hal_state.cpp).
#pragma once
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <rdma/providers/fi_prov.h>

#include "npo/hal/hal.hpp"

namespace npo::fi {

// ---- Backend choice and the process-wide state (hal_state.cpp) ---------------------------
struct BackendChoice {
  std::string uri;      // as configured
  bool remote = false;  // emu-remote:DIR (one System per card)
  std::string dir;      // remote: socket dir
  std::string query;    // remote: what followed '?' (only doorbell=shadow|socket; the provider opens each card)
  std::string origin;   // "FI_NPO_BACKEND", "NPO_BACKEND" or "" (the default)
};

/// The backend of this process: FI_NPO_BACKEND, else NPO_BACKEND, else emu-remote:/run/npo-emud
/// when that directory exists, else vfio:all (docs/libfabric.md "Backend").
BackendChoice choose_backend();
/// The card FI_NPO_CARD names (a bad value or one >= n is reported once), or nullopt
/// (docs/libfabric.md "Picking a card"). Call only when the hints name no domain.
std::optional<unsigned> named_card(std::size_t n, const BackendChoice& b);
/// Inside a parallel job (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, PMI_LOCAL_RANK,
/// SLURM_LOCALID) the local rank modulo n, the card this rank tries first; else nullopt.
std::optional<unsigned> launcher_card(std::size_t n);
/// "emu-remote:DIR?card=K[&QUERY]": card k of an npo-emud backend as a domain opens it.
std::string remote_card_uri(const BackendChoice& b, unsigned k);
/// fi_domain of card `card` failed with `e`: prints once per process one stderr line with the
/// reason (the HAL's message; for a held card also the card count and, when this node runs more
/// ranks than there are cards, that) and logs it (FI_LOG warn). Returns -errno for fi_domain.
/// Takes no lock of Shared: callable with s.mu held.
int domain_open_failed(const BackendChoice& b, unsigned card, const Error& e);

struct Shared {
  std::mutex mu;
  bool logging_configured = false;
  // in-process backends (emu:..., vfio:...): one System for the process, brought up once
  std::string local_uri;
  std::shared_ptr<System> local;
  std::string local_error;
  // emu-remote: card count per socket dir (enumerated read-only once)
  std::map<std::string, std::size_t> remote_cards;
  // endpoint numbers in use per card fabric ID (lanes)
  std::map<std::uint32_t, unsigned> ep_used;
  // emu-remote: the System of each card this process holds, by URI, shared by every domain on
  // that card (the daemon gives a card to one owner connection: a second System::open of it
  // from the same process would be refused); it closes with the last domain
  std::map<std::string, std::weak_ptr<System>> remote_sys;
  // emu-remote: the card fi_getinfo claimed for this process (claim_card), held as its owner
  // connection until cleanup() so that no other process takes it between getinfo and fi_domain
  std::string claim_dir;
  std::optional<unsigned> claimed;
  std::shared_ptr<System> claim;
};

/// The process-wide state, created on first use; cleanup() deletes it (g_shared).
extern std::atomic<Shared*> g_shared;
Shared& shared();
/// Opens (once) the process-wide System of an in-process backend and brings its fabric up.
/// Caller holds s.mu.
Result<std::shared_ptr<System>> local_system_locked(Shared& s, const std::string& uri);
/// The System of card `k` of an npo-emud backend, opened as this process's owner connection
/// once and shared by every domain of the process on that card (the daemon serves a card to
/// one owner connection). Caller holds s.mu. Errors: System::open's, e.g. kUnavailable "card K
/// is open by pid P ..." when another process holds the card.
Result<std::shared_ptr<System>> remote_card_locked(Shared& s, const BackendChoice& b, unsigned k);
/// Claims a free card of the npo-emud backend `b` (n cards) for this process: tries `first`,
/// then first+1, ... modulo n, and keeps the first one whose owner connection the daemon grants
/// (Shared::claim, until cleanup()); later calls return the same card. nullopt when every card
/// is held by another process or the daemon cannot be reached: said once on stderr (which
/// process holds which card) and at FI_LOG warn. Thread-safety: takes s.mu.
std::optional<unsigned> claim_card(const BackendChoice& b, std::size_t n, unsigned first);
/// Number of cards the backend offers; 0 when nothing is reachable (quickly; why is logged at
/// FI_LOG warn and, when FI_NPO_BACKEND chose the backend, said once on stderr). emu-remote:
/// counts the daemon's card sockets without connecting (docs/libfabric.md "Backend").
std::size_t count_cards(const BackendChoice& b);

}  // namespace npo::fi
