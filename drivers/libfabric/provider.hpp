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
//
// This private header (with ring.hpp, the ring format, hal_state.hpp, and module_fns.hpp, what the
// sources define for each other) holds the objects
// behind each fid and the helpers the sources share: hal_state.cpp (backend choice,
// process-wide state), config.cpp (the FI_NPO_* parameter table, fi_param_define / fi_param_get, once-per-process
// notices; config.hpp), cq_eq.cpp (EQ, CQ), av_mr.cpp (AV, MR), ep.cpp (the endpoint fid, fi_endpoint), msg.cpp (data
// path, DGRAM fi_ops_msg), progress.cpp (polling, stall dump), rdm.cpp / rdm_progress.cpp / rdm_msg.cpp (the RDM
// endpoint: receive side and tag matching, send side and progress, msg and tagged ops), rma.cpp, atomic.cpp, trace.cpp,
// provider.cpp (fabric, domain, getinfo, fi_prov_ini). Thread-safety: every fid of a domain is serialised by the
// domain's mutex (FI_THREAD_SAFE); the EQ has its own.
#pragma once
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
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
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

#include "config.hpp"
#include "fi_npo_ext.h"
#include "hal_state.hpp"
#include "npo/hal/hal.hpp"
#include "ring.hpp"
#include "trace.hpp"

namespace npo::fi {

inline char* dup(std::string_view s) {
  auto* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) {
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
  }
  return p;
}

inline const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

extern fi_provider g_provider;

// Logs through libfabric (FI_LOG_LEVEL=warn shows it), as every provider does.
inline void warn(fi_log_subsys sub, const std::string& msg) {
  if (fi_log_enabled(&g_provider, FI_LOG_WARN, sub))
    fi_log(&g_provider, FI_LOG_WARN, sub, "npo", __LINE__, "%s\n", msg.c_str());
}

inline void info(fi_log_subsys sub, const std::string& msg) {
  if (fi_log_enabled(&g_provider, FI_LOG_INFO, sub))
    fi_log(&g_provider, FI_LOG_INFO, sub, "npo", __LINE__, "%s\n", msg.c_str());
}

// ---- Small helpers ------------------------------------------------------------------------
template <typename F>
struct Enosys;
template <typename R, typename... A>
struct Enosys<R (*)(A...)> {
  static R call(A...) { return static_cast<R>(-FI_ENOSYS); }
};
#define NPO_ENOSYS(S, m) ::npo::fi::Enosys<decltype(S::m)>::call

inline int fi_errno_of(OpStatus st) {
  switch (st) {
    case OpStatus::kRemoteUnreachable: return FI_EHOSTUNREACH;
    case OpStatus::kWindowInvalid:
    case OpStatus::kWindowKey:
    case OpStatus::kWindowRange:
    case OpStatus::kWindowRights:
    case OpStatus::kWindowRevoked: return FI_ECONNREFUSED;
    case OpStatus::kPartitionDenied: return FI_EACCES;
    case OpStatus::kTimeout:
    case OpStatus::kAborted: return FI_ENODEV;
    default: return FI_EIO;
  }
}

// A status that says the fabric did not deliver (as opposed to a failure of the own card).
inline bool is_path_failure(OpStatus st) {
  switch (st) {
    case OpStatus::kRemoteUnreachable:
    case OpStatus::kWindowInvalid:
    case OpStatus::kWindowKey:
    case OpStatus::kWindowRange:
    case OpStatus::kWindowRights:
    case OpStatus::kWindowRevoked:
    case OpStatus::kPartitionDenied:
    case OpStatus::kFenceSkipped: return true;
    default: return false;
  }
}

