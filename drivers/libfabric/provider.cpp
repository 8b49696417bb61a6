// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the `npo` libfabric provider over npo-hal's public API (docs/libfabric.md).
//
// A core provider: FI_EP_DGRAM + FI_MSG (libfabric's ofi_rxd layers FI_EP_RDM + FI_TAGGED on
// it). One endpoint = one card. Each endpoint owns a receive ring in its card's HBM, exported
// as a window; the endpoint's address is that window's serialized handle plus the ring
// geometry. A send copies the payload into DMA-able host memory (staging), then the card
// writes it by remote DMA into the peer's ring slot, a fence, then the slot header. Progress
// (CQ reads) polls the card's completions and the own ring through the BAR aperture.
// Only fi_prov_ini is exported (npo-fi.map).
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include "fi_npo_ext.h"
#include "npo/hal/hal.hpp"

namespace npo::fi {
namespace {

// ---- Constants (docs/libfabric.md "Ring format") ------------------------------------------
constexpr std::size_t kMaxMsg = 4096;          // payload bytes per datagram
constexpr std::size_t kHdr = 64;               // slot header bytes
constexpr std::size_t kSlot = kHdr + kMaxMsg;  // one ring slot
constexpr std::size_t kCtrl = 4096;            // per-lane consumer counters (64 B each)
constexpr unsigned kDefaultLanes = 64;         // sender lanes per ring
constexpr unsigned kSlotsPerLane = 16;         // slots per lane
constexpr unsigned kEpsPerCard = 4;            // endpoints per card per process
constexpr unsigned kTxSize = 64;               // tx context depth (staging slots)
constexpr unsigned kRxSize = 256;              // posted receives
constexpr unsigned kIovLimit = 4;
constexpr std::uint32_t kHdrMagic = 0x46504f4e;   // "NOPF"
constexpr std::uint32_t kAddrMagic = 0x31414e50;  // "PNA1"
constexpr std::size_t kAddrLen = 48;              // fi_getname / fi_av_insert address bytes
constexpr std::uint64_t kCaps = FI_MSG | FI_SEND | FI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM;
constexpr auto kRefreshTimeout = std::chrono::milliseconds(200);

// Slot header, little-endian, at the start of a slot; written last (after the payload and a fence).
struct SlotHeader {
  std::uint64_t seq;    // lane sequence number of the message, 1-based; the "valid" mark
  std::uint32_t len;    // payload bytes
  std::uint32_t flags;  // bit0: data is valid (FI_REMOTE_CQ_DATA)
  std::uint64_t data;   // remote CQ data
  std::uint32_t magic;  // kHdrMagic
  std::uint32_t src_fabric_id;
  std::uint64_t sum;  // payload_sum() of the payload: a failed payload write is detected
  std::uint8_t pad[24];
};
constexpr std::uint32_t kFlagData = 1;  // data is valid
constexpr std::uint32_t kFlagSkip = 2;  // tombstone: the message of this seq was lost, skip the slot

// Checksum of a payload (64-bit multiply-xorshift over 8-byte words, length folded in). Not
// cryptographic: it tells a slot whose payload write failed (stale bytes) from a good one.
std::uint64_t payload_sum(const std::byte* p, std::size_t len) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ len;
  std::size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  std::uint64_t tail = 0;
  if (i < len) std::memcpy(&tail, p + i, len - i);
  h = (h ^ tail) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 29);
}
static_assert(sizeof(SlotHeader) == kHdr);

// CPU access to the ring in HBM (the BAR aperture), which the card writes by DMA while we
// poll it, as a CPU polls device-written memory: acquire load of the seq, release store of
// the consumer counter. ThreadSanitizer cannot see the card's side as synchronisation (the
// in-process emulator's engines are threads that memcpy into HBM), so under TSan these few
// accesses are left uninstrumented; everything else stays checked.
#if defined(__SANITIZE_THREAD__)
#define NPO_HW_ACCESS __attribute__((no_sanitize_thread, noinline))
NPO_HW_ACCESS std::uint64_t hw_load64(const std::byte* p) {
  return __atomic_load_n(reinterpret_cast<const volatile std::uint64_t*>(p), __ATOMIC_ACQUIRE);
}
NPO_HW_ACCESS void hw_store64(std::byte* p, std::uint64_t v) {
  __atomic_store_n(reinterpret_cast<volatile std::uint64_t*>(p), v, __ATOMIC_RELEASE);
}
NPO_HW_ACCESS void hw_copy(std::byte* dst, const std::byte* src, std::size_t n) {
  auto* vs = reinterpret_cast<const volatile std::byte*>(src);
  auto* vd = reinterpret_cast<volatile std::byte*>(dst);
  for (std::size_t i = 0; i < n; ++i) vd[i] = vs[i];
}
#else
std::uint64_t hw_load64(const std::byte* p) {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(const_cast<std::byte*>(p)))
      .load(std::memory_order_acquire);
}
void hw_store64(std::byte* p, std::uint64_t v) {
  std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(p)).store(v, std::memory_order_release);
}
void hw_copy(std::byte* dst, const std::byte* src, std::size_t n) { std::memcpy(dst, src, n); }
#endif

// Endpoint address: the window handle of the ring plus its geometry.
struct WireAddr {
  std::array<std::byte, WindowHandle::kSerializedSize> handle;
  std::uint16_t lanes;
  std::uint16_t slots;
  std::uint32_t magic;
};
static_assert(sizeof(WireAddr) == kAddrLen);

std::uint64_t ring_bytes(unsigned lanes) {
  const std::uint64_t b = kCtrl + std::uint64_t{lanes} * kSlotsPerLane * kSlot;
  return (b + 4095) & ~std::uint64_t{4095};
}
std::uint64_t slot_offset(unsigned lane, unsigned slots, std::uint64_t seq) {
  return kCtrl + (std::uint64_t{lane} * slots + (seq - 1) % slots) * kSlot;
}

char* dup(std::string_view s) {
  auto* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) {
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
  }
  return p;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

// ---- Backend choice and the shared System ----------------------------------------------
struct BackendChoice {
  std::string uri;      // as configured
  bool remote = false;  // emu-remote:DIR (one System per card)
  std::string dir;      // remote: socket dir
};

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
};
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

extern fi_provider g_provider;

// Logs through libfabric (FI_LOG_LEVEL=warn shows it), as every provider does.
void warn(fi_log_subsys sub, const std::string& msg) {
  if (fi_log_enabled(&g_provider, FI_LOG_WARN, sub))
    fi_log(&g_provider, FI_LOG_WARN, sub, "npo", __LINE__, "%s\n", msg.c_str());
}

// ---- Small helpers ------------------------------------------------------------------------
template <typename F>
struct Enosys;
template <typename R, typename... A>
struct Enosys<R (*)(A...)> {
  static R call(A...) { return static_cast<R>(-FI_ENOSYS); }
};
#define NPO_ENOSYS(S, m) ::npo::fi::Enosys<decltype(S::m)>::call

int fi_errno_of(OpStatus st) {
  switch (st) {
    case OpStatus::kRemoteUnreachable: return FI_EHOSTUNREACH;
    case OpStatus::kWindowInvalid:
    case OpStatus::kWindowKey:
    case OpStatus::kWindowRange:
    case OpStatus::kWindowRights:
    case OpStatus::kWindowRevoked: return FI_ECONNREFUSED;
    case OpStatus::kTimeout:
    case OpStatus::kAborted: return FI_ENODEV;
    default: return FI_EIO;
  }
}

// A status that says the fabric did not deliver (as opposed to a failure of the own card).
bool is_path_failure(OpStatus st) {
  switch (st) {
    case OpStatus::kRemoteUnreachable:
    case OpStatus::kWindowInvalid:
    case OpStatus::kWindowKey:
    case OpStatus::kWindowRange:
    case OpStatus::kWindowRights:
    case OpStatus::kWindowRevoked:
    case OpStatus::kFenceSkipped: return true;
    default: return false;
  }
}

int fi_errno_of(const Error& e) {
  switch (e.code()) {
    case Code::kUnavailable: return FI_ENODEV;
    case Code::kResourceExhausted: return FI_ENOMEM;
    case Code::kInvalidArgument: return FI_EINVAL;
    case Code::kNotFound: return FI_ENODATA;
    default: return FI_EIO;
  }
}

struct Ep;
struct Cq;
struct Eq;

// What a card-level fault does (docs/libfabric.md "Faults"): "report" puts it on the CQ (and
// the EQ) only; "abort" also ends the process with the message on stderr, so a parallel job
// whose runtime swallows core-provider errors (ofi_rxd retries for minutes) ends within
// seconds, naming the card. Default: abort inside a parallel job (a local-rank variable is
// set), report otherwise. NPO_FI_FAULT=report|abort overrides.
bool in_parallel_job() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"})
    if (env(var)) return true;
  return false;
}
bool abort_on_fault() {
  static const bool v = [] {
    if (const char* f = env("NPO_FI_FAULT")) return std::string_view(f) == "abort";
    return in_parallel_job();
  }();
  return v;
}
// A peer unreachable or its window refused for this long is a fault, not a transient (a link
// retrain or reroute under it is survived). NPO_FI_FAULT_MS overrides (default 5000 ms).
std::chrono::milliseconds fault_persistence() {
  if (const char* v = env("NPO_FI_FAULT_MS")) return std::chrono::milliseconds(std::max(0, std::atoi(v)));
  return std::chrono::milliseconds(5000);
}
// How often progress checks that the own card still answers (mailbox heartbeat).
constexpr auto kHeartbeatPeriod = std::chrono::seconds(1);

// Ports of `dev` with a module whose link is not up: "port 3 (down, neighbour fabric id 4)".
std::string down_ports(Device& dev) {
  std::string out;
  for (unsigned p = 0; p < dev.port_count(); ++p) {
    auto st = read_port(dev, p);
    if (!st || !st->module_present || st->link_up) continue;
    if (!out.empty()) out += ", ";
    out += "port " + std::to_string(p) + " down";
    if (st->neighbor_fabric_id) out += " (neighbour fabric id " + std::to_string(*st->neighbor_fabric_id) + ")";
  }
  return out;
}

