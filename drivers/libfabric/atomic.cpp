// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: FI_ATOMIC on the native FI_EP_RDM endpoint (docs/libfabric.md "Atomics").
//
// An atomic travels like a small RMA write (rma.cpp): one ring message kAtomicReq carries the
// request (AtomicReq), the operands and, for a compare op, the compare values; the target's
// CPU executes it during its progress -- after the same key / range / access checks as an RMA
// -- and answers with kAtomicResp (status and, for a fetching op, the old values). Every
// atomic the provider executes in a process holds one process-wide mutex while it reads,
// combines and writes the target elements, so atomics are atomic against each other whatever
// endpoint or domain of the process runs them (not against plain CPU stores of the
// application, as FI_ATOMIC does not promise either). An atomic completes at the initiator
// when the answer arrived (delivery complete); a refused one with an error entry.
#include <cmath>
#include <type_traits>

#include "provider.hpp"

namespace npo::fi {

namespace {

// Operand bytes per atomic (one buffer: operands, compare values or results): the request
// (AtomicReq + operands + compare values) fits one ring message, the answer too.
constexpr std::size_t kAtomicMaxBytes = 1024;

// The request part of kAtomicReq. `kind`: 0 a plain atomic, 1 fetching, 2 compare.
struct AtomicReq {
  std::uint64_t op;    // the initiator's op id (rma_ops)
  std::uint64_t key;   // the target MR's key
  std::uint64_t addr;  // remote address: offset into the MR (plus its registration offset)
  std::uint32_t count;
  std::uint16_t datatype;
  std::uint8_t aop;   // fi_op
  std::uint8_t kind;  // 0 plain, 1 fetch, 2 compare
  WireAddr sender;    // where to answer
};
static_assert(sizeof(AtomicReq) == 32 + kAddrLen);
static_assert(sizeof(AtomicReq) + 2 * kAtomicMaxBytes <= kMaxMsg);

enum Kind : std::uint8_t { kPlain = 0, kFetch = 1, kCompare = 2 };

// Bytes of one element of `dt`, 0 when the provider does not support the type.
std::size_t type_size(int dt) {
  switch (dt) {
    case FI_INT8:
    case FI_UINT8: return 1;
    case FI_INT16:
    case FI_UINT16: return 2;
    case FI_INT32:
    case FI_UINT32:
    case FI_FLOAT: return 4;
    case FI_INT64:
    case FI_UINT64:
    case FI_DOUBLE: return 8;
    default: return 0;
  }
}
bool is_float(int dt) { return dt == FI_FLOAT || dt == FI_DOUBLE; }

// Whether `op` on `dt` is offered as `kind` (fi_atomic(3): which ops each call family takes).
bool valid(int dt, int op, Kind kind) {
  if (type_size(dt) == 0) return false;
  switch (op) {
    case FI_MIN:
    case FI_MAX:
    case FI_SUM:
    case FI_PROD:
    case FI_LOR:
    case FI_LAND:
    case FI_LXOR:
    case FI_ATOMIC_WRITE: return kind != kCompare;
    case FI_BOR:
    case FI_BAND:
    case FI_BXOR: return kind != kCompare && !is_float(dt);
    case FI_ATOMIC_READ: return kind == kFetch;
    case FI_CSWAP:
    case FI_CSWAP_NE:
    case FI_CSWAP_LE:
    case FI_CSWAP_LT:
    case FI_CSWAP_GE:
    case FI_CSWAP_GT: return kind == kCompare;
    case FI_MSWAP: return kind == kCompare && !is_float(dt);
    default: return false;
  }
}

std::size_t max_count(int dt) { return kAtomicMaxBytes / type_size(dt); }

// Integer arithmetic wraps (done on the unsigned type of the same width, no UB).
template <typename T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<std::uint64_t>(static_cast<U>(a)) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <typename T>
T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<std::uint64_t>(static_cast<U>(a)) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

// One element: `cur` is the target's value, `v` the operand, `c` the compare value.
template <typename T>
T combine(int op, T cur, T v, T c) {
  switch (op) {
    case FI_MIN: return v < cur ? v : cur;
    case FI_MAX: return v > cur ? v : cur;
    case FI_SUM: return wrap_add(cur, v);
    case FI_PROD: return wrap_mul(cur, v);
    case FI_LOR: return static_cast<T>((cur != T{}) || (v != T{}));
    case FI_LAND: return static_cast<T>((cur != T{}) && (v != T{}));
    case FI_LXOR: return static_cast<T>((cur != T{}) != (v != T{}));
    case FI_ATOMIC_WRITE: return v;
    case FI_ATOMIC_READ: return cur;
    case FI_CSWAP: return c == cur ? v : cur;
    case FI_CSWAP_NE: return c != cur ? v : cur;
    case FI_CSWAP_LE: return c <= cur ? v : cur;
    case FI_CSWAP_LT: return c < cur ? v : cur;
    case FI_CSWAP_GE: return c >= cur ? v : cur;
    case FI_CSWAP_GT: return c > cur ? v : cur;
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case FI_BOR: return static_cast<T>(cur | v);
      case FI_BAND: return static_cast<T>(cur & v);
      case FI_BXOR: return static_cast<T>(cur ^ v);
      case FI_MSWAP: return static_cast<T>((v & c) | (cur & ~c));
      default: break;
    }
  }
  return cur;
}

// Applies `op` to `count` elements in place at `mem` (unaligned-safe copies).
template <typename T>
void apply_typed(int op, std::byte* mem, const std::byte* operand, const std::byte* compare, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    T cur{}, v{}, c{};
    std::memcpy(&cur, mem + i * sizeof(T), sizeof(T));
    if (operand) std::memcpy(&v, operand + i * sizeof(T), sizeof(T));
    if (compare) std::memcpy(&c, compare + i * sizeof(T), sizeof(T));
    const T r = combine<T>(op, cur, v, c);
    std::memcpy(mem + i * sizeof(T), &r, sizeof(T));
  }
}

