// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the RDM endpoint's operations -- fi_ops_msg and fi_ops_tagged over one send and one
// receive path (tag matching, FI_PEEK / FI_CLAIM / FI_DISCARD) and fi_cancel.
#include "provider.hpp"

namespace npo::fi {

// ---- Operations -------------------------------------------------------------------------------
namespace {

ssize_t rdm_send(Ep& e, const iovec* iov, std::size_t count, fi_addr_t dest, void* ctx, std::uint64_t data,
                 bool has_data, bool inject, bool completion, bool tagged, std::uint64_t tag) {
  if (!e.enabled) return -FI_EOPBADSTATE;
  if (!e.av) return -FI_EINVAL;
  if (count > kIovLimit) return -FI_EINVAL;
  if (dest >= e.av->table.size() || !e.av->table[dest].valid) return -FI_EINVAL;
  const std::size_t len = iov_bytes(iov, count);
  if (len > kRdmMaxMsg || (inject && len > kEagerMax)) return -FI_EMSGSIZE;
  e.rdm_progress();
  if (e.fatal_reported) return -FI_EIO;
  if (trace::on()) trace::send_begin(e, len, e.av->table[dest].handle.fabric_id, tagged, inject, has_data, tag);
  SlotMeta m;
  m.tagged = tagged;
  m.tag = tag;
  m.cq_flags = FI_SEND | (tagged ? FI_TAGGED : FI_MSG);
  if (len <= kEagerMax) {
    const ssize_t r = do_send(e, iov, count, dest, ctx, data, has_data, completion, m);
    if (trace::on()) trace::send_end(e, static_cast<long>(r), 0);
    return r;
  }
  // rendezvous: announce; the data moves when the receiver grants landing space
  const std::uint64_t id = e.next_send_id++;
  RtsBody b{id, len, e.wire};
  iovec biov{&b, sizeof b};
  m.kind = kRts;
  m.send_id = id;
  const ssize_t r = do_send(e, &biov, 1, dest, nullptr, data, has_data, false, m);
  if (trace::on()) trace::send_end(e, static_cast<long>(r), id);
  if (r != 0) return r;
  Ep::SendReq q;
  q.ctx = ctx;
  q.completion = completion;
  q.count = count;
  for (std::size_t i = 0; i < count; ++i) q.iov[i] = iov[i];
  q.total = len;
  q.cq_flags = m.cq_flags;
  q.tag = tag;
  q.peer = e.av->table[dest];
  q.dest_key = dest_key_of(q.peer.handle);
  e.sends.emplace(id, q);
  return 0;
}

ssize_t rdm_recv(Ep& e, const iovec* iov, std::size_t count, fi_addr_t src, void* ctx, std::uint64_t flags, bool tagged,
                 std::uint64_t tag, std::uint64_t ignore) {
  if (!e.enabled) return -FI_EOPBADSTATE;
  if (count > kIovLimit) return -FI_EINVAL;
  Ep::Posted r;
  r.ctx = ctx;
  r.count = count;
  r.flags = flags;
  r.tagged = tagged;
  r.tag = tag;
  r.ignore = ignore;
  r.src = e.directed_recv ? src : FI_ADDR_UNSPEC;  // ignored without FI_DIRECTED_RECV (fi_msg(3))
  for (std::size_t i = 0; i < count; ++i) r.iov[i] = iov[i];
  if (flags & (FI_PEEK | FI_CLAIM)) {
    std::list<Ep::Unexp>::iterator u = e.unexp.end();
    if (flags & FI_PEEK) {
      e.rdm_progress();
      u = std::find_if(e.unexp.begin(), e.unexp.end(), [&](const Ep::Unexp& x) { return matches(x, r); });
      if (u == e.unexp.end()) {
        if (e.rx_cq)
          e.rx_cq->push_error(ctx, FI_RECV | (tagged ? FI_TAGGED : FI_MSG), 0, 0, FI_ENOMSG,
                              "npo: no message matches the peek on " + e.where(), tag);
        return 0;
      }
      if (!(flags & (FI_CLAIM | FI_DISCARD))) {  // a peek only reports the message
        Cq::Comp c{ctx, recv_flags(u->tagged, u->has_data), static_cast<std::size_t>(u->total), nullptr,
                   u->has_data ? u->data : 0};
        c.tag = u->tag;
        c.src = u->src;
        if (e.rx_cq) e.rx_cq->push(c);
        return 0;
      }
    } else {
      // FI_CLAIM without FI_PEEK: the message an earlier FI_PEEK|FI_CLAIM with this context claimed
      if (!ctx) return -FI_EINVAL;
      u = std::find_if(e.unexp.begin(), e.unexp.end(), [&](const Ep::Unexp& x) { return x.claimed_by == ctx; });
      if (u == e.unexp.end()) return -FI_EINVAL;
    }
    if ((flags & FI_PEEK) && (flags & FI_CLAIM) && !(flags & FI_DISCARD)) {
      u->claimed_by = ctx;  // reported now; received later by FI_CLAIM with the same context
      Cq::Comp c{ctx, recv_flags(u->tagged, u->has_data), static_cast<std::size_t>(u->total), nullptr,
                 u->has_data ? u->data : 0};
      c.tag = u->tag;
      c.src = u->src;
      if (e.rx_cq) e.rx_cq->push(c);
      return 0;
    }
    if (flags & FI_DISCARD) {
      Cq::Comp c{ctx, recv_flags(u->tagged, u->has_data), 0, nullptr, u->has_data ? u->data : 0};
      c.tag = u->tag;
      c.src = u->src;
      discard_unexp(e, u);
      e.count(FI_RECV);
      if (e.rx_cq) e.rx_cq->push(c);
      return 0;
    }
    deliver_unexp(e, r, u);
    return 0;
  }
  if (flags & FI_MULTI_RECV) {
    // one buffer for message after message (untagged only, fi_msg(3)); the unexpected ones
    // that match go in first
    if (tagged || count == 0) return -FI_EINVAL;
    if (e.posted.size() >= kRxSize) return -FI_EAGAIN;
    if (trace::on()) trace::recv_begin(e, ctx, iov_bytes(iov, count), tagged, tag);
    r.multi = std::make_shared<Ep::Posted::Multi>();
    if (iov_bytes(iov, count) < e.min_multi_recv) r.multi->released = true;  // one message, then released
    for (auto u = e.unexp.begin(); u != e.unexp.end();) {
      if (!matches(*u, r)) {
        ++u;
        continue;
      }
      const auto next = std::next(u);
      deliver_unexp(e, multi_slice(e, r, u->total), u);
      u = next;
      if (r.multi->released) return 0;
    }
    e.posted.push_back(r);
    return 0;
  }
  auto u = std::find_if(e.unexp.begin(), e.unexp.end(), [&](const Ep::Unexp& x) { return matches(x, r); });
  if (u != e.unexp.end()) {
    if (trace::on()) trace::recv_begin(e, ctx, iov_bytes(iov, count), tagged, tag);
    deliver_unexp(e, r, u);
    return 0;
  }
  if (e.posted.size() >= kRxSize) return -FI_EAGAIN;
  if (trace::on()) trace::recv_begin(e, ctx, iov_bytes(iov, count), tagged, tag);
  e.posted.push_back(r);
  return 0;
}

// The op flags of fi_recv / fi_recvv: FI_COMPLETION as the CQ binding says, FI_MULTI_RECV when
// the info's rx_attr->op_flags asked for it (fi_endpoint(3) "op_flags").
std::uint64_t untagged_recv_flags(const Ep& e) {
  return (e.rx_default_completion() ? FI_COMPLETION : 0) | (e.rx_op_flags & FI_MULTI_RECV);
}

// fi_ops_msg
ssize_t m_recv(fid_ep* f, void* buf, std::size_t len, void*, fi_addr_t src, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{buf, len};
  return rdm_recv(*e, &iov, 1, src, ctx, untagged_recv_flags(*e), false, 0, 0);
}
ssize_t m_recvv(fid_ep* f, const iovec* iov, void**, std::size_t count, fi_addr_t src, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return rdm_recv(*e, iov, count, src, ctx, untagged_recv_flags(*e), false, 0, 0);
}
ssize_t m_recvmsg(fid_ep* f, const fi_msg* msg, std::uint64_t flags) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return rdm_recv(*e, msg->msg_iov, msg->iov_count, msg->addr, msg->context, flags, false, 0, 0);
}
ssize_t m_send(fid_ep* f, const void* buf, std::size_t len, void*, fi_addr_t dest, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rdm_send(*e, &iov, 1, dest, ctx, 0, false, false, e->tx_default_completion(), false, 0);
}
ssize_t m_sendv(fid_ep* f, const iovec* iov, void**, std::size_t count, fi_addr_t dest, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return rdm_send(*e, iov, count, dest, ctx, 0, false, false, e->tx_default_completion(), false, 0);
}
ssize_t m_sendmsg(fid_ep* f, const fi_msg* msg, std::uint64_t flags) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return rdm_send(*e, msg->msg_iov, msg->iov_count, msg->addr, msg->context, msg->data,
                  (flags & FI_REMOTE_CQ_DATA) != 0, (flags & FI_INJECT) != 0,
                  !e->tx_selective || (flags & FI_COMPLETION), false, 0);
}
ssize_t m_inject(fid_ep* f, const void* buf, std::size_t len, fi_addr_t dest) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rdm_send(*e, &iov, 1, dest, nullptr, 0, false, true, false, false, 0);
}
ssize_t m_senddata(fid_ep* f, const void* buf, std::size_t len, void*, std::uint64_t data, fi_addr_t dest, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rdm_send(*e, &iov, 1, dest, ctx, data, true, false, e->tx_default_completion(), false, 0);
}
ssize_t m_injectdata(fid_ep* f, const void* buf, std::size_t len, std::uint64_t data, fi_addr_t dest) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rdm_send(*e, &iov, 1, dest, nullptr, data, true, true, false, false, 0);
}