// ---- Fabric -------------------------------------------------------------------------------
struct Fabric {
  fid_fabric fab{};
  BackendChoice backend;
};

// ---- EQ -----------------------------------------------------------------------------------
struct Eq {
  fid_eq eq{};
  std::mutex mu;
  struct Event {
    std::uint32_t event;
    std::vector<std::byte> bytes;
  };
  std::deque<Event> events;
  struct Err {
    fi_eq_err_entry entry;
    std::string msg;
  };
  std::deque<Err> errors;
  std::string last_msg;

  void push_error(fid_t fid, void* context, int err, std::string msg) {
    std::lock_guard lk(mu);
    Err e{};
    e.entry.fid = fid;
    e.entry.context = context;
    e.entry.err = err;
    e.entry.prov_errno = err;
    e.msg = std::move(msg);
    errors.push_back(std::move(e));
  }
};

// ---- Domain --------------------------------------------------------------------------------
struct Domain {
  fid_domain dom{};
  Fabric* fabric = nullptr;
  std::recursive_mutex mu;
  std::shared_ptr<System> sys;
  Device* dev = nullptr;
  unsigned card = 0;
  std::uint32_t fabric_id = 0;
  std::atomic<std::uint64_t> ops_ok{0}, ops_failed{0}, bytes_moved{0}, datagrams_dropped{0};
  std::atomic<unsigned> refs{0};  // AVs, CQs, EPs, MRs open on it
};

// ---- AV -------------------------------------------------------------------------------------
struct Av {
  fid_av av{};
  Domain* domain = nullptr;
  Eq* eq = nullptr;
  struct Entry {
    bool valid = false;
    WireAddr wire{};
    WindowHandle handle{};
  };
  std::vector<Entry> table;
  std::atomic<unsigned> refs{0};
};

// ---- CQ ------------------------------------------------------------------------------------
struct Cq {
  fid_cq cq{};
  Domain* domain = nullptr;
  fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
  std::size_t capacity = 0;
  int wait_fd = -1;
  bool signaled = false;
  struct Comp {
    void* op_context;
    std::uint64_t flags;
    std::size_t len;
    void* buf;
    std::uint64_t data;
  };
  std::deque<Comp> comps;
  struct Err {
    fi_cq_err_entry entry;
    std::string msg;
  };
  std::deque<Err> errors;
  std::string last_msg;
  std::vector<Ep*> eps;  // endpoints bound (progressed on read)
  unsigned empty_polls = 0;
  std::atomic<unsigned> refs{0};

  void push(const Comp& c) { comps.push_back(c); }
  void push_error(void* ctx, std::uint64_t flags, std::size_t len, std::size_t olen, int err, std::string msg) {
    Err e{};
    e.entry.op_context = ctx;
    e.entry.flags = flags;
    e.entry.len = len;
    e.entry.olen = olen;
    e.entry.err = err;
    e.entry.prov_errno = err;
    e.msg = std::move(msg);
    errors.push_back(std::move(e));
  }
  void progress();
};

// ---- Endpoint -----------------------------------------------------------------------------
struct Ep {
  fid_ep ep{};
  Domain* domain = nullptr;
  Av* av = nullptr;
  Cq* tx_cq = nullptr;
  Cq* rx_cq = nullptr;
  Eq* eq = nullptr;
  bool tx_selective = false, rx_selective = false;
  bool enabled = false;
  unsigned ep_no = 0;
  unsigned lanes = kDefaultLanes;
  unsigned my_lane = 0;  // lane this endpoint writes in every peer's ring

  // resources on the card
  HbmRange hbm{};
  std::unique_ptr<Window> window;
  std::unique_ptr<WindowMapping> map;
  std::unique_ptr<MemoryRegion> staging;
  std::unique_ptr<DmaQueue> queue;
  WireAddr wire{};
  std::vector<std::uint64_t> rx_consumed;                               // per lane: messages consumed
  std::vector<std::byte> rx_scratch = std::vector<std::byte>(kMaxMsg);  // a slot's payload, read once
  unsigned rx_lane_cursor = 0;
  bool fatal_reported = false;
  std::uint64_t dropped = 0;     // received datagrams lost to failed writes (tombstones, bad checksums)
  std::uint64_t dropped_tx = 0;  // sent datagrams the fabric did not deliver

  struct Rx {
    void* ctx;
    std::array<iovec, kIovLimit> iov;
    std::size_t count;
    std::uint64_t flags;
  };
  std::deque<Rx> rx;

  struct Tx {
    enum Kind { kSend, kRead } kind = kSend;
    OpHandle first = 0, last = 0;
    void* ctx = nullptr;
    bool completion = true;
    std::size_t len = 0;
    unsigned slot = 0;
    std::uint64_t cq_flags = 0;
    std::uint32_t dest_fabric = 0;
    std::uint64_t dest_key = 0;
    std::uint64_t seq = 0;
    bool header_failed = false;
    OpStatus worst = OpStatus::kOk;
    std::uint64_t info = 0;
    bool done = false;
  };
  std::deque<Tx> tx;
  std::vector<unsigned> free_slots;
  struct Dest {
    std::uint64_t next_seq = 1;
    std::uint64_t consumed = 0;
    std::optional<std::chrono::steady_clock::time_point> failing_since;  // first error of a run
    std::vector<std::uint64_t> holes;  // seqs whose header write failed: tombstones owed
  };
  std::chrono::steady_clock::time_point next_heartbeat = std::chrono::steady_clock::now() + kHeartbeatPeriod;
  std::unordered_map<std::uint64_t, Dest> dests;

  std::byte* staging_slot(unsigned s) { return staging->bytes().data() + std::size_t{s} * kSlot; }
  std::uint64_t staging_iova(unsigned s) const { return staging->iova() + std::uint64_t{s} * kSlot; }
  std::uint64_t readback_iova() const { return staging->iova() + std::uint64_t{kTxSize} * kSlot; }
  std::byte* readback() { return staging->bytes().data() + std::size_t{kTxSize} * kSlot; }

  std::string where() const {
    return "card " + std::to_string(domain->card) + " (npo" + std::to_string(domain->card) + ", fabric id " +
           std::to_string(domain->fabric_id) + ")";
  }
  void poll_dma();
  void poll_rx();
  void progress() {
    poll_dma();
    poll_rx();
    check_card();
  }
  void report_fatal(const std::string& msg, int err) {
    if (fatal_reported) return;
    fatal_reported = true;
    if (eq) eq->push_error(&ep.fid, ep.fid.context, err, msg);
    if (abort_on_fault()) {
      const std::string_view m = std::string_view(msg).starts_with("npo: ") ? std::string_view(msg).substr(5) : msg;
      std::fprintf(stderr, "npo: fatal: %.*s (NPO_FI_FAULT=report keeps the process running)\n",
                   static_cast<int>(m.size()), m.data());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  // A failed send to `dest_key`: fatal once that peer kept failing for fault_persistence().
  void send_failed(std::uint64_t dest_key, OpStatus st, const std::string& msg) {
    if (st == OpStatus::kTimeout || st == OpStatus::kAborted) {
      // the own queue was reset: the own card hung or was removed
      report_fatal(msg, FI_ENODEV);
      return;
    }
    auto it = dests.find(dest_key);
    if (it == dests.end()) return;
    const auto now = std::chrono::steady_clock::now();
    if (!it->second.failing_since) it->second.failing_since = now;
    if (now - *it->second.failing_since >= fault_persistence()) {
      std::string m =
          msg + " for " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(now - *it->second.failing_since).count()) +
          " ms";
      if (st == OpStatus::kRemoteUnreachable) {
        const std::string ports = down_ports(*domain->dev);
        if (!ports.empty()) m += "; links of " + where() + ": " + ports;
      }
      report_fatal(m, fi_errno_of(st));
    }
  }
  void send_ok(std::uint64_t dest_key) {
    auto it = dests.find(dest_key);
    if (it != dests.end()) it->second.failing_since.reset();
  }
  // Once per kHeartbeatPeriod: the own card still answers its mailbox, else fatal.
  void check_card() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_heartbeat) return;
    next_heartbeat = now + kHeartbeatPeriod;
    auto hb = domain->dev->heartbeat();
    if (!hb && hb.error().code() == Code::kUnavailable)
      report_fatal(where() + " is gone: " + hb.error().to_string(), FI_ENODEV);
  }
};

void Cq::progress() {
  for (Ep* e : eps) e->progress();
}

// Reaps the card's completions and finishes sends (CQ entries) and remote reads.
void Ep::poll_dma() {
  if (!queue) return;
  std::array<OpCompletion, 64> out;
  for (;;) {
    const std::size_t n = queue->poll(out);
    for (std::size_t i = 0; i < n; ++i) {
      const OpCompletion& c = out[i];
      if (c.status == OpStatus::kOk) {
        domain->ops_ok.fetch_add(1, std::memory_order_relaxed);
        domain->bytes_moved.fetch_add(c.info, std::memory_order_relaxed);
      } else {
        domain->ops_failed.fetch_add(1, std::memory_order_relaxed);
      }
      auto it =
          std::find_if(tx.begin(), tx.end(), [&](const Tx& t) { return c.handle >= t.first && c.handle <= t.last; });
      if (it == tx.end()) continue;
      if (c.status != OpStatus::kOk && it->worst == OpStatus::kOk) {
        it->worst = c.status;
        it->info = c.info;
      }
      if (c.handle != it->last) continue;
      if (c.status != OpStatus::kOk && it->kind == Tx::kSend) {
        // the header never landed: the peer waits for this seq; owe it a tombstone
        if (auto d = dests.find(it->dest_key); d != dests.end()) d->second.holes.push_back(it->seq);
      }
      it->done = true;
      if (it->kind == Tx::kSend) {
        free_slots.push_back(it->slot);
        Cq* cq = tx_cq;
        if (it->worst != OpStatus::kOk) {
          const std::string msg = "npo: send of " + std::to_string(it->len) + " B from " + where() +
                                  " to the card with fabric id " + std::to_string(it->dest_fabric) +
                                  " failed: " + std::string(op_status_name(it->worst));
          if (is_path_failure(it->worst)) {
            // The fabric did not deliver the datagram (peer unreachable, its ring window gone):
            // like a UD/UDP datagram it is dropped and the send completes; a reliability layer
            // (ofi_rxd) retransmits. A peer that keeps failing is a fault (send_failed).
            ++dropped_tx;
            domain->datagrams_dropped.fetch_add(1, std::memory_order_relaxed);
            warn(FI_LOG_EP_DATA, msg);
            if (cq && it->completion) cq->push({it->ctx, it->cq_flags, it->len, nullptr, 0});
          } else if (cq) {
            cq->push_error(it->ctx, it->cq_flags, 0, 0, fi_errno_of(it->worst), msg);
          }
          send_failed(it->dest_key, it->worst, msg);
        } else {
          send_ok(it->dest_key);
          if (cq && it->completion) cq->push({it->ctx, it->cq_flags, it->len, nullptr, 0});
        }
        tx.erase(it);
      }
    }
    if (n < out.size()) break;
  }
  // finished reads are removed by their waiter; drop stale ones
  while (!tx.empty() && tx.front().kind == Tx::kRead && tx.front().done && tx.front().ctx == nullptr) tx.pop_front();
}

