// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the RDM endpoint's send side and progress -- finished, delivered and failed ring
// writes, resends, peers that are gone, and Ep::rdm_progress (docs/libfabric.md "Native RDM").
#include "provider.hpp"

namespace npo::fi {

namespace {

// The sender of a ring message, to send it CTS: its AV entry, else the address its RTS carried.
const Av::Entry* peer_of(Ep& e, std::uint64_t src_key) {
  if (auto it = e.peers.find(src_key); it != e.peers.end()) return &it->second;
  return nullptr;
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
  if (s->second.cq_flags & FI_SEND) e.count(FI_SEND, true);
  if (e.tx_cq && (s->second.completion || s->second.ctx))
    e.tx_cq->push_error(s->second.ctx, s->second.cq_flags, 0, 0, err, msg, s->second.tag);
  e.sends.erase(s);
}

}  // namespace

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
          // a send's last chunk, or the last chunk of a large read this side is the target of
          if (s->second.rma_src) {
            count(FI_REMOTE_READ);
          } else if (s->second.cq_flags & FI_SEND) {  // an RMA write counts at its ack (rma.cpp)
            count(s->second.cq_flags);
          }
          if (tx_cq && s->second.completion)
            tx_cq->push({s->second.ctx, s->second.cq_flags, static_cast<std::size_t>(s->second.total), nullptr, 0,
                         s->second.tag});
          sends.erase(s);
        }
      }
    } else if (t.msg_kind == kEager) {
      count(t.cq_flags);  // injects too (fi_cntr(3): every operation counts)
      if (t.completion && tx_cq) tx_cq->push({t.ctx, t.cq_flags, t.len, nullptr, 0, t.tag});
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
  } else if (t.msg_kind == kEager) {
    count(t.cq_flags, true);
    if ((t.completion || t.ctx) && tx_cq)  // as fail_send_req
      tx_cq->push_error(t.ctx, t.cq_flags, 0, 0, fi_errno_of(t.worst), msg, t.tag);
  }
  if (t.send_id) rma_fail(*this, t.send_id, fi_errno_of(t.worst), msg);
  report_fatal(msg, fi_errno_of(t.worst));
}

// ---- A sender's successor wrote: the sender is closed -----------------------------------------
void Ep::drop_tx_to_gone(const Tx& t) {
  free_slots.push_back(t.slot);
  if (t.rndv_chunk >= 0) rndv_free.push_back(static_cast<unsigned>(t.rndv_chunk));
  if (t.msg_kind == kEager) count(t.cq_flags, true);
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
    } else if (!q.rma_write && q.r.ctx != reinterpret_cast<void*>(1)) {
      count(FI_RECV, true);
      const std::uint64_t multi = multi_done(q.r);
      if (rx_cq)
        rx_cq->push_error(q.r.ctx, recv_flags(q.tagged, q.has_data) | multi, 0, 0, FI_EIO, msg, q.tag,
                          q.has_data ? q.data : 0);
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
      if (!known) {  // the peer cannot be read now: check again later (a fault after FI_NPO_FAULT_MS)
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
}  // namespace npo::fi
