// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: backend choice and the process-wide state -- the in-process System, card
// counts per npo-emud, endpoint numbers per card (docs/libfabric.md "Backend").
#include <fcntl.h>
#include <signal.h>

#include <charconv>

#include "provider.hpp"

namespace npo::fi {

BackendChoice choose_backend() {
  BackendChoice c;
  if (const char* v = param_str(Param::kBackend)) {
    c.uri = v;
    c.origin = "FI_NPO_BACKEND";
  } else if (const char* b = env("NPO_BACKEND")) {
    c.uri = b;
    c.origin = "NPO_BACKEND";
  } else {
    struct stat st {};
    if (::stat("/run/npo-emud", &st) == 0 && S_ISDIR(st.st_mode)) {
      c.uri = "emu-remote:/run/npo-emud";
    } else {
      c.uri = "vfio:all";
    }
    // set but empty: the user asked for something; the default is used (count_cards says so)
    if (param_present(Param::kBackend)) c.origin = "FI_NPO_BACKEND";
  }
  constexpr std::string_view kRemote = "emu-remote:";
  if (std::string_view(c.uri).starts_with(kRemote)) {
    c.remote = true;
    std::string rest = c.uri.substr(kRemote.size());
    const auto q = rest.find('?');
    c.dir = rest.substr(0, q);
    if (q != std::string::npos) c.query = rest.substr(q + 1);
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

namespace {
// The card count of the last npo-emud enumerated, for domain_open_failed: read without s.mu,
// which its caller may hold.
std::atomic<std::size_t> g_daemon_cards{0};

// Says why the backend offers no card: FI_LOG warn always; once on stderr when FI_NPO_BACKEND
// chose it (the user wants this provider; libfabric's default log level hides warn).
void no_cards(const BackendChoice& b, const std::string& why) {
  std::string what = b.origin.empty() ? "the default backend " + b.uri : b.origin + "=" + b.uri;
  if (b.origin == "FI_NPO_BACKEND" && !param_str(Param::kBackend))
    what = "FI_NPO_BACKEND is empty; the default " + b.uri;
  const std::string line = "npo: no cards: " + what + ": " + why;
  if (b.origin == "FI_NPO_BACKEND") {
    notice_once("backend:" + b.uri, line);
  } else {
    warn(FI_LOG_CORE, line);
  }
}

// Ranks of this parallel job (its world size), 0 outside one.
unsigned job_ranks() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"}) {
    if (const char* v = env(var)) {
      unsigned n = 0;
      std::from_chars(v, v + std::strlen(v), n);
      return n;
    }
  }
  return 0;
}
// Ranks of this job on this node, 0 when unknown.
unsigned local_ranks() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = env(var)) {
      unsigned n = 0;
      std::from_chars(v, v + std::strlen(v), n);
      return n;
    }
  }
  return 0;
}

// An in-process emulator (emu:...) inside a job of several ranks: every rank would get its own
// private emulator, whose cards no other rank can reach (the job would fail seconds later on a
// refused window). Non-empty: why the provider offers no card then.
std::string private_emulator_in_job(const BackendChoice& b) {
  if (!std::string_view(b.uri).starts_with("emu:")) return {};
  const unsigned n = job_ranks();
  if (n <= 1) return {};
  return "an in-process emulator is private to each process, and this job has " + std::to_string(n) +
         " ranks that could not reach each other's cards: share one emulator with `npo-emud --topology " + b.uri +
         " --socket-dir DIR` and FI_NPO_BACKEND=emu-remote:DIR (docs/libfabric.md \"Backend\")";
}