// Consumes arrived datagrams into posted receives, lane by lane.
void Ep::poll_rx() {
  if (!map || rx.empty()) return;
  std::byte* base = map->bytes().data();
  for (unsigned scanned = 0; scanned < lanes && !rx.empty(); ++scanned) {
    const unsigned lane = (rx_lane_cursor + scanned) % lanes;
    for (;;) {
      if (rx.empty()) break;
      const std::uint64_t want = rx_consumed[lane] + 1;
      const std::byte* slot = base + slot_offset(lane, kSlotsPerLane, want);
      if (hw_load64(slot) != want) break;
      SlotHeader h;
      hw_copy(reinterpret_cast<std::byte*>(&h), slot, sizeof h);
      const bool bad_header = (h.flags & kFlagSkip) || h.magic != kHdrMagic || h.len > kMaxMsg;
      if (!bad_header) hw_copy(rx_scratch.data(), slot + kHdr, h.len);
      if (bad_header || payload_sum(rx_scratch.data(), h.len) != h.sum) {
        // a tombstone, or a payload write that failed: the datagram is dropped (DGRAM)
        ++dropped;
        rx_consumed[lane] = want;
        hw_store64(base + std::size_t{lane} * 64, want);
        continue;
      }
      Rx r = rx.front();
      rx.pop_front();
      std::size_t cap = 0;
      for (std::size_t i = 0; i < r.count; ++i) cap += r.iov[i].iov_len;
      const std::size_t len = std::min<std::size_t>(h.len, kMaxMsg);
      std::size_t copied = 0;
      for (std::size_t i = 0; i < r.count && copied < len; ++i) {
        const std::size_t n = std::min(r.iov[i].iov_len, len - copied);
        std::memcpy(r.iov[i].iov_base, rx_scratch.data() + copied, n);
        copied += n;
      }
      const std::uint64_t flags = FI_RECV | FI_MSG | ((h.flags & kFlagData) ? FI_REMOTE_CQ_DATA : 0);
      if (rx_cq) {
        if (len > cap) {
          rx_cq->push_error(r.ctx, flags, copied, len - copied, FI_ETRUNC,
                            "npo: receive on " + where() + " truncated: message of " + std::to_string(len) +
                                " B, buffer of " + std::to_string(cap) + " B");
          rx_cq->errors.back().entry.data = h.data;
        } else if (!rx_selective || (r.flags & FI_COMPLETION)) {
          rx_cq->push({r.ctx, flags, len, r.count ? r.iov[0].iov_base : nullptr, (h.flags & kFlagData) ? h.data : 0});
        }
      }
      rx_consumed[lane] = want;
      hw_store64(base + std::size_t{lane} * 64, want);
    }
  }
  rx_lane_cursor = (rx_lane_cursor + 1) % lanes;
}

// ---- fid ops helpers ----------------------------------------------------------------------
int no_bind(fid*, fid*, std::uint64_t) { return -FI_ENOSYS; }
int no_control(fid*, int, void*) { return -FI_ENOSYS; }
int no_ops_open(fid*, const char*, std::uint64_t, void**, void*) { return -FI_ENOSYS; }
int no_tostr(const fid*, char*, std::size_t) { return -FI_ENOSYS; }
int no_ops_set(fid*, const char*, std::uint64_t, void*, void*) { return -FI_ENOSYS; }

// ---- EQ ops -------------------------------------------------------------------------------
ssize_t eq_read(fid_eq* f, std::uint32_t* event, void* buf, std::size_t len, std::uint64_t flags) {
  auto* q = reinterpret_cast<Eq*>(f);
  std::lock_guard lk(q->mu);
  if (!q->errors.empty()) return -FI_EAVAIL;
  if (q->events.empty()) return -FI_EAGAIN;
  auto& e = q->events.front();
  if (len < e.bytes.size()) return -FI_ETOOSMALL;
  if (event) *event = e.event;
  if (buf) std::memcpy(buf, e.bytes.data(), e.bytes.size());
  const auto n = static_cast<ssize_t>(e.bytes.size());
  if (!(flags & FI_PEEK)) q->events.pop_front();
  return n;
}
ssize_t eq_readerr(fid_eq* f, fi_eq_err_entry* buf, std::uint64_t flags) {
  auto* q = reinterpret_cast<Eq*>(f);
  std::lock_guard lk(q->mu);
  if (q->errors.empty()) return -FI_EAGAIN;
  auto& e = q->errors.front();
  q->last_msg = e.msg;
  const std::size_t user_err_size = buf->err_data_size;
  void* user_err = buf->err_data;
  *buf = e.entry;
  if (user_err_size && user_err) {
    const std::size_t n = std::min(user_err_size, q->last_msg.size() + 1);
    std::memcpy(user_err, q->last_msg.c_str(), n);
    buf->err_data = user_err;
    buf->err_data_size = n;
  } else {
    buf->err_data = q->last_msg.data();
    buf->err_data_size = q->last_msg.size() + 1;
  }
  if (!(flags & FI_PEEK)) q->errors.pop_front();
  return sizeof(fi_eq_err_entry);
}
ssize_t eq_write(fid_eq* f, std::uint32_t event, const void* buf, std::size_t len, std::uint64_t) {
  auto* q = reinterpret_cast<Eq*>(f);
  std::lock_guard lk(q->mu);
  Eq::Event e{event, std::vector<std::byte>(len)};
  if (len) std::memcpy(e.bytes.data(), buf, len);
  q->events.push_back(std::move(e));
  return static_cast<ssize_t>(len);
}
ssize_t eq_sread(fid_eq* f, std::uint32_t* event, void* buf, std::size_t len, int timeout, std::uint64_t flags) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout < 0 ? 1'000'000'000 : timeout);
  for (;;) {
    const ssize_t r = eq_read(f, event, buf, len, flags);
    if (r != -FI_EAGAIN) return r;
    if (std::chrono::steady_clock::now() >= end) return -FI_EAGAIN;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}
const char* err_string(int prov_errno, const void* err_data, char* buf, std::size_t len) {
  const char* s = err_data ? static_cast<const char*>(err_data) : fi_strerror(prov_errno);
  if (buf && len) {
    std::snprintf(buf, len, "%s", s);
    return buf;
  }
  return s;
}
const char* eq_strerror(fid_eq*, int prov_errno, const void* err_data, char* buf, std::size_t len) {
  return err_string(prov_errno, err_data, buf, len);
}
int eq_close(fid* f) {
  delete reinterpret_cast<Eq*>(f);
  return 0;
}
fi_ops eq_fi_ops{sizeof(fi_ops), eq_close, no_bind, no_control, no_ops_open, no_tostr, no_ops_set};
fi_ops_eq eq_ops{sizeof(fi_ops_eq), eq_read, eq_readerr, eq_write, eq_sread, eq_strerror};

constexpr unsigned kEmptyPollsBeforeBackoff = 64;
bool backoff_enabled() {
  static const bool v = !(env("NPO_FI_POLL_BACKOFF") && std::string_view(env("NPO_FI_POLL_BACKOFF")) == "0");
  return v;
}

