// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: FI_RMA on the native FI_EP_RDM endpoint (docs/libfabric.md "RMA").
//
// Target memory is a host buffer registered with fi_mr_reg and remote access; its key is the
// application's requested key (mr_mode 0: no FI_MR_PROV_KEY), the remote address an offset
// into the region (no FI_MR_VIRT_ADDR). The bytes travel over the endpoint's ring machinery
// and the target's CPU places them (as libfabric's tcp provider does): a write up to
// kRmaEagerMax is one ring message (RmaReq + data), a larger one a rendezvous whose chunks the
// initiator's card writes into the target's landing zone (an HBM window with a HAL key), which
// the target's progress copies into the region; a read is a request the target answers with
// the data (one message, or chunks into the initiator's landing zone). Every placement checks
// key, range and access at the target first; a refused operation completes at the initiator
// with an error entry. A write completes when the target acknowledged the placement
// (delivery complete); a read when the data is in the initiator's buffer.
#include "provider.hpp"

namespace npo::fi {

namespace {

// The request part of RMA messages (kRmaWrite / kRmaWriteReq / kRmaReadReq).
struct RmaReq {
  std::uint64_t op;    // the initiator's op id (rma_ops)
  std::uint64_t key;   // the target MR's key
  std::uint64_t addr;  // remote address: offset into the MR (plus its registration offset)
  std::uint64_t len;   // bytes
  WireAddr sender;     // where to answer
};
static_assert(sizeof(RmaReq) == kRmaReqBytes);

std::string err_text(std::uint64_t err) {
  switch (err) {
    case FI_EKEYREJECTED: return "no memory region with remote access has that key";
    case FI_EACCES: return "the memory region does not allow that access";
    case FI_EINVAL: return "the range lies outside the memory region";
    default: return fi_strerror(static_cast<int>(err));
  }
}

void ack(Ep& e, std::uint64_t src_key, std::uint64_t op, std::uint64_t err) {
  e.ctrl_out.push_back(Ep::Ctrl{src_key, kRmaAck, {op, err}});
}

// A write with FI_REMOTE_CQ_DATA placed: its completion at the target.
void remote_cq_data(Ep& e, std::uint64_t len, std::uint64_t data) {
  if (!e.rx_cq) return;
  e.rx_cq->push({nullptr, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, static_cast<std::size_t>(len), nullptr, data});
}

// The initiator's op ends: its completion (or error entry).
void complete(Ep& e, std::map<std::uint64_t, Ep::RmaOp>::iterator it, std::uint64_t err) {
  const Ep::RmaOp& op = it->second;
  const std::uint64_t flags = FI_RMA | (op.read ? FI_READ : FI_WRITE);
  e.count(flags, err != 0);
  if (e.tx_cq) {
    if (err) {
      e.tx_cq->push_error(op.ctx, flags, 0, 0, static_cast<int>(err),
                          "npo: remote " + std::string(op.read ? "read" : "write") + " of " + std::to_string(op.len) +
                              " B from " + e.where() + " refused by the card with fabric id " +
                              std::to_string(op.peer.handle.fabric_id) + ": " + err_text(err));
    } else if (op.completion) {
      e.tx_cq->push({op.ctx, flags, static_cast<std::size_t>(op.len), nullptr, 0});
    }
  }
  e.rma_ops.erase(it);
}

void target_request(Ep& e, const SlotHeader& h, const std::byte* payload, fi_addr_t src, std::uint64_t src_key) {
  RmaReq rq{};
  if (h.len < sizeof rq) {
    e.report_fatal("npo: " + e.where() + " received a short RMA request", FI_EIO);
    return;
  }
  std::memcpy(&rq, payload, sizeof rq);
  if (!learn_peer(e, src_key, src, rq.sender)) {
    e.report_fatal(
        "npo: " + e.where() + " cannot answer an RMA request from fabric id " + std::to_string(h.src_fabric_id),
        FI_EHOSTUNREACH);
    return;
  }
  const bool write = h.kind != kRmaReadReq;
  const Domain::MrRegion* mr = nullptr;
  std::uint64_t err = mr_check(e, rq.key, rq.addr, rq.len, write ? FI_REMOTE_WRITE : FI_REMOTE_READ, &mr);
  if (err)
    warn(FI_LOG_EP_DATA, "npo: " + e.where() + " refuses a remote " + (write ? "write" : "read") + " of " +
                             std::to_string(rq.len) + " B at " + std::to_string(rq.addr) + " with key " +
                             std::to_string(rq.key) + " from fabric id " + std::to_string(h.src_fabric_id) + ": " +
                             err_text(err));
  const bool has_data = (h.flags & kFlagData) != 0;
  if (h.kind == kRmaWrite) {
    const std::uint64_t n = h.len - sizeof rq;
    if (!err && n != rq.len) err = FI_EINVAL;
    if (!err) copy_to_iov(mr->iov.data(), mr->count, rq.addr - mr->offset, payload + sizeof rq, n, false);
    if (!err) {
      e.domain->target_rma_writes.fetch_add(1, std::memory_order_relaxed);
      e.count(FI_REMOTE_WRITE);
    }
    ack(e, src_key, rq.op, err);
    if (!err && has_data) remote_cq_data(e, rq.len, h.data);
    return;
  }
  if (err) {
    ack(e, src_key, rq.op, err);
    return;
  }
  (h.kind == kRmaWriteReq ? e.domain->target_rma_writes : e.domain->target_rma_reads)
      .fetch_add(1, std::memory_order_relaxed);
  if (h.kind == kRmaWriteReq) {
    // a rendezvous into the landing zone; each chunk is placed (and checked again) on its FIN
    Ep::RecvReq q;
    q.total = rq.len;
    q.send_id = rq.op;
    q.src_key = src_key;
    q.ring = ring_of(h);
    q.src = src;
    q.data = h.data;
    q.has_data = has_data;
    q.rma_write = true;
    q.rma_key = rq.key;
    q.rma_addr = rq.addr;
    const std::uint64_t id = e.next_recv_id++;
    auto [it, ok] = e.recvs.emplace(id, q);
    queue_grants(e, id, it->second);
    return;
  }
  // a read
  if (rq.len <= kRmaEagerMax) {
    Ep::Ctrl c{src_key, kRmaReadResp, {rq.op, 0, rq.len}};
    c.body.resize(3 + (rq.len + 7) / 8);
    copy_from_iov(mr->iov.data(), mr->count, rq.addr - mr->offset, reinterpret_cast<std::byte*>(c.body.data() + 3),
                  rq.len);
    e.ctrl_out.push_back(std::move(c));
    e.count(FI_REMOTE_READ);
    return;
  }
  // large: the initiator grants its landing zone (kRmaReadGo, then CTS), this side sends chunks
  const std::uint64_t sid = e.next_send_id++;
  Ep::SendReq s;
  s.completion = false;
  s.rma_src = true;
  s.rma_key = rq.key;
  s.base_off = rq.addr;
  s.total = rq.len;
  s.peer = e.peers[src_key];
  s.dest_key = dest_key_of(s.peer.handle);
  e.sends.emplace(sid, std::move(s));
  e.ctrl_out.push_back(Ep::Ctrl{src_key, kRmaReadGo, {rq.op, sid}});
}

}  // namespace

void rma_on_message(Ep& e, const SlotHeader& h, const std::byte* payload, fi_addr_t src, std::uint64_t src_key) {
  std::array<std::uint64_t, 3> w{};
  std::memcpy(w.data(), payload, std::min<std::size_t>(h.len, sizeof w));
  switch (h.kind) {
    case kRmaWrite:
    case kRmaWriteReq:
    case kRmaReadReq: target_request(e, h, payload, src, src_key); return;
    case kRmaAck: {
      if (auto it = e.rma_ops.find(w[0]); it != e.rma_ops.end()) complete(e, it, w[1]);
      return;
    }
    case kRmaReadResp: {
      auto it = e.rma_ops.find(w[0]);
      if (it == e.rma_ops.end() || h.len < 24) return;
      const std::uint64_t n = std::min<std::uint64_t>({w[2], h.len - 24, it->second.len});
      if (!w[1]) copy_to_iov(it->second.iov.data(), it->second.count, 0, payload + 24, n, false);
      complete(e, it, w[1]);
      return;
    }
    case kRmaReadGo: {
      auto it = e.rma_ops.find(w[0]);
      if (it == e.rma_ops.end() || !it->second.read) return;
      if (!e.peers.count(src_key)) e.peers[src_key] = it->second.peer;
      Ep::RecvReq q;
      q.r.ctx = it->second.ctx;
      q.r.iov = it->second.iov;
      q.r.count = it->second.count;
      q.total = it->second.len;
      q.send_id = w[1];
      q.src_key = src_key;
      q.ring = ring_of(h);
      q.src = src;
      q.rma_op = w[0];
      const std::uint64_t id = e.next_recv_id++;
      auto [r, ok] = e.recvs.emplace(id, q);
      queue_grants(e, id, r->second);
      return;
    }
    default: return;
  }
}

void rma_place_chunk(Ep& e, Ep::RecvReq& r, std::uint64_t msg_off, const std::byte* src, std::uint64_t len) {
  if (r.rma_err) return;
  const Domain::MrRegion* mr = nullptr;
  // checked again: the region may have been closed since the request was accepted
  if (const std::uint64_t err = mr_check(e, r.rma_key, r.rma_addr + msg_off, len, FI_REMOTE_WRITE, &mr)) {
    r.rma_err = err;
    return;
  }
  copy_to_iov(mr->iov.data(), mr->count, r.rma_addr + msg_off - mr->offset, src, len, true);
}

void rma_recv_done(Ep& e, Ep::RecvReq& r) {
  if (r.rma_write) {
    ack(e, r.src_key, r.send_id, r.rma_err);
    if (!r.rma_err) e.count(FI_REMOTE_WRITE);
    if (!r.rma_err && r.has_data) remote_cq_data(e, r.total, r.data);
    return;
  }
  if (auto it = e.rma_ops.find(r.rma_op); it != e.rma_ops.end()) complete(e, it, r.rma_err);
}

void rma_stage_chunk(Ep& e, Ep::SendReq& q, std::uint64_t msg_off, std::byte* dst, std::uint64_t len) {
  const Domain::MrRegion* mr = nullptr;
  if (!q.rma_err) q.rma_err = mr_check(e, q.rma_key, q.base_off + msg_off, len, FI_REMOTE_READ, &mr);
  if (q.rma_err) {
    std::memset(dst, 0, len);  // the region went away: nothing of it leaves; the FIN says why
    return;
  }
  copy_from_iov(mr->iov.data(), mr->count, q.base_off + msg_off - mr->offset, dst, len);
}

void rma_fail(Ep& e, std::uint64_t id, int err, const std::string& msg) {
  auto it = e.rma_ops.find(id);
  if (it == e.rma_ops.end()) return;
  const std::uint64_t kind = it->second.atomic ? FI_ATOMIC : FI_RMA;
  e.count(kind | (it->second.read ? FI_READ : FI_WRITE), true);
  if (e.tx_cq) e.tx_cq->push_error(it->second.ctx, kind | (it->second.read ? FI_READ : FI_WRITE), 0, 0, err, msg);
  e.rma_ops.erase(it);
}

// ---- Initiator operations ---------------------------------------------------------------
namespace {

// Common checks; returns the peer or an error (negative FI_ errno).
ssize_t begin(Ep& e, std::size_t count, fi_addr_t peer_addr, std::size_t len, bool inject) {
  if (!e.enabled) return -FI_EOPBADSTATE;
  if (!e.av || count > kIovLimit) return -FI_EINVAL;
  if (peer_addr >= e.av->table.size() || !e.av->table[peer_addr].valid) return -FI_EINVAL;
  if (len > kRdmMaxMsg || (inject && len > kEagerMax)) return -FI_EMSGSIZE;
  e.rdm_progress();
  if (e.fatal_reported) return -FI_EIO;
  return 0;
}

ssize_t rma_write(Ep& e, const iovec* iov, std::size_t count, fi_addr_t dest, std::uint64_t addr, std::uint64_t key,
                  void* ctx, std::uint64_t data, bool has_data, bool inject, bool completion) {
  const std::size_t len = iov_bytes(iov, count);
  if (const ssize_t r = begin(e, count, dest, len, inject); r != 0) return r;
  const Av::Entry peer = e.av->table[dest];
  const std::uint64_t id = e.next_send_id++;
  RmaReq rq{id, key, addr, len, e.wire};
  Ep::RmaOp op;
  op.ctx = ctx;
  op.completion = completion;  // fi_writemsg(FI_INJECT) still completes; r_inject passes false
  op.len = len;
  op.peer = peer;
  e.rma_ops[id] = op;
  SlotMeta m;
  m.send_id = id;
  m.cq_flags = FI_RMA | FI_WRITE;
  if (len <= kRmaEagerMax) {
    std::array<iovec, kIovLimit + 1> v{};
    v[0] = {&rq, sizeof rq};
    for (std::size_t i = 0; i < count; ++i) v[i + 1] = iov[i];
    m.kind = kRmaWrite;
    const ssize_t r = send_to(e, peer, v.data(), count + 1, nullptr, data, has_data, false, m, kSendWait);
    if (r != 0) e.rma_ops.erase(id);
    if (r == 0) e.domain->rma_writes.fetch_add(1, std::memory_order_relaxed);
    return r;
  }
  Ep::SendReq q;
  q.completion = false;  // the target's ack completes the write, not the last FIN
  if (inject) {
    q.owned.resize(len);
    copy_from_iov(iov, count, 0, q.owned.data(), len);
    q.iov[0] = {nullptr, len};
    q.count = 1;
  } else {
    for (std::size_t i = 0; i < count; ++i) q.iov[i] = iov[i];
    q.count = count;
  }
  q.total = len;
  q.cq_flags = FI_RMA | FI_WRITE;
  q.peer = peer;
  q.dest_key = dest_key_of(peer.handle);
  auto [it, ok] = e.sends.emplace(id, std::move(q));
  if (inject) it->second.iov[0].iov_base = it->second.owned.data();
  m.kind = kRmaWriteReq;
  iovec biov{&rq, sizeof rq};
  const ssize_t r = send_to(e, peer, &biov, 1, nullptr, data, has_data, false, m, kSendWait);
  if (r != 0) {
    e.sends.erase(id);
    e.rma_ops.erase(id);
  } else {
    e.domain->rma_writes.fetch_add(1, std::memory_order_relaxed);
  }
  return r;
}

ssize_t rma_read(Ep& e, const iovec* iov, std::size_t count, fi_addr_t src, std::uint64_t addr, std::uint64_t key,
                 void* ctx, bool completion) {
  const std::size_t len = iov_bytes(iov, count);
  if (const ssize_t r = begin(e, count, src, len, false); r != 0) return r;
  const Av::Entry peer = e.av->table[src];
  const std::uint64_t id = e.next_send_id++;
  RmaReq rq{id, key, addr, len, e.wire};
  Ep::RmaOp op;
  op.ctx = ctx;
  op.completion = completion;
  op.read = true;
  op.len = len;
  op.peer = peer;
  for (std::size_t i = 0; i < count; ++i) op.iov[i] = iov[i];
  op.count = count;
  e.rma_ops[id] = op;
  SlotMeta m;
  m.kind = kRmaReadReq;
  m.send_id = id;
  m.cq_flags = FI_RMA | FI_READ;
  iovec biov{&rq, sizeof rq};
  const ssize_t r = send_to(e, peer, &biov, 1, nullptr, 0, false, false, m, kSendWait);
  if (r != 0) e.rma_ops.erase(id);
  if (r == 0) e.domain->rma_reads.fetch_add(1, std::memory_order_relaxed);
  return r;
}

Ep* ep_of(fid_ep* f) { return reinterpret_cast<Ep*>(f); }

ssize_t r_read(fid_ep* f, void* buf, std::size_t len, void*, fi_addr_t src, std::uint64_t addr, std::uint64_t key,
               void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{buf, len};
  return rma_read(*e, &iov, 1, src, addr, key, ctx, e->tx_default_completion());
}
ssize_t r_readv(fid_ep* f, const iovec* iov, void**, std::size_t count, fi_addr_t src, std::uint64_t addr,
                std::uint64_t key, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return rma_read(*e, iov, count, src, addr, key, ctx, e->tx_default_completion());
}
ssize_t r_readmsg(fid_ep* f, const fi_msg_rma* msg, std::uint64_t flags) {
  Ep* e = ep_of(f);
  if (!msg || msg->rma_iov_count != 1) return -FI_EINVAL;
  std::lock_guard lk(e->domain->mu);
  return rma_read(*e, msg->msg_iov, msg->iov_count, msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->context,
                  !e->tx_selective || (flags & FI_COMPLETION));
}
ssize_t r_write(fid_ep* f, const void* buf, std::size_t len, void*, fi_addr_t dest, std::uint64_t addr,
                std::uint64_t key, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rma_write(*e, &iov, 1, dest, addr, key, ctx, 0, false, false, e->tx_default_completion());
}
ssize_t r_writev(fid_ep* f, const iovec* iov, void**, std::size_t count, fi_addr_t dest, std::uint64_t addr,
                 std::uint64_t key, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return rma_write(*e, iov, count, dest, addr, key, ctx, 0, false, false, e->tx_default_completion());
}
ssize_t r_writemsg(fid_ep* f, const fi_msg_rma* msg, std::uint64_t flags) {
  Ep* e = ep_of(f);
  if (!msg || msg->rma_iov_count != 1) return -FI_EINVAL;
  std::lock_guard lk(e->domain->mu);
  return rma_write(*e, msg->msg_iov, msg->iov_count, msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->context,
                   msg->data, (flags & FI_REMOTE_CQ_DATA) != 0, (flags & FI_INJECT) != 0,
                   !e->tx_selective || (flags & FI_COMPLETION));
}
ssize_t r_inject(fid_ep* f, const void* buf, std::size_t len, fi_addr_t dest, std::uint64_t addr, std::uint64_t key) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rma_write(*e, &iov, 1, dest, addr, key, nullptr, 0, false, true, false);
}
ssize_t r_writedata(fid_ep* f, const void* buf, std::size_t len, void*, std::uint64_t data, fi_addr_t dest,
                    std::uint64_t addr, std::uint64_t key, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rma_write(*e, &iov, 1, dest, addr, key, ctx, data, true, false, e->tx_default_completion());
}
ssize_t r_injectdata(fid_ep* f, const void* buf, std::size_t len, std::uint64_t data, fi_addr_t dest,
                     std::uint64_t addr, std::uint64_t key) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rma_write(*e, &iov, 1, dest, addr, key, nullptr, data, true, true, false);
}

}  // namespace