void apply(int dt, int op, std::byte* mem, const std::byte* operand, const std::byte* compare, std::size_t count) {
  switch (dt) {
    case FI_INT8: return apply_typed<std::int8_t>(op, mem, operand, compare, count);
    case FI_UINT8: return apply_typed<std::uint8_t>(op, mem, operand, compare, count);
    case FI_INT16: return apply_typed<std::int16_t>(op, mem, operand, compare, count);
    case FI_UINT16: return apply_typed<std::uint16_t>(op, mem, operand, compare, count);
    case FI_INT32: return apply_typed<std::int32_t>(op, mem, operand, compare, count);
    case FI_UINT32: return apply_typed<std::uint32_t>(op, mem, operand, compare, count);
    case FI_INT64: return apply_typed<std::int64_t>(op, mem, operand, compare, count);
    case FI_UINT64: return apply_typed<std::uint64_t>(op, mem, operand, compare, count);
    case FI_FLOAT: return apply_typed<float>(op, mem, operand, compare, count);
    case FI_DOUBLE: return apply_typed<double>(op, mem, operand, compare, count);
    default: return;
  }
}

// Every atomic the provider executes in this process holds this while it touches memory.
std::mutex& atomic_mutex() {
  static std::mutex m;
  return m;
}

std::string err_text(std::uint64_t err) {
  switch (err) {
    case FI_EKEYREJECTED: return "no memory region with remote access has that key";
    case FI_EACCES: return "the memory region does not allow that access";
    case FI_EINVAL: return "the range lies outside the memory region";
    case FI_EOPNOTSUPP: return "the operation or datatype is not supported";
    default: return fi_strerror(static_cast<int>(err));
  }
}