// ---- CQ ops -------------------------------------------------------------------------------
std::size_t cq_entry_size(fi_cq_format f) {
  switch (f) {
    case FI_CQ_FORMAT_MSG: return sizeof(fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA: return sizeof(fi_cq_data_entry);
    case FI_CQ_FORMAT_TAGGED: return sizeof(fi_cq_tagged_entry);
    default: return sizeof(fi_cq_entry);
  }
}
void write_entry(fi_cq_format f, void* out, const Cq::Comp& c) {
  switch (f) {
    case FI_CQ_FORMAT_MSG: {
      fi_cq_msg_entry e{c.op_context, c.flags, c.len};
      std::memcpy(out, &e, sizeof e);
      break;
    }
    case FI_CQ_FORMAT_DATA: {
      fi_cq_data_entry e{c.op_context, c.flags, c.len, c.buf, c.data};
      std::memcpy(out, &e, sizeof e);
      break;
    }
    case FI_CQ_FORMAT_TAGGED: {
      fi_cq_tagged_entry e{c.op_context, c.flags, c.len, c.buf, c.data, 0};
      std::memcpy(out, &e, sizeof e);
      break;
    }
    default: {
      fi_cq_entry e{c.op_context};
      std::memcpy(out, &e, sizeof e);
      break;
    }
  }
}
ssize_t cq_readfrom(fid_cq* f, void* buf, std::size_t count, fi_addr_t* src) {
  auto* q = reinterpret_cast<Cq*>(f);
  std::lock_guard lk(q->domain->mu);
  q->progress();
  if (!q->errors.empty()) return -FI_EAVAIL;
  if (q->comps.empty()) {
    // A caller spinning on an empty CQ would starve the card's engines on a host with few
    // cores (the emulator's engines are threads); after a burst of empty polls, give the
    // CPU away briefly (NPO_FI_POLL_BACKOFF=0 disables it).
    if (++q->empty_polls > kEmptyPollsBeforeBackoff && backoff_enabled()) {
      q->domain->mu.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(1));
      q->domain->mu.lock();
    }
    return -FI_EAGAIN;
  }
  q->empty_polls = 0;
  const std::size_t sz = cq_entry_size(q->format);
  std::size_t n = 0;
  for (; n < count && !q->comps.empty(); ++n) {
    write_entry(q->format, static_cast<std::byte*>(buf) + n * sz, q->comps.front());
    if (src) src[n] = FI_ADDR_NOTAVAIL;
    q->comps.pop_front();
  }
  return static_cast<ssize_t>(n);
}
ssize_t cq_read(fid_cq* f, void* buf, std::size_t count) { return cq_readfrom(f, buf, count, nullptr); }
ssize_t cq_readerr(fid_cq* f, fi_cq_err_entry* buf, std::uint64_t flags) {
  auto* q = reinterpret_cast<Cq*>(f);
  std::lock_guard lk(q->domain->mu);
  if (q->errors.empty()) return -FI_EAGAIN;
  auto& e = q->errors.front();
  q->last_msg = e.msg;
  const std::size_t user_err_size = buf->err_data_size;
  void* user_err = buf->err_data;
  const bool new_abi = FI_VERSION_GE(q->domain->fabric->fab.api_version, FI_VERSION(1, 5));
  // The entry is as large as the caller's API version knows (fi_cq_err_entry grew in 1.5).
  if (new_abi) {
    *buf = e.entry;
  } else {
    std::memcpy(buf, &e.entry, offsetof(fi_cq_err_entry, err_data_size));
  }
  if (new_abi && user_err_size && user_err) {
    const std::size_t n = std::min(user_err_size, q->last_msg.size() + 1);
    std::memcpy(user_err, q->last_msg.c_str(), n);
    buf->err_data = user_err;
    buf->err_data_size = n;
  } else {
    buf->err_data = q->last_msg.data();
    if (new_abi) buf->err_data_size = q->last_msg.size() + 1;
  }
  (void)flags;
  q->errors.pop_front();
  return 1;
}
ssize_t cq_sreadfrom(fid_cq* f, void* buf, std::size_t count, fi_addr_t* src, const void*, int timeout) {
  auto* q = reinterpret_cast<Cq*>(f);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout < 0 ? 1'000'000'000 : timeout);
  for (;;) {
    const ssize_t r = cq_readfrom(f, buf, count, src);
    if (r != -FI_EAGAIN) return r;
    {
      std::lock_guard lk(q->domain->mu);
      if (q->signaled) {
        q->signaled = false;
        return -FI_EAGAIN;
      }
    }
    if (std::chrono::steady_clock::now() >= end) return -FI_EAGAIN;
    std::this_thread::yield();
  }
}
ssize_t cq_sread(fid_cq* f, void* buf, std::size_t count, const void* cond, int timeout) {
  return cq_sreadfrom(f, buf, count, nullptr, cond, timeout);
}
int cq_signal(fid_cq* f) {
  auto* q = reinterpret_cast<Cq*>(f);
  std::lock_guard lk(q->domain->mu);
  q->signaled = true;
  return 0;
}
const char* cq_strerror(fid_cq*, int prov_errno, const void* err_data, char* buf, std::size_t len) {
  return err_string(prov_errno, err_data, buf, len);
}
int cq_close(fid* f) {
  auto* q = reinterpret_cast<Cq*>(f);
  if (q->refs.load() != 0) return -FI_EBUSY;
  q->domain->refs.fetch_sub(1);
  if (q->wait_fd >= 0) ::close(q->wait_fd);
  delete q;
  return 0;
}
int cq_control(fid* f, int command, void* arg) {
  auto* q = reinterpret_cast<Cq*>(f);
  if (command == FI_GETWAIT) {
    if (q->wait_fd < 0) return -FI_ENODATA;
    *static_cast<int*>(arg) = q->wait_fd;
    return 0;
  }
  if (command == FI_GETWAITOBJ) {
    *static_cast<fi_wait_obj*>(arg) = q->wait_fd >= 0 ? FI_WAIT_FD : FI_WAIT_NONE;
    return 0;
  }
  return -FI_ENOSYS;
}
fi_ops cq_fi_ops{sizeof(fi_ops), cq_close, no_bind, cq_control, no_ops_open, no_tostr, no_ops_set};
fi_ops_cq cq_ops{sizeof(fi_ops_cq), cq_read, cq_readfrom, cq_readerr, cq_sread, cq_sreadfrom, cq_signal, cq_strerror};

// ---- AV ops -------------------------------------------------------------------------------
Result<Av::Entry> decode_addr(Domain& d, const void* addr) {
  Av::Entry e;
  std::memcpy(&e.wire, addr, kAddrLen);
  if (e.wire.magic != kAddrMagic || e.wire.lanes == 0 || e.wire.slots == 0)
    return fail(Code::kInvalidArgument, "not an npo address");
  auto h = import_window(*d.sys, e.wire.handle);
  if (!h) return std::unexpected(h.error());
  e.handle = *h;
  e.valid = true;
  return e;
}
int av_insert(fid_av* f, const void* addr, std::size_t count, fi_addr_t* fi_addr, std::uint64_t flags, void* context) {
  auto* a = reinterpret_cast<Av*>(f);
  std::lock_guard lk(a->domain->mu);
  int ok = 0;
  for (std::size_t i = 0; i < count; ++i) {
    auto e = decode_addr(*a->domain, static_cast<const std::byte*>(addr) + i * kAddrLen);
    if (!e) {
      if (fi_addr) fi_addr[i] = FI_ADDR_NOTAVAIL;
      if ((flags & FI_SYNC_ERR) && context) static_cast<int*>(context)[i] = -fi_errno_of(e.error());
      continue;
    }
    if ((flags & FI_SYNC_ERR) && context) static_cast<int*>(context)[i] = 0;
    a->table.push_back(*e);
    if (fi_addr) fi_addr[i] = a->table.size() - 1;
    ++ok;
  }
  if (a->eq) {
    fi_eq_entry ev{};
    ev.fid = &a->av.fid;
    ev.context = context;
    ev.data = static_cast<std::uint64_t>(ok);
    eq_write(&a->eq->eq, FI_AV_COMPLETE, &ev, sizeof ev, 0);
    return 0;
  }
  return ok;
}
int av_remove(fid_av* f, fi_addr_t* fi_addr, std::size_t count, std::uint64_t) {
  auto* a = reinterpret_cast<Av*>(f);
  std::lock_guard lk(a->domain->mu);
  int ret = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (fi_addr[i] >= a->table.size() || !a->table[fi_addr[i]].valid) {
      ret = -FI_EINVAL;
      continue;
    }
    a->table[fi_addr[i]].valid = false;
  }
  return ret;
}
int av_lookup(fid_av* f, fi_addr_t fi_addr, void* addr, std::size_t* addrlen) {
  auto* a = reinterpret_cast<Av*>(f);
  std::lock_guard lk(a->domain->mu);
  if (fi_addr >= a->table.size() || !a->table[fi_addr].valid) return -FI_ENOENT;
  std::memcpy(addr, &a->table[fi_addr].wire, std::min(*addrlen, kAddrLen));
  *addrlen = kAddrLen;
  return 0;
}
const char* av_straddr(fid_av*, const void* addr, char* buf, std::size_t* len) {
  WireAddr w;
  std::memcpy(&w, addr, kAddrLen);
  auto h = WindowHandle::deserialize(w.handle);
  char tmp[128];
  int n;
  if (w.magic != kAddrMagic || !h) {
    n = std::snprintf(tmp, sizeof tmp, "npo://invalid");
  } else {
    n = std::snprintf(tmp, sizeof tmp, "npo://fabric%u/window%u.%u/ring%ux%u", h->fabric_id, h->window_id,
                      h->generation, unsigned{w.lanes}, unsigned{w.slots});
  }
  if (buf && *len) std::snprintf(buf, *len, "%s", tmp);
  *len = static_cast<std::size_t>(n) + 1;
  return buf;
}
int av_close(fid* f) {
  auto* a = reinterpret_cast<Av*>(f);
  if (a->refs.load() != 0) return -FI_EBUSY;
  a->domain->refs.fetch_sub(1);
  delete a;
  return 0;
}
int av_bind(fid* f, fid* b, std::uint64_t) {
  auto* a = reinterpret_cast<Av*>(f);
  if (b->fclass != FI_CLASS_EQ) return -FI_EINVAL;
  a->eq = reinterpret_cast<Eq*>(b);
  return 0;
}
fi_ops av_fi_ops{sizeof(fi_ops), av_close, av_bind, no_control, no_ops_open, no_tostr, no_ops_set};
fi_ops_av av_ops{
    sizeof(fi_ops_av), av_insert,  NPO_ENOSYS(fi_ops_av, insertsvc), NPO_ENOSYS(fi_ops_av, insertsym), av_remove,
    av_lookup,         av_straddr, NPO_ENOSYS(fi_ops_av, av_set)};

// ---- MR ops (no registration needed: every send is staged) -------------------------------
struct Mr {
  fid_mr mr{};
  Domain* domain = nullptr;
};
std::atomic<std::uint64_t> g_mr_key{1};
int mr_close(fid* f) {
  auto* m = reinterpret_cast<Mr*>(f);
  m->domain->refs.fetch_sub(1);
  delete m;
  return 0;
}
fi_ops mr_fi_ops{sizeof(fi_ops), mr_close, no_bind, no_control, no_ops_open, no_tostr, no_ops_set};
int mr_regattr(fid* f, const fi_mr_attr* attr, std::uint64_t, fid_mr** out) {
  auto* d = reinterpret_cast<Domain*>(f);
  auto* m = new Mr;
  m->domain = d;
  m->mr.fid.fclass = FI_CLASS_MR;
  m->mr.fid.context = attr ? attr->context : nullptr;
  m->mr.fid.ops = &mr_fi_ops;
  m->mr.mem_desc = nullptr;
  m->mr.key = g_mr_key.fetch_add(1);
  d->refs.fetch_add(1);
  *out = &m->mr;
  return 0;
}
int mr_regv(fid* f, const iovec* iov, std::size_t count, std::uint64_t access, std::uint64_t offset,
            std::uint64_t requested_key, std::uint64_t flags, fid_mr** mr, void* context) {
  fi_mr_attr attr{};
  attr.mr_iov = iov;
  attr.iov_count = count;
  attr.access = access;
  attr.offset = offset;
  attr.requested_key = requested_key;
  attr.context = context;
  return mr_regattr(f, &attr, flags, mr);
}
int mr_reg(fid* f, const void* buf, std::size_t len, std::uint64_t access, std::uint64_t offset,
           std::uint64_t requested_key, std::uint64_t flags, fid_mr** mr, void* context) {
  iovec iov{const_cast<void*>(buf), len};
  return mr_regv(f, &iov, 1, access, offset, requested_key, flags, mr, context);
}
fi_ops_mr mr_ops{sizeof(fi_ops_mr), mr_reg, mr_regv, mr_regattr};

