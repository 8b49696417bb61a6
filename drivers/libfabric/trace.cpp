// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: provider-side tracing (trace.hpp; docs/libfabric.md "Traces"). A small
// trace-event JSON writer of its own: the provider is a HAL user and links no JSON library.
#include "trace.hpp"

#include <ctime>
#include <fstream>

#include "provider.hpp"

namespace npo::fi::trace {

std::atomic<Tracer*> g_tracer{nullptr};

namespace {

std::uint64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// ns as microseconds with three decimals, exactly ("12.345").
std::string us(std::uint64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%llu.%03llu", static_cast<unsigned long long>(ns / 1000),
                static_cast<unsigned long long>(ns % 1000));
  return b;
}

void escape_into(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += ch;
    }
  }
  out += '"';
}

// A JSON object built field by field ({"k":v,...}).
class Obj {
 public:
  Obj& num(std::string_view k, std::uint64_t v) { return raw(k, std::to_string(v)); }
  Obj& str(std::string_view k, std::string_view v) {
    key(k);
    escape_into(s_, v);
    return *this;
  }
  Obj& raw(std::string_view k, std::string_view v) {
    key(k);
    s_ += v;
    return *this;
  }
  std::string done() { return s_.empty() ? "{}" : s_ + "}"; }

 private:
  void key(std::string_view k) {
    s_ += s_.empty() ? "{" : ",";
    escape_into(s_, k);
    s_ += ':';
  }
  std::string s_;
};

struct Event {
  char ph;  // 'X', 'i', 'M'
  std::uint32_t tid;
  std::uint64_t ts_ns, dur_ns;
  std::string name;
  const char* cat;
  std::string args;  // a JSON object
};

struct PendingOp {
  std::uint64_t bytes = 0;
  Role role = Role::kPayload;
  std::uint32_t peer = 0;
  std::uint64_t submit_ns = 0;  // 0: not submitted yet
  std::uint64_t msg = 0;        // the message it belongs to (0: none)
  const char* name = "dma";
};

struct Msg {
  const char* name;
  bool send;
  std::uint64_t post_ns;
  std::uint64_t bytes;     // send: message bytes; receive: buffer bytes
  std::uint64_t done = 0;  // rendezvous send: chunk bytes delivered
  std::uint32_t peer;
  bool tagged;
  std::uint64_t tag;
  std::uint64_t recv_id = 0;
};

struct EpState {
  std::uint32_t tid = 0;  // base track: +1 queue, +2 sends, +3 receives, +4 faults
  std::unordered_map<OpHandle, PendingOp> ops;
  std::vector<OpHandle> unstamped;
  std::uint64_t current = 0;  // the send call in progress
  std::unordered_map<std::uint64_t, Msg> msgs;
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint64_t> by_ring;  // (dest key, seq) -> msg
  std::unordered_map<std::uint64_t, std::uint64_t> by_send_id, by_recv_id;
  std::unordered_map<void*, std::deque<std::uint64_t>> recv_by_ctx;
};

const char* payload_name(const Ep& e, std::uint8_t kind) {
  if (!e.rdm) return "datagram write";
  switch (kind) {
    case kEager: return "eager write";
    case kRts: return "rts write";
    case kCts: return "cts write";
    case kFin: return "fin write";
    default: return "ring write";
  }
}

}  // namespace

class Tracer {
 public:
  explicit Tracer(std::string path, std::size_t max_events) : path_(std::move(path)), max_(max_events) {}

  std::mutex mu;

  EpState& state(Ep& e) {
    auto [it, fresh] = eps_.try_emplace(&e);
    if (fresh) {
      const std::uint32_t card = e.domain->card;
      it->second.tid = card * 100 + e.ep_no * 10;
      const std::string who = "card " + std::to_string(card) + " ep " + std::to_string(e.ep_no);
      name_track(it->second.tid + 1, who + ": DMA queue");
      name_track(it->second.tid + 2, who + ": sends");
      name_track(it->second.tid + 3, who + ": receives");
      name_track(it->second.tid + 4, who + ": faults");
      cards_.push_back(Obj()
                           .num("card", card)
                           .num("fabric_id", e.domain->fabric_id)
                           .num("ep", e.ep_no)
                           .num("queue_tid", it->second.tid + 1)
                           .done());
    }
    return it->second;
  }

  void add(Event ev) {
    if (events_.size() >= max_) {
      ++dropped_;
      return;
    }
    events_.push_back(std::move(ev));
  }