// Target: execute the request, queue the answer.
void target_request(Ep& e, const SlotHeader& h, const std::byte* payload, fi_addr_t src, std::uint64_t src_key) {
  AtomicReq rq{};
  if (h.len < sizeof rq) {
    e.report_fatal("npo: " + e.where() + " received a short atomic request", FI_EIO);
    return;
  }
  std::memcpy(&rq, payload, sizeof rq);
  if (!learn_peer(e, src_key, src, rq.sender)) {
    e.report_fatal("npo: " + e.where() + " cannot answer an atomic from fabric id " + std::to_string(h.src_fabric_id),
                   FI_EHOSTUNREACH);
    return;
  }
  const auto kind = static_cast<Kind>(rq.kind);
  const std::size_t sz = type_size(rq.datatype);
  std::uint64_t err = 0;
  if (!valid(rq.datatype, rq.aop, kind) || rq.count == 0 || rq.count > max_count(rq.datatype)) err = FI_EOPNOTSUPP;
  const std::size_t bytes = err ? 0 : std::size_t{rq.count} * sz;
  const bool has_operand = rq.aop != FI_ATOMIC_READ;
  const std::size_t want = sizeof rq + (has_operand ? bytes : 0) + (kind == kCompare ? bytes : 0);
  if (!err && h.len < want) err = FI_EINVAL;
  // a read needs FI_REMOTE_READ, a write FI_REMOTE_WRITE, a fetching write both
  std::uint64_t need = 0;
  if (rq.aop != FI_ATOMIC_READ) need |= FI_REMOTE_WRITE;
  if (kind != kPlain) need |= FI_REMOTE_READ;
  const Domain::MrRegion* mr = nullptr;
  if (!err) err = mr_check(e, rq.key, rq.addr, bytes, need, &mr);
  Ep::Ctrl c{src_key, kAtomicResp, {rq.op, err, 0}};
  if (err) {
    warn(FI_LOG_EP_DATA, "npo: " + e.where() + " refuses an atomic (op " + std::to_string(rq.aop) + ", datatype " +
                             std::to_string(rq.datatype) + ", " + std::to_string(rq.count) + " elements) at " +
                             std::to_string(rq.addr) + " with key " + std::to_string(rq.key) + " from fabric id " +
                             std::to_string(h.src_fabric_id) + ": " + err_text(err));
    e.ctrl_out.push_back(std::move(c));
    return;
  }
  const std::byte* operand = has_operand ? payload + sizeof rq : nullptr;
  const std::byte* compare = kind == kCompare ? payload + sizeof rq + bytes : nullptr;
  std::array<std::byte, kAtomicMaxBytes> cur{};
  {
    std::lock_guard lk(atomic_mutex());
    copy_from_iov(mr->iov.data(), mr->count, rq.addr - mr->offset, cur.data(), bytes);
    if (kind != kPlain) {
      c.body[2] = bytes;
      c.body.resize(3 + (bytes + 7) / 8);
      std::memcpy(c.body.data() + 3, cur.data(), bytes);
    }
    if (rq.aop != FI_ATOMIC_READ) {
      apply(rq.datatype, rq.aop, cur.data(), operand, compare, rq.count);
      copy_to_iov(mr->iov.data(), mr->count, rq.addr - mr->offset, cur.data(), bytes, false);
    }
  }
  e.ctrl_out.push_back(std::move(c));
  e.domain->target_atomics.fetch_add(1, std::memory_order_relaxed);
  // fi_ep_bind(3): a fetching or compare atomic counts as a remote read, a plain one as a write
  e.count(kind == kPlain ? FI_REMOTE_WRITE : FI_REMOTE_READ);
  if ((h.flags & kFlagData) && e.rx_cq)
    e.rx_cq->push({nullptr, FI_ATOMIC | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, bytes, nullptr, h.data});
}

// Initiator: the answer arrived.
void initiator_answer(Ep& e, const SlotHeader& h, const std::byte* payload) {
  std::array<std::uint64_t, 3> w{};
  if (h.len < sizeof w) return;
  std::memcpy(w.data(), payload, sizeof w);
  auto it = e.rma_ops.find(w[0]);
  if (it == e.rma_ops.end() || !it->second.atomic) return;
  Ep::RmaOp& op = it->second;
  const std::uint64_t err = w[1];
  const std::uint64_t flags = FI_ATOMIC | (op.read ? FI_READ : FI_WRITE);
  e.count(flags, err != 0);
  if (!err && op.read) {
    const std::uint64_t n = std::min<std::uint64_t>({w[2], h.len - sizeof w, op.len});
    copy_to_iov(op.iov.data(), op.count, 0, payload + sizeof w, n, false);
  }
  if (e.tx_cq) {
    if (err) {
      e.tx_cq->push_error(op.ctx, flags, 0, 0, static_cast<int>(err),
                          "npo: atomic of " + std::to_string(op.len) + " B from " + e.where() +
                              " refused by the card with fabric id " + std::to_string(op.peer.handle.fabric_id) + ": " +
                              err_text(err));
    } else if (op.completion) {
      e.tx_cq->push({op.ctx, flags, 0, nullptr, 0});
    }
  }
  e.rma_ops.erase(it);
}