// ---- Endpoint data path -------------------------------------------------------------------
// Reads the peer's consumer counter of our lane `lane` (my_lane modulo the peer's lane count,
// where the receiver writes it: poll_rx) by a remote read of 8 bytes, waiting for it.
Result<std::uint64_t> refresh_consumed(Ep& e, const WindowHandle& h, unsigned lane) {
  auto op = e.queue->enqueue_remote_read(h, std::uint64_t{lane} * 64, DmaAddress::host(e.readback_iova()), 8);
  if (!op) return std::unexpected(op.error());
  Ep::Tx t;
  t.kind = Ep::Tx::kRead;
  t.first = t.last = *op;
  t.ctx = &t;  // marks a waiter
  e.tx.push_back(t);
  if (auto s = e.queue->submit(); !s) return std::unexpected(s.error());
  const auto end = std::chrono::steady_clock::now() + kRefreshTimeout;
  for (;;) {
    e.poll_dma();
    auto it = std::find_if(e.tx.begin(), e.tx.end(),
                           [&](const Ep::Tx& x) { return x.kind == Ep::Tx::kRead && x.last == *op; });
    if (it != e.tx.end() && it->done) {
      const OpStatus st = it->worst;
      e.tx.erase(it);
      if (st != OpStatus::kOk)
        return fail(Code::kUnavailable, "remote read of the peer's ring counter: " + std::string(op_status_name(st)));
      std::uint64_t v;
      std::memcpy(&v, e.readback(), 8);
      return v;
    }
    if (std::chrono::steady_clock::now() >= end) {
      if (it != e.tx.end()) it->ctx = nullptr;  // abandoned: dropped when it completes
      return fail(Code::kDeadlineExceeded, "remote read of the peer's ring counter timed out");
    }
    std::this_thread::yield();
  }
}

// Writes one slot of the peer's ring: payload (if any), a fence, then the header (so the
// receiver sees a header only after the payload landed; the checksum catches a payload that
// failed). A tombstone (flags kFlagSkip, no payload) stands for a seq whose header never
// landed. Returns 0 when posted, 1 when it failed and was reported on the CQ.
ssize_t post_slot(Ep& e, const Av::Entry& peer, Ep::Dest& d, std::uint64_t key, std::uint64_t seq, const iovec* iov,
                  std::size_t count, std::size_t len, void* ctx, std::uint64_t data, std::uint32_t flags,
                  bool completion) {
  const WindowHandle& h = peer.handle;
  const unsigned lanes = peer.wire.lanes, slots = peer.wire.slots;
  const unsigned lane = e.my_lane % lanes;
  const unsigned s = e.free_slots.back();
  std::byte* st = e.staging_slot(s);
  std::size_t off = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (iov[i].iov_len) std::memcpy(st + kHdr + off, iov[i].iov_base, iov[i].iov_len);
    off += iov[i].iov_len;
  }
  SlotHeader hdr{};
  hdr.seq = seq;
  hdr.len = static_cast<std::uint32_t>(len);
  hdr.flags = flags;
  hdr.data = data;
  hdr.magic = kHdrMagic;
  hdr.src_fabric_id = e.domain->fabric_id;
  hdr.sum = payload_sum(st + kHdr, len);
  std::memcpy(st, &hdr, sizeof hdr);
  const std::uint64_t dst = slot_offset(lane, slots, seq);
  auto fail_enqueue = [&](const Error& err) -> ssize_t {
    const std::string msg = "npo: send from " + e.where() + " failed: " + err.to_string();
    if (e.tx_cq && completion) e.tx_cq->push_error(ctx, FI_SEND | FI_MSG, 0, 0, fi_errno_of(err), msg);
    e.report_fatal(msg, fi_errno_of(err));
    return 1;  // reported on the CQ; nothing was posted
  };
  Ep::Tx t;
  t.ctx = ctx;
  t.completion = completion;
  t.len = len;
  t.slot = s;
  t.cq_flags = FI_SEND | FI_MSG;
  t.dest_fabric = h.fabric_id;
  t.dest_key = key;
  t.seq = seq;
  bool first_set = false;
  if (len) {
    auto op = e.queue->enqueue_remote_write(DmaAddress::host(e.staging_iova(s) + kHdr), h, dst + kHdr,
                                            static_cast<std::uint32_t>(len));
    if (!op) return fail_enqueue(op.error());
    t.first = *op;
    first_set = true;
    auto fence = e.queue->enqueue_fence();
    if (!fence) return fail_enqueue(fence.error());
  }
  auto hop = e.queue->enqueue_remote_write(DmaAddress::host(e.staging_iova(s)), h, dst, kHdr);
  if (!hop) return fail_enqueue(hop.error());
  if (!first_set) t.first = *hop;
  t.last = *hop;
  if (auto sub = e.queue->submit(); !sub) return fail_enqueue(sub.error());
  e.free_slots.pop_back();
  e.tx.push_back(t);
  (void)d;
  return 0;
}

ssize_t do_send(Ep& e, const iovec* iov, std::size_t count, fi_addr_t dest, void* ctx, std::uint64_t data,
                bool has_data, bool inject, bool completion) {
  if (!e.enabled) return -FI_EOPBADSTATE;
  if (!e.av) return -FI_EINVAL;
  if (count > kIovLimit) return -FI_EINVAL;
  std::size_t len = 0;
  for (std::size_t i = 0; i < count; ++i) len += iov[i].iov_len;
  if (len > kMaxMsg) return -FI_EMSGSIZE;
  if (dest >= e.av->table.size() || !e.av->table[dest].valid) return -FI_EINVAL;
  const Av::Entry peer = e.av->table[dest];
  e.poll_dma();
  const WindowHandle& h = peer.handle;
  const std::uint64_t key = (std::uint64_t{h.fabric_id} << 32) | (std::uint64_t{h.window_id} << 16) | h.generation;
  Ep::Dest& d = e.dests[key];
  // tombstones first: the peer's lane is stuck at the oldest seq whose header never landed
  while (!d.holes.empty()) {
    if (e.free_slots.empty() || e.queue->outstanding() + 4 > e.queue->depth()) return -FI_EAGAIN;
    const std::uint64_t hole = d.holes.front();
    d.holes.erase(d.holes.begin());
    if (post_slot(e, peer, d, key, hole, nullptr, 0, 0, nullptr, 0, kFlagSkip, false) != 0) {
      d.holes.insert(d.holes.begin(), hole);
      return 0;
    }
  }
  if (e.free_slots.empty()) return -FI_EAGAIN;
  if (e.queue->outstanding() + 4 > e.queue->depth()) return -FI_EAGAIN;
  const unsigned slots = peer.wire.slots;
  if (d.next_seq - 1 - d.consumed >= slots) {
    auto c = refresh_consumed(e, h, e.my_lane % peer.wire.lanes);
    if (!c) {
      if (c.error().code() == Code::kDeadlineExceeded) return -FI_EAGAIN;
      // the peer's ring cannot be read: the datagram is dropped (see poll_dma)
      const std::string msg = "npo: send from " + e.where() + " to the card with fabric id " +
                              std::to_string(h.fabric_id) + " dropped: " + c.error().to_string();
      ++e.dropped_tx;
      e.domain->datagrams_dropped.fetch_add(1, std::memory_order_relaxed);
      warn(FI_LOG_EP_DATA, msg);
      if (e.tx_cq && completion && !inject) e.tx_cq->push({ctx, FI_SEND | FI_MSG, len, nullptr, 0});
      e.send_failed(key, OpStatus::kRemoteUnreachable, msg);
      return 0;
    }
    d.consumed = std::max(d.consumed, *c);
    if (d.next_seq - 1 - d.consumed >= slots) return -FI_EAGAIN;
  }
  const ssize_t r = post_slot(e, peer, d, key, d.next_seq, iov, count, len, ctx, data, has_data ? kFlagData : 0,
                              completion && !inject);
  if (r == 0) ++d.next_seq;
  return r == 1 ? 0 : r;
}

Ep* ep_of(fid_ep* f) { return reinterpret_cast<Ep*>(f); }