  void end_msg(EpState& s, std::uint64_t id, const char* status, std::uint64_t bytes) {
    auto it = s.msgs.find(id);
    if (it == s.msgs.end()) return;
    const Msg& m = it->second;
    const std::uint64_t now = mono_ns();
    Obj a;
    a.num("msg", id).num("bytes", bytes).str("status", status).num("post_ns", m.post_ns).num("end_ns", now);
    if (m.send) a.num("peer", m.peer);
    if (m.tagged) a.num("tag", m.tag);
    add({'X', s.tid + (m.send ? 2u : 3u), m.post_ns, now - m.post_ns, m.name, m.send ? "send" : "recv", a.done()});
    if (m.recv_id) s.by_recv_id.erase(m.recv_id);
    s.msgs.erase(it);
  }

  void instant(EpState& s, const std::string& name, const char* cat, std::string args) {
    add({'i', s.tid + 4, mono_ns(), 0, name, cat, std::move(args)});
  }

  void closed(Ep& e) {
    auto it = eps_.find(&e);
    if (it == eps_.end()) return;
    unfinished_ops_ += it->second.ops.size();
    unfinished_msgs_ += it->second.msgs.size();
    eps_.erase(it);
  }

  std::uint64_t next_msg() { return ++msg_counter_; }

  // Streams the events to PATH.tmp, then renames it over PATH (a reader never sees half a file).
  void write() {
    const char* rank = rank_env();
    Obj other;
    other.str("tool", "libnpo-fi")
        .num("pid", static_cast<std::uint64_t>(::getpid()))
        .raw("rank", rank ? std::to_string(std::atoi(rank)) : "null")
        .str("clock", "CLOCK_MONOTONIC")
        .num("events", events_.size())
        .num("dropped_events", dropped_)
        .num("unfinished_ops", unfinished_ops_)
        .num("unfinished_messages", unfinished_msgs_);
    std::string cards = "[";
    for (std::size_t i = 0; i < cards_.size(); ++i) cards += (i ? "," : "") + cards_[i];
    other.raw("endpoints", cards + "]");
    const std::string tmp = path_ + ".tmp";
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const std::string pid = std::to_string(::getpid());
    std::string text = "{\"displayTimeUnit\":\"ns\",\"otherData\":" + other.done() + ",\"traceEvents\":[\n";
    text += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":";
    escape_into(text, "libnpo-fi pid " + pid + (rank ? std::string(" rank ") + rank : std::string()));
    text += "}}";
    out << text;
    std::map<std::uint32_t, unsigned> layers;
    const std::vector<std::uint32_t> tids = layer_tids(layers);
    for (const auto& [tid, name] : tracks_) {
      out << ",\n" << track_meta(pid, tid, name);
      for (unsigned k = 1; k <= layers[tid]; ++k)
        out << ",\n" << track_meta(pid, tid + k * kLayerTid, name + " (overlap " + std::to_string(k) + ")");
    }
    for (std::size_t i = 0; i < events_.size(); ++i) {
      const Event& ev = events_[i];
      text = ",\n{\"name\":";
      escape_into(text, ev.name);
      text += ",\"cat\":\"";
      text += ev.cat;
      text += "\",\"ph\":\"";
      text += ev.ph;
      text += "\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tids[i]) + ",\"ts\":" + us(ev.ts_ns);
      if (ev.ph == 'X') text += ",\"dur\":" + us(ev.dur_ns);
      if (ev.ph == 'i') text += ",\"s\":\"t\"";
      text += ",\"args\":" + ev.args + "}";
      out << text;
    }
    out << "\n]}\n";
    out.flush();
    if (!out) {
      notice_once("trace-write", "npo: cannot write the trace file " + tmp + ": " + std::strerror(errno));
      return;
    }
    out.close();
    if (std::rename(tmp.c_str(), path_.c_str()) != 0)
      notice_once("trace-write", "npo: cannot write the trace file " + path_ + ": " + std::strerror(errno));
  }

  static const char* rank_env() {
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
      if (const char* r = env(v)) return r;
    return nullptr;
  }

 private:
  void name_track(std::uint32_t tid, const std::string& name) { tracks_[tid] = name; }

  // Track metadata (name, sort order) of `tid` for the file.
  static std::string track_meta(const std::string& pid, std::uint32_t tid, const std::string& name) {
    std::string m = "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid) +
                    ",\"args\":{\"name\":";
    escape_into(m, name);
    m += "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(tid) +
         ",\"args\":{\"sort_index\":" + std::to_string(tid) + "}}";
    return m;
  }

