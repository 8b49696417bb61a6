// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: event queues and completion queues (docs/libfabric.md).
#include <sys/prctl.h>

#include "provider.hpp"

namespace npo::fi {

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
// How long an empty run yields before it sleeps (kYield mode): longer than the waits inside a
// collective (the 8-rank allreduce of 1 MiB took 14-15 ms with 2 ms here, 8.8-10 with 20 ms).
constexpr auto kYieldFor = std::chrono::milliseconds(20);
// FI_NPO_POLL_BACKOFF (docs/libfabric.md "Progress"): what a caller polling an empty CQ does
// after 64 empty polls. "yield" (the default; also "1"/"on"): sched_yield for the first 20 ms
// of the empty run, so a thread the CPU is needed for (npo-emud's session thread running the
// card's engine, another rank) runs at once and the caller is back as soon as nothing else is
// runnable; after that, 1 us sleeps, so a rank that waits long (a peer computing, a barrier
// with a dead peer, an idle server) stops competing for the cores. "sleep": 1 us sleeps from
// the start (the core may idle; a woken caller waits for the timer); "0"/"off": spin.
// Measured with npo-emud's inline engine on 2 cores (README "Open MPI over npo"): yield beat
// sleep ~15x (median) on the 8-rank MPI_Allreduce and on 1 MiB ping-pong bandwidth.
enum class Backoff { kSpin, kSleep, kYield };
Backoff backoff_mode() {
  static const Backoff v = [] {
    const auto e = param_choice(Param::kPollBackoff, {"yield", "sleep", "0", "off", "1", "on"});
    if (e == "0" || e == "off") return Backoff::kSpin;
    if (e == "sleep") return Backoff::kSleep;
    return Backoff::kYield;
  }();
  return v;
}

// Linux lets a normal thread's timed sleep end up to its timer slack (default 50 us) late: a
// 1 us back-off would wait ~55 us and add that to every message's latency. Once per thread
// that backs off here, its slack is set to 1 us (prctl(2) PR_SET_TIMERSLACK; it only makes
// that thread's later timed sleeps more punctual).
void precise_sleeps() {
  thread_local bool set = false;
  if (set) return;
  set = true;
  (void)::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
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
      fi_cq_tagged_entry e{c.op_context, c.flags, c.len, c.buf, c.data, c.tag};
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
    // CPU away briefly (FI_NPO_POLL_BACKOFF=0 disables it).
    if (++q->empty_polls > kEmptyPollsBeforeBackoff && backoff_mode() != Backoff::kSpin) {
      const auto now = std::chrono::steady_clock::now();
      if (q->empty_polls == kEmptyPollsBeforeBackoff + 1) q->empty_since = now;
      q->domain->mu.unlock();
      if (backoff_mode() == Backoff::kYield && now - q->empty_since < kYieldFor) {
        std::this_thread::yield();
      } else {
        precise_sleeps();
        std::this_thread::sleep_for(std::chrono::microseconds(1));
      }
      q->domain->mu.lock();
    }
    return -FI_EAGAIN;
  }
  q->empty_polls = 0;
  const std::size_t sz = cq_entry_size(q->format);
  std::size_t n = 0;
  for (; n < count && !q->comps.empty(); ++n) {
    write_entry(q->format, static_cast<std::byte*>(buf) + n * sz, q->comps.front());
    if (src) src[n] = q->comps.front().src;
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
  if (e.entry.err == FI_ECANCELED || e.entry.err == FI_ENOMSG) {
    // A canceled receive and a peek that found nothing carry no provider data (as libfabric's
    // own providers report them; fi_strerror says it all): nothing is copied through the
    // caller's err_data, so an entry it did not initialise is not written through (fabtests'
    // recv_cancel and rdm_tagged_peek pass one).
    buf->err_data = nullptr;
    if (new_abi) buf->err_data_size = 0;
  } else if (new_abi && user_err_size && user_err) {
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

}  // namespace npo::fi