// The cards of the npo-emud serving `dir`, counted from its sockets DIR/card-K.sock without
// connecting (docs/spec/emud-protocol.md §1): a connection would make the daemon attach a
// read-only observer per card and process. The daemon is alive while the pid in its lock file
// DIR/npo-emud.lock runs (the lock itself is not tried: holding it even briefly would refuse a
// daemon starting that moment). 0 with `why` set when nothing serves the directory.
std::size_t count_daemon_cards(const std::string& dir, std::string& why) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    why = "no directory " + dir + " (is npo-emud running? start it with `npo-emud --topology emu:mesh8 --socket-dir " +
          dir + "`)";
    return 0;
  }
  const std::string lock = dir + "/npo-emud.lock";
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = "no npo-emud serves " + dir + " (no " + lock +
          "; start it with `npo-emud --topology emu:mesh8 --socket-dir " + dir + "`)";
    return 0;
  }
  std::array<char, 32> buf{};
  const ssize_t got = ::read(fd, buf.data(), buf.size() - 1);
  ::close(fd);
  long pid = 0;
  if (got > 0) std::from_chars(buf.data(), buf.data() + got, pid);
  if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
    why = "npo-emud at " + dir + " is gone (pid " + std::to_string(pid) + " of " + lock +
          " is not running); restart the daemon";
    return 0;
  }
  std::size_t n = 0;
  for (;; ++n) {
    const std::string sock = dir + "/card-" + std::to_string(n) + ".sock";
    if (::stat(sock.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) break;
  }
  if (n == 0) why = "npo-emud at " + dir + " (pid " + std::to_string(pid) + ") serves no card socket (yet)";
  return n;
}
}  // namespace

// Why the emu-remote options `query` (k=v&k=v) cannot pass through to the domains' cards, or ""
// when they can: doorbell=shadow|socket and engine=local|daemon (docs/libfabric.md "Backend").
std::string bad_pass_through(std::string_view query) {
  bool local = false, socket = false;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    local = local || kv == "engine=local";
    socket = socket || kv == "doorbell=socket";
    if (kv == "doorbell=shadow" || kv == "doorbell=socket" || kv == "engine=local" || kv == "engine=daemon") continue;
    if (kv.starts_with("doorbell=")) return "?" + std::string(kv) + " is neither ?doorbell=shadow nor ?doorbell=socket";
    if (kv.starts_with("engine=")) return "?" + std::string(kv) + " is neither ?engine=local nor ?engine=daemon";
    return "the provider takes no ?" + std::string(kv) +
           " (it opens every card of the daemon as domain npoK itself; list one card with FI_NPO_CARD=K; only "
           "?doorbell=shadow|socket and ?engine=local|daemon pass through)";
  }
  if (local && socket) {
    return "?engine=local needs ?doorbell=shadow (a rank's own engines order their doorbells through the shadow "
           "page); with ?doorbell=socket the daemon runs the engines";
  }
  return {};
}

// Number of cards the chosen backend offers; 0 when nothing is reachable.
std::size_t count_cards(const BackendChoice& b) {
  auto& s = shared();
  std::lock_guard lk(s.mu);
  configure_logging_locked(s);
  if (b.remote) {
    // Only the doorbell and engine options pass through (each domain opens
    // emu-remote:DIR?card=K&QUERY); which cards and how to attach are the provider's.
    if (const std::string bad = bad_pass_through(b.query); !bad.empty()) {
      no_cards(b, bad);
      return 0;
    }
    if (auto it = s.remote_cards.find(b.dir); it != s.remote_cards.end()) return it->second;
    std::string why;
    const std::size_t n = count_daemon_cards(b.dir, why);
    if (n) {
      s.remote_cards[b.dir] = n;
      g_daemon_cards.store(n, std::memory_order_relaxed);
    } else {
      no_cards(b, why);
    }
    return n;
  }
  if (std::string_view(b.uri).starts_with("vfio")) {
    // Real cards: no VFIO group, no card (cheap, quiet check before opening anything).
    struct stat st {};
    if (::stat("/dev/vfio", &st) != 0) {
      no_cards(b,
               "no /dev/vfio on this host (no card bound to vfio-pci; for the emulator see docs/libfabric.md "
               "\"Backend\")");
      return 0;
    }
  }
  if (const std::string why = private_emulator_in_job(b); !why.empty()) {
    no_cards(b, why);
    if (b.origin != "FI_NPO_BACKEND") notice_once("backend:" + b.uri, "npo: no cards: " + b.uri + ": " + why);
    return 0;
  }
  auto sys = local_system_locked(s, b.uri);
  if (!sys) {
    no_cards(b, sys.error().to_string());
    return 0;
  }
  return (*sys)->device_count();
}

std::optional<unsigned> named_card(std::size_t n, const BackendChoice& b) {
  auto c = param_int(Param::kCard, 0, 65535);
  if (!c) return std::nullopt;
  if (static_cast<std::size_t>(*c) >= n) {
    notice_once("card:" + std::to_string(*c), "npo: FI_NPO_CARD=" + std::to_string(*c) + " but " + b.uri + " has " +
                                                  std::to_string(n) + " cards (npo0..npo" + std::to_string(n - 1) +
                                                  "): fi_getinfo lists none");
  }
  return static_cast<unsigned>(*c);
}

