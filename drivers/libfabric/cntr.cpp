// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: completion counters (fi_cntr(3); docs/libfabric.md "Counters"). A counter
// bound to RDM endpoints counts their operations of the kinds it was bound for, with or
// without a CQ entry; its error count moves for operations that end in error. Progress is
// manual: fi_cntr_read and fi_cntr_wait progress the endpoints bound to the counter.
#include "provider.hpp"

namespace npo::fi {
namespace {

constexpr unsigned kEmptyReadsBeforeYield = 64;

Cntr* cntr_of(fid_cntr* f) { return reinterpret_cast<Cntr*>(f); }

// Progresses every endpoint bound to `c` (under the domain's mutex).
void progress(Cntr& c) {
  for (Ep* e : c.eps) e->progress();
}

std::uint64_t cntr_read(fid_cntr* f) {
  Cntr* c = cntr_of(f);
  const std::uint64_t before = c->value.load(std::memory_order_acquire);
  {
    std::lock_guard lk(c->domain->mu);
    progress(*c);
  }
  const std::uint64_t v = c->value.load(std::memory_order_acquire);
  // a caller spinning on an unchanged counter gives the CPU to the card's engines (the
  // emulator's engines are threads; see cq_readfrom)
  if (v == before && ++c->empty_reads > kEmptyReadsBeforeYield) std::this_thread::yield();
  if (v != before) c->empty_reads = 0;
  return v;
}
std::uint64_t cntr_readerr(fid_cntr* f) {
  Cntr* c = cntr_of(f);
  std::lock_guard lk(c->domain->mu);
  progress(*c);
  return c->errors.load(std::memory_order_acquire);
}
int cntr_add(fid_cntr* f, std::uint64_t v) {
  cntr_of(f)->value.fetch_add(v, std::memory_order_release);
  return 0;
}
int cntr_set(fid_cntr* f, std::uint64_t v) {
  cntr_of(f)->value.store(v, std::memory_order_release);
  return 0;
}
int cntr_adderr(fid_cntr* f, std::uint64_t v) {
  cntr_of(f)->errors.fetch_add(v, std::memory_order_release);
  return 0;
}
int cntr_seterr(fid_cntr* f, std::uint64_t v) {
  cntr_of(f)->errors.store(v, std::memory_order_release);
  return 0;
}
// Waits until the counter reaches `threshold` (0), an operation fails meanwhile (-FI_EAVAIL),
// or `timeout` ms pass (-FI_ETIMEDOUT; a negative timeout waits for ever).
int cntr_wait(fid_cntr* f, std::uint64_t threshold, int timeout) {
  Cntr* c = cntr_of(f);
  const std::uint64_t errors = c->errors.load(std::memory_order_acquire);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
  for (;;) {
    if (cntr_read(f) >= threshold) return 0;
    if (c->errors.load(std::memory_order_acquire) != errors) return -FI_EAVAIL;
    if (timeout >= 0 && std::chrono::steady_clock::now() >= end) return -FI_ETIMEDOUT;
    std::this_thread::yield();
  }
}

int cntr_close(fid* f) {
  auto* c = reinterpret_cast<Cntr*>(f);
  if (c->refs.load() != 0) return -FI_EBUSY;
  c->domain->refs.fetch_sub(1);
  delete c;
  return 0;
}
int cntr_control(fid*, int command, void* arg) {
  if (command == FI_GETWAITOBJ) {
    *static_cast<fi_wait_obj*>(arg) = FI_WAIT_NONE;
    return 0;
  }
  return -FI_ENOSYS;
}

fi_ops cntr_fi_ops{sizeof(fi_ops), cntr_close, no_bind, cntr_control, no_ops_open, no_tostr, no_ops_set};
fi_ops_cntr cntr_ops{sizeof(fi_ops_cntr), cntr_read,   cntr_readerr, cntr_add, cntr_set,
                     cntr_wait,           cntr_adderr, cntr_seterr};

}  // namespace

int cntr_open(fid_domain* f, fi_cntr_attr* attr, fid_cntr** out, void* context) {
  auto* d = reinterpret_cast<Domain*>(f);
  if (attr) {
    if (attr->events != FI_CNTR_EVENTS_COMP) return -FI_ENOSYS;
    // progress is manual: a waiter polls (FI_WAIT_UNSPEC, FI_WAIT_YIELD), no fd or wait set
    switch (attr->wait_obj) {
      case FI_WAIT_NONE:
      case FI_WAIT_UNSPEC:
      case FI_WAIT_YIELD: break;
      default: return -FI_ENOSYS;
    }
    if (attr->flags) return -FI_EBADFLAGS;
  }
  auto* c = new Cntr;
  c->domain = d;
  c->cntr.fid.fclass = FI_CLASS_CNTR;
  c->cntr.fid.context = context;
  c->cntr.fid.ops = &cntr_fi_ops;
  c->cntr.ops = &cntr_ops;
  d->refs.fetch_add(1);
  *out = &c->cntr;
  return 0;
}

int cntr_bind(Ep& e, Cntr& c, std::uint64_t flags) {
  if (c.domain != e.domain) return -FI_EINVAL;
  if (!e.rdm) return -FI_ENOSYS;
  constexpr std::pair<std::uint64_t, CntrEvent> kEvents[] = {{FI_SEND, kCntrSend},
                                                             {FI_RECV, kCntrRecv},
                                                             {FI_READ, kCntrRead},
                                                             {FI_WRITE, kCntrWrite},
                                                             {FI_REMOTE_READ, kCntrRemoteRead},
                                                             {FI_REMOTE_WRITE, kCntrRemoteWrite}};
  std::uint64_t known = 0;
  for (const auto& [bit, ev] : kEvents) {
    known |= bit;
    if ((flags & bit) && e.cntrs[ev] && e.cntrs[ev] != &c) return -FI_EINVAL;
  }
  if (!(flags & known)) return -FI_EBADFLAGS;
  for (const auto& [bit, ev] : kEvents)
    if (flags & bit) e.cntrs[ev] = &c;
  if (std::find(c.eps.begin(), c.eps.end(), &e) == c.eps.end()) {
    c.eps.push_back(&e);
    c.refs.fetch_add(1);
  }
  return 0;
}

void cntr_unbind(Ep& e) {
  for (Cntr*& c : e.cntrs) {
    if (!c) continue;
    Cntr* gone = c;
    if (std::find(gone->eps.begin(), gone->eps.end(), &e) != gone->eps.end()) {
      std::erase(gone->eps, &e);
      gone->refs.fetch_sub(1);
    }
    for (Cntr*& o : e.cntrs)
      if (o == gone) o = nullptr;
  }
}

}  // namespace npo::fi