  // Spans of one track that overlap without nesting (pipelined ops, concurrent messages) would
  // not draw as a stack: each span goes to the first of the track's layers (the track itself,
  // then tid + k * kLayerTid, "... (overlap k)") where it nests. Returns the tid per event.
  std::vector<std::uint32_t> layer_tids(std::map<std::uint32_t, unsigned>& layers) const {
    std::vector<std::uint32_t> tid(events_.size());
    std::unordered_map<std::uint32_t, std::vector<std::size_t>> spans;
    for (std::size_t i = 0; i < events_.size(); ++i) {
      tid[i] = events_[i].tid;
      if (events_[i].ph == 'X') spans[events_[i].tid].push_back(i);
    }
    for (auto& [track, idx] : spans) {
      std::stable_sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) {
        const Event &a = events_[x], &b = events_[y];
        return a.ts_ns != b.ts_ns ? a.ts_ns < b.ts_ns : a.dur_ns > b.dur_ns;
      });
      std::vector<std::vector<std::uint64_t>> stacks;  // per layer: ends of the open spans
      for (const std::size_t i : idx) {
        const std::uint64_t start = events_[i].ts_ns, end = start + events_[i].dur_ns;
        std::size_t k = 0;
        for (;; ++k) {
          if (k == stacks.size()) stacks.emplace_back();
          auto& st = stacks[k];
          while (!st.empty() && st.back() <= start) st.pop_back();
          if (st.empty() || end <= st.back()) {
            st.push_back(end);
            break;
          }
        }
        tid[i] = track + static_cast<std::uint32_t>(k) * kLayerTid;
        unsigned& n = layers[track];
        n = std::max(n, static_cast<unsigned>(k));
      }
    }
    return tid;
  }

  static constexpr std::uint32_t kLayerTid = 1'000'000;
  std::string path_;
  std::size_t max_;
  std::vector<Event> events_;
  std::map<std::uint32_t, std::string> tracks_;  // tid -> name
  std::vector<std::string> cards_;
  std::unordered_map<const Ep*, EpState> eps_;
  std::uint64_t dropped_ = 0, unfinished_ops_ = 0, unfinished_msgs_ = 0, msg_counter_ = 0;
};

namespace {

// PATH with %p (pid) and %r (rank) replaced; without either, ".PID" before a final ".json"
// (else ".PID.json" appended).
std::string file_name(std::string path) {
  const std::string pid = std::to_string(::getpid());
  const char* rank = Tracer::rank_env();
  bool substituted = false;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    if (path[i] != '%') continue;
    const char c = path[i + 1];
    if (c != 'p' && c != 'r') continue;
    const std::string v = c == 'p' ? pid : (rank ? rank : pid);
    path.replace(i, 2, v);
    i += v.size() - 1;
    substituted = true;
  }
  if (substituted) return path;
  if (path.ends_with(".json")) return path.substr(0, path.size() - 5) + "." + pid + ".json";
  return path + "." + pid + ".json";
}

// Deletes the tracer when the provider is unloaded (libfabric's fi_fini dlcloses it, after every
// fid is closed) or the process exits normally: until then it lives, since a fatal fault may
// write the file from any thread (and then ends the process with _Exit, skipping this).
struct TracerOwner {
  TracerOwner() = default;
  TracerOwner(const TracerOwner&) = delete;
  TracerOwner& operator=(const TracerOwner&) = delete;
  ~TracerOwner() {
    Tracer* t = g_tracer.exchange(nullptr, std::memory_order_acq_rel);
    if (t == nullptr) return;
    { std::lock_guard lk(t->mu); }  // a caller that loaded it before the exchange is done
    delete t;
  }
};
TracerOwner g_tracer_owner;

// Tracer with its mutex held, or null when tracing is off.
struct Locked {
  Tracer* t;
  std::unique_lock<std::mutex> lk;
  explicit Locked() : t(g_tracer.load(std::memory_order_acquire)) {
    if (t) lk = std::unique_lock(t->mu);
  }
};

}  // namespace

