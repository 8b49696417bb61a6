// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the native FI_EP_RDM endpoint (docs/libfabric.md "Native RDM").
//
// Reliable: a ring write the fabric did not deliver (peer unreachable while a link retrains,
// its window busy, a queue timeout with the card alive) is resent from the staging slot that
// still holds it, in sequence order, until FI_NPO_FAULT_MS says the peer is gone. Ordered:
// every sender writes its own lane of the receiver's ring in sequence order (FI_ORDER_SAS).
// Messages up to kEagerMax bytes go eager (one ring message); larger ones by rendezvous: an
// RTS, then the receiver grants chunks of its landing zone (CTS, up to kGrantsPerRecv ahead),
// the sender's card writes each chunk straight into it by remote DMA followed by a FIN, and
// the receiver copies the chunk out and grants the next. No per-packet acknowledgements.
// Tag matching (posted receives, then unexpected messages, in arrival order), FI_DIRECTED_RECV,
// FI_PEEK / FI_CLAIM / FI_DISCARD and fi_cancel live here. Unexpected eager payloads are
// buffered up to kUnexpMax bytes; beyond that the ring is left unconsumed, so the sender's
// credits run out (flow control): nothing is dropped.
#include "provider.hpp"

namespace npo::fi {

namespace {

// CTS: grants of one message, up to kGrantsPerRecv in one message (after send_id and recv_id,
// triples of msg_off, land_off, len).
constexpr std::size_t kCtsMaxWords = 2 + 3 * kGrantsPerRecv;

}  // namespace

std::size_t iov_bytes(const iovec* iov, std::size_t count) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < count; ++i) n += iov[i].iov_len;
  return n;
}

// Copies `len` bytes of `src` into the iov list at message offset `off`; returns bytes copied
// (less when the buffers end first).
std::size_t copy_to_iov(const iovec* iov, std::size_t count, std::size_t off, const std::byte* src, std::size_t len,
                        bool device_src) {
  std::size_t done = 0;
  for (std::size_t i = 0; i < count && done < len; ++i) {
    if (off >= iov[i].iov_len) {
      off -= iov[i].iov_len;
      continue;
    }
    const std::size_t n = std::min(iov[i].iov_len - off, len - done);
    auto* dst = static_cast<std::byte*>(iov[i].iov_base) + off;
    if (device_src) {
      hw_copy(dst, src + done, n);
    } else {
      std::memcpy(dst, src + done, n);
    }
    done += n;
    off = 0;
  }
  return done;
}
// Gathers `len` bytes at message offset `off` of the iov list into `dst`.
void copy_from_iov(const iovec* iov, std::size_t count, std::size_t off, std::byte* dst, std::size_t len) {
  std::size_t done = 0;
  for (std::size_t i = 0; i < count && done < len; ++i) {
    if (off >= iov[i].iov_len) {
      off -= iov[i].iov_len;
      continue;
    }
    const std::size_t n = std::min(iov[i].iov_len - off, len - done);
    std::memcpy(dst + done, static_cast<const std::byte*>(iov[i].iov_base) + off, n);
    done += n;
    off = 0;
  }
}

bool matches(const Ep::Posted& p, bool tagged, std::uint64_t tag, fi_addr_t src) {
  if (p.tagged != tagged) return false;
  if (tagged && ((p.tag ^ tag) & ~p.ignore) != 0) return false;
  return p.src == FI_ADDR_UNSPEC || p.src == src;
}
bool matches(const Ep::Unexp& u, const Ep::Posted& p) { return !u.claimed_by && matches(p, u.tagged, u.tag, u.src); }

std::uint64_t recv_flags(bool tagged, bool has_data) {
  return FI_RECV | (tagged ? FI_TAGGED : FI_MSG) | (has_data ? FI_REMOTE_CQ_DATA : 0);
}

Ep::Posted multi_slice(Ep& e, Ep::Posted& p, std::uint64_t len) {
  Ep::Posted s = p;
  const std::uint64_t cap = iov_bytes(p.iov.data(), p.count);
  std::uint64_t off = p.multi->used;
  s.count = 0;
  for (std::size_t i = 0; i < p.count; ++i) {
    if (off >= p.iov[i].iov_len) {
      off -= p.iov[i].iov_len;
      continue;
    }
    s.iov[s.count++] = {static_cast<std::byte*>(p.iov[i].iov_base) + off, p.iov[i].iov_len - off};
    off = 0;
  }
  // a message longer than what is left is truncated (FI_ETRUNC) and takes the rest
  p.multi->used += std::min(len, cap - p.multi->used);
  ++p.multi->inflight;
  if (cap - p.multi->used < e.min_multi_recv) p.multi->released = true;
  return s;
}