// fi_ops_tagged
ssize_t t_recv(fid_ep* f, void* buf, std::size_t len, void*, fi_addr_t src, std::uint64_t tag, std::uint64_t ignore,
               void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{buf, len};
  return rdm_recv(*e, &iov, 1, src, ctx, e->rx_default_completion() ? FI_COMPLETION : 0, true, tag, ignore);
}
ssize_t t_recvv(fid_ep* f, const iovec* iov, void**, std::size_t count, fi_addr_t src, std::uint64_t tag,
                std::uint64_t ignore, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return rdm_recv(*e, iov, count, src, ctx, e->rx_default_completion() ? FI_COMPLETION : 0, true, tag, ignore);
}
ssize_t t_recvmsg(fid_ep* f, const fi_msg_tagged* msg, std::uint64_t flags) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return rdm_recv(*e, msg->msg_iov, msg->iov_count, msg->addr, msg->context, flags, true, msg->tag, msg->ignore);
}
ssize_t t_send(fid_ep* f, const void* buf, std::size_t len, void*, fi_addr_t dest, std::uint64_t tag, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rdm_send(*e, &iov, 1, dest, ctx, 0, false, false, e->tx_default_completion(), true, tag);
}
ssize_t t_sendv(fid_ep* f, const iovec* iov, void**, std::size_t count, fi_addr_t dest, std::uint64_t tag, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return rdm_send(*e, iov, count, dest, ctx, 0, false, false, e->tx_default_completion(), true, tag);
}
ssize_t t_sendmsg(fid_ep* f, const fi_msg_tagged* msg, std::uint64_t flags) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return rdm_send(*e, msg->msg_iov, msg->iov_count, msg->addr, msg->context, msg->data,
                  (flags & FI_REMOTE_CQ_DATA) != 0, (flags & FI_INJECT) != 0,
                  !e->tx_selective || (flags & FI_COMPLETION), true, msg->tag);
}
ssize_t t_inject(fid_ep* f, const void* buf, std::size_t len, fi_addr_t dest, std::uint64_t tag) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rdm_send(*e, &iov, 1, dest, nullptr, 0, false, true, false, true, tag);
}
ssize_t t_senddata(fid_ep* f, const void* buf, std::size_t len, void*, std::uint64_t data, fi_addr_t dest,
                   std::uint64_t tag, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rdm_send(*e, &iov, 1, dest, ctx, data, true, false, e->tx_default_completion(), true, tag);
}
ssize_t t_injectdata(fid_ep* f, const void* buf, std::size_t len, std::uint64_t data, fi_addr_t dest,
                     std::uint64_t tag) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return rdm_send(*e, &iov, 1, dest, nullptr, data, true, true, false, true, tag);
}

}  // namespace

