// SPDX-License-Identifier: Apache-2.0
// dma_npo's fast path (rte_dma_fp_object): copy, fill, copy_sg, submit, completed,
// completed_status, burst_capacity over one HAL DmaQueue per vchan (docs/dpdk.md "Mapping").
// No lock, no allocation, no system call beyond the HAL's doorbell.
//
// Ring indexes: DPDK's 16-bit ring_idx counts dmadev ops. One dmadev op may be several HAL
// ops (a hidden fence for RTE_DMA_OP_FLAG_FENCE; one gather or copy per destination entry
// of copy_sg). A per-vchan slot ring records how many HAL completions each dmadev op still
// waits for and the first error among them; completions arrive in submission order.
// Addresses outside DPDK's registered memory become a descriptor the card must reject (an
// HBM range past the end of HBM), so the op completes in order, through the card, with
// RTE_DMA_STATUS_INVALID_SRC_ADDR / _DST_ADDR (docs/dpdk.md "IOVA").

#include <rte_log.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>

#include "device.hpp"

namespace npo::dpdk {

int errno_of(const Error& e) {
  switch (e.code()) {
    case Code::kInvalidArgument:
    case Code::kOutOfRange: return -EINVAL;
    case Code::kResourceExhausted: return -ENOMEM;
    case Code::kNotFound: return -ENODEV;
    case Code::kPermissionDenied: return -EPERM;
    case Code::kUnimplemented: return -ENOTSUP;
    case Code::kFailedPrecondition: return -EBUSY;
    default: return -EIO;
  }
}

/// HAL op status -> dmadev status code (docs/dpdk.md has the table).
rte_dma_status_code map_status(OpStatus s) {
  switch (s) {
    case OpStatus::kOk: return RTE_DMA_STATUS_SUCCESSFUL;
    case OpStatus::kBadOpcode: return RTE_DMA_STATUS_INVALID_OPCODE;
    case OpStatus::kBadDescriptor: return RTE_DMA_STATUS_INVALID_LENGTH;
    case OpStatus::kIommuFault: return RTE_DMA_STATUS_PAGE_FAULT;
    case OpStatus::kIommuPermission: return RTE_DMA_STATUS_INVALID_ADDR;
    case OpStatus::kHbmRange: return RTE_DMA_STATUS_INVALID_ADDR;
    case OpStatus::kSgError: return RTE_DMA_STATUS_DESCRIPTOR_READ_ERROR;
    case OpStatus::kFenceSkipped: return RTE_DMA_STATUS_NOT_ATTEMPTED;
    case OpStatus::kRemoteUnreachable: return RTE_DMA_STATUS_DEV_LINK_ERROR;
    case OpStatus::kWindowInvalid:
    case OpStatus::kWindowKey:
    case OpStatus::kWindowRange:
    case OpStatus::kWindowRights:
    case OpStatus::kWindowRevoked: return RTE_DMA_STATUS_INVALID_ADDR;
    case OpStatus::kPartitionDenied: return RTE_DMA_STATUS_INVALID_ADDR;
    case OpStatus::kEngineError: return RTE_DMA_STATUS_BUS_ERROR;
    case OpStatus::kTimeout: return RTE_DMA_STATUS_ERROR_UNKNOWN;
    case OpStatus::kAborted: return RTE_DMA_STATUS_USER_ABORT;
  }
  return RTE_DMA_STATUS_ERROR_UNKNOWN;
}

// ---- fast path ------------------------------------------------------------------------------

void poll_hw(Vchan& v) {
  const std::uint64_t mask = v.depth - 1;
  for (int rounds = 0; rounds < 1024; ++rounds) {
    const std::size_t n = v.queue->poll(v.cbuf);
    for (std::size_t i = 0; i < n; ++i) {
      Slot& s = v.slots[v.hal_done & mask];
      const OpStatus st = v.cbuf[i].status;
      if (s.fence) {
        s.fence = false;  // a hidden fence: FENCE_SKIPPED only reports an earlier failure
        if (st != OpStatus::kOk && st != OpStatus::kFenceSkipped && s.status == RTE_DMA_STATUS_SUCCESSFUL) {
          s.status = static_cast<std::uint16_t>(map_status(st));
        }
      } else if (st != OpStatus::kOk && s.status == RTE_DMA_STATUS_SUCCESSFUL) {
        s.status = s.forced != 0 ? s.forced : static_cast<std::uint16_t>(map_status(st));
      }
      if (--s.hal_left == 0) ++v.hal_done;
    }
    if (n < v.cbuf.size()) return;
  }
}

namespace {

/// Free dmadev op slots and HAL ring entries.
unsigned space(const Vchan& v) {
  const auto ops = v.depth - static_cast<unsigned>(v.enq - v.ret);
  const auto hal = v.depth - static_cast<unsigned>(v.queue->outstanding());
  return std::min(ops, hal);
}

/// Common checks of an enqueue; returns 0 or a negative errno.
int check_enqueue(NpoDev& d, std::uint16_t vchan, unsigned hal_ops) {
  if (!d.started) [[unlikely]] {
    if (d.misuse_logs++ < kMisuseLogs) log(RTE_LOG_ERR, "%s: enqueue on a stopped device", d.name.c_str());
    return -EINVAL;
  }
  if (vchan >= d.vchans.size() || !d.vchans[vchan].queue) [[unlikely]] {
    if (d.misuse_logs++ < kMisuseLogs) log(RTE_LOG_ERR, "%s: vchan %u is not set up", d.name.c_str(), vchan);
    return -EINVAL;
  }
  if (space(d.vchans[vchan]) < hal_ops) [[unlikely]]
    return -ENOSPC;
  return 0;
}

int finish_enqueue(NpoDev& d, Vchan& v, const Slot& s, std::uint64_t flags) {
  v.slots[v.enq & (v.depth - 1)] = s;
  const auto idx = static_cast<std::uint16_t>(v.enq);
  ++v.enq;
  ++v.unsubmitted;
  if (flags & RTE_DMA_OP_FLAG_SUBMIT) {
    if (auto r = v.queue->submit(); !r) [[unlikely]] {
      log(RTE_LOG_ERR, "%s: submit failed: %s", d.name.c_str(), r.error().to_string().c_str());
      return -EIO;
    }
    v.stats.submitted += v.unsubmitted;
    v.unsubmitted = 0;
  }
  return idx;
}

/// An op the card must reject: an HBM range that starts at the end of HBM (kHbmRange).
Result<OpHandle> enqueue_poison(NpoDev& d, Vchan& v) {
  ++v.hal_enq;
  return v.queue->enqueue_copy(DmaAddress::hbm(d.poison_hbm), DmaAddress::hbm(d.poison_hbm), 1);
}

/// The start of a single copy or fill (`what`): checks the device, vchan, space and length,
/// enqueues the fence the op asks for and fills `s`. Returns 0 or a negative errno.
int begin_single(NpoDev& d, std::uint16_t vchan, std::uint32_t length, std::uint64_t flags, const char* what, Slot& s) {
  const bool fence = (flags & RTE_DMA_OP_FLAG_FENCE) != 0;
  if (int e = check_enqueue(d, vchan, fence ? 2 : 1); e != 0) return e;
  if (length == 0 || length > d.caps.max_transfer_bytes) [[unlikely]] {
    if (d.misuse_logs++ < kMisuseLogs)
      log(RTE_LOG_ERR, "%s: %s length %u outside 1..%u", d.name.c_str(), what, length, d.caps.max_transfer_bytes);
    return -EINVAL;
  }
  s = Slot{.hal_left = static_cast<std::uint16_t>(fence ? 2 : 1), .fence = fence};
  if (fence) {
    Vchan& v = d.vchans[vchan];
    ++v.hal_enq;
    if (auto r = v.queue->enqueue_fence(); !r) return errno_of(r.error());
  }
  return 0;
}

}  // namespace

int fp_copy(void* priv, std::uint16_t vchan, rte_iova_t src, rte_iova_t dst, std::uint32_t length,
            std::uint64_t flags) {
  NpoDev& d = *dev_of(priv);
  Slot s{};
  if (int e = begin_single(d, vchan, length, flags, "copy", s); e != 0) return e;
  Vchan& v = d.vchans[vchan];
  const MemTable* t = d.memory->current.load(std::memory_order_acquire);
  std::uint64_t si = 0, di = 0;
  const bool src_ok = t != nullptr && t->translate(src, length, si);
  const bool dst_ok = t != nullptr && t->translate(dst, length, di);
  Result<OpHandle> r;
  if (src_ok && dst_ok) [[likely]] {
    ++v.hal_enq;
    r = v.queue->enqueue_copy(DmaAddress::host(si), DmaAddress::host(di), length);
  } else {
    s.forced = static_cast<std::uint16_t>(src_ok ? RTE_DMA_STATUS_INVALID_DST_ADDR : RTE_DMA_STATUS_INVALID_SRC_ADDR);
    r = enqueue_poison(d, v);
  }
  if (!r) [[unlikely]]
    return errno_of(r.error());  // cannot happen after the space check
  return finish_enqueue(d, v, s, flags);
}

int fp_fill(void* priv, std::uint16_t vchan, std::uint64_t pattern, rte_iova_t dst, std::uint32_t length,
            std::uint64_t flags) {
  NpoDev& d = *dev_of(priv);
  Slot s{};
  if (int e = begin_single(d, vchan, length, flags, "fill", s); e != 0) return e;
  Vchan& v = d.vchans[vchan];
  const MemTable* t = d.memory->current.load(std::memory_order_acquire);
  std::uint64_t di = 0;
  Result<OpHandle> r;
  if (t != nullptr && t->translate(dst, length, di)) [[likely]] {
    ++v.hal_enq;
    r = v.queue->enqueue_fill(DmaAddress::host(di), pattern, length);
  } else {
    s.forced = RTE_DMA_STATUS_INVALID_DST_ADDR;
    r = enqueue_poison(d, v);
  }
  if (!r) [[unlikely]]
    return errno_of(r.error());
  return finish_enqueue(d, v, s, flags);
}

int fp_copy_sg(void* priv, std::uint16_t vchan, const rte_dma_sge* src, const rte_dma_sge* dst, std::uint16_t nb_src,
               std::uint16_t nb_dst, std::uint64_t flags) {
  NpoDev& d = *dev_of(priv);
  const bool fence = (flags & RTE_DMA_OP_FLAG_FENCE) != 0;
  if (nb_src == 0 || nb_dst == 0 || nb_src > kMaxSges || nb_dst > kMaxSges || src == nullptr || dst == nullptr)
      [[unlikely]] {
    if (d.misuse_logs++ < kMisuseLogs)
      log(RTE_LOG_ERR, "%s: copy_sg with %u source and %u destination entries (1..%u each)", d.name.c_str(), nb_src,
          nb_dst, kMaxSges);
    return -EINVAL;
  }
  if (int e = check_enqueue(d, vchan, nb_dst + (fence ? 1u : 0u)); e != 0) return e;
  std::uint64_t total_src = 0, total_dst = 0;
  for (unsigned i = 0; i < nb_src; ++i) total_src += src[i].length;
  for (unsigned i = 0; i < nb_dst; ++i) {
    total_dst += dst[i].length;
    if (dst[i].length == 0 || dst[i].length > d.caps.max_transfer_bytes) {
      if (d.misuse_logs++ < kMisuseLogs)
        log(RTE_LOG_ERR, "%s: copy_sg destination entry %u has length %u (1..%u)", d.name.c_str(), i, dst[i].length,
            d.caps.max_transfer_bytes);
      return -EINVAL;
    }
  }
  if (total_src != total_dst) [[unlikely]] {
    if (d.misuse_logs++ < kMisuseLogs)
      log(RTE_LOG_ERR, "%s: copy_sg sources hold %" PRIu64 " bytes, destinations %" PRIu64, d.name.c_str(), total_src,
          total_dst);
    return -EINVAL;
  }
  Vchan& v = d.vchans[vchan];
  const MemTable* t = d.memory->current.load(std::memory_order_acquire);
  Slot s{.hal_left = static_cast<std::uint16_t>(nb_dst + (fence ? 1 : 0)), .fence = fence};
  // Any address outside DPDK's memory: the whole op is rejected by the card (one HAL op).
  bool bad_src = t == nullptr, bad_dst = t == nullptr;
  std::uint64_t tmp = 0;
  for (unsigned i = 0; i < nb_src && !bad_src; ++i) bad_src = !t->translate(src[i].addr, src[i].length, tmp);
  for (unsigned i = 0; i < nb_dst && !bad_dst; ++i) bad_dst = !t->translate(dst[i].addr, dst[i].length, tmp);
  if (fence) {
    ++v.hal_enq;
    if (auto r = v.queue->enqueue_fence(); !r) return errno_of(r.error());
  }
  if (bad_src || bad_dst) {
    s.forced = static_cast<std::uint16_t>(bad_src ? RTE_DMA_STATUS_INVALID_SRC_ADDR : RTE_DMA_STATUS_INVALID_DST_ADDR);
    s.hal_left = static_cast<std::uint16_t>(1 + (fence ? 1 : 0));
    if (auto r = enqueue_poison(d, v); !r) return errno_of(r.error());
    return finish_enqueue(d, v, s, flags);
  }
  // One HAL op per destination entry: a copy when one source piece covers it, else a gather
  // whose list lives in this HAL op's SG-table slot (DMA-mapped, read by the card).
  unsigned si = 0;
  std::uint32_t s_off = 0;
  const std::uint64_t table_iova = v.sg_table->iova();
  auto* table = reinterpret_cast<SgEntry*>(v.sg_table->bytes().data());
  for (unsigned j = 0; j < nb_dst; ++j) {
    std::uint64_t dio = 0;
    t->translate(dst[j].addr, dst[j].length, dio);
    const std::uint64_t hal_slot = v.hal_enq & (v.depth - 1);
    SgEntry* list = table + hal_slot * kMaxSges;
    std::uint16_t count = 0;
    std::uint32_t need = dst[j].length;
    while (need > 0) {
      while (src[si].length == s_off) {
        ++si;
        s_off = 0;
      }
      const std::uint32_t take = std::min(need, src[si].length - s_off);
      std::uint64_t sio = 0;
      t->translate(src[si].addr + s_off, take, sio);
      list[count++] = SgEntry{.iova = sio, .length = take, .reserved = 0};
      s_off += take;
      need -= take;
    }
    ++v.hal_enq;
    Result<OpHandle> r =
        count == 1 ? v.queue->enqueue_copy(DmaAddress::host(list[0].iova), DmaAddress::host(dio), dst[j].length)
                   : v.queue->enqueue_gather(table_iova + hal_slot * kMaxSges * sizeof(SgEntry), count,
                                             DmaAddress::host(dio), dst[j].length);
    if (!r) [[unlikely]]
      return errno_of(r.error());
  }
  return finish_enqueue(d, v, s, flags);
}

int fp_submit(void* priv, std::uint16_t vchan) {
  NpoDev& d = *dev_of(priv);
  if (!d.started || vchan >= d.vchans.size() || !d.vchans[vchan].queue) [[unlikely]] {
    if (d.misuse_logs++ < kMisuseLogs) {
      log(RTE_LOG_ERR, "%s: submit on a stopped device or vchan %u not set up", d.name.c_str(), vchan);
    }
    return -EINVAL;
  }
  Vchan& v = d.vchans[vchan];
  if (auto r = v.queue->submit(); !r) [[unlikely]] {
    log(RTE_LOG_ERR, "%s: submit failed: %s", d.name.c_str(), r.error().to_string().c_str());
    return -EIO;
  }
  v.stats.submitted += v.unsubmitted;
  v.unsubmitted = 0;
  return 0;
}

std::uint16_t fp_completed(void* priv, std::uint16_t vchan, const std::uint16_t nb_cpls, std::uint16_t* last_idx,
                           bool* has_error) {
  NpoDev& d = *dev_of(priv);
  if (vchan >= d.vchans.size() || !d.vchans[vchan].queue) [[unlikely]]
    return 0;
  Vchan& v = d.vchans[vchan];
  if (v.hal_done - v.ret < nb_cpls) poll_hw(v);
  const std::uint64_t mask = v.depth - 1;
  std::uint16_t n = 0;
  while (n < nb_cpls && v.ret < v.hal_done) {
    if (v.slots[v.ret & mask].status != RTE_DMA_STATUS_SUCCESSFUL) {
      *has_error = true;
      break;
    }
    ++v.ret;
    ++n;
  }
  v.stats.completed += n;
  *last_idx = static_cast<std::uint16_t>(v.ret - 1);
  return n;
}

std::uint16_t fp_completed_status(void* priv, std::uint16_t vchan, const std::uint16_t nb_cpls, std::uint16_t* last_idx,
                                  rte_dma_status_code* status) {
  NpoDev& d = *dev_of(priv);
  if (vchan >= d.vchans.size() || !d.vchans[vchan].queue) [[unlikely]]
    return 0;
  Vchan& v = d.vchans[vchan];
  if (v.hal_done - v.ret < nb_cpls) poll_hw(v);
  const std::uint64_t mask = v.depth - 1;
  std::uint16_t n = 0;
  while (n < nb_cpls && v.ret < v.hal_done) {
    const auto st = static_cast<rte_dma_status_code>(v.slots[v.ret & mask].status);
    status[n] = st;
    if (st != RTE_DMA_STATUS_SUCCESSFUL) ++v.stats.errors;
    ++v.ret;
    ++n;
  }
  v.stats.completed += n;
  *last_idx = static_cast<std::uint16_t>(v.ret - 1);
  return n;
}

std::uint16_t fp_burst_capacity(const void* priv, std::uint16_t vchan) {
  const NpoDev& d = *dev_of(priv);
  if (!d.started || vchan >= d.vchans.size() || !d.vchans[vchan].queue) [[unlikely]]
    return 0;
  return static_cast<std::uint16_t>(std::min(space(d.vchans[vchan]), 65535u));
}

}  // namespace npo::dpdk
