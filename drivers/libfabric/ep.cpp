// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the endpoint fid -- fi_cancel, options, the ops tables, close, bind, control and
// fi_endpoint (ep_open) (docs/libfabric.md "Faults").
#include <sys/random.h>

#include "names.hpp"
#include "provider.hpp"

namespace npo::fi {

ssize_t ep_cancel(fid_t f, void* ctx) {
  Ep* e = reinterpret_cast<Ep*>(f);
  std::lock_guard lk(e->domain->mu);
  if (e->rdm) return rdm_cancel(*e, ctx);
  auto it = std::find_if(e->rx.begin(), e->rx.end(), [&](const Ep::Rx& r) { return r.ctx == ctx; });
  if (it == e->rx.end()) return -FI_ENOENT;
  e->rx.erase(it);
  if (e->rx_cq) e->rx_cq->push_error(ctx, FI_RECV | FI_MSG, 0, 0, FI_ECANCELED, "npo: receive canceled");
  return 0;
}
// FI_OPT_MIN_MULTI_RECV (size_t, bytes; RDM only): an FI_MULTI_RECV buffer is released once
// less than this is left (default kEagerMax).
int ep_getopt(fid_t f, int level, int optname, void* optval, std::size_t* optlen) {
  Ep* e = reinterpret_cast<Ep*>(f);
  if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV || !e->rdm) return -FI_ENOPROTOOPT;
  if (!optval || !optlen || *optlen < sizeof(std::size_t)) return -FI_ETOOSMALL;
  std::lock_guard lk(e->domain->mu);
  std::memcpy(optval, &e->min_multi_recv, sizeof(std::size_t));
  *optlen = sizeof(std::size_t);
  return 0;
}
int ep_setopt(fid_t f, int level, int optname, const void* optval, std::size_t optlen) {
  Ep* e = reinterpret_cast<Ep*>(f);
  if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV || !e->rdm) return -FI_ENOPROTOOPT;
  if (!optval || optlen != sizeof(std::size_t)) return -FI_EINVAL;
  std::lock_guard lk(e->domain->mu);
  std::memcpy(&e->min_multi_recv, optval, sizeof(std::size_t));
  return 0;
}
ssize_t ep_rx_size_left(fid_ep* f) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return static_cast<ssize_t>(kRxSize - std::min<std::size_t>(kRxSize, e->rdm ? e->posted.size() : e->rx.size()));
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
    cntr_unbind(*e);
    if (e->service) unpublish_service(d->fabric->backend, e->service, e->wire);
    e->queue.reset();
    e->map.reset();
    if (e->window) (void)e->window->revoke();
    e->window.reset();
    if (e->hbm.size) (void)free_hbm(*d->dev, e->hbm);
    e->staging.reset();
    if (trace::on()) trace::ep_closed(*e);
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
    case FI_CLASS_CNTR: return cntr_bind(*e, *reinterpret_cast<Cntr*>(b), flags);
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
  // RDM: the landing zone of rendezvous chunks follows the ring, in the same window
  // Slots per lane shrink (to 2) when the lanes of a large supernode would make the ring
  // larger than kRingBudget.
  while (e.slots > 2 && ring_bytes(e.lanes, e.slots) > kRingBudget) e.slots /= 2;
  const std::uint64_t bytes = ring_bytes(e.lanes, e.slots) + (e.rdm ? std::uint64_t{kLandingChunks} * kRndvChunk : 0);
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
  e.wire.slots = static_cast<std::uint16_t>(e.slots);
  e.wire.magic = kAddrMagic;
  e.rx_consumed.assign(e.lanes, 0);
  e.lane_owner.assign(e.lanes, 0);
  e.lane_src.assign(e.lanes, 0);
  e.lane_ring.assign(e.lanes, 0);
  for (unsigned s = kTxSize; s > 0; --s) e.free_slots.push_back(s - 1);
  return e.rdm ? rdm_setup(e) : 0;
}

int ep_open(fid_domain* f, fi_info* info, fid_ep** out, void* context) {
  auto* d = reinterpret_cast<Domain*>(f);
  if (info && info->ep_attr && info->ep_attr->type != FI_EP_DGRAM && info->ep_attr->type != FI_EP_RDM &&
      info->ep_attr->type != FI_EP_UNSPEC)
    return -FI_EINVAL;
  trace::init();  // FI_NPO_TRACE, read once per process
  auto e = std::make_unique<Ep>();
  e->rdm = info && info->ep_attr && info->ep_attr->type == FI_EP_RDM;
  e->directed_recv = info && (info->caps & FI_DIRECTED_RECV);
  if (info && info->tx_attr) e->tx_op_flags = info->tx_attr->op_flags;
  if (info && info->rx_attr) e->rx_op_flags = info->rx_attr->op_flags;
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
  if (e->rdm) {
    e->ep.msg = &rdm_msg_ops;
    e->ep.tagged = &rdm_tagged_ops;
    e->ep.rma = &rdm_rma_ops;
    e->ep.atomic = &rdm_atomic_ops;
  }
  // A bad FI_NPO_FAULT / FI_NPO_FAULT_MS / FI_NPO_STALL_MS is reported now, not at the first fault.
  (void)abort_on_fault();
  (void)fault_persistence();
  (void)stall_dump_after();
  // One lane per possible sender (fabric IDs 1..N, kEpsPerCard endpoints each), at least 64.
  e->lanes =
      std::clamp(kEpsPerCard * (static_cast<unsigned>(count_cards(d->fabric->backend)) + 1), kDefaultLanes, 4096u);
  if (auto l = param_int(Param::kRingLanes, 1, 4096)) e->lanes = static_cast<unsigned>(*l);
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
  // Message ids start at random: a peer may still answer (CTS, RMA replies) a rendezvous of
  // the endpoint that had this card, number and window slot before; its ids then name none
  // of ours, and the answer is dropped instead of landing in one of our sends.
  if (::getrandom(&e->next_send_id, sizeof e->next_send_id, 0) != static_cast<ssize_t>(sizeof e->next_send_id))
    e->next_send_id = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  e->next_send_id = (e->next_send_id >> 2) | 1;  // far from wrapping, never 0
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
  // An info whose source address names a service (fi_getinfo with FI_SOURCE and a service):
  // publish this endpoint under it, as a bound port (names.hpp).
  if (info && is_svc_addr(info->src_addr) && info->src_addrlen == kAddrLen) {
    SvcAddr svc;
    std::memcpy(&svc, info->src_addr, sizeof svc);
    if (svc.service != 0) {
      if (const int r = publish_service(d->fabric->backend, svc.service, e->wire); r != 0) {
        d->refs.fetch_add(1);  // ep_close gives it back
        d->mu.unlock();
        ep_close(&e.release()->ep.fid);
        d->mu.lock();
        return r;
      }
      e->service = svc.service;
    }
  }
  d->refs.fetch_add(1);
  *out = &e.release()->ep;
  return 0;
}

}  // namespace npo::fi