namespace {
// FI_NPO_TRACE names a file in a directory this process cannot write: said at start (the file
// is written at exit, when nobody looks any more).
void check_trace_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    notice_once("trace-dir", "npo: FI_NPO_TRACE: cannot write the trace file " + path + " (directory " + dir + ": " +
                                 std::strerror(errno) + "); the trace is recorded but will be lost");
}
}  // namespace

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* p = param_str(Param::kTrace);
    if (!p) return;
    std::size_t max = 1'000'000;
    if (auto m = param_int(Param::kTraceMax, 0, std::int64_t{1} << 40)) max = static_cast<std::size_t>(*m);
    check_trace_dir(file_name(p));
    // Lives until the provider is unloaded (TracerOwner).
    g_tracer.store(new Tracer(file_name(p), max), std::memory_order_release);
  });
}

void op_enqueued(Ep& e, OpHandle handle, std::uint64_t bytes, Role role, std::uint32_t peer_fabric_id) {
  Locked l;
  if (!l.t) return;
  EpState& s = l.t->state(e);
  PendingOp op;
  op.bytes = bytes;
  op.role = role;
  op.peer = peer_fabric_id;
  s.ops[handle] = op;
  s.unstamped.push_back(handle);
}

template <typename Tx>
void submitted(Ep& e, const Tx* tx) {
  Locked l;
  if (!l.t) return;
  EpState& s = l.t->state(e);
  const std::uint64_t now = mono_ns();
  std::uint64_t msg = 0;
  const char* payload = "ring write";
  if (tx) {
    const auto key = std::make_pair(tx->dest_key, tx->seq);
    payload = payload_name(e, tx->msg_kind);
    if (auto it = s.by_ring.find(key); it != s.by_ring.end()) {
      msg = it->second;  // a resend
    } else if (!e.rdm) {
      msg = 0;
    } else if (tx->msg_kind == kEager || tx->msg_kind == kRts) {
      msg = s.current;
    } else if (tx->msg_kind == kFin) {
      if (auto f = s.by_send_id.find(tx->send_id); f != s.by_send_id.end()) msg = f->second;
    } else if (tx->msg_kind == kCts && tx->len >= 16) {
      // the CTS body (in its staging slot): send_id, recv_id, grants
      std::uint64_t recv_id = 0;
      std::memcpy(&recv_id, e.staging_slot(tx->slot) + kHdr + 8, 8);
      if (auto f = s.by_recv_id.find(recv_id); f != s.by_recv_id.end()) msg = f->second;
    }
    if (msg) s.by_ring[key] = msg;
  }
  for (const OpHandle h : s.unstamped) {
    auto it = s.ops.find(h);
    if (it == s.ops.end()) continue;
    PendingOp& op = it->second;
    op.submit_ns = now;
    op.msg = msg;
    switch (op.role) {
      case Role::kChunk: op.name = "rendezvous chunk"; break;
      case Role::kPayload: op.name = payload; break;
      case Role::kHeader: op.name = "ring header"; break;
      case Role::kRead: op.name = "ring read"; break;
    }
  }
  s.unstamped.clear();
}
template void submitted<Ep::Tx>(Ep&, const Ep::Tx*);

void op_done(Ep& e, const OpCompletion& c) {
  Locked l;
  if (!l.t) return;
  EpState& s = l.t->state(e);
  auto it = s.ops.find(c.handle);
  if (it == s.ops.end()) return;
  const PendingOp op = it->second;
  s.ops.erase(it);
  const std::uint64_t now = mono_ns();
  const std::uint64_t start = op.submit_ns ? op.submit_ns : now;
  Obj a;
  a.num("bytes", op.bytes)
      .num("peer", op.peer)
      .num("handle", c.handle)
      .str("status", op_status_name(c.status))
      .num("submit_ns", start)
      .num("complete_ns", now)
      .num("card", e.domain->card);
  if (op.msg) a.num("msg", op.msg);
  l.t->add({'X', s.tid + 1, start, now - start, op.name, c.status == OpStatus::kOk ? "dma" : "dma,fault", a.done()});
}

void send_begin(Ep& e, std::uint64_t len, std::uint32_t peer_fabric_id, bool tagged, bool inject, bool has_data,
                std::uint64_t tag) {
  Locked l;
  if (!l.t) return;
  EpState& s = l.t->state(e);
  const char* name =
      tagged ? (inject ? (has_data ? "fi_tinjectdata" : "fi_tinject") : (has_data ? "fi_tsenddata" : "fi_tsend"))
             : (inject ? (has_data ? "fi_injectdata" : "fi_inject") : (has_data ? "fi_senddata" : "fi_send"));
  const std::uint64_t id = l.t->next_msg();
  s.msgs.emplace(id, Msg{name, true, mono_ns(), len, 0, peer_fabric_id, tagged, tag});
  s.current = id;
}

