// SPDX-License-Identifier: Apache-2.0
// SIGBUS guard for unsealed client memory (sigbus_guard.hpp). The table is a fixed array of
// lock-free slots: the signal handler only reads atomics and calls mmap, both safe there.
#include "server/sigbus_guard.hpp"

#include <sys/mman.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <mutex>

namespace npo::emu::server {

namespace {

struct Slot {
  std::atomic<bool> taken{false};
  std::atomic<std::uintptr_t> start{0};  ///< 0: not (yet / any more) guarding
  std::atomic<std::size_t> len{0};
  std::atomic<bool> hit{false};
};

std::array<Slot, kGuardSlots> g_slots;
struct sigaction g_previous {};
std::once_flag g_once;
bool g_installed = false;

void on_sigbus(int sig, siginfo_t* info, void* uctx) {
  const auto a = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (auto& s : g_slots) {
    const std::uintptr_t start = s.start.load(std::memory_order_acquire);
    if (start == 0 || a < start || a - start >= s.len.load(std::memory_order_acquire)) continue;
    // The client shrank its memfd under this mapping: put private zero pages in its place
    // (same address, so the faulting access retries and succeeds) and remember it.
    void* p = ::mmap(reinterpret_cast<void*>(start), s.len.load(std::memory_order_acquire), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p != MAP_FAILED) {
      s.hit.store(true, std::memory_order_release);
      return;
    }
    break;  // cannot repair: behave as without the guard
  }
  // Not ours: hand over to the previous disposition.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, uctx);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
    return;
  }
  // Default action: reinstate it; returning re-runs the access, which faults again and dies.
  ::signal(SIGBUS, SIG_DFL);
}

}  // namespace

bool install_sigbus_guard() noexcept {
  std::call_once(g_once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    g_installed = ::sigaction(SIGBUS, &sa, &g_previous) == 0;
  });
  return g_installed;
}

int guard_mapping(void* addr, std::size_t len) noexcept {
  for (int i = 0; i < kGuardSlots; ++i) {
    Slot& s = g_slots[static_cast<std::size_t>(i)];
    bool expected = false;
    if (!s.taken.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
    s.hit.store(false, std::memory_order_relaxed);
    s.len.store(len, std::memory_order_relaxed);
    s.start.store(reinterpret_cast<std::uintptr_t>(addr), std::memory_order_release);
    return i;
  }
  return -1;
}

bool unguard_mapping(int slot) noexcept {
  if (slot < 0 || slot >= kGuardSlots) return false;
  Slot& s = g_slots[static_cast<std::size_t>(slot)];
  s.start.store(0, std::memory_order_release);
  const bool hit = s.hit.exchange(false, std::memory_order_acq_rel);
  s.taken.store(false, std::memory_order_release);
  return hit;
}

}  // namespace npo::emu::server