// ---- Initiator operations ---------------------------------------------------------------

// Elements over an ioc list; SIZE_MAX when the list is too long.
std::size_t ioc_count(const fi_ioc* ioc, std::size_t n) {
  if (n > kIovLimit || (n && !ioc)) return SIZE_MAX;
  std::size_t c = 0;
  for (std::size_t i = 0; i < n; ++i) c += ioc[i].count;
  return c;
}

// Gathers the elements of an ioc list into `dst` (bytes = count x size).
void gather(const fi_ioc* ioc, std::size_t n, std::size_t sz, std::byte* dst) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t b = ioc[i].count * sz;
    if (b) std::memcpy(dst, ioc[i].addr, b);
    dst += b;
  }
}

struct Call {
  const fi_ioc* src = nullptr;
  std::size_t src_n = 0;
  const fi_ioc* cmp = nullptr;
  std::size_t cmp_n = 0;
  const fi_ioc* res = nullptr;
  std::size_t res_n = 0;
  fi_addr_t dest = 0;
  std::uint64_t addr = 0, key = 0;
  int dt = 0, op = 0;
  void* ctx = nullptr;
  Kind kind = kPlain;
  bool inject = false, completion = true;
  std::uint64_t data = 0;
  bool has_data = false;
  // The target and operation of the non-msg entry points.
  void to(fi_addr_t d, std::uint64_t a, std::uint64_t k, int t, int o, void* c, Kind kd) {
    dest = d;
    addr = a;
    key = k;
    dt = t;
    op = o;
    ctx = c;
    kind = kd;
  }
};

ssize_t start(Ep& e, const Call& c) {
  if (!e.enabled) return -FI_EOPBADSTATE;
  if (!e.av) return -FI_EINVAL;
  if (c.dest >= e.av->table.size() || !e.av->table[c.dest].valid) return -FI_EINVAL;
  if (!valid(c.dt, c.op, c.kind)) return -FI_EOPNOTSUPP;
  const std::size_t sz = type_size(c.dt);
  const bool has_operand = c.op != FI_ATOMIC_READ;
  const std::size_t n_src = ioc_count(c.src, c.src_n);
  const std::size_t n_res = ioc_count(c.res, c.res_n);
  const std::size_t n_cmp = ioc_count(c.cmp, c.cmp_n);
  if (n_src == SIZE_MAX || n_res == SIZE_MAX || n_cmp == SIZE_MAX) return -FI_EINVAL;
  // FI_ATOMIC_READ takes its count from the buffer (its operand is ignored) or the results
  const std::size_t count = (has_operand || n_src) ? n_src : n_res;
  if (count == 0) return -FI_EINVAL;
  if (count > max_count(c.dt)) return -FI_EMSGSIZE;
  if (c.kind != kPlain && n_res != count) return -FI_EINVAL;
  if (c.kind == kCompare && n_cmp != count) return -FI_EINVAL;
  e.rdm_progress();
  if (e.fatal_reported) return -FI_EIO;
  const std::size_t bytes = count * sz;
  const Av::Entry peer = e.av->table[c.dest];
  const std::uint64_t id = e.next_send_id++;
  AtomicReq rq{id,
               c.key,
               c.addr,
               static_cast<std::uint32_t>(count),
               static_cast<std::uint16_t>(c.dt),
               static_cast<std::uint8_t>(c.op),
               static_cast<std::uint8_t>(c.kind),
               e.wire};
  std::array<std::byte, sizeof(AtomicReq) + 2 * kAtomicMaxBytes> msg{};
  std::memcpy(msg.data(), &rq, sizeof rq);
  std::size_t len = sizeof rq;
  if (has_operand) {
    gather(c.src, c.src_n, sz, msg.data() + len);
    len += bytes;
  }
  if (c.kind == kCompare) {
    gather(c.cmp, c.cmp_n, sz, msg.data() + len);
    len += bytes;
  }
  Ep::RmaOp op;
  op.ctx = c.ctx;
  op.completion = c.completion && !c.inject;
  op.read = c.kind != kPlain;
  op.atomic = true;
  op.len = bytes;
  op.peer = peer;
  for (std::size_t i = 0; i < c.res_n; ++i) op.iov[i] = {c.res[i].addr, c.res[i].count * sz};
  op.count = c.res_n;
  e.rma_ops[id] = op;
  SlotMeta m;
  m.kind = kAtomicReq;
  m.send_id = id;
  m.cq_flags = FI_ATOMIC | (op.read ? FI_READ : FI_WRITE);
  iovec v{msg.data(), len};
  const ssize_t r = send_to(e, peer, &v, 1, nullptr, c.data, c.has_data, false, m, kSendWait);
  if (r != 0) e.rma_ops.erase(id);
  if (r == 0) e.domain->atomics.fetch_add(1, std::memory_order_relaxed);
  return r;
}