void send_end(Ep& e, long rc, std::uint64_t send_id) {
  Locked l;
  if (!l.t) return;
  EpState& s = l.t->state(e);
  const std::uint64_t id = s.current;
  s.current = 0;
  if (!id) return;
  if (rc != 0) {
    s.msgs.erase(id);  // not posted (-FI_EAGAIN, ...): the application calls again
    return;
  }
  if (send_id) s.by_send_id[send_id] = id;
}

template <typename Tx>
void tx_delivered(Ep& e, const Tx& tx) {
  Locked l;
  if (!l.t) return;
  EpState& s = l.t->state(e);
  auto r = s.by_ring.find(std::make_pair(tx.dest_key, tx.seq));
  if (r == s.by_ring.end()) return;
  const std::uint64_t id = r->second;
  s.by_ring.erase(r);
  auto m = s.msgs.find(id);
  if (m == s.msgs.end()) return;
  if (tx.msg_kind == kEager) {
    l.t->end_msg(s, id, "ok", m->second.bytes);
  } else if (tx.msg_kind == kFin) {
    m->second.done += tx.data_len;
    if (m->second.done >= m->second.bytes) {
      s.by_send_id.erase(tx.send_id);
      l.t->end_msg(s, id, "ok", m->second.bytes);
    }
  }
}
template void tx_delivered<Ep::Tx>(Ep&, const Ep::Tx&);

template <typename Tx>
void tx_failed(Ep& e, const Tx& tx, bool resent, std::string_view status) {
  Locked l;
  if (!l.t) return;
  EpState& s = l.t->state(e);
  std::uint64_t id = 0;
  if (auto r = s.by_ring.find(std::make_pair(tx.dest_key, tx.seq)); r != s.by_ring.end()) id = r->second;
  Obj a;
  a.num("peer", tx.dest_fabric).num("seq", tx.seq).num("attempts", tx.attempts).str("status", status);
  if (id) a.num("msg", id);
  l.t->instant(s, resent ? "resend" : "send failed", "fault", a.done());
  if (resent) return;
  s.by_ring.erase(std::make_pair(tx.dest_key, tx.seq));
  if (tx.send_id) s.by_send_id.erase(tx.send_id);
  if (id && (tx.send_id || tx.msg_kind == kEager)) l.t->end_msg(s, id, "failed", 0);
}
template void tx_failed<Ep::Tx>(Ep&, const Ep::Tx&, bool, std::string_view);

void recv_begin(Ep& e, void* ctx, std::uint64_t cap, bool tagged, std::uint64_t tag) {
  Locked l;
  if (!l.t) return;
  EpState& s = l.t->state(e);
  const std::uint64_t id = l.t->next_msg();
  s.msgs.emplace(id, Msg{tagged ? "fi_trecv" : "fi_recv", false, mono_ns(), cap, 0, 0, tagged, tag});
  s.recv_by_ctx[ctx].push_back(id);
}

void recv_rendezvous(Ep& e, void* ctx, std::uint64_t recv_id) {
  Locked l;
  if (!l.t) return;
  EpState& s = l.t->state(e);
  auto it = s.recv_by_ctx.find(ctx);
  if (it == s.recv_by_ctx.end() || it->second.empty()) return;
  const std::uint64_t id = it->second.front();
  s.by_recv_id[recv_id] = id;
  if (auto m = s.msgs.find(id); m != s.msgs.end()) m->second.recv_id = recv_id;
}

void recv_end(Ep& e, void* ctx, std::uint64_t bytes, const char* status) {
  Locked l;
  if (!l.t) return;
  EpState& s = l.t->state(e);
  auto it = s.recv_by_ctx.find(ctx);
  if (it == s.recv_by_ctx.end() || it->second.empty()) return;
  const std::uint64_t id = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) s.recv_by_ctx.erase(it);
  l.t->end_msg(s, id, status, bytes);
}

void fault(Ep& e, const char* what, const std::string& msg) {
  Locked l;
  if (!l.t) return;
  EpState& s = l.t->state(e);
  l.t->instant(s, what, "fault", Obj().str("message", msg).num("card", e.domain->card).done());
}

void flush() {
  Locked l;
  if (l.t) l.t->write();
}

void ep_closed(Ep& e) {
  Locked l;
  if (!l.t) return;
  l.t->closed(e);
  l.t->write();
}

}  // namespace npo::fi::trace