std::uint64_t multi_done(const Ep::Posted& r) {
  if (!r.multi) return 0;
  if (r.multi->inflight) --r.multi->inflight;
  return (r.multi->released && r.multi->inflight == 0) ? FI_MULTI_RECV : 0;
}

std::optional<Ep::Posted> take_posted(Ep& e, bool tagged, std::uint64_t tag, fi_addr_t src, std::uint64_t len) {
  auto p =
      std::find_if(e.posted.begin(), e.posted.end(), [&](const Ep::Posted& r) { return matches(r, tagged, tag, src); });
  if (p == e.posted.end()) return std::nullopt;
  if (p->multi) {
    Ep::Posted s = multi_slice(e, *p, len);
    if (p->multi->released) e.posted.erase(p);
    return s;
  }
  const Ep::Posted r = *p;
  e.posted.erase(p);
  return r;
}

namespace {

// Writes the completion of a receive of `total` message bytes into `r` (FI_ETRUNC when the
// buffers were shorter).
void complete_recv(Ep& e, const Ep::Posted& r, std::uint64_t total, bool tagged, std::uint64_t tag, std::uint64_t data,
                   bool has_data, fi_addr_t src) {
  if (trace::on()) trace::recv_end(e, r.ctx, total, total > iov_bytes(r.iov.data(), r.count) ? "truncated" : "ok");
  const std::size_t cap = iov_bytes(r.iov.data(), r.count);
  e.count(FI_RECV, total > cap);
  const std::uint64_t multi = multi_done(r);
  if (!e.rx_cq) return;
  const std::uint64_t flags = recv_flags(tagged, has_data) | multi;
  if (total > cap) {
    e.rx_cq->push_error(r.ctx, flags, cap, total - cap, FI_ETRUNC,
                        "npo: receive on " + e.where() + " truncated: message of " + std::to_string(total) +
                            " B, buffer of " + std::to_string(cap) + " B",
                        tag, has_data ? data : 0);
    return;
  }
  if (e.rx_selective && !(r.flags & FI_COMPLETION) && !multi) return;
  Cq::Comp c{r.ctx, flags, static_cast<std::size_t>(total), r.count ? r.iov[0].iov_base : nullptr, has_data ? data : 0};
  c.tag = tagged ? tag : 0;
  c.src = src;
  e.rx_cq->push(c);
}

}  // namespace

// Grants landing chunks to the message of `q` (up to kGrantsPerRecv ahead), all in one CTS.
void queue_grants(Ep& e, std::uint64_t recv_id, Ep::RecvReq& q) {
  Ep::Ctrl c{q.src_key, kCts, {q.send_id, recv_id}};
  while (q.granted < q.total && q.granted - q.received < std::uint64_t{kGrantsPerRecv} * kRndvChunk &&
         !e.land_free.empty()) {
    const unsigned chunk = e.land_free.back();
    e.land_free.pop_back();
    const std::uint64_t len = std::min<std::uint64_t>(kRndvChunk, q.total - q.granted);
    c.body.insert(c.body.end(), {q.granted, e.landing_off() + std::uint64_t{chunk} * kRndvChunk, len});
    q.landing.push_back(e.landing_off() + std::uint64_t{chunk} * kRndvChunk);
    q.granted += len;
  }
  if (c.body.size() > 2) e.ctrl_out.push_back(std::move(c));
}

namespace {

void start_rndv_recv(Ep& e, const Ep::Posted& r, std::uint64_t total, std::uint64_t send_id, std::uint64_t src_key,
                     std::uint64_t ring, fi_addr_t src, bool tagged, std::uint64_t tag, std::uint64_t data,
                     bool has_data) {
  const std::uint64_t id = e.next_recv_id++;
  Ep::RecvReq q;
  q.r = r;
  q.ring = ring;
  q.total = total;
  q.send_id = send_id;
  q.src_key = src_key;
  q.src = src;
  q.tag = tag;
  q.data = data;
  q.has_data = has_data;
  q.tagged = tagged;
  auto [it, ok] = e.recvs.emplace(id, q);
  if (trace::on()) trace::recv_rendezvous(e, r.ctx, id);
  queue_grants(e, id, it->second);
}

}  // namespace

