// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the native FI_EP_RDM endpoint (docs/libfabric.md "Native RDM").
//
// Reliable: a ring write the fabric did not deliver (peer unreachable while a link retrains,
// its window busy, a queue timeout with the card alive) is resent from the staging slot that
// still holds it, in sequence order, until NPO_FI_FAULT_MS says the peer is gone. Ordered:
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

struct RtsBody {
  std::uint64_t send_id;
  std::uint64_t total;
  WireAddr sender;  // where to send the CTS
};
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

namespace {

bool matches(const Ep::Posted& p, bool tagged, std::uint64_t tag, fi_addr_t src) {
  if (p.tagged != tagged) return false;
  if (tagged && ((p.tag ^ tag) & ~p.ignore) != 0) return false;
  return p.src == FI_ADDR_UNSPEC || p.src == src;
}
bool matches(const Ep::Unexp& u, const Ep::Posted& p) { return !u.claimed_by && matches(p, u.tagged, u.tag, u.src); }

std::uint64_t recv_flags(bool tagged, bool has_data) {
  return FI_RECV | (tagged ? FI_TAGGED : FI_MSG) | (has_data ? FI_REMOTE_CQ_DATA : 0);
}

// Writes the completion of a receive of `total` message bytes into `r` (FI_ETRUNC when the
// buffers were shorter).
void complete_recv(Ep& e, const Ep::Posted& r, std::uint64_t total, bool tagged, std::uint64_t tag, std::uint64_t data,
                   bool has_data, fi_addr_t src) {
  if (trace::on()) trace::recv_end(e, r.ctx, total, total > iov_bytes(r.iov.data(), r.count) ? "truncated" : "ok");
  if (!e.rx_cq) return;
  const std::size_t cap = iov_bytes(r.iov.data(), r.count);
  const std::uint64_t flags = recv_flags(tagged, has_data);
  if (total > cap) {
    e.rx_cq->push_error(r.ctx, flags, cap, total - cap, FI_ETRUNC,
                        "npo: receive on " + e.where() + " truncated: message of " + std::to_string(total) +
                            " B, buffer of " + std::to_string(cap) + " B",
                        tag, has_data ? data : 0);
    return;
  }
  if (e.rx_selective && !(r.flags & FI_COMPLETION)) return;
  Cq::Comp c{r.ctx, flags, static_cast<std::size_t>(total), r.count ? r.iov[0].iov_base : nullptr, has_data ? data : 0};
  c.tag = tagged ? tag : 0;
  c.src = src;
  e.rx_cq->push(c);
}

// The sender of a ring message, to send it CTS: its AV entry, else the address its RTS carried.
const Av::Entry* peer_of(Ep& e, std::uint64_t src_key) {
  if (auto it = e.peers.find(src_key); it != e.peers.end()) return &it->second;
  return nullptr;
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

// A posted receive meets an unexpected message: deliver it (eager) or start its rendezvous.
void deliver_unexp(Ep& e, const Ep::Posted& r, std::list<Ep::Unexp>::iterator u) {
  if (u->kind == kEager) {
    copy_to_iov(r.iov.data(), r.count, 0, u->payload.data(), u->payload.size(), false);
    complete_recv(e, r, u->total, u->tagged, u->tag, u->data, u->has_data, u->src);
    e.unexp_bytes -= u->payload.size();
  } else if (u->sender_gone) {  // claimed before its sender was found closed: no data will come
    if (e.rx_cq)
      e.rx_cq->push_error(r.ctx, recv_flags(u->tagged, u->has_data), 0, 0, FI_EIO,
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

// The IOVA of message bytes [off, off+len) of `q` in the process memory map, when they lie in
// one iov entry (the card reads them there: no staging copy); 0 otherwise.
std::uint64_t zero_copy_src(const Ep& e, const Ep::SendReq& q, std::uint64_t off, std::uint64_t len) {
  if (!e.domain->process_map || q.no_zero_copy) return 0;
  for (std::size_t i = 0; i < q.count; ++i) {
    if (off < q.iov[i].iov_len) {
      if (len > q.iov[i].iov_len - off) return 0;
      return e.domain->process_map->iova_of(static_cast<const std::byte*>(q.iov[i].iov_base) + off);
    }
    off -= q.iov[i].iov_len;
  }
  return 0;
}

// An error is reported also for an operation posted without FI_COMPLETION (fi_cq(3)), when it
// has a context to name: an error entry with a NULL context breaks Open MPI 4.1's mtl ofi.
void fail_send_req(Ep& e, std::map<std::uint64_t, Ep::SendReq>::iterator s, int err, const std::string& msg) {
  if (e.tx_cq && (s->second.completion || s->second.ctx))
    e.tx_cq->push_error(s->second.ctx, s->second.cq_flags, 0, 0, err, msg, s->second.tag);
  e.sends.erase(s);
}

}  // namespace

int rdm_setup(Ep& e) {
  {
    Domain& d = *e.domain;
    std::lock_guard lk(d.mu);
    if (!d.process_map_tried) {
      d.process_map_tried = true;
      if (env_bool("NPO_FI_ZERO_COPY", "the default on").value_or(true)) {
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
      // the first posted receive this message matches, taken off the list
      auto take_posted = [&]() -> std::optional<Posted> {
        auto p =
            std::find_if(posted.begin(), posted.end(), [&](const Posted& r) { return matches(r, tagged, h.tag, src); });
        if (p == posted.end()) return std::nullopt;
        const Posted r = *p;
        posted.erase(p);
        return r;
      };
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
          if (auto r = take_posted()) {
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
          if (auto r = take_posted()) {
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

// ---- Send side: finished ring writes --------------------------------------------------------
void Ep::rdm_tx_done(Tx t) {
  if (t.worst == OpStatus::kOk) {
    rdm_tx_delivered(t);
    return;
  }
  rdm_tx_failed(std::move(t));
}

void Ep::rdm_tx_delivered(const Tx& t) {
  if (trace::on()) trace::tx_delivered(*this, t);
  {
    send_ok(t.dest_key);
    free_slots.push_back(t.slot);
    if (t.rndv_chunk >= 0) rndv_free.push_back(static_cast<unsigned>(t.rndv_chunk));
    if (t.msg_kind == kFin) {
      if (auto s = sends.find(t.send_id); s != sends.end()) {
        s->second.done += t.data_len;
        if (s->second.done >= s->second.total) {
          if (tx_cq && s->second.completion)
            tx_cq->push({s->second.ctx, s->second.cq_flags, static_cast<std::size_t>(s->second.total), nullptr, 0,
                         s->second.tag});
          sends.erase(s);
        }
      }
    } else if (t.msg_kind == kEager && t.completion && tx_cq) {
      tx_cq->push({t.ctx, t.cq_flags, t.len, nullptr, 0, t.tag});
    }
  }
}

void Ep::rdm_tx_failed(Tx t) {
  if (gone_rings.count(t.dest_key)) {  // a write to a closed sender's ring (predecessor_gone)
    drop_tx_to_gone(t);
    return;
  }
  if (t.rndv_src != 0 && (t.worst == OpStatus::kIommuFault || t.worst == OpStatus::kIommuPermission)) {
    // The card could not read the chunk where it lies: memory process_vm_readv cannot reach
    // (memfd_secret, a device mapping) that the CPU can. Nothing of the FIN landed (its header
    // is fenced behind the chunk): send it again from staging, and the rest of the message.
    if (auto s = sends.find(t.send_id); s != sends.end()) s->second.no_zero_copy = true;
    info(FI_LOG_EP_DATA, "npo: " + where() + ": the card cannot read a send buffer in place (" +
                             std::string(op_status_name(t.worst)) + "); staging it");
    t.restage = true;
    t.retry_at = std::chrono::steady_clock::now();
    retry.push_back(std::move(t));
    return;
  }
  std::string msg = "npo: send of " + std::to_string(t.len + t.data_len) + " B from " + where() +
                    " to the card with fabric id " + std::to_string(t.dest_fabric) +
                    " failed: " + std::string(op_status_name(t.worst));
  std::optional<std::string> gone;
  if (t.worst == OpStatus::kTimeout || t.worst == OpStatus::kAborted) gone = card_gone_reason();
  // the own card (or the daemon behind it) is gone: say that, not only "timeout"
  if (gone) msg = "npo: " + where() + " is gone: " + *gone + " (" + msg.substr(5) + ")";
  const bool transient =
      is_path_failure(t.worst) || ((t.worst == OpStatus::kTimeout || t.worst == OpStatus::kAborted) && !gone);
  if (transient) send_failed(t.dest_key, t.worst, msg);
  if (transient && !fatal_reported) {
    if (trace::on()) trace::tx_failed(*this, t, true, op_status_name(t.worst));
    warn(FI_LOG_EP_DATA, msg + "; resending");
    // A queue reset (timeout) leaves unknown whether the writes landed: a resend of a message
    // that did land could overwrite a landing chunk or ring slot already reused, so its
    // delivery is checked first (rdm_progress). A path failure (unreachable, window refused,
    // fence skipped) is known not to have written anything.
    t.verify = t.verify || t.worst == OpStatus::kTimeout || t.worst == OpStatus::kAborted;
    // exponential backoff: resending every millisecond from every rank would keep the card
    // (and, emulated, the daemon that retrains the link) busy with doomed writes
    const auto backoff =
        std::min<std::chrono::milliseconds>(kRetryBackoff * (1u << std::min(t.attempts, 6u)), kRetryBackoffMax);
    ++t.attempts;
    t.retry_at = std::chrono::steady_clock::now() + backoff;
    retry.push_back(std::move(t));
    return;
  }
  // not deliverable: the operation fails (and the endpoint reports the fault)
  if (trace::on()) trace::tx_failed(*this, t, false, op_status_name(t.worst));
  free_slots.push_back(t.slot);
  if (t.rndv_chunk >= 0) rndv_free.push_back(static_cast<unsigned>(t.rndv_chunk));
  if (t.send_id) {
    if (auto s = sends.find(t.send_id); s != sends.end()) fail_send_req(*this, s, fi_errno_of(t.worst), msg);
  } else if (t.msg_kind == kEager && (t.completion || t.ctx) && tx_cq) {  // as fail_send_req
    tx_cq->push_error(t.ctx, t.cq_flags, 0, 0, fi_errno_of(t.worst), msg, t.tag);
  }
  if (t.send_id) rma_fail(*this, t.send_id, fi_errno_of(t.worst), msg);
  report_fatal(msg, fi_errno_of(t.worst));
}

// ---- A sender's successor wrote: the sender is closed -----------------------------------------
void Ep::drop_tx_to_gone(const Tx& t) {
  free_slots.push_back(t.slot);
  if (t.rndv_chunk >= 0) rndv_free.push_back(static_cast<unsigned>(t.rndv_chunk));
  if (t.msg_kind == kEager && (t.completion || t.ctx) && tx_cq)  // as fail_send_req
    tx_cq->push_error(t.ctx, t.cq_flags, 0, 0, FI_EIO,
                      "npo: send of " + std::to_string(t.len) + " B from " + where() +
                          " failed: the endpoint on the card with fabric id " + std::to_string(t.dest_fabric) +
                          " was closed (the endpoint opened next on that card has written since)",
                      t.tag);
}

void Ep::predecessor_gone(std::uint64_t ring) {
  const auto fid = static_cast<std::uint32_t>(ring >> 32);
  const auto win = static_cast<std::uint32_t>((ring >> 16) & 0xffffu);
  const std::uint64_t key = src_key_of(fid, win);
  const std::string msg = "npo: the endpoint on the card with fabric id " + std::to_string(fid) + " (ring window " +
                          std::to_string(win) + ") that " + where() +
                          " exchanged a message with was closed before the message finished (the endpoint opened "
                          "next on that card has written since)";
  unsigned failed = 0, lost = 0;
  // its failures so far do not count toward a fault of ours (dests is not erased: a send
  // in progress may hold a reference into it)
  if (auto d = dests.find(ring); d != dests.end()) d->second.failing_since.reset();
  // rendezvous receives from it: no more chunks will come; their landing chunks are free again
  // (its writes ended when it closed, before its successor's first message)
  for (auto it = recvs.begin(); it != recvs.end();) {
    RecvReq& q = it->second;
    if (q.ring != ring) {
      ++it;
      continue;
    }
    for (const std::uint64_t off : q.landing)
      land_free.push_back(static_cast<unsigned>((off - landing_off()) / kRndvChunk));
    if (q.rma_op) {
      rma_fail(*this, q.rma_op, FI_EIO, msg);
    } else if (!q.rma_write && q.r.ctx != reinterpret_cast<void*>(1) && rx_cq) {
      rx_cq->push_error(q.r.ctx, recv_flags(q.tagged, q.has_data), 0, 0, FI_EIO, msg, q.tag, q.has_data ? q.data : 0);
    }
    std::erase_if(ctrl_out,
                  [&](const Ctrl& c) { return c.kind == kCts && c.body.size() > 1 && c.body[1] == it->first; });
    it = recvs.erase(it);
    ++failed;
  }
  // messages it announced (RTS) that no receive took yet: their data will not come; one
  // already claimed (FI_PEEK | FI_CLAIM) fails when it is claimed
  for (auto it = unexp.begin(); it != unexp.end();) {
    if (it->ring != ring || it->kind != kRts) {
      ++it;
      continue;
    }
    ++lost;
    if (it->claimed_by) {
      it->sender_gone = true;
      ++it;
    } else {
      it = unexp.erase(it);
    }
  }
  // writes to its ring waiting to be resent
  for (auto it = retry.begin(); it != retry.end();) {
    if (it->dest_key != ring) {
      ++it;
      continue;
    }
    drop_tx_to_gone(*it);
    it = retry.erase(it);
  }
  // our rendezvous sends and RMA to it: nobody will answer them
  for (auto it = sends.begin(); it != sends.end();) {
    if (it->second.dest_key != ring) {
      ++it;
      continue;
    }
    auto next = std::next(it);
    if (it->second.rma_src) {
      sends.erase(it);  // answering its RMA read: nobody waits for the data
    } else {
      fail_send_req(*this, it, FI_EIO, msg);
      ++failed;
    }
    it = next;
  }
  for (auto it = rma_ops.begin(); it != rma_ops.end();) {
    auto next = std::next(it);
    if (dest_key_of(it->second.peer.handle) == ring) {
      rma_fail(*this, it->first, FI_EIO, msg);
      ++failed;
    }
    it = next;
  }
  // the address its RTS or RMA request left for answers
  if (auto p = peers.find(key); p != peers.end() && dest_key_of(p->second.handle) == ring) peers.erase(p);
  if (failed + lost > 0)
    warn(FI_LOG_EP_DATA, msg + ": " + std::to_string(failed) + " operation(s) failed, " + std::to_string(lost) +
                             " unreceived message(s) dropped");
}

// ---- Progress -------------------------------------------------------------------------------
void Ep::rdm_progress() {
  if (progressing) return;
  progressing = true;
  poll_dma();
  rdm_poll_rx();
  if (!pending_gone.empty()) {  // senders found closed by rdm_poll_rx (lane_shared)
    const std::vector<std::uint64_t> gone = std::exchange(pending_gone, {});
    for (const std::uint64_t r : gone) predecessor_gone(r);
  }
  const auto now = std::chrono::steady_clock::now();
  // 1. resend failed writes, oldest first (sequence order per peer)
  while (!retry.empty() && retry.front().retry_at <= now && queue->outstanding() + 6 <= queue->depth()) {
    Tx t = std::move(retry.front());
    retry.pop_front();
    if (t.restage) {
      if (rndv_free.empty()) {  // wait for a staging chunk
        retry.push_front(std::move(t));
        break;
      }
      auto snd = sends.find(t.send_id);
      if (snd == sends.end()) {
        report_fatal("npo: " + where() + ": a rendezvous chunk to restage has no send", FI_EIO);
        break;
      }
      FinBody b{};
      std::memcpy(&b, staging_slot(t.slot) + kHdr, sizeof b);
      const unsigned chunk = rndv_free.back();
      rndv_free.pop_back();
      copy_from_iov(snd->second.iov.data(), snd->second.count, b.msg_off,
                    rndv_staging->bytes().data() + std::size_t{chunk} * kRndvChunk, t.data_len);
      t.rndv_chunk = static_cast<int>(chunk);
      t.rndv_src = 0;
      t.restage = false;
      domain->rndv_zero_copy_bytes.fetch_sub(t.data_len);
      domain->rndv_staged_bytes.fetch_add(t.data_len);
    }
    if (t.verify) {
      // delivered if the peer consumed our seq, or its slot already holds it
      bool delivered = false, known = false;
      if (auto c = refresh_consumed(*this, t.handle, t.lane)) {
        known = true;
        delivered = *c >= t.seq;
        if (!delivered) {
          if (auto v = read_peer_u64(*this, t.handle, slot_offset(t.lanes, t.lane, t.slots, t.seq))) {
            delivered = *v == t.seq;
          } else {
            known = false;
          }
        }
      }
      if (!known) {  // the peer cannot be read now: check again later (a fault after NPO_FI_FAULT_MS)
        send_failed(t.dest_key, OpStatus::kRemoteUnreachable,
                    "npo: delivery check from " + where() + " to the card with fabric id " +
                        std::to_string(t.dest_fabric) + " failed");
        t.retry_at = now + kRetryBackoff;
        retry.push_front(std::move(t));
        break;
      }
      if (delivered) {
        rdm_tx_delivered(t);
        continue;
      }
      t.verify = false;
    }
    if (auto r = enqueue_tx(*this, t); !r) {
      report_fatal("npo: resend from " + where() + " failed: " + r.error().to_string(), fi_errno_of(r.error()));
      break;
    }
    tx.push_back(std::move(t));
  }
  // 2. control messages (grants)
  while (!ctrl_out.empty()) {
    const Ctrl& c = ctrl_out.front();
    const Av::Entry* peer = peer_of(*this, c.dest_key);
    if (!peer || gone_rings.count(dest_key_of(peer->handle))) {  // nobody to tell, or a closed ring
      ctrl_out.pop_front();
      continue;
    }
    iovec iov{const_cast<std::uint64_t*>(c.body.data()), c.body.size() * sizeof(std::uint64_t)};
    SlotMeta m;
    m.kind = c.kind;
    if (send_to(*this, *peer, &iov, 1, nullptr, 0, false, false, m, std::chrono::milliseconds(0)) != 0) break;
    ctrl_out.pop_front();
  }
  // 3. rendezvous data: each granted chunk written with its FIN behind it, straight from the
  // user's buffer when the process memory map covers it (zero-copy), else from a staging chunk;
  // one doorbell for all of them
  defer_submit = true;
  for (auto s = sends.begin(); s != sends.end();) {
    SendReq& q = s->second;
    bool blocked = false;
    while (!q.grants.empty()) {
      if (free_slots.empty() || queue->outstanding() + 6 > queue->depth()) {
        blocked = true;
        break;
      }
      const SendReq::Grant g = q.grants.front();
      const std::uint64_t zsrc = q.rma_src ? 0 : zero_copy_src(*this, q, g.msg_off, g.len);
      if (zsrc == 0 && rndv_free.empty()) {
        blocked = true;
        break;
      }
      int chunk = -1;
      if (zsrc == 0) {
        chunk = static_cast<int>(rndv_free.back());
        std::byte* stage = rndv_staging->bytes().data() + std::size_t(chunk) * kRndvChunk;
        if (q.rma_src) {
          rma_stage_chunk(*this, q, g.msg_off, stage, g.len);
        } else {
          copy_from_iov(q.iov.data(), q.count, g.msg_off, stage, g.len);
        }
      }
      FinBody b{q.recv_id, g.msg_off, g.land_off, g.len, q.rma_err};
      iovec iov{&b, sizeof b};
      SlotMeta m;
      m.kind = kFin;
      m.send_id = s->first;
      m.rndv_chunk = chunk;
      m.rndv_src = zsrc;
      m.land_off = g.land_off;
      m.data_len = g.len;
      m.cq_flags = q.cq_flags;
      m.tag = q.tag;
      if (send_to(*this, q.peer, &iov, 1, nullptr, 0, false, false, m, std::chrono::milliseconds(0)) != 0) {
        blocked = true;
        break;
      }
      // (send_to reaps completions, which may have pushed freed chunks meanwhile)
      if (chunk >= 0) rndv_free.erase(std::find(rndv_free.begin(), rndv_free.end(), static_cast<unsigned>(chunk)));
      (zsrc != 0 ? domain->rndv_zero_copy_bytes : domain->rndv_staged_bytes).fetch_add(g.len);
      q.grants.pop_front();
    }
    if (blocked) break;
    ++s;
  }
  defer_submit = false;
  if (submit_pending) {
    submit_pending = false;
    if (auto sub = queue->submit(); !sub) {
      report_fatal("npo: rendezvous data from " + where() + " failed: " + sub.error().to_string(),
                   fi_errno_of(sub.error()));
    }
  }
  // 4. receives waiting for landing chunks
  if (!land_free.empty())
    for (auto& [id, q] : recvs)
      if (q.granted < q.total) queue_grants(*this, id, q);
  check_card();
  check_stall();
  progressing = false;
}

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
      if (e.rx_cq) e.rx_cq->push(c);
      return 0;
    }
    deliver_unexp(e, r, u);
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

Ep* ep_of(fid_ep* f) { return reinterpret_cast<Ep*>(f); }

// fi_ops_msg
ssize_t m_recv(fid_ep* f, void* buf, std::size_t len, void*, fi_addr_t src, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{buf, len};
  return rdm_recv(*e, &iov, 1, src, ctx, e->rx_default_completion() ? FI_COMPLETION : 0, false, 0, 0);
}
ssize_t m_recvv(fid_ep* f, const iovec* iov, void**, std::size_t count, fi_addr_t src, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return rdm_recv(*e, iov, count, src, ctx, e->rx_default_completion() ? FI_COMPLETION : 0, false, 0, 0);
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
  if (e.rx_cq)
    e.rx_cq->push_error(ctx, FI_RECV | (r.tagged ? FI_TAGGED : FI_MSG), 0, 0, FI_ECANCELED, "npo: receive canceled",
                        r.tag);
  return 0;
}

fi_ops_msg rdm_msg_ops{sizeof(fi_ops_msg), m_recv,   m_recvv,    m_recvmsg,   m_send, m_sendv,
                       m_sendmsg,          m_inject, m_senddata, m_injectdata};
fi_ops_tagged rdm_tagged_ops{
    sizeof(fi_ops_tagged), t_recv, t_recvv, t_recvmsg, t_send, t_sendv, t_sendmsg, t_inject, t_senddata, t_injectdata};

}  // namespace npo::fi