ssize_t ep_sendv(fid_ep* f, const iovec* iov, void**, std::size_t count, fi_addr_t dest, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return do_send(*e, iov, count, dest, ctx, 0, false, false, !e->tx_selective);
}
ssize_t ep_send(fid_ep* f, const void* buf, std::size_t len, void* desc, fi_addr_t dest, void* ctx) {
  iovec iov{const_cast<void*>(buf), len};
  return ep_sendv(f, &iov, &desc, 1, dest, ctx);
}
ssize_t ep_sendmsg(fid_ep* f, const fi_msg* msg, std::uint64_t flags) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return do_send(*e, msg->msg_iov, msg->iov_count, msg->addr, msg->context, msg->data, (flags & FI_REMOTE_CQ_DATA) != 0,
                 (flags & FI_INJECT) != 0, !e->tx_selective || (flags & FI_COMPLETION));
}
ssize_t ep_inject(fid_ep* f, const void* buf, std::size_t len, fi_addr_t dest) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return do_send(*e, &iov, 1, dest, nullptr, 0, false, true, false);
}
ssize_t ep_senddata(fid_ep* f, const void* buf, std::size_t len, void*, std::uint64_t data, fi_addr_t dest, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return do_send(*e, &iov, 1, dest, ctx, data, true, false, !e->tx_selective);
}
ssize_t ep_injectdata(fid_ep* f, const void* buf, std::size_t len, std::uint64_t data, fi_addr_t dest) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return do_send(*e, &iov, 1, dest, nullptr, data, true, true, false);
}
ssize_t do_recv(Ep& e, const iovec* iov, std::size_t count, void* ctx, std::uint64_t flags) {
  if (!e.enabled) return -FI_EOPBADSTATE;
  if (count > kIovLimit) return -FI_EINVAL;
  if (e.rx.size() >= kRxSize) return -FI_EAGAIN;
  Ep::Rx r{};
  r.ctx = ctx;
  r.count = count;
  r.flags = flags;
  for (std::size_t i = 0; i < count; ++i) r.iov[i] = iov[i];
  e.rx.push_back(r);
  return 0;
}
ssize_t ep_recvv(fid_ep* f, const iovec* iov, void**, std::size_t count, fi_addr_t, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return do_recv(*e, iov, count, ctx, FI_COMPLETION);
}
ssize_t ep_recv(fid_ep* f, void* buf, std::size_t len, void* desc, fi_addr_t src, void* ctx) {
  iovec iov{buf, len};
  return ep_recvv(f, &iov, &desc, 1, src, ctx);
}
ssize_t ep_recvmsg(fid_ep* f, const fi_msg* msg, std::uint64_t flags) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return do_recv(*e, msg->msg_iov, msg->iov_count, msg->context, flags);
}
fi_ops_msg ep_msg_ops{sizeof(fi_ops_msg), ep_recv,    ep_recvv,  ep_recvmsg,  ep_send,
                      ep_sendv,           ep_sendmsg, ep_inject, ep_senddata, ep_injectdata};

ssize_t ep_cancel(fid_t f, void* ctx) {
  Ep* e = reinterpret_cast<Ep*>(f);
  std::lock_guard lk(e->domain->mu);
  auto it = std::find_if(e->rx.begin(), e->rx.end(), [&](const Ep::Rx& r) { return r.ctx == ctx; });
  if (it == e->rx.end()) return -FI_ENOENT;
  e->rx.erase(it);
  if (e->rx_cq) e->rx_cq->push_error(ctx, FI_RECV | FI_MSG, 0, 0, FI_ECANCELED, "npo: receive canceled");
  return 0;
}
int ep_getopt(fid_t, int level, int optname, void* optval, std::size_t* optlen) {
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  if (optname == FI_OPT_MIN_MULTI_RECV) return -FI_ENOPROTOOPT;
  (void)optval;
  (void)optlen;
  return -FI_ENOPROTOOPT;
}
int ep_setopt(fid_t, int level, int, const void*, std::size_t) {
  return level == FI_OPT_ENDPOINT ? -FI_ENOPROTOOPT : -FI_ENOPROTOOPT;
}
ssize_t ep_rx_size_left(fid_ep* f) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return static_cast<ssize_t>(kRxSize - e->rx.size());
}
ssize_t ep_tx_size_left(fid_ep* f) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return static_cast<ssize_t>(e->free_slots.size());
}
fi_ops_ep ep_base_ops{sizeof(fi_ops_ep),
                      ep_cancel,
                      ep_getopt,
                      ep_setopt,
                      NPO_ENOSYS(fi_ops_ep, tx_ctx),
                      NPO_ENOSYS(fi_ops_ep, rx_ctx),
                      ep_rx_size_left,
                      ep_tx_size_left};

int ep_getname(fid_t f, void* addr, std::size_t* addrlen) {
  Ep* e = reinterpret_cast<Ep*>(f);
  const std::size_t have = *addrlen;
  *addrlen = kAddrLen;
  if (have < kAddrLen) return -FI_ETOOSMALL;
  std::memcpy(addr, &e->wire, kAddrLen);
  return 0;
}
fi_ops_cm ep_cm_ops{sizeof(fi_ops_cm),
                    NPO_ENOSYS(fi_ops_cm, setname),
                    ep_getname,
                    NPO_ENOSYS(fi_ops_cm, getpeer),
                    NPO_ENOSYS(fi_ops_cm, connect),
                    NPO_ENOSYS(fi_ops_cm, listen),
                    NPO_ENOSYS(fi_ops_cm, accept),
                    NPO_ENOSYS(fi_ops_cm, reject),
                    NPO_ENOSYS(fi_ops_cm, shutdown),
                    NPO_ENOSYS(fi_ops_cm, join)};
fi_ops_rma ep_rma_ops{sizeof(fi_ops_rma),
                      NPO_ENOSYS(fi_ops_rma, read),
                      NPO_ENOSYS(fi_ops_rma, readv),
                      NPO_ENOSYS(fi_ops_rma, readmsg),
                      NPO_ENOSYS(fi_ops_rma, write),
                      NPO_ENOSYS(fi_ops_rma, writev),
                      NPO_ENOSYS(fi_ops_rma, writemsg),
                      NPO_ENOSYS(fi_ops_rma, inject),
                      NPO_ENOSYS(fi_ops_rma, writedata),
                      NPO_ENOSYS(fi_ops_rma, injectdata)};
fi_ops_tagged ep_tagged_ops{sizeof(fi_ops_tagged),
                            NPO_ENOSYS(fi_ops_tagged, recv),
                            NPO_ENOSYS(fi_ops_tagged, recvv),
                            NPO_ENOSYS(fi_ops_tagged, recvmsg),
                            NPO_ENOSYS(fi_ops_tagged, send),
                            NPO_ENOSYS(fi_ops_tagged, sendv),
                            NPO_ENOSYS(fi_ops_tagged, sendmsg),
                            NPO_ENOSYS(fi_ops_tagged, inject),
                            NPO_ENOSYS(fi_ops_tagged, senddata),
                            NPO_ENOSYS(fi_ops_tagged, injectdata)};
fi_ops_atomic ep_atomic_ops{sizeof(fi_ops_atomic),
                            NPO_ENOSYS(fi_ops_atomic, write),
                            NPO_ENOSYS(fi_ops_atomic, writev),
                            NPO_ENOSYS(fi_ops_atomic, writemsg),
                            NPO_ENOSYS(fi_ops_atomic, inject),
                            NPO_ENOSYS(fi_ops_atomic, readwrite),
                            NPO_ENOSYS(fi_ops_atomic, readwritev),
                            NPO_ENOSYS(fi_ops_atomic, readwritemsg),
                            NPO_ENOSYS(fi_ops_atomic, compwrite),
                            NPO_ENOSYS(fi_ops_atomic, compwritev),
                            NPO_ENOSYS(fi_ops_atomic, compwritemsg),
                            NPO_ENOSYS(fi_ops_atomic, writevalid),
                            NPO_ENOSYS(fi_ops_atomic, readwritevalid),
                            NPO_ENOSYS(fi_ops_atomic, compwritevalid)};
fi_ops_collective ep_coll_ops{sizeof(fi_ops_collective),
                              NPO_ENOSYS(fi_ops_collective, barrier),
                              NPO_ENOSYS(fi_ops_collective, broadcast),
                              NPO_ENOSYS(fi_ops_collective, alltoall),
                              NPO_ENOSYS(fi_ops_collective, allreduce),
                              NPO_ENOSYS(fi_ops_collective, allgather),
                              NPO_ENOSYS(fi_ops_collective, reduce_scatter),
                              NPO_ENOSYS(fi_ops_collective, reduce),
                              NPO_ENOSYS(fi_ops_collective, scatter),
                              NPO_ENOSYS(fi_ops_collective, gather),
                              NPO_ENOSYS(fi_ops_collective, msg),
                              NPO_ENOSYS(fi_ops_collective, barrier2)};

int ep_close(fid* f) {
  Ep* e = reinterpret_cast<Ep*>(f);
  Domain* d = e->domain;
  {
    std::lock_guard lk(d->mu);
    // let sends in flight finish (bounded), so no DMA targets freed staging memory
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (e->queue && e->queue->outstanding() > 0 && std::chrono::steady_clock::now() < end) {
      e->poll_dma();
      std::this_thread::yield();
    }
    if (e->tx_cq == e->rx_cq) {
      if (e->tx_cq) {
        std::erase(e->tx_cq->eps, e);
        e->tx_cq->refs.fetch_sub(1);
      }
    } else {
      if (e->tx_cq) {
        std::erase(e->tx_cq->eps, e);
        e->tx_cq->refs.fetch_sub(1);
      }
      if (e->rx_cq) {
        std::erase(e->rx_cq->eps, e);
        e->rx_cq->refs.fetch_sub(1);
      }
    }
    if (e->av) e->av->refs.fetch_sub(1);
    e->queue.reset();
    e->map.reset();
    if (e->window) (void)e->window->revoke();
    e->window.reset();
    if (e->hbm.size) (void)free_hbm(*d->dev, e->hbm);
    e->staging.reset();
  }
  {
    auto& s = shared();
    std::lock_guard lk(s.mu);
    s.ep_used[d->fabric_id] &= ~(1u << e->ep_no);
  }
  d->refs.fetch_sub(1);
  delete e;
  return 0;
}
int ep_bind(fid* f, fid* b, std::uint64_t flags) {
  Ep* e = reinterpret_cast<Ep*>(f);
  std::lock_guard lk(e->domain->mu);
  switch (b->fclass) {
    case FI_CLASS_AV: {
      auto* a = reinterpret_cast<Av*>(b);
      if (a->domain != e->domain) return -FI_EINVAL;
      if (e->av) return -FI_EINVAL;
      e->av = a;
      a->refs.fetch_add(1);
      return 0;
    }
    case FI_CLASS_CQ: {
      auto* q = reinterpret_cast<Cq*>(b);
      if (q->domain != e->domain) return -FI_EINVAL;
      if (!(flags & (FI_TRANSMIT | FI_RECV))) return -FI_EBADFLAGS;
      if (flags & FI_TRANSMIT) {
        if (e->tx_cq) return -FI_EINVAL;
        e->tx_cq = q;
        e->tx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
      }
      if (flags & FI_RECV) {
        if (e->rx_cq) return -FI_EINVAL;
        e->rx_cq = q;
        e->rx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
      }
      if (std::find(q->eps.begin(), q->eps.end(), e) == q->eps.end()) {
        q->eps.push_back(e);
        q->refs.fetch_add(1);
      }
      return 0;
    }
    case FI_CLASS_EQ: e->eq = reinterpret_cast<Eq*>(b); return 0;
    default: return -FI_ENOSYS;
  }
}
int ep_control(fid* f, int command, void*) {
  Ep* e = reinterpret_cast<Ep*>(f);
  std::lock_guard lk(e->domain->mu);
  if (command != FI_ENABLE) return -FI_ENOSYS;
  if (!e->tx_cq || !e->rx_cq) return -FI_ENOCQ;
  if (!e->av) return -FI_ENOAV;
  e->enabled = true;
  return 0;
}
fi_ops ep_fi_ops{sizeof(fi_ops), ep_close, ep_bind, ep_control, no_ops_open, no_tostr, no_ops_set};