// A posted receive meets an unexpected message: deliver it (eager) or start its rendezvous.
void deliver_unexp(Ep& e, const Ep::Posted& r, std::list<Ep::Unexp>::iterator u) {
  if (u->kind == kEager) {
    copy_to_iov(r.iov.data(), r.count, 0, u->payload.data(), u->payload.size(), false);
    complete_recv(e, r, u->total, u->tagged, u->tag, u->data, u->has_data, u->src);
    e.unexp_bytes -= u->payload.size();
  } else if (u->sender_gone) {  // claimed before its sender was found closed: no data will come
    e.count(FI_RECV, true);
    const std::uint64_t multi = multi_done(r);
    if (e.rx_cq)
      e.rx_cq->push_error(r.ctx, recv_flags(u->tagged, u->has_data) | multi, 0, 0, FI_EIO,
                          "npo: the sender of a claimed message to " + e.where() +
                              " was closed before the message finished (the endpoint opened next on its card "
                              "has written since)",
                          u->tag, u->has_data ? u->data : 0);
  } else {
    start_rndv_recv(e, r, u->total, u->send_id, u->src_key, u->ring, u->src, u->tagged, u->tag, u->data, u->has_data);
  }
  e.unexp.erase(u);
}

// A discarded rendezvous message still has to be drained (the sender waits for grants): it is
// received into no buffer, without a completion.
void discard_unexp(Ep& e, std::list<Ep::Unexp>::iterator u) {
  if (u->kind == kEager) {
    e.unexp_bytes -= u->payload.size();
  } else if (!u->sender_gone) {
    Ep::Posted sink;
    sink.flags = 0;
    sink.ctx = nullptr;
    const std::uint64_t id = e.next_recv_id++;
    Ep::RecvReq q;
    q.r = sink;
    q.total = u->total;
    q.send_id = u->send_id;
    q.src_key = u->src_key;
    q.ring = u->ring;
    q.src = u->src;
    q.tagged = u->tagged;
    q.tag = u->tag;
    q.r.ctx = reinterpret_cast<void*>(1);  // marks "no completion"
    auto [it, ok] = e.recvs.emplace(id, q);
    queue_grants(e, id, it->second);
  }
  e.unexp.erase(u);
}

int rdm_setup(Ep& e) {
  {
    Domain& d = *e.domain;
    std::lock_guard lk(d.mu);
    if (!d.process_map_tried) {
      d.process_map_tried = true;
      if (param_bool(Param::kZeroCopy).value_or(true)) {
        auto pm = map_process_memory(*d.dev, false);
        if (pm) {
          d.process_map = std::move(*pm);
        } else {
          // VFIO has none (a real IOMMU maps pinned pages): expected. Anything else is worth a warning.
          const std::string msg = "npo" + std::to_string(d.card) +
                                  ": rendezvous sources are staged (no process memory map: " + pm.error().to_string() +
                                  ")";
          if (pm.error().code() == Code::kUnimplemented) {
            info(FI_LOG_DOMAIN, msg);
          } else {
            warn(FI_LOG_DOMAIN, msg);
          }
        }
      }
    }
  }
  auto st = allocate_host_memory(*e.domain->dev, std::size_t{kRndvStagingChunks} * kRndvChunk);
  if (!st) return -fi_errno_of(st.error());
  e.rndv_staging = std::move(*st);
  for (unsigned c = kRndvStagingChunks; c > 0; --c) e.rndv_free.push_back(c - 1);
  for (unsigned c = kLandingChunks; c > 0; --c) e.land_free.push_back(c - 1);
  return 0;
}