Ep* ep_of(fid_ep* f) { return reinterpret_cast<Ep*>(f); }

ssize_t run(fid_ep* f, Call c, bool default_completion = true, std::uint64_t flags = 0, bool msg = false) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  if (msg) {
    c.completion = !e->tx_selective || (flags & FI_COMPLETION);
    c.inject = (flags & FI_INJECT) != 0;
    c.has_data = (flags & FI_REMOTE_CQ_DATA) != 0;
  } else if (default_completion) {
    c.completion = e->tx_default_completion();
  }
  return start(*e, c);
}

ssize_t a_write(fid_ep* f, const void* buf, std::size_t count, void*, fi_addr_t dest, std::uint64_t addr,
                std::uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  fi_ioc ioc{const_cast<void*>(buf), count};
  Call c;
  c.src = &ioc;
  c.src_n = 1;
  c.to(dest, addr, key, dt, op, ctx, kPlain);
  return run(f, c);
}
ssize_t a_writev(fid_ep* f, const fi_ioc* iov, void**, std::size_t count, fi_addr_t dest, std::uint64_t addr,
                 std::uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  Call c;
  c.src = iov;
  c.src_n = count;
  c.to(dest, addr, key, dt, op, ctx, kPlain);
  return run(f, c);
}
// The target of a *msg call: one remote ioc whose count matches.
bool msg_target(const fi_msg_atomic* m, Call& c) {
  if (!m || m->rma_iov_count != 1 || !m->rma_iov) return false;
  c.src = m->msg_iov;
  c.src_n = m->iov_count;
  c.to(m->addr, m->rma_iov[0].addr, m->rma_iov[0].key, m->datatype, m->op, m->context, kPlain);
  c.data = m->data;
  return true;
}
ssize_t a_writemsg(fid_ep* f, const fi_msg_atomic* m, std::uint64_t flags) {
  Call c;
  if (!msg_target(m, c)) return -FI_EINVAL;
  return run(f, c, true, flags, true);
}
ssize_t a_inject(fid_ep* f, const void* buf, std::size_t count, fi_addr_t dest, std::uint64_t addr, std::uint64_t key,
                 fi_datatype dt, fi_op op) {
  fi_ioc ioc{const_cast<void*>(buf), count};
  Call c;
  c.src = &ioc;
  c.src_n = 1;
  c.to(dest, addr, key, dt, op, nullptr, kPlain);
  c.inject = true;
  c.completion = false;
  return run(f, c, false);
}
ssize_t a_readwrite(fid_ep* f, const void* buf, std::size_t count, void*, void* result, void*, fi_addr_t dest,
                    std::uint64_t addr, std::uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  fi_ioc src{const_cast<void*>(buf), count};
  fi_ioc res{result, count};
  Call c;
  c.src = buf ? &src : nullptr;
  c.src_n = buf ? 1 : 0;
  c.res = &res;
  c.res_n = 1;
  c.to(dest, addr, key, dt, op, ctx, kFetch);
  return run(f, c);
}
ssize_t a_readwritev(fid_ep* f, const fi_ioc* iov, void**, std::size_t count, fi_ioc* resultv, void**,
                     std::size_t result_count, fi_addr_t dest, std::uint64_t addr, std::uint64_t key, fi_datatype dt,
                     fi_op op, void* ctx) {
  Call c;
  c.src = iov;
  c.src_n = count;
  c.res = resultv;
  c.res_n = result_count;
  c.to(dest, addr, key, dt, op, ctx, kFetch);
  return run(f, c);
}
ssize_t a_readwritemsg(fid_ep* f, const fi_msg_atomic* m, fi_ioc* resultv, void**, std::size_t result_count,
                       std::uint64_t flags) {
  Call c;
  if (!msg_target(m, c)) return -FI_EINVAL;
  c.res = resultv;
  c.res_n = result_count;
  c.kind = kFetch;
  if (flags & FI_INJECT) return -FI_EINVAL;  // a fetching op has a result to deliver
  return run(f, c, true, flags, true);
}
ssize_t a_compwrite(fid_ep* f, const void* buf, std::size_t count, void*, const void* compare, void*, void* result,
                    void*, fi_addr_t dest, std::uint64_t addr, std::uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  fi_ioc src{const_cast<void*>(buf), count};
  fi_ioc cmp{const_cast<void*>(compare), count};
  fi_ioc res{result, count};
  Call c;
  c.src = &src;
  c.src_n = 1;
  c.cmp = &cmp;
  c.cmp_n = 1;
  c.res = &res;
  c.res_n = 1;
  c.to(dest, addr, key, dt, op, ctx, kCompare);
  return run(f, c);
}
ssize_t a_compwritev(fid_ep* f, const fi_ioc* iov, void**, std::size_t count, const fi_ioc* comparev, void**,
                     std::size_t compare_count, fi_ioc* resultv, void**, std::size_t result_count, fi_addr_t dest,
                     std::uint64_t addr, std::uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  Call c;
  c.src = iov;
  c.src_n = count;
  c.cmp = comparev;
  c.cmp_n = compare_count;
  c.res = resultv;
  c.res_n = result_count;
  c.to(dest, addr, key, dt, op, ctx, kCompare);
  return run(f, c);
}
ssize_t a_compwritemsg(fid_ep* f, const fi_msg_atomic* m, const fi_ioc* comparev, void**, std::size_t compare_count,
                       fi_ioc* resultv, void**, std::size_t result_count, std::uint64_t flags) {
  Call c;
  if (!msg_target(m, c)) return -FI_EINVAL;
  c.cmp = comparev;
  c.cmp_n = compare_count;
  c.res = resultv;
  c.res_n = result_count;
  c.kind = kCompare;
  if (flags & FI_INJECT) return -FI_EINVAL;
  return run(f, c, true, flags, true);
}