// Creates the endpoint's ring window, aperture mapping, staging memory and DMA queue.
int ep_setup(Ep& e) {
  Domain& d = *e.domain;
  const std::uint64_t bytes = ring_bytes(e.lanes);
  auto hbm = allocate_hbm(*d.dev, bytes, 4096);
  if (!hbm) return -FI_ENOMEM;
  e.hbm = *hbm;
  auto w = export_window(*d.dev, e.hbm.offset, e.hbm.size, {.read = true, .write = true});
  if (!w) return -fi_errno_of(w.error());
  e.window = std::move(*w);
  auto m = map_window(*d.dev, *e.window);
  if (!m) return -fi_errno_of(m.error());
  e.map = std::move(*m);
  std::memset(e.map->bytes().data(), 0, e.map->bytes().size());
  auto st = allocate_host_memory(*d.dev, std::size_t{kTxSize} * kSlot + 4096);
  if (!st) return -fi_errno_of(st.error());
  e.staging = std::move(*st);
  const unsigned engines = std::max(1u, d.dev->info().num_engines);
  Result<std::unique_ptr<DmaQueue>> q = fail(Code::kResourceExhausted, "no queue");
  for (unsigned i = 0; i < engines && !q; ++i) q = d.dev->open_queue({.engine = (e.ep_no + i) % engines, .depth = 256});
  if (!q) return -fi_errno_of(q.error());
  e.queue = std::move(*q);
  e.wire.handle = e.window->handle().serialize();
  e.wire.lanes = static_cast<std::uint16_t>(e.lanes);
  e.wire.slots = kSlotsPerLane;
  e.wire.magic = kAddrMagic;
  e.rx_consumed.assign(e.lanes, 0);
  for (unsigned s = kTxSize; s > 0; --s) e.free_slots.push_back(s - 1);
  return 0;
}

int ep_open(fid_domain* f, fi_info* info, fid_ep** out, void* context) {
  auto* d = reinterpret_cast<Domain*>(f);
  if (info && info->ep_attr && info->ep_attr->type != FI_EP_DGRAM && info->ep_attr->type != FI_EP_UNSPEC)
    return -FI_EINVAL;
  auto e = std::make_unique<Ep>();
  e->domain = d;
  e->ep.fid.fclass = FI_CLASS_EP;
  e->ep.fid.context = context;
  e->ep.fid.ops = &ep_fi_ops;
  e->ep.ops = &ep_base_ops;
  e->ep.cm = &ep_cm_ops;
  e->ep.msg = &ep_msg_ops;
  e->ep.rma = &ep_rma_ops;
  e->ep.tagged = &ep_tagged_ops;
  e->ep.atomic = &ep_atomic_ops;
  e->ep.collective = &ep_coll_ops;
  if (const char* l = env("NPO_FI_RING_LANES")) e->lanes = std::clamp(static_cast<unsigned>(std::atoi(l)), 1u, 4096u);
  {
    auto& s = shared();
    std::lock_guard lk(s.mu);
    unsigned& used = s.ep_used[d->fabric_id];
    unsigned no = 0;
    while (no < kEpsPerCard && (used & (1u << no))) ++no;
    if (no == kEpsPerCard) return -FI_EBUSY;
    used |= 1u << no;
    e->ep_no = no;
  }
  e->my_lane = d->fabric_id * kEpsPerCard + e->ep_no;
  std::lock_guard lk(d->mu);
  if (const int r = ep_setup(*e); r != 0) {
    e->queue.reset();
    e->map.reset();
    e->window.reset();
    if (e->hbm.size) (void)free_hbm(*d->dev, e->hbm);
    auto& s = shared();
    std::lock_guard lk2(s.mu);
    s.ep_used[d->fabric_id] &= ~(1u << e->ep_no);
    return r;
  }
  d->refs.fetch_add(1);
  *out = &e.release()->ep;
  return 0;
}

// ---- Domain ops ---------------------------------------------------------------------------
int av_open(fid_domain* f, fi_av_attr* attr, fid_av** out, void* context) {
  auto* d = reinterpret_cast<Domain*>(f);
  if (attr && attr->name) return -FI_ENOSYS;  // no named (shared) AVs
  auto* a = new Av;
  a->domain = d;
  a->av.fid.fclass = FI_CLASS_AV;
  a->av.fid.context = context;
  a->av.fid.ops = &av_fi_ops;
  a->av.ops = &av_ops;
  if (attr && attr->count) a->table.reserve(attr->count);
  d->refs.fetch_add(1);
  *out = &a->av;
  return 0;
}
int cq_open(fid_domain* f, fi_cq_attr* attr, fid_cq** out, void* context) {
  auto* d = reinterpret_cast<Domain*>(f);
  auto q = std::make_unique<Cq>();
  q->domain = d;
  q->cq.fid.fclass = FI_CLASS_CQ;
  q->cq.fid.context = context;
  q->cq.fid.ops = &cq_fi_ops;
  q->cq.ops = &cq_ops;
  if (attr) {
    switch (attr->format) {
      case FI_CQ_FORMAT_UNSPEC:
      case FI_CQ_FORMAT_CONTEXT: q->format = FI_CQ_FORMAT_CONTEXT; break;
      case FI_CQ_FORMAT_MSG:
      case FI_CQ_FORMAT_DATA:
      case FI_CQ_FORMAT_TAGGED: q->format = attr->format; break;
      default: return -FI_ENOSYS;
    }
    switch (attr->wait_obj) {
      case FI_WAIT_NONE:
      case FI_WAIT_UNSPEC: break;
      case FI_WAIT_FD:
        // Progress is polled: the fd is always readable, so a waiter comes back to fi_cq_read.
        q->wait_fd = ::eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
        if (q->wait_fd < 0) return -FI_ENOMEM;
        break;
      default: return -FI_ENOSYS;
    }
    q->capacity = attr->size;
  }
  d->refs.fetch_add(1);
  *out = &q.release()->cq;
  return 0;
}
int dma_counters(fid_domain* f, fi_npo_dma_counters* out) {
  if (!f || !out) return -FI_EINVAL;
  auto* d = reinterpret_cast<Domain*>(f);
  out->ops_ok = d->ops_ok.load();
  out->ops_failed = d->ops_failed.load();
  out->bytes_moved = d->bytes_moved.load();
  out->datagrams_dropped = d->datagrams_dropped.load();
  out->card = d->card;
  out->fabric_id = d->fabric_id;
  return 0;
}
fi_npo_domain_ops npo_domain_ops{sizeof(fi_npo_domain_ops), dma_counters};
int domain_ops_open(fid*, const char* name, std::uint64_t, void** ops, void*) {
  if (!name || std::string_view(name) != FI_NPO_DOMAIN_OPS_NAME) return -FI_ENOSYS;
  *ops = &npo_domain_ops;
  return 0;
}
int domain_close(fid* f) {
  auto* d = reinterpret_cast<Domain*>(f);
  if (d->refs.load() != 0) return -FI_EBUSY;
  delete d;
  return 0;
}
int endpoint2(fid_domain* f, fi_info* info, fid_ep** ep, std::uint64_t flags, void* context) {
  if (flags) return -FI_EBADFLAGS;
  return ep_open(f, info, ep, context);
}
fi_ops domain_fi_ops{sizeof(fi_ops), domain_close, no_bind, no_control, domain_ops_open, no_tostr, no_ops_set};
fi_ops_domain domain_ops{sizeof(fi_ops_domain),
                         av_open,
                         cq_open,
                         ep_open,
                         NPO_ENOSYS(fi_ops_domain, scalable_ep),
                         NPO_ENOSYS(fi_ops_domain, cntr_open),
                         NPO_ENOSYS(fi_ops_domain, poll_open),
                         NPO_ENOSYS(fi_ops_domain, stx_ctx),
                         NPO_ENOSYS(fi_ops_domain, srx_ctx),
                         NPO_ENOSYS(fi_ops_domain, query_atomic),
                         NPO_ENOSYS(fi_ops_domain, query_collective),
                         endpoint2};

// ---- Fabric ops ---------------------------------------------------------------------------
std::optional<unsigned> card_of_domain_name(const char* name) {
  if (!name) return std::nullopt;
  std::string_view n(name);
  if (!n.starts_with("npo") || n.size() == 3) return std::nullopt;
  unsigned k = 0;
  for (char c : n.substr(3)) {
    if (c < '0' || c > '9') return std::nullopt;
    k = k * 10 + static_cast<unsigned>(c - '0');
  }
  return k;
}