// ---- Receive side: the own ring ----------------------------------------------------------
void Ep::rdm_poll_rx() {
  if (!map) return;
  std::byte* base = map->bytes().data();
  // The lanes of senders seen so far on every call; all lanes (a new sender's first message)
  // on every 16th: a spinning rank's poll is a few loads, not one per lane of the ring.
  const bool full = hot_lanes.empty() || (++rx_polls & 15u) == 0;
  const unsigned n = full ? lanes : static_cast<unsigned>(hot_lanes.size());
  for (unsigned scanned = 0; scanned < n; ++scanned) {
    const unsigned lane = full ? (rx_lane_cursor + scanned) % lanes : hot_lanes[scanned];
    for (unsigned budget = 0; budget < slots; ++budget) {
      const std::uint64_t want = rx_consumed[lane] + 1;
      const std::byte* slot = base + slot_offset(lanes, lane, slots, want);
      if (hw_load64(slot) != want) break;
      SlotHeader h;
      hw_copy(reinterpret_cast<std::byte*>(&h), slot, sizeof h);
      if (h.magic == kHdrMagic && lane_shared(lane, h.src_fabric_id, h.src_window, h.src_ep, h.src_generation,
                                              (h.flags & kFlagSkip) != 0 && h.len == 0))
        return;
      if (h.magic == kHdrMagic && (h.flags & kFlagSkip) && h.len == 0) {
        // A tombstone: a seq the endpoint that wrote this lane before the sender never
        // delivered (it closed first); the sender found the gap when it took the lane over
        // (sync_lane). RDM senders resend their own failed writes, so only they write one.
        rx_consumed[lane] = want;
        hw_store64(base + std::size_t{lane} * 64, want);
        continue;
      }
      const bool bad_header = h.magic != kHdrMagic || h.len > kMaxMsg || (h.flags & kFlagSkip);
      if (!bad_header) hw_copy(rx_scratch.data(), slot + kHdr, h.len);
      if (bad_header || payload_sum(rx_scratch.data(), h.len) != h.sum) {
        // The fence before every header makes this impossible on a working card: data loss.
        report_fatal("npo: " + where() + " received a corrupt message on ring lane " + std::to_string(lane) + " (seq " +
                         std::to_string(want) + ", from fabric id " + std::to_string(h.src_fabric_id) + ")",
                     FI_EIO);
        rx_consumed[lane] = want;
        hw_store64(base + std::size_t{lane} * 64, want);
        continue;
      }
      const std::uint64_t src_key = src_key_of(h.src_fabric_id, h.src_window);
      const std::uint64_t ring = ring_of(h);  // 0: a sender that does not say its generation
      if (ring != 0 && !gone_rings.empty() && gone_rings.count(ring) &&
          (h.kind == kRts || h.kind == kRmaWriteReq || h.kind == kRmaReadReq)) {
        // a request of a closed sender that needs it to move more data or take an answer
        // (complete ones -- eager messages, eager RMA writes, atomics -- are applied)
        info(FI_LOG_EP_DATA, "npo: " + where() + " dropped a request (kind " + std::to_string(h.kind) +
                                 ") of a closed sender on lane " + std::to_string(lane));
        rx_consumed[lane] = want;
        hw_store64(base + std::size_t{lane} * 64, want);
        continue;
      }
      if (h.flags & kFlagAck) {  // the sender's credits toward it, piggybacked (see post_slot)
        const std::uint64_t dkey = ring_key(h.src_fabric_id, h.src_window, h.src_generation);
        if (auto d = dests.find(dkey); d != dests.end() && h.ack <= d->second.next_seq - 1)
          d->second.consumed = std::max(d->second.consumed, h.ack);
      }
      fi_addr_t src = FI_ADDR_NOTAVAIL;
      if (av) {
        if (auto it = av->by_src.find(src_key); it != av->by_src.end()) src = it->second;
      }
      const bool tagged = (h.flags & kFlagTagged) != 0;
      const bool has_data = (h.flags & kFlagData) != 0;
      bool consumed = true;
      auto unexpected = [&](MsgKind kind, std::uint64_t total) -> Unexp& {
        Unexp& u = unexp.emplace_back();
        u.tagged = tagged;
        u.kind = kind;
        u.src = src;
        u.src_key = src_key;
        u.ring = ring;
        u.tag = h.tag;
        u.data = h.data;
        u.has_data = has_data;
        u.total = total;
        return u;
      };
      switch (h.kind) {
        case kEager: {
          if (auto r = take_posted(*this, tagged, h.tag, src, h.len)) {
            copy_to_iov(r->iov.data(), r->count, 0, rx_scratch.data(), h.len, false);
            complete_recv(*this, *r, h.len, tagged, h.tag, h.data, has_data, src);
          } else if (unexp_bytes + h.len > kUnexpMax) {
            consumed = false;  // flow control: the sender's credits run out until receives come
          } else {
            unexpected(kEager, h.len).payload.assign(rx_scratch.begin(), rx_scratch.begin() + h.len);
            unexp_bytes += h.len;
          }
          break;
        }
        case kRts: {
          RtsBody b{};
          std::memcpy(&b, rx_scratch.data(), std::min<std::size_t>(sizeof b, h.len));
          // A known sender's entry is replaced when the RTS names another ring: the endpoint
          // that had this card and window slot before it was closed (its window revoked).
          if (auto p = peers.find(src_key); p != peers.end() && p->second.wire.handle != b.sender.handle)
            peers.erase(p);
          if (!peers.count(src_key)) {
            if (av && src != FI_ADDR_NOTAVAIL && av->table[src].wire.handle == b.sender.handle) {
              peers[src_key] = av->table[src];
            } else if (auto a = decode_addr(*domain, &b.sender)) {
              peers[src_key] = *a;
            } else {
              report_fatal("npo: " + where() + " cannot answer a rendezvous from fabric id " +
                               std::to_string(h.src_fabric_id) + ": " + a.error().to_string(),
                           FI_EHOSTUNREACH);
              break;
            }
          }
          if (auto r = take_posted(*this, tagged, h.tag, src, b.total)) {
            start_rndv_recv(*this, *r, b.total, b.send_id, src_key, ring, src, tagged, h.tag, h.data, has_data);
          } else {
            unexpected(kRts, b.total).send_id = b.send_id;
          }
          break;
        }
        case kCts: {
          std::array<std::uint64_t, kCtsMaxWords> w{};
          const std::size_t words = std::min<std::size_t>(h.len / 8, kCtsMaxWords);
          std::memcpy(w.data(), rx_scratch.data(), words * 8);
          if (words < 5) break;
          if (auto s = sends.find(w[0]); s != sends.end()) {
            s->second.recv_id = w[1];
            for (std::size_t i = 2; i + 3 <= words; i += 3) s->second.grants.push_back({w[i], w[i + 1], w[i + 2]});
          }
          break;
        }
        case kFin: {
          FinBody b{};
          std::memcpy(&b, rx_scratch.data(), std::min<std::size_t>(sizeof b, h.len));
          auto q = recvs.find(b.recv_id);
          if (q == recvs.end()) break;
          RecvReq& r = q->second;
          if (b.land_off >= landing_off() && b.len <= kRndvChunk && b.land_off + b.len <= map->bytes().size()) {
            if (r.rma_write) {
              rma_place_chunk(*this, r, b.msg_off, base + b.land_off, b.len);
            } else {
              copy_to_iov(r.r.iov.data(), r.r.count, b.msg_off, base + b.land_off, b.len, true);
            }
            land_free.push_back(static_cast<unsigned>((b.land_off - landing_off()) / kRndvChunk));
            if (auto l = std::find(r.landing.begin(), r.landing.end(), b.land_off); l != r.landing.end())
              r.landing.erase(l);
          }
          r.received += b.len;
          if (b.err) r.rma_err = b.err;
          if (r.received >= r.total) {
            if (r.rma_write || r.rma_op)
              rma_recv_done(*this, r);
            else if (r.r.ctx != reinterpret_cast<void*>(1))
              complete_recv(*this, r.r, r.total, r.tagged, r.tag, r.data, r.has_data, r.src);
            recvs.erase(q);
          } else {
            queue_grants(*this, q->first, r);
          }
          break;
        }
        case kRmaWrite:
        case kRmaWriteReq:
        case kRmaReadReq:
        case kRmaReadResp:
        case kRmaReadGo:
        case kRmaAck: rma_on_message(*this, h, rx_scratch.data(), src, src_key); break;
        case kAtomicReq:
        case kAtomicResp: atomic_on_message(*this, h, rx_scratch.data(), src, src_key); break;
        default:
          report_fatal("npo: " + where() + " received a message of unknown kind " + std::to_string(h.kind), FI_EIO);
          break;
      }
      if (!consumed) break;
      note_activity();
      rx_consumed[lane] = want;
      hw_store64(base + std::size_t{lane} * 64, want);
    }
  }
  rx_lane_cursor = (rx_lane_cursor + 1) % lanes;
}

}  // namespace npo::fi