int valid_count(fi_datatype dt, fi_op op, std::size_t* count, Kind kind) {
  if (!valid(dt, op, kind)) return -FI_EOPNOTSUPP;
  if (count) *count = max_count(dt);
  return 0;
}
int a_writevalid(fid_ep*, fi_datatype dt, fi_op op, std::size_t* count) { return valid_count(dt, op, count, kPlain); }
int a_readwritevalid(fid_ep*, fi_datatype dt, fi_op op, std::size_t* count) {
  return valid_count(dt, op, count, kFetch);
}
int a_compwritevalid(fid_ep*, fi_datatype dt, fi_op op, std::size_t* count) {
  return valid_count(dt, op, count, kCompare);
}

}  // namespace

void atomic_on_message(Ep& e, const SlotHeader& h, const std::byte* payload, fi_addr_t src, std::uint64_t src_key) {
  if (h.kind == kAtomicReq) {
    target_request(e, h, payload, src, src_key);
  } else {
    initiator_answer(e, h, payload);
  }
}

int query_atomic(fid_domain*, fi_datatype dt, fi_op op, fi_atomic_attr* attr, std::uint64_t flags) {
  if (flags & ~(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC)) return -FI_EBADFLAGS;
  if ((flags & FI_FETCH_ATOMIC) && (flags & FI_COMPARE_ATOMIC)) return -FI_EINVAL;
  const Kind kind = (flags & FI_COMPARE_ATOMIC) ? kCompare : (flags & FI_FETCH_ATOMIC) ? kFetch : kPlain;
  if (!valid(dt, op, kind)) return -FI_EOPNOTSUPP;
  if (attr) {
    attr->size = type_size(dt);
    attr->count = max_count(dt);
  }
  return 0;
}

fi_ops_atomic rdm_atomic_ops{sizeof(fi_ops_atomic), a_write,      a_writev,         a_writemsg,      a_inject,
                             a_readwrite,           a_readwritev, a_readwritemsg,   a_compwrite,     a_compwritev,
                             a_compwritemsg,        a_writevalid, a_readwritevalid, a_compwritevalid};

}  // namespace npo::fi