std::optional<unsigned> launcher_card(std::size_t n) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* r = env(var)) {
      unsigned rank = 0;
      std::from_chars(r, r + std::strlen(r), rank);
      return rank % static_cast<unsigned>(n);
    }
  }
  return std::nullopt;
}

std::string remote_card_uri(const BackendChoice& b, unsigned k) {
  return "emu-remote:" + b.dir + "?card=" + std::to_string(k) + (b.query.empty() ? std::string() : "&" + b.query);
}

Result<std::shared_ptr<System>> remote_card_locked(Shared& s, const BackendChoice& b, unsigned k) {
  const std::string uri = remote_card_uri(b, k);
  if (auto held = s.remote_sys[uri].lock()) return held;
  auto sys = System::open(uri);
  if (!sys) return std::unexpected(sys.error());
  std::shared_ptr<System> p(std::move(*sys));
  s.remote_sys[uri] = p;
  return p;
}

namespace {
// "card K is open by pid P (...)" (docs/spec/emud-protocol.md §3): P, or "" for another error.
std::string holder_pid(const Error& e) {
  constexpr std::string_view kMark = " is open by pid ";
  const std::string& m = e.message();
  const auto at = m.find(kMark);
  if (at == std::string::npos) return {};
  const auto from = at + kMark.size();
  const auto end = m.find_first_not_of("0123456789", from);
  return m.substr(from, end == std::string::npos ? std::string::npos : end - from);
}
}  // namespace

std::optional<unsigned> claim_card(const BackendChoice& b, std::size_t n, unsigned first) {
  auto& s = shared();
  std::lock_guard lk(s.mu);
  if (s.claimed && s.claim_dir == b.dir && *s.claimed < n) return s.claimed;
  std::string held;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned k = static_cast<unsigned>((first + i) % n);
    auto sys = remote_card_locked(s, b, k);
    if (sys) {
      s.claim_dir = b.dir;
      s.claimed = k;
      s.claim = *sys;
      return k;
    }
    const std::string pid = holder_pid(sys.error());
    if (pid.empty()) {
      notice_once("claim:" + b.dir, "npo: fi_getinfo: cannot open card " + std::to_string(k) + " of npo-emud at " +
                                        b.dir + ": " + sys.error().message());
      return std::nullopt;
    }
    held += (held.empty() ? "" : ", ") + ("npo" + std::to_string(k)) + " by pid " + pid;
  }
  std::string line = "npo: no free card: all " + std::to_string(n) + " cards of npo-emud at " + b.dir +
                     " are held by other processes (" + held + ")";
  const unsigned local = local_ranks();
  if (local > n) {
    line += "; this job runs " + std::to_string(local) + " ranks on this node but there are only " + std::to_string(n) +
            " cards: run at most " + std::to_string(n) + " ranks per node";
  } else {
    line += "; one process drives a card at a time: wait for one to end, or start npo-emud with more cards";
  }
  notice_once("claim-all:" + b.dir, line);
  return std::nullopt;
}

int domain_open_failed(const BackendChoice& b, unsigned card, const Error& e) {
  const std::string name = "npo" + std::to_string(card);
  std::string line = "npo: fi_domain " + name + ": cannot open card " + std::to_string(card) + " of " +
                     (b.remote ? "npo-emud at " + b.dir : b.uri) + ": " + e.message();
  const bool held = e.message().find(" is open by pid ") != std::string::npos;
  if (held) {
    const std::size_t n = g_daemon_cards.load(std::memory_order_relaxed);
    const unsigned local = local_ranks();
    if (n && local > n) {
      line += "; this job runs " + std::to_string(local) + " ranks on this node but there are only " +
              std::to_string(n) + " cards (one process per card; local rank K drives card K mod " + std::to_string(n) +
              "): run at most " + std::to_string(n) + " ranks per node";
    } else if (n) {
      line += "; the daemon has " + std::to_string(n) +
              " cards, each served to one process at a time: another process (job) holds this one";
    }
  }
  notice_once("domain", line);
  return -fi_errno_of(e);
}

}  // namespace npo::fi
