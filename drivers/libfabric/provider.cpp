// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the `npo` libfabric provider -- fabric, domains (one per card), getinfo and the
// entry point fi_prov_ini, the module's only exported symbol (docs/libfabric.md).
#include "provider.hpp"

#include "names.hpp"

namespace npo::fi {

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
int op_counters(fid_domain* f, fi_npo_op_counters* out) {
  if (!f || !out) return -FI_EINVAL;
  auto* d = reinterpret_cast<Domain*>(f);
  out->rma_writes = d->rma_writes.load();
  out->rma_reads = d->rma_reads.load();
  out->atomics = d->atomics.load();
  out->target_rma_writes = d->target_rma_writes.load();
  out->target_rma_reads = d->target_rma_reads.load();
  out->target_atomics = d->target_atomics.load();
  out->rndv_zero_copy_bytes = d->rndv_zero_copy_bytes.load();
  out->rndv_staged_bytes = d->rndv_staged_bytes.load();
  out->credit_reads = d->credit_reads.load();
  return 0;
}
fi_npo_domain_ops npo_domain_ops{sizeof(fi_npo_domain_ops), dma_counters, op_counters};
int domain_ops_open(fid*, const char* name, std::uint64_t, void** ops, void*) {
  if (!name || std::string_view(name) != FI_NPO_DOMAIN_OPS_NAME) return -FI_ENOSYS;
  *ops = &npo_domain_ops;
  return 0;
}
int domain_close(fid* f) {
  auto* d = reinterpret_cast<Domain*>(f);
  if (d->refs.load() != 0) return -FI_EBUSY;
  if (param_bool(Param::kStats).value_or(false)) {
    // one line per domain, for runtimes the application cannot ask (docs/libfabric.md "Extensions")
    std::fprintf(
        stderr,
        "npo: stats pid %d domain npo%u (fabric id %u): started rma_write=%llu rma_read=%llu atomic=%llu; "
        "executed as target rma_write=%llu rma_read=%llu atomic=%llu; dma ops=%llu bytes=%llu; "
        "rendezvous zero_copy_bytes=%llu staged_bytes=%llu; credit_reads=%llu\n",
        static_cast<int>(::getpid()), d->card, d->fabric_id, static_cast<unsigned long long>(d->rma_writes.load()),
        static_cast<unsigned long long>(d->rma_reads.load()), static_cast<unsigned long long>(d->atomics.load()),
        static_cast<unsigned long long>(d->target_rma_writes.load()),
        static_cast<unsigned long long>(d->target_rma_reads.load()),
        static_cast<unsigned long long>(d->target_atomics.load()), static_cast<unsigned long long>(d->ops_ok.load()),
        static_cast<unsigned long long>(d->bytes_moved.load()),
        static_cast<unsigned long long>(d->rndv_zero_copy_bytes.load()),
        static_cast<unsigned long long>(d->rndv_staged_bytes.load()),
        static_cast<unsigned long long>(d->credit_reads.load()));
    std::fflush(stderr);
  }
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
                         cntr_open,
                         NPO_ENOSYS(fi_ops_domain, poll_open),
                         NPO_ENOSYS(fi_ops_domain, stx_ctx),
                         NPO_ENOSYS(fi_ops_domain, srx_ctx),
                         query_atomic,
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
    auto& s = shared();
    std::lock_guard lk(s.mu);
    // one System per card per process, shared by the domains on it (a second owner attach of
    // the same card from this process would be refused by the daemon); a card fi_getinfo
    // claimed is already open
    auto sys = remote_card_locked(s, fab->backend, *k);
    if (!sys) return domain_open_failed(fab->backend, *k, sys.error());
    d->sys = *sys;
    if (d->sys->device_count() != 1) return -FI_ENODEV;
    d->dev = &d->sys->device(0);
  } else {
    auto& s = shared();
    std::lock_guard lk(s.mu);
    auto sys = local_system_locked(s, fab->backend.uri);
    if (!sys) return domain_open_failed(fab->backend, *k, sys.error());
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

// The native RDM endpoint (rdm.cpp): tagged and untagged messages of any size, reliable,
// ordered per sender, directed receives, peek/claim/discard, remote CQ data; RMA read and
// write into registered memory (rma.cpp).
constexpr std::uint64_t kRdmRmaCaps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
// FI_RMA_EVENT: counters bound with FI_REMOTE_READ / FI_REMOTE_WRITE count the RMA and
// atomics this endpoint is the target of (cntr.cpp).
constexpr std::uint64_t kRdmCaps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV | FI_SOURCE |
                                   FI_LOCAL_COMM | FI_REMOTE_COMM | kRdmRmaCaps | FI_ATOMIC | FI_RMA_EVENT |
                                   FI_MULTI_RECV;

bool hints_match_rdm(const fi_info* hints, unsigned card) {
  if (!hints) return true;
  // capabilities this endpoint cannot offer (secondary ones like FI_FENCE are ignored)
  if (hints->caps & (FI_COLLECTIVE | FI_HMEM | FI_TRIGGER | FI_MULTICAST | FI_NAMED_RX_CTX)) return false;
  if (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM) return false;
  if (hints->ep_attr && hints->ep_attr->max_msg_size > kRdmMaxMsg) return false;
  if (hints->domain_attr && hints->domain_attr->name &&
      std::string_view(hints->domain_attr->name) != "npo" + std::to_string(card))
    return false;
  if (hints->fabric_attr && hints->fabric_attr->name && std::string_view(hints->fabric_attr->name) != "npo")
    return false;
  if (hints->fabric_attr && hints->fabric_attr->prov_name && std::string_view(hints->fabric_attr->prov_name) != "npo")
    return false;
  if (hints->addr_format != FI_FORMAT_UNSPEC) return false;
  if (hints->domain_attr && hints->domain_attr->cq_data_size > 8) return false;
  // FI_MR_BASIC (v1.0: provider keys, virtual addresses) is not offered: keys are the
  // application's and remote addresses offsets, which is FI_MR_SCALABLE (mr_mode 0 since 1.5)
  if (hints->domain_attr && (hints->domain_attr->mr_mode & FI_MR_BASIC)) return false;
  if (hints->domain_attr && (hints->domain_attr->mr_mode & FI_MR_LOCAL) == 0 && hints->domain_attr->mr_mode != 0 &&
      (hints->domain_attr->mr_mode &
       ~(FI_MR_BASIC | FI_MR_SCALABLE | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_LOCAL | FI_MR_RAW |
         FI_MR_ENDPOINT | FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT | FI_MR_HMEM)))
    return false;
  if (hints->tx_attr && (hints->tx_attr->inject_size > kEagerMax || hints->tx_attr->iov_limit > kIovLimit))
    return false;
  if (hints->rx_attr && hints->rx_attr->iov_limit > kIovLimit) return false;
  if (hints->tx_attr && (hints->tx_attr->msg_order & ~(FI_ORDER_SAS | FI_ORDER_NONE))) return false;
  if (hints->rx_attr && (hints->rx_attr->msg_order & ~(FI_ORDER_SAS | FI_ORDER_NONE))) return false;
  return true;
}

fi_info* make_info(unsigned card, const fi_info* hints);

fi_info* make_rdm_info(unsigned card, const fi_info* hints) {
  fi_info* i = make_info(card, hints);
  if (!i) return nullptr;
  // The capabilities asked for (all when none were): FI_DIRECTED_RECV in particular changes
  // behaviour, since without it a receive's source address is ignored (fi_tagged(3)).
  std::uint64_t caps = kRdmCaps;
  if (hints && hints->caps) {
    caps = hints->caps & kRdmCaps;
    if (!(caps & (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC))) caps |= FI_MSG | FI_TAGGED;
    // FI_RMA / FI_ATOMIC alone mean both directions and both roles (fi_getinfo(3))
    if ((caps & (FI_RMA | FI_ATOMIC)) && !(caps & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)))
      caps |= FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    if (!(caps & (FI_SEND | FI_RECV))) caps |= FI_SEND | FI_RECV;
    caps |= FI_LOCAL_COMM | FI_REMOTE_COMM;
  }
  i->caps = caps;
  i->tx_attr->caps = caps & (FI_MSG | FI_TAGGED | FI_SEND | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE);
  i->rx_attr->caps = caps & (FI_MSG | FI_TAGGED | FI_RECV | FI_DIRECTED_RECV | FI_SOURCE | FI_RMA | FI_ATOMIC |
                             FI_REMOTE_READ | FI_REMOTE_WRITE | FI_RMA_EVENT | FI_MULTI_RECV);
  if (caps & (FI_RMA | FI_ATOMIC)) {
    i->tx_attr->rma_iov_limit = 1;
    i->domain_attr->mr_iov_limit = kIovLimit;
  }
  i->tx_attr->inject_size = kEagerMax;
  i->domain_attr->cntr_cnt = kEpsPerCard * kCntrEvents;
  i->rx_attr->total_buffered_recv = kUnexpMax;
  // default op flags: FI_COMPLETION when asked (with FI_SELECTIVE_COMPLETION it decides)
  if (hints && hints->tx_attr) i->tx_attr->op_flags = hints->tx_attr->op_flags & FI_COMPLETION;
  if (hints && hints->rx_attr) i->rx_attr->op_flags = hints->rx_attr->op_flags & FI_COMPLETION;
  // FI_MULTI_RECV in the default op flags makes every fi_recv a multi-receive buffer
  if ((caps & FI_MULTI_RECV) && hints && hints->rx_attr)
    i->rx_attr->op_flags |= hints->rx_attr->op_flags & FI_MULTI_RECV;
  i->ep_attr->type = FI_EP_RDM;
  i->ep_attr->max_msg_size = kRdmMaxMsg;
  // all 64 tag bits are matched (libfabric 1.17 has no FI_TAG_GENERIC; this is its pattern)
  i->ep_attr->mem_tag_format = 0xaaaaaaaaaaaaaaaaull;
  // any user buffer is accepted (the provider stages it), so no FI_MR_LOCAL; keys are the
  // application's, remote addresses offsets: FI_MR_SCALABLE when the hints say it so
  i->domain_attr->mr_mode =
      (hints && hints->domain_attr && hints->domain_attr->mr_mode == FI_MR_SCALABLE) ? FI_MR_SCALABLE : 0;
  return i;
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
  // Both AV types work the same (an fi_addr_t is the table index), so an unspecified type is
  // answered FI_AV_UNSPEC, as libfabric's own providers do: a program that sees FI_AV_TABLE may
  // assume its first insert is fi_addr 0 (fabtests' ft_init_av does).
  i->domain_attr->av_type = (hints && hints->domain_attr) ? hints->domain_attr->av_type : FI_AV_UNSPEC;
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

// libfabric's OFI_CORE_PROV_ONLY (include/ofi.h, internal): set when a utility provider
// (ofi_rxd, ofi_rxm) asks a core provider for endpoints to layer on.
constexpr std::uint64_t kCoreProvOnly = 1ull << 59;

// Whether entry `i` gives everything `hints` asks for (fi_getinfo(3): a returned entry
// satisfies the hints): every capability, ordering bit and domain capability asked for, the
// progress models, the AV type. An entry that does not is not returned, so what the provider
// does not offer is refused at getinfo with -FI_ENODATA, not by a later call.
bool info_fits(const fi_info* i, const fi_info* hints) {
  if (!hints) return true;
  auto has = [](std::uint64_t have, std::uint64_t want) { return (have & want) == want; };
  // primary capabilities (secondary ones such as FI_FENCE are hints, fi_getinfo(3) "Capabilities")
  constexpr std::uint64_t kPrimary = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_SEND | FI_RECV |
                                     FI_REMOTE_READ | FI_REMOTE_WRITE | FI_MULTICAST | FI_COLLECTIVE | FI_HMEM |
                                     FI_NAMED_RX_CTX | FI_DIRECTED_RECV | FI_MULTI_RECV | FI_RMA_EVENT | FI_TRIGGER |
                                     FI_SOURCE | FI_SHARED_AV | FI_VARIABLE_MSG;
  if (!has(i->caps, hints->caps & kPrimary)) return false;
  if (hints->tx_attr && !has(i->tx_attr->caps, hints->tx_attr->caps & kPrimary)) return false;
  if (hints->rx_attr && !has(i->rx_attr->caps, hints->rx_attr->caps & kPrimary)) return false;
  if (hints->tx_attr && !has(i->tx_attr->msg_order, hints->tx_attr->msg_order)) return false;
  if (hints->rx_attr && !has(i->rx_attr->msg_order, hints->rx_attr->msg_order)) return false;
  if (hints->tx_attr && !has(i->tx_attr->comp_order, hints->tx_attr->comp_order)) return false;
  if (hints->rx_attr && !has(i->rx_attr->comp_order, hints->rx_attr->comp_order)) return false;
  if (hints->domain_attr) {
    const fi_domain_attr& h = *hints->domain_attr;
    if (!has(i->domain_attr->caps, h.caps & (FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SHARED_AV))) return false;
    if (h.data_progress != FI_PROGRESS_UNSPEC && h.data_progress != i->domain_attr->data_progress) return false;
    if (h.control_progress != FI_PROGRESS_UNSPEC && h.control_progress != i->domain_attr->control_progress)
      return false;
    if (h.threading != FI_THREAD_UNSPEC && i->domain_attr->threading != FI_THREAD_SAFE &&
        h.threading != i->domain_attr->threading)
      return false;
    if (h.av_type != FI_AV_UNSPEC && h.av_type != FI_AV_MAP && h.av_type != FI_AV_TABLE) return false;
  }
  if (hints->ep_attr && hints->ep_attr->protocol != FI_PROTO_UNSPEC && hints->ep_attr->protocol != i->ep_attr->protocol)
    return false;
  return true;
}

// Whether some entry of card 0 (the hints name no domain here) satisfies `hints`.
bool any_entry_fits(const fi_info* hints) {
  for (int kind = 0; kind < 2; ++kind) {
    if (kind == 0 ? !hints_match_rdm(hints, 0) : !hints_match(hints, 0)) continue;
    fi_info* i = kind == 0 ? make_rdm_info(0, hints) : make_info(0, hints);
    const bool fits = i && info_fits(i, hints);
    fi_freeinfo(i);
    if (fits) return true;
  }
  return false;
}

// node / service / FI_SOURCE of fi_getinfo as service addresses (names.hpp): every entry gets
// a source address (the card's; with FI_SOURCE the service to publish), and a destination
// address when node or service names a peer. False when they name nothing the provider serves.
bool set_addresses(fi_info* i, unsigned card, const char* node, std::uint32_t service, std::uint64_t flags,
                   const fi_info* hints) {
  const bool source = (flags & FI_SOURCE) != 0;
  if (hints && hints->src_addr && hints->src_addrlen == kAddrLen) {
    i->src_addr = std::malloc(kAddrLen);
    if (i->src_addr) std::memcpy(i->src_addr, hints->src_addr, kAddrLen);
  } else {
    i->src_addr = make_svc_addr(source ? service : 0, card, source ? node : nullptr);
  }
  if (!i->src_addr) return false;
  i->src_addrlen = kAddrLen;
  if (!source && (node || service)) {
    i->dest_addr = make_svc_addr(service, ~0u, node);
  } else if (hints && hints->dest_addr && hints->dest_addrlen == kAddrLen) {
    i->dest_addr = std::malloc(kAddrLen);
    if (i->dest_addr) std::memcpy(i->dest_addr, hints->dest_addr, kAddrLen);
  } else {
    return true;
  }
  if (!i->dest_addr) return false;
  i->dest_addrlen = kAddrLen;
  return true;
}

int getinfo(std::uint32_t version, const char* node, const char* service, std::uint64_t flags, const fi_info* hints,
            fi_info** info) {
  *info = nullptr;
  // The native RDM endpoint replaces ofi_rxd over the DGRAM core. libfabric lists utility
  // providers before a provider it does not know, so `-p npo` would pick "npo;ofi_rxd" first;
  // like efa, shm and psm3 the provider declines layering unless FI_NPO_LAYERING=1 asks for it
  // (to compare against ofi_rxd, docs/libfabric.md "Layering").
  if ((flags & kCoreProvOnly) && !param_bool(Param::kLayering).value_or(false)) return -FI_ENODATA;
  // Services are numbers on this host (names.hpp): another host, or a service that is not a
  // number, is nothing this provider reaches.
  const auto svc = parse_service(service);
  if (!svc || !node_is_local(node)) {
    warn(FI_LOG_CORE, std::string("fi_getinfo: ") + (svc ? "node " + std::string(node) + " is not this host"
                                                         : "service " + std::string(service) + " is not a number"));
    return -FI_ENODATA;
  }
  const BackendChoice b = choose_backend();
  const std::size_t n = count_cards(b);
  if (n == 0) return -FI_ENODATA;
  // Card choice (docs/libfabric.md "Picking a card"): a domain named in the hints; else
  // FI_NPO_CARD; else, on npo-emud, a card claimed for this process (the local rank's first
  // inside a parallel job, then the next free one), listed first -- alone inside a job, before
  // the others outside one; else (in-process backends) the local rank's card inside a job, or
  // every card.
  std::optional<unsigned> first;
  bool rest = true;
  const bool named = hints && hints->domain_attr && hints->domain_attr->name;
  if (!named) {
    first = named_card(n, b);
    rest = !first;
    if (!first) {
      const auto rank_card = launcher_card(n);
      if (b.remote) {
        if (!any_entry_fits(hints)) return -FI_ENODATA;  // claim no card for nothing
        first = claim_card(b, n, rank_card.value_or(0));
        if (!first) return -FI_ENODATA;
        rest = !rank_card;
      } else if (rank_card) {
        first = rank_card;
        rest = false;
      }
    }
  }
  fi_info* head = nullptr;
  fi_info* tail = nullptr;
  std::vector<unsigned> order;
  if (first) order.push_back(*first);
  for (unsigned k = 0; rest && k < n; ++k)
    if (!first || k != *first) order.push_back(k);
  for (const unsigned k : order) {
    if (k >= n) continue;
    // the native RDM endpoint first (a runtime takes the first entry that fits), then the
    // DGRAM core (what ofi_rxd and other utility providers layer on)
    for (int kind = 0; kind < 2; ++kind) {
      if (kind == 0 ? !hints_match_rdm(hints, k) : !hints_match(hints, k)) continue;
      fi_info* i = kind == 0 ? make_rdm_info(k, hints) : make_info(k, hints);
      if (i && !info_fits(i, hints)) {
        fi_freeinfo(i);
        continue;
      }
      if (i && !set_addresses(i, k, node, *svc, flags, hints)) {
        fi_freeinfo(i);
        i = nullptr;
      }
      if (!i) {
        fi_freeinfo(head);
        return -FI_ENOMEM;
      }
      // Before 1.5 mr_mode is an enum whose answer must be a mode, never FI_MR_UNSPEC (0):
      // this provider's keys and offsets are FI_MR_SCALABLE (fi_domain(3) "MR Mode").
      if (FI_VERSION_LT(version, FI_VERSION(1, 5)) && i->domain_attr->mr_mode == 0)
        i->domain_attr->mr_mode = FI_MR_SCALABLE;
      if (tail) {
        tail->next = i;
      } else {
        head = i;
      }
      tail = i;
    }
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

}  // namespace npo::fi

// Every FI_NPO_* parameter is defined before libfabric gets the provider (fi_info -e lists them;
// a failed definition leaves config.cpp reading the variable itself).
extern "C" FI_EXT_INI {
  (void)npo::fi::define_params(&npo::fi::g_provider);
  return &npo::fi::g_provider;
}