int domain_open(fid_fabric* f, fi_info* info, fid_domain** out, void* context) {
  auto* fab = reinterpret_cast<Fabric*>(f);
  auto k = card_of_domain_name(info && info->domain_attr ? info->domain_attr->name : nullptr);
  if (!k) return -FI_EINVAL;
  auto d = std::make_unique<Domain>();
  d->fabric = fab;
  d->card = *k;
  if (fab->backend.remote) {
    const std::string uri = "emu-remote:" + fab->backend.dir + "?card=" + std::to_string(*k);
    auto sys = System::open(uri);
    if (!sys) {
      warn(FI_LOG_DOMAIN, "cannot open card " + std::to_string(*k) + " (" + uri + "): " + sys.error().to_string());
      return -fi_errno_of(sys.error());
    }
    d->sys = std::shared_ptr<System>(std::move(*sys));
    if (d->sys->device_count() != 1) return -FI_ENODEV;
    d->dev = &d->sys->device(0);
  } else {
    auto& s = shared();
    std::lock_guard lk(s.mu);
    auto sys = local_system_locked(s, fab->backend.uri);
    if (!sys) return -fi_errno_of(sys.error());
    d->sys = *sys;
    if (*k >= d->sys->device_count()) return -FI_ENODEV;
    d->dev = &d->sys->device(*k);
  }
  d->fabric_id = d->dev->info().fabric_id;
  d->dom.fid.fclass = FI_CLASS_DOMAIN;
  d->dom.fid.context = context;
  d->dom.fid.ops = &domain_fi_ops;
  d->dom.ops = &domain_ops;
  d->dom.mr = &mr_ops;
  *out = &d.release()->dom;
  return 0;
}
int domain2_open(fid_fabric* f, fi_info* info, fid_domain** out, std::uint64_t flags, void* context) {
  if (flags) return -FI_EBADFLAGS;
  return domain_open(f, info, out, context);
}
int eq_open(fid_fabric*, fi_eq_attr* attr, fid_eq** out, void* context) {
  if (attr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC) return -FI_ENOSYS;
  auto* q = new Eq;
  q->eq.fid.fclass = FI_CLASS_EQ;
  q->eq.fid.context = context;
  q->eq.fid.ops = &eq_fi_ops;
  q->eq.ops = &eq_ops;
  *out = &q->eq;
  return 0;
}
int fabric_trywait(fid_fabric*, fid** fids, int count) {
  for (int i = 0; i < count; ++i) {
    if (fids[i]->fclass != FI_CLASS_CQ) continue;
    auto* q = reinterpret_cast<Cq*>(fids[i]);
    std::lock_guard lk(q->domain->mu);
    q->progress();
    if (!q->comps.empty() || !q->errors.empty()) return -FI_EAGAIN;
  }
  return 0;
}
int fabric_close(fid* f) {
  delete reinterpret_cast<Fabric*>(f);
  return 0;
}
fi_ops fabric_fi_ops{sizeof(fi_ops), fabric_close, no_bind, no_control, no_ops_open, no_tostr, no_ops_set};
fi_ops_fabric fabric_ops{sizeof(fi_ops_fabric),
                         domain_open,
                         NPO_ENOSYS(fi_ops_fabric, passive_ep),
                         eq_open,
                         NPO_ENOSYS(fi_ops_fabric, wait_open),
                         fabric_trywait,
                         domain2_open};

int fabric_open(fi_fabric_attr* attr, fid_fabric** out, void* context) {
  if (attr && attr->name && std::string_view(attr->name) != "npo") return -FI_EINVAL;
  auto* fab = new Fabric;
  fab->backend = choose_backend();
  fab->fab.fid.fclass = FI_CLASS_FABRIC;
  fab->fab.fid.context = context;
  fab->fab.fid.ops = &fabric_fi_ops;
  fab->fab.ops = &fabric_ops;
  *out = &fab->fab;
  return 0;
}

// ---- getinfo ------------------------------------------------------------------------------
bool hints_match(const fi_info* hints, unsigned card) {
  if (!hints) return true;
  if (hints->caps & ~(kCaps | FI_MULTICAST | FI_SOURCE | FI_NAMED_RX_CTX | FI_DIRECTED_RECV | FI_TRIGGER | FI_FENCE |
                      FI_RMA_EVENT | FI_SOURCE_ERR | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SHARED_AV | FI_HMEM))
    if (hints->caps & ~kCaps &
        (FI_TAGGED | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_COLLECTIVE |
         FI_MULTI_RECV))
      return false;
  if (hints->caps & (FI_TAGGED | FI_RMA | FI_ATOMIC | FI_COLLECTIVE | FI_MULTI_RECV | FI_SOURCE | FI_DIRECTED_RECV |
                     FI_HMEM | FI_TRIGGER | FI_MULTICAST | FI_NAMED_RX_CTX | FI_RMA_EVENT))
    return false;
  if (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_DGRAM) return false;
  if (hints->ep_attr && hints->ep_attr->max_msg_size > kMaxMsg) return false;
  if (hints->domain_attr && hints->domain_attr->name &&
      std::string_view(hints->domain_attr->name) != "npo" + std::to_string(card))
    return false;
  if (hints->fabric_attr && hints->fabric_attr->name && std::string_view(hints->fabric_attr->name) != "npo")
    return false;
  if (hints->addr_format != FI_FORMAT_UNSPEC) return false;
  if (hints->domain_attr && hints->domain_attr->cq_data_size > 8) return false;
  if (hints->tx_attr && (hints->tx_attr->inject_size > kMaxMsg || hints->tx_attr->iov_limit > kIovLimit)) return false;
  if (hints->rx_attr && hints->rx_attr->iov_limit > kIovLimit) return false;
  return true;
}

fi_info* make_info(unsigned card, const fi_info* hints) {
  fi_info* i = fi_allocinfo();
  if (!i) return nullptr;
  const std::uint64_t caps = kCaps;
  i->caps = caps;
  i->mode = 0;
  i->addr_format = FI_FORMAT_UNSPEC;
  i->tx_attr->caps = caps & (FI_MSG | FI_SEND);
  i->tx_attr->mode = 0;
  i->tx_attr->op_flags = 0;
  i->tx_attr->msg_order = FI_ORDER_SAS;
  i->tx_attr->comp_order = FI_ORDER_NONE;
  i->tx_attr->inject_size = kMaxMsg;
  i->tx_attr->size = kTxSize;
  i->tx_attr->iov_limit = kIovLimit;
  i->tx_attr->rma_iov_limit = 0;
  i->rx_attr->caps = caps & (FI_MSG | FI_RECV);
  i->rx_attr->mode = 0;
  i->rx_attr->op_flags = 0;
  i->rx_attr->msg_order = FI_ORDER_SAS;
  i->rx_attr->comp_order = FI_ORDER_NONE;
  i->rx_attr->total_buffered_recv = 0;
  i->rx_attr->size = kRxSize;
  i->rx_attr->iov_limit = kIovLimit;
  i->ep_attr->type = FI_EP_DGRAM;
  i->ep_attr->protocol = FI_PROTO_UNSPEC;
  i->ep_attr->protocol_version = 1;
  i->ep_attr->max_msg_size = kMaxMsg;
  i->ep_attr->msg_prefix_size = 0;
  i->ep_attr->max_order_raw_size = 0;
  i->ep_attr->max_order_war_size = 0;
  i->ep_attr->max_order_waw_size = 0;
  i->ep_attr->mem_tag_format = 0;
  i->ep_attr->tx_ctx_cnt = 1;
  i->ep_attr->rx_ctx_cnt = 1;
  i->domain_attr->name = dup("npo" + std::to_string(card));
  i->domain_attr->threading = FI_THREAD_SAFE;
  i->domain_attr->control_progress = FI_PROGRESS_MANUAL;
  i->domain_attr->data_progress = FI_PROGRESS_MANUAL;
  i->domain_attr->resource_mgmt = FI_RM_ENABLED;
  i->domain_attr->av_type = (hints && hints->domain_attr && hints->domain_attr->av_type != FI_AV_UNSPEC)
                                ? hints->domain_attr->av_type
                                : FI_AV_TABLE;
  i->domain_attr->mr_mode = 0;
  i->domain_attr->mr_key_size = 8;
  i->domain_attr->cq_data_size = 8;
  i->domain_attr->cq_cnt = 64;
  i->domain_attr->ep_cnt = kEpsPerCard;
  i->domain_attr->tx_ctx_cnt = kEpsPerCard;
  i->domain_attr->rx_ctx_cnt = kEpsPerCard;
  i->domain_attr->max_ep_tx_ctx = 1;
  i->domain_attr->max_ep_rx_ctx = 1;
  i->domain_attr->max_ep_stx_ctx = 0;
  i->domain_attr->max_ep_srx_ctx = 0;
  i->domain_attr->cntr_cnt = 0;
  i->domain_attr->mr_iov_limit = 1;
  i->domain_attr->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
  i->domain_attr->mode = 0;
  i->domain_attr->mr_cnt = 1 << 16;
  i->fabric_attr->name = dup("npo");
  i->fabric_attr->prov_version = FI_VERSION(0, 1);
  i->fabric_attr->api_version = FI_VERSION(1, 17);
  return i;
}

int getinfo(std::uint32_t, const char*, const char*, std::uint64_t, const fi_info* hints, fi_info** info) {
  *info = nullptr;
  const BackendChoice b = choose_backend();
  const std::size_t n = count_cards(b);
  if (n == 0) return -FI_ENODATA;
  // Card choice (docs/libfabric.md "Picking a card"): a domain named in the hints; else
  // FI_NPO_CARD; else, inside a parallel job, the local rank modulo the card count (so rank
  // i of a node drives card i, whatever entry the runtime would pick); else every card.
  std::optional<unsigned> only;
  const bool named = hints && hints->domain_attr && hints->domain_attr->name;
  if (!named) {
    if (const char* c = env("FI_NPO_CARD")) {
      only = static_cast<unsigned>(std::atoi(c));
    } else {
      for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"}) {
        if (const char* r = env(var)) {
          only = static_cast<unsigned>(std::atoi(r)) % static_cast<unsigned>(n);
          break;
        }
      }
    }
  }
  fi_info* head = nullptr;
  fi_info* tail = nullptr;
  for (unsigned k = 0; k < n; ++k) {
    if (only && *only != k) continue;
    if (!hints_match(hints, k)) continue;
    fi_info* i = make_info(k, hints);
    if (!i) {
      fi_freeinfo(head);
      return -FI_ENOMEM;
    }
    if (tail) {
      tail->next = i;
    } else {
      head = i;
    }
    tail = i;
  }
  if (!head) return -FI_ENODATA;
  *info = head;
  return 0;
}

void cleanup() {
  delete g_shared.exchange(nullptr);  // closes the process-wide System, if any
}

fi_provider g_provider{
    .version = FI_VERSION(0, 1),
    .fi_version = FI_VERSION(1, 17),
    .context = {},
    .name = "npo",
    .getinfo = getinfo,
    .fabric = fabric_open,
    .cleanup = cleanup,
};

}  // namespace
}  // namespace npo::fi

extern "C" FI_EXT_INI { return &npo::fi::g_provider; }