ssize_t rdm_cancel(Ep& e, void* ctx) {
  auto it = std::find_if(e.posted.begin(), e.posted.end(), [&](const Ep::Posted& r) { return r.ctx == ctx; });
  if (it == e.posted.end()) return -FI_ENOENT;
  const Ep::Posted r = *it;
  e.posted.erase(it);
  if (trace::on()) trace::recv_end(e, ctx, 0, "canceled");
  // an FI_MULTI_RECV buffer is released by the cancel: FI_MULTI_RECV on it unless messages
  // still land in it (then on the last of those)
  std::uint64_t multi = 0;
  if (r.multi) {
    r.multi->released = true;
    if (r.multi->inflight == 0) multi = FI_MULTI_RECV;
  }
  if (e.rx_cq)
    e.rx_cq->push_error(ctx, FI_RECV | (r.tagged ? FI_TAGGED : FI_MSG) | multi, 0, 0, FI_ECANCELED,
                        "npo: receive canceled", r.tag);
  return 0;
}

fi_ops_msg rdm_msg_ops{sizeof(fi_ops_msg), m_recv,   m_recvv,    m_recvmsg,   m_send, m_sendv,
                       m_sendmsg,          m_inject, m_senddata, m_injectdata};
fi_ops_tagged rdm_tagged_ops{
    sizeof(fi_ops_tagged), t_recv, t_recvv, t_recvmsg, t_send, t_sendv, t_sendmsg, t_inject, t_senddata, t_injectdata};

}  // namespace npo::fi
