// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: address vectors and (no-op) memory registration (docs/libfabric.md).
#include "names.hpp"
#include "provider.hpp"

namespace npo::fi {

// ---- AV ops -------------------------------------------------------------------------------
Result<Av::Entry> decode_addr(Domain& d, const void* addr) {
  if (!addr) return fail(Code::kInvalidArgument, "no address (NULL)");
  Av::Entry e;
  if (is_svc_addr(addr)) {
    // a service address from fi_getinfo's node/service: the endpoint published under it
    SvcAddr svc;
    std::memcpy(&svc, addr, sizeof svc);
    auto w = resolve_service(d.fabric->backend, svc);
    if (!w) return std::unexpected(w.error());
    e.wire = *w;
  } else {
    std::memcpy(&e.wire, addr, kAddrLen);
  }
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
  if (!addr && count) return -FI_EINVAL;
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
    a->by_src[src_key_of(e->handle.fabric_id, e->handle.window_id)] = a->table.size() - 1;
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
    const auto& h = a->table[fi_addr[i]].handle;
    if (auto it = a->by_src.find(src_key_of(h.fabric_id, h.window_id));
        it != a->by_src.end() && it->second == fi_addr[i])
      a->by_src.erase(it);
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
  if (is_svc_addr(addr)) {
    SvcAddr svc;
    std::memcpy(&svc, addr, sizeof svc);
    std::string node(svc.node, strnlen(svc.node, sizeof svc.node));
    n = std::snprintf(tmp, sizeof tmp, "npo://service/%s:%u", node.empty() ? "localhost" : node.c_str(), svc.service);
  } else if (w.magic != kAddrMagic || !h) {
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

// ---- MR ops --------------------------------------------------------------------------------
// No registration is needed to send (every send is staged). A region with FI_REMOTE_READ or
// FI_REMOTE_WRITE is entered in the domain's table under its requested key (mr_mode 0: the
// application picks keys; a key in use is -FI_ENOKEY), where RMA operations of peers find it
// (rma.cpp); closing it removes it at once, under the domain's lock.
struct Mr {
  fid_mr mr{};
  Domain* domain = nullptr;
  bool remote = false;  // in domain->mrs
};
int mr_close(fid* f) {
  auto* m = reinterpret_cast<Mr*>(f);
  {
    std::lock_guard lk(m->domain->mu);
    if (m->remote) m->domain->mrs.erase(m->mr.key);
  }
  m->domain->refs.fetch_sub(1);
  delete m;
  return 0;
}
fi_ops mr_fi_ops{sizeof(fi_ops), mr_close, no_bind, no_control, no_ops_open, no_tostr, no_ops_set};
int mr_regattr(fid* f, const fi_mr_attr* attr, std::uint64_t, fid_mr** out) {
  auto* d = reinterpret_cast<Domain*>(f);
  if (!attr || !out || attr->iov_count > kIovLimit || (attr->iov_count && !attr->mr_iov)) return -FI_EINVAL;
  const bool remote = (attr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE)) != 0;
  std::lock_guard lk(d->mu);
  if (remote && d->mrs.count(attr->requested_key)) return -FI_ENOKEY;
  auto* m = new Mr;
  m->domain = d;
  m->remote = remote;
  m->mr.fid.fclass = FI_CLASS_MR;
  m->mr.fid.context = attr->context;
  m->mr.fid.ops = &mr_fi_ops;
  m->mr.mem_desc = nullptr;
  m->mr.key = attr->requested_key;
  if (remote) {
    Domain::MrRegion r;
    r.count = attr->iov_count;
    for (std::size_t i = 0; i < r.count; ++i) {
      r.iov[i] = attr->mr_iov[i];
      r.len += attr->mr_iov[i].iov_len;
    }
    r.access = attr->access & (FI_REMOTE_READ | FI_REMOTE_WRITE);
    r.offset = attr->offset;
    d->mrs.emplace(m->mr.key, r);
  }
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

}  // namespace npo::fi