fi_ops_rma rdm_rma_ops{sizeof(fi_ops_rma), r_read,     r_readv,  r_readmsg,   r_write,
                       r_writev,           r_writemsg, r_inject, r_writedata, r_injectdata};

std::uint64_t mr_check(Ep& e, std::uint64_t key, std::uint64_t addr, std::uint64_t len, std::uint64_t need,
                       const Domain::MrRegion** out) {
  auto it = e.domain->mrs.find(key);
  if (it == e.domain->mrs.end()) return FI_EKEYREJECTED;
  const Domain::MrRegion& r = it->second;
  if ((r.access & need) != need) return FI_EACCES;
  if (addr < r.offset || addr - r.offset > r.len || len > r.len - (addr - r.offset)) return FI_EINVAL;
  *out = &r;
  return 0;
}

bool learn_peer(Ep& e, std::uint64_t src_key, fi_addr_t src, const WireAddr& w) {
  if (auto p = e.peers.find(src_key); p != e.peers.end()) {
    if (p->second.wire.handle == w.handle) return true;
    e.peers.erase(p);  // another ring at that card and slot: the endpoint there was replaced
  }
  if (e.av && src != FI_ADDR_NOTAVAIL && src < e.av->table.size() && e.av->table[src].valid &&
      e.av->table[src].wire.handle == w.handle) {
    e.peers[src_key] = e.av->table[src];
    return true;
  }
  auto a = decode_addr(*e.domain, &w);
  if (!a) return false;
  e.peers[src_key] = *a;
  return true;
}

}  // namespace npo::fi
