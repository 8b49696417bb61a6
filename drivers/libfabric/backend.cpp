// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: backend choice and the process-wide state -- the in-process System, card
// counts per npo-emud, endpoint numbers per card (docs/libfabric.md "Backend").
#include "provider.hpp"

namespace npo::fi {

BackendChoice choose_backend() {
  BackendChoice c;
  if (const char* v = env("NPO_FI_BACKEND")) {
    c.uri = v;
  } else if (const char* b = env("NPO_BACKEND")) {
    c.uri = b;
  } else {
    struct stat st {};
    if (::stat("/run/npo-emud", &st) == 0 && S_ISDIR(st.st_mode)) {
      c.uri = "emu-remote:/run/npo-emud";
    } else {
      c.uri = "vfio:all";
    }
  }
  constexpr std::string_view kRemote = "emu-remote:";
  if (std::string_view(c.uri).starts_with(kRemote)) {
    c.remote = true;
    std::string rest = c.uri.substr(kRemote.size());
    c.dir = rest.substr(0, rest.find('?'));
  }
  return c;
}

// Created on first use, deleted by cleanup() (libfabric's fi_fini, before it unloads the
// module): no static destructor, whose order against fi_fini at exit is not defined.
std::atomic<Shared*> g_shared{nullptr};
Shared& shared() {
  Shared* s = g_shared.load(std::memory_order_acquire);
  if (s) return *s;
  auto* fresh = new Shared;
  if (g_shared.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *s;
}

void configure_logging_locked(Shared& s) {
  if (s.logging_configured) return;
  s.logging_configured = true;
  log::Options o;
  o.level = env("NPO_LOG_LEVEL") ? std::string(env("NPO_LOG_LEVEL")) : std::string("off");
  (void)log::configure(o);
}

// Opens (once) the process-wide System of an in-process backend and brings the fabric up.
Result<std::shared_ptr<System>> local_system_locked(Shared& s, const std::string& uri) {
  if (s.local && s.local_uri == uri) return s.local;
  if (!s.local_error.empty() && s.local_uri == uri) return fail(Code::kUnavailable, s.local_error);
  s.local_uri = uri;
  auto sys = System::open(uri);
  if (!sys) {
    s.local_error = sys.error().to_string();
    return std::unexpected(sys.error());
  }
  std::shared_ptr<System> p(std::move(*sys));
  if (p->device_count() > 1 && std::string_view(uri).starts_with("emu")) {
    auto up = bring_up_fabric(*p);
    if (!up) {
      s.local_error = up.error().to_string();
      return std::unexpected(up.error());
    }
  }
  s.local = p;
  return p;
}

// Number of cards the chosen backend offers; 0 when nothing is reachable.
std::size_t count_cards(const BackendChoice& b) {
  auto& s = shared();
  std::lock_guard lk(s.mu);
  configure_logging_locked(s);
  if (b.remote) {
    if (auto it = s.remote_cards.find(b.dir); it != s.remote_cards.end()) return it->second;
    struct stat st {};
    if (::stat(b.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    auto sys = System::open("emu-remote:" + b.dir + "?mode=ro");
    const std::size_t n = sys ? (*sys)->device_count() : 0;
    if (n) s.remote_cards[b.dir] = n;
    return n;
  }
  if (std::string_view(b.uri).starts_with("vfio")) {
    // Real cards: no VFIO group, no card (cheap, quiet check before opening anything).
    struct stat st {};
    if (::stat("/dev/vfio", &st) != 0) return 0;
  }
  auto sys = local_system_locked(s, b.uri);
  return sys ? (*sys)->device_count() : 0;
}

}  // namespace npo::fi