inline int fi_errno_of(const Error& e) {
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
// set), report otherwise. FI_NPO_FAULT=report|abort (case ignored) overrides; another value
// is reported once and the default used.
inline bool in_parallel_job() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"})
    if (env(var)) return true;
  return false;
}
inline bool abort_on_fault() {
  static const bool v = [] {
    const bool job = in_parallel_job();
    if (auto f = param_choice(Param::kFault, {"abort", "report"},
                              job ? "the default abort (inside a parallel job)" : "the default report"))
      return *f == "abort";
    return job;
  }();
  return v;
}
// A peer unreachable or its window refused for this long is a fault, not a transient (a link
// retrain or reroute under it is survived). FI_NPO_FAULT_MS overrides (1..86400000 ms; default
// 5000 ms, also for a bad value, which is reported once).
inline std::chrono::milliseconds fault_persistence() {
  return std::chrono::milliseconds(param_int(Param::kFaultMs, 1, 86'400'000).value_or(5000));
}
// How often progress checks that the own card still answers (mailbox heartbeat).
constexpr auto kHeartbeatPeriod = std::chrono::seconds(1);

// Ports of `dev` whose link is not up: "port 3 down (neighbour fabric id 4)", "port 0 down (no
// transceiver module)" (a removed module).
inline std::string down_ports(Device& dev) {
  std::string out;
  for (unsigned p = 0; p < dev.port_count(); ++p) {
    auto st = read_port(dev, p);
    if (!st || st->link_up) continue;
    // a port without a module that never had one (an unpopulated cage) is not news
    if (!st->module_present && st->up_count == 0 && !st->events.module_change) continue;
    if (!out.empty()) out += ", ";
    out += "port " + std::to_string(p) + (st->module_present ? " down" : " down (transceiver module removed)");
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
  // one-sided operations (fi_npo_op_counters): started as initiator, executed as target
  std::atomic<std::uint64_t> rma_writes{0}, rma_reads{0}, atomics{0};
  std::atomic<std::uint64_t> target_rma_writes{0}, target_rma_reads{0}, target_atomics{0};
  // rendezvous payload bytes the card read straight from the user's buffer / from staging
  std::atomic<std::uint64_t> rndv_zero_copy_bytes{0}, rndv_staged_bytes{0};
  std::atomic<std::uint64_t> credit_reads{0};  // remote reads of a peer's consumer counter
  // The process's memory mapped for the card (zero-copy rendezvous sources), made by the first
  // RDM endpoint; null when the backend cannot (VFIO) or FI_NPO_ZERO_COPY=0. Guarded by mu.
  std::unique_ptr<ProcessMemoryMap> process_map;
  bool process_map_tried = false;
  // Memory regions open to remote access (FI_REMOTE_READ / FI_REMOTE_WRITE), by key; guarded by mu.
  struct MrRegion {
    std::array<iovec, kIovLimit> iov{};
    std::size_t count = 0;
    std::uint64_t len = 0;     // bytes over all iovs
    std::uint64_t access = 0;  // FI_REMOTE_READ / FI_REMOTE_WRITE
    std::uint64_t offset = 0;  // the registration's offset: remote address `offset` is byte 0
  };
  std::unordered_map<std::uint64_t, MrRegion> mrs;
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
  std::unordered_map<std::uint64_t, fi_addr_t> by_src;  // (fabric ID << 16 | window ID) -> fi_addr
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
    std::uint64_t tag = 0;
    fi_addr_t src = FI_ADDR_NOTAVAIL;
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
  std::chrono::steady_clock::time_point empty_since;  // when the back-off of this empty run began
  std::atomic<unsigned> refs{0};

  void push(const Comp& c) { comps.push_back(c); }
  void push_error(void* ctx, std::uint64_t flags, std::size_t len, std::size_t olen, int err, std::string msg,
                  std::uint64_t tag = 0, std::uint64_t data = 0) {
    Err e{};
    e.entry.tag = tag;
    e.entry.data = data;
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

// ---- Counter (cntr.cpp; docs/libfabric.md "Counters") ---------------------------------------
// What a counter bound to an endpoint counts (fi_ep_bind(3) flags FI_SEND, FI_RECV, FI_READ,
// FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE).
enum CntrEvent : unsigned {
  kCntrSend,
  kCntrRecv,
  kCntrRead,
  kCntrWrite,
  kCntrRemoteRead,
  kCntrRemoteWrite,
  kCntrEvents
};
struct Cntr {
  fid_cntr cntr{};
  Domain* domain = nullptr;
  std::atomic<std::uint64_t> value{0}, errors{0};
  std::vector<Ep*> eps;  // endpoints bound (progressed by fi_cntr_read / fi_cntr_wait); guarded by domain->mu
  unsigned empty_reads = 0;
  std::atomic<unsigned> refs{0};
};

// ---- Endpoint -----------------------------------------------------------------------------
struct Ep {
  fid_ep ep{};
  Domain* domain = nullptr;
  Av* av = nullptr;
  Cq* tx_cq = nullptr;
  Cq* rx_cq = nullptr;
  Eq* eq = nullptr;
  std::array<Cntr*, kCntrEvents> cntrs{};  // bound counters (RDM only)
  // One operation of this endpoint ended (with or without a CQ entry: counters count every
  // operation, fi_cntr(3)): the counter bound for its kind moves, its error count on `error`.
  // `cq_flags` as in the completion: FI_REMOTE_WRITE / FI_REMOTE_READ (target side of an RMA
  // or atomic), FI_SEND, FI_RECV, FI_READ (RMA reads, fetching atomics), FI_WRITE.
  void count(std::uint64_t cq_flags, bool error = false) {
    const CntrEvent ev = (cq_flags & FI_REMOTE_WRITE)  ? kCntrRemoteWrite
                         : (cq_flags & FI_REMOTE_READ) ? kCntrRemoteRead
                         : (cq_flags & FI_SEND)        ? kCntrSend
                         : (cq_flags & FI_RECV)        ? kCntrRecv
                         : (cq_flags & FI_READ)        ? kCntrRead
                                                       : kCntrWrite;
    if (Cntr* c = cntrs[ev]) (error ? c->errors : c->value).fetch_add(1, std::memory_order_release);
  }
  bool tx_selective = false, rx_selective = false;
  std::uint64_t tx_op_flags = 0, rx_op_flags = 0;  // the info's default op flags (FI_COMPLETION)
  // Whether a send call without flags (fi_send, fi_tsend, ...) generates a completion: always,
  // unless the CQ was bound with FI_SELECTIVE_COMPLETION and the default op flags lack FI_COMPLETION.
  bool tx_default_completion() const { return !tx_selective || (tx_op_flags & FI_COMPLETION); }
  bool rx_default_completion() const { return !rx_selective || (rx_op_flags & FI_COMPLETION); }
  bool enabled = false;
  std::uint32_t service = 0;  // the service this endpoint publishes (names.hpp), 0 for none
  unsigned ep_no = 0;
  unsigned lanes = kDefaultLanes;
  unsigned slots = kSlotsPerLane;         // slots per lane of the own ring
  std::vector<std::uint64_t> lane_owner;  // per lane: (fabric ID << 8 | endpoint number) + 1 of its sender
  std::vector<std::uint64_t> lane_src;    // per lane: src_key_of() + 1 of its sender's ring window
  std::vector<std::uint64_t> lane_ring;   // RDM, per lane: dest_key_of() + 1 of its sender's ring (window, generation)
  std::unordered_set<std::uint64_t> gone_rings;  // RDM: rings (dest_key_of) of closed senders (predecessor_gone)
  std::vector<std::uint64_t> pending_gone;       // RDM: rings found closed, cleaned up by rdm_progress
  std::unordered_map<std::uint64_t, unsigned> lane_of_src;  // src_key_of() -> its lane in the own ring
  std::vector<unsigned> hot_lanes;  // RDM: lanes with a sender, scanned on every poll (rdm_poll_rx)
  unsigned rx_polls = 0;            // RDM: polls so far; every 16th scans every lane
  unsigned my_lane = 0;             // lane this endpoint writes in every peer's ring

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
    // RDM: what a resend needs (the staging slot keeps header and payload until delivered)
    std::uint8_t msg_kind = kEager;
    std::uint64_t tag = 0, cq_data = 0;
    std::uint64_t send_id = 0;   // the rendezvous send this FIN (or RTS) belongs to; 0: none
    int rndv_chunk = -1;         // FIN: the sender staging chunk whose data goes first
    std::uint64_t rndv_src = 0;  // FIN without a staging chunk: the IOVA of the user's data (zero-copy)
    bool restage = false;        // a zero-copy chunk the card could not read: resend it from staging
    std::uint64_t land_off = 0, data_len = 0;
    unsigned lane = 0, slots = 0, lanes = 0;  // the peer ring's geometry
    WindowHandle handle{};
    std::chrono::steady_clock::time_point retry_at{};
    bool verify = false;    // the queue timed out under it: check delivery before resending
    unsigned attempts = 0;  // resends so far (the backoff doubles with each)
  };
  std::deque<Tx> tx;
  std::vector<unsigned> free_slots;
  struct Dest {
    std::uint64_t next_seq = 1;
    std::uint64_t consumed = 0;
    std::optional<std::chrono::steady_clock::time_point> failing_since;  // first error of a run
    std::vector<std::uint64_t> holes;  // seqs whose header write failed: tombstones owed
    bool synced = false;               // next_seq continues the lane after a predecessor's messages (sync_lane)
  };
  std::chrono::steady_clock::time_point next_heartbeat = std::chrono::steady_clock::now() + kHeartbeatPeriod;
  std::unordered_map<std::uint64_t, Dest> dests;

  // ---- RDM state (rdm.cpp) ----
  bool rdm = false;
  bool directed_recv = false;  // FI_DIRECTED_RECV asked for: a receive's source address counts
  bool progressing = false;    // progress() is not re-entered from inside itself
  // enqueue_tx leaves the doorbell to flush_submit (rendezvous chunks: one doorbell for all of
  // a progress pass, so the card moves them back to back without a round trip each)
  bool defer_submit = false, submit_pending = false;
  struct Posted {  // a posted receive
    void* ctx = nullptr;
    std::array<iovec, kIovLimit> iov{};
    std::size_t count = 0;
    std::uint64_t flags = 0;  // op flags (FI_COMPLETION, ...)
    bool tagged = false;
    std::uint64_t tag = 0, ignore = 0;
    fi_addr_t src = FI_ADDR_UNSPEC;
    // FI_MULTI_RECV (fi_msg(3)): one buffer takes message after message, each placed right
    // after the one before (take_posted cuts a slice per message). The buffer stays posted
    // until less than min_multi_recv bytes are left; the completion of the last message in
    // it (released, none in flight) carries FI_MULTI_RECV. Shared by the slices.
    struct Multi {
      std::uint64_t used = 0;  // bytes handed to messages so far
      unsigned inflight = 0;   // slices whose message has not completed yet
      bool released = false;   // taken off `posted`
    };
    std::shared_ptr<Multi> multi;
  };
  std::deque<Posted> posted;
  std::size_t min_multi_recv = kEagerMax;  // FI_OPT_MIN_MULTI_RECV, bytes
  struct Unexp {                           // a message that arrived before its receive (eager payload, or an RTS)
    bool tagged = false;
    MsgKind kind = kEager;
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    std::uint64_t src_key = 0;
    std::uint64_t tag = 0, data = 0;
    bool has_data = false;
    std::uint64_t total = 0;  // message bytes
    std::vector<std::byte> payload;
    std::uint64_t send_id = 0;   // RTS: the sender's id of the message
    void* claimed_by = nullptr;  // FI_CLAIM: the context that claimed it
    std::uint64_t ring = 0;      // the sender's ring (dest_key_of; 0: not known)
    bool sender_gone = false;    // RTS of a sender found closed (predecessor_gone): no data will come
  };
  std::list<Unexp> unexp;
  std::size_t unexp_bytes = 0;
  struct SendReq {  // a rendezvous send
    void* ctx = nullptr;
    bool completion = true;
    std::array<iovec, kIovLimit> iov{};
    std::size_t count = 0;
    std::uint64_t total = 0, done = 0;
    std::uint64_t cq_flags = 0, tag = 0;
    std::uint64_t dest_key = 0;
    std::uint64_t recv_id = 0;  // the receiver's id of the message (from its first CTS)
    Av::Entry peer{};
    struct Grant {
      std::uint64_t msg_off, land_off, len;
    };
    std::deque<Grant> grants;  // granted, not yet written
    // RMA (rma.cpp): a target's answer to a large read reads MR `rma_key` from base_off on
    // (looked up per chunk); rma_err is sent in each FIN (0, or the MR vanished meanwhile).
    bool rma_src = false;
    std::uint64_t rma_key = 0, base_off = 0;
    std::uint64_t rma_err = 0;
    std::vector<std::byte> owned;  // an injected large write's copy of the data
    bool no_zero_copy = false;     // a chunk could not be read in place: stage the rest
  };
  std::map<std::uint64_t, SendReq> sends;
  std::uint64_t next_send_id = 1;
  struct RecvReq {  // a rendezvous receive in progress
    Posted r;
    std::uint64_t total = 0, granted = 0, received = 0;
    std::uint64_t send_id = 0;
    std::uint64_t src_key = 0;
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    std::uint64_t tag = 0, data = 0;
    bool has_data = false, tagged = false;
    // RMA (rma.cpp): a target receiving a large write places chunks into MR rma_key at
    // rma_addr (rma_write); an initiator receiving a large read completes rma_ops[rma_op].
    bool rma_write = false;
    std::uint64_t rma_key = 0, rma_addr = 0, rma_op = 0;
    std::uint64_t rma_err = 0;
    std::vector<std::uint64_t> landing;  // landing chunk offsets granted and not yet FIN'd
    std::uint64_t ring = 0;              // the sender's ring (dest_key_of; 0: not known)
  };
  std::map<std::uint64_t, RecvReq> recvs;
  struct RmaOp {  // an RMA of this initiator waiting for its ack / data (rma.cpp)
    void* ctx = nullptr;
    bool completion = true;
    bool read = false;
    std::uint64_t len = 0;
    std::array<iovec, kIovLimit> iov{};  // read: where the data goes
    std::size_t count = 0;
    Av::Entry peer{};
    bool atomic = false;  // an atomic (atomic.cpp); `read`: a fetching one, iov takes the old values
  };
  std::map<std::uint64_t, RmaOp> rma_ops;
  std::uint64_t next_recv_id = 1;
  std::vector<unsigned> land_free;  // landing chunks free (receiver)
  std::unique_ptr<MemoryRegion> rndv_staging;
  std::vector<unsigned> rndv_free;  // sender staging chunks free
  struct Ctrl {                     // a control message waiting for credits (CTS)
    std::uint64_t dest_key;         // the peer, as src_key_of() (a key of `peers`)
    MsgKind kind;
    std::vector<std::uint64_t> body;  // CTS: send_id, recv_id, then (msg_off, land_off, len) per grant
  };
  std::deque<Ctrl> ctrl_out;
  std::deque<Tx> retry;                                // failed writes waiting to be resent
  std::unordered_map<std::uint64_t, Av::Entry> peers;  // senders seen in RTS, by src key
  std::uint64_t landing_off() const { return ring_bytes(lanes, slots); }
  // Every sender owns one lane of a ring (its fabric ID x 4 + endpoint number, mod lanes): a
  // second sender on a lane would overwrite the first one's slots. Fatal when seen. The owner
  // is a card's fabric ID and endpoint number, not a ring window: endpoint numbers are unique
  // among a card's open endpoints and a card has one owning process, so a message of the same
  // card and number from another ring window comes from the owner's successor (the owner was
  // closed, or its process is gone), which continued the lane's sequence (sync_lane). The
  // lane's credits (`ack`, post_slot) then go to the successor's window.
  bool lane_shared(unsigned lane, std::uint32_t src_fabric_id, std::uint16_t src_window, std::uint8_t src_ep,
                   std::uint16_t src_generation, bool tombstone) {
    const std::uint64_t who = ((std::uint64_t{src_fabric_id} << 8) | src_ep) + 1;
    if (lane_owner[lane] == 0) {
      lane_owner[lane] = who;
      hot_lanes.push_back(lane);
    }
    if (lane_owner[lane] != who) {
      report_fatal("npo: two senders write lane " + std::to_string(lane) + " of the ring of " + where() +
                       " (fabric ids " + std::to_string((lane_owner[lane] - 1) >> 8) + " and " +
                       std::to_string(src_fabric_id) + "): open the endpoints with more FI_NPO_RING_LANES (" +
                       std::to_string(lanes) + " now)",
                   FI_EIO);
      return true;
    }
    const std::uint64_t k = src_key_of(src_fabric_id, src_window) + 1;
    if (lane_src[lane] != k) {  // the owner's first message, or its successor's
      if (lane_src[lane] != 0) lane_of_src.erase(lane_src[lane] - 1);
      lane_src[lane] = k;
      lane_of_src[k - 1] = lane;
    }
    // The successor may get the same window ID: its ring differs in the generation (never 0
    // on a ring window; 0 is a sender that does not say). A successor's tombstones come
    // before messages its predecessor left (sync_lane fills the gaps below the highest one),
    // so they do not take the lane over: its first own message, after all of those, does.
    if (rdm && src_generation != 0 && !tombstone) {
      const std::uint64_t ring = ring_key(src_fabric_id, src_window, src_generation) + 1;
      if (lane_ring[lane] != ring) {
        if (lane_ring[lane] != 0) {
          gone_rings.insert(lane_ring[lane] - 1);
          pending_gone.push_back(lane_ring[lane] - 1);
        }
        lane_ring[lane] = ring;
        gone_rings.erase(ring - 1);  // a ring of that key closed long ago: this one is live
      }
    }
    return false;
  }

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
  // Stall diagnostic (FI_NPO_STALL_MS, default off): when progress saw no completion and no
  // arrival for that long, the endpoint's ring and flow-control state goes to the log once
  // per quiet period (FI_LOG_LEVEL=warn shows it).
  std::chrono::steady_clock::time_point last_activity = std::chrono::steady_clock::now();
  bool stall_dumped = false;
  void note_activity() {
    last_activity = std::chrono::steady_clock::now();
    stall_dumped = false;
  }
  void check_stall();
  void progress() {
    if (rdm) return rdm_progress();
    poll_dma();
    poll_rx();
    check_card();
    check_stall();
  }
  void rdm_progress();                 // rdm.cpp
  void rdm_tx_done(Tx t);              // rdm.cpp: a finished ring write of an RDM endpoint
  void rdm_poll_rx();                  // rdm.cpp: consume the own ring (never sends)
  void rdm_tx_delivered(const Tx& t);  // rdm.cpp: it landed: free what it held, complete
  void rdm_tx_failed(Tx t);            // rdm.cpp: resend later, or fail the operation
  // rdm.cpp: the ring `ring` (dest_key_of) belonged to a sender whose successor (the endpoint
  // opened next with the same card and endpoint number) has written this endpoint's ring: the
  // sender is closed. What it owed or was owed can never finish: its rendezvous receives fail
  // (FI_EIO), its announced unmatched messages are dropped (claimed ones fail at FI_CLAIM),
  // our sends and RMA to it fail. Run from rdm_progress, never inside a send's wait (which
  // holds references into `dests`). Control messages and failed writes to a gone ring are
  // dropped where they are sent (drop_tx_to_gone); the ring stays in gone_rings.
  void predecessor_gone(std::uint64_t ring);
  // rdm.cpp: a write to a gone ring that failed or waits to be resent: not resent; an eager
  // send's completion is an FI_EIO error.
  void drop_tx_to_gone(const Tx& t);
  void report_fatal(const std::string& msg, int err) {
    if (fatal_reported) return;
    fatal_reported = true;
    if (trace::on()) trace::fault(*this, "fatal", msg);
    if (eq) eq->push_error(&ep.fid, ep.fid.context, err, msg);
    if (abort_on_fault()) {
      if (trace::on()) trace::flush();  // the process ends: write what was recorded
      const std::string_view m = std::string_view(msg).starts_with("npo: ") ? std::string_view(msg).substr(5) : msg;
      std::fprintf(stderr,
                   "npo: fatal: %.*s (the process ends; FI_NPO_FAULT=report would report it on the EQ instead)\n",
                   static_cast<int>(m.size()), m.data());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  // Why the own card is gone (removed: its registers read all-ones; or its backend gone, e.g.
  // "emu-remote: npo-emud at DIR is gone ..."), or empty while it still answers. Register
  // reads, not the mailbox: a firmware slowed down by a loaded host leaves the mailbox busy for
  // a second (kUnavailable too) on a card that works. The HAL's message without its context:
  // that names the System-local index (0 for an emu-remote card), where() names the card.
  std::optional<std::string> card_gone_reason() {
    auto c = domain->dev->card_counters();
    if (!c && c.error().code() == Code::kUnavailable) return c.error().message();
    return std::nullopt;
  }
  bool own_card_gone() { return card_gone_reason().has_value(); }
  // A failed send to `dest_key`: fatal at once when the own card is gone; otherwise once that
  // peer kept failing for fault_persistence(). A queue timeout (no progress for the queue's
  // hang_timeout, the queue reset and re-enabled) with the card still answering is a transient:
  // on a loaded host the engine may not be scheduled for a second; a hung engine keeps timing
  // out and becomes fatal after the persistence time.
  void send_failed(std::uint64_t dest_key, OpStatus st, const std::string& msg) {
    if (trace::on()) trace::fault(*this, "send failed", msg);
    if (st == OpStatus::kTimeout || st == OpStatus::kAborted) {
      if (auto gone = card_gone_reason()) {
        report_fatal(where() + " is gone: " + *gone, FI_ENODEV);
        return;
      }
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
  // Once per kHeartbeatPeriod: the own card still answers (card_gone_reason), else fatal.
  void check_card() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_heartbeat) return;
    next_heartbeat = now + kHeartbeatPeriod;
    if (auto gone = card_gone_reason()) report_fatal(where() + " is gone: " + *gone, FI_ENODEV);
  }
};

// The endpoint behind an fid_ep (its first member).
inline Ep* ep_of(fid_ep* f) { return reinterpret_cast<Ep*>(f); }
// FI_NPO_STALL_MS, read once: after how long without progress an endpoint dumps its state (0: never).
std::chrono::milliseconds stall_dump_after();

// ---- fid ops helpers ----------------------------------------------------------------------
inline int no_bind(fid*, fid*, std::uint64_t) { return -FI_ENOSYS; }
inline int no_control(fid*, int, void*) { return -FI_ENOSYS; }
inline int no_ops_open(fid*, const char*, std::uint64_t, void**, void*) { return -FI_ENOSYS; }
inline int no_tostr(const fid*, char*, std::size_t) { return -FI_ENOSYS; }
inline int no_ops_set(fid*, const char*, std::uint64_t, void*, void*) { return -FI_ENOSYS; }

}  // namespace npo::fi

// What the sources of the module define for each other (functions, op tables, message bodies).
#include "module_fns.hpp"
