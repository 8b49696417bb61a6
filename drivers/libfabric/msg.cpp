// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the endpoint data path over the HAL -- staged remote DMA into the peer's ring,
// peer counter reads, sends and receives, and the DGRAM endpoint's fi_ops_msg (docs/libfabric.md "Data path").
#include "provider.hpp"

namespace npo::fi {

// ---- Endpoint data path -------------------------------------------------------------------
// Reads the peer's consumer counter of our lane (a remote read of 8 bytes), waiting for it.
// `lane`: our lane in that peer's ring (my_lane mod the peer's lane count).
Result<std::uint64_t> refresh_consumed(Ep& e, const WindowHandle& h, unsigned lane, OpStatus* status) {
  return read_peer_u64(e, h, std::uint64_t{lane} * 64, status);
}

// First contact with a peer: our lane in its ring may hold the messages of an endpoint that
// had our card and endpoint number before us (closed, or its process gone): the peer has
// consumed some, and the rest wait in the slots after its consumer counter. Our sequence
// continues after all of them -- the peer expects consumed + 1 next, and a restart at 1 would
// never be seen, nor may we overwrite a message it has not read. One batch of remote reads
// (one doorbell, one wait): the consumer counter and the seq word of each of the lane's S
// slots; slot j holds only seqs = j + 1 mod S, so seq q is present when slot (q - 1) mod S
// reads q. We continue after the highest seq present in (consumed, consumed + S]; a seq below
// it that is missing (a header of the predecessor that never landed) would stop the peer's
// lane for good, so it is owed a tombstone (d.holes), as a failed header of our own is.
// Sets d.consumed, d.next_seq and d.holes; returns the counter.
Result<std::uint64_t> sync_lane(Ep& e, const Av::Entry& peer, Ep::Dest& d, OpStatus* status) {
  const unsigned lanes = peer.wire.lanes, slots = peer.wire.slots;
  if (lanes == 0 || slots == 0) return fail(Code::kInvalidArgument, "peer ring without lanes or slots");
  const unsigned lane = e.my_lane % lanes;
  const unsigned scan = std::min<unsigned>(slots, kReadbackWords - 1);  // all of them in this provider (S <= 16)
  std::array<std::uint64_t, kReadbackWords> offsets{};
  offsets[0] = std::uint64_t{lane} * 64;
  for (unsigned j = 0; j < scan; ++j) offsets[1 + j] = slot_offset(lanes, lane, slots, j + 1);
  std::array<std::uint64_t, kReadbackWords> v{};
  if (auto r = read_peer_words(e, peer.handle, std::span(offsets).first(1 + scan), v.data(), status); !r)
    return std::unexpected(r.error());
  const std::uint64_t c = v[0];
  auto present = [&](std::uint64_t q) {
    const unsigned j = static_cast<unsigned>((q - 1) % slots);
    return j < scan && v[1 + j] == q;
  };
  std::uint64_t top = c;  // highest seq present
  for (std::uint64_t q = c + 1; q <= c + slots; ++q)
    if (present(q)) top = q;
  d.holes.clear();
  for (std::uint64_t q = c + 1; q < top; ++q)
    if (!present(q)) d.holes.push_back(q);
  d.consumed = c;
  d.next_seq = top + 1;
  return c;
}

// Reads the 8-byte words at `offsets` of the peer's ring window by remote DMA into out[],
// one doorbell for all of them, and waits (up to kRefreshTimeout) for the last.
Result<void> read_peer_words(Ep& e, const WindowHandle& h, std::span<const std::uint64_t> offsets, std::uint64_t* out,
                             OpStatus* status) {
  if (offsets.empty() || offsets.size() > kReadbackWords) return fail(Code::kInvalidArgument, "read batch size");
  if (e.queue->outstanding() + offsets.size() + 1 + 6 > e.queue->depth())
    return fail(Code::kDeadlineExceeded, "no queue room for the remote reads yet");  // the caller waits and retries
  // A batch given up on (timed out) still completes later into the same readback words: no
  // new batch while one is outstanding, so timeouts against a peer that does not answer do
  // not pile reads up in the queue.
  if (std::any_of(e.tx.begin(), e.tx.end(),
                  [](const Ep::Tx& x) { return x.kind == Ep::Tx::kRead && x.ctx == nullptr && !x.done; }))
    return fail(Code::kDeadlineExceeded, "an earlier remote read of a peer's ring is still outstanding");
  // Behind a FENCE op: the batch starts after every earlier op, so no earlier read's data
  // lands in the readback words after this batch's (registers.md §5.7). The fence is an op
  // of its own, outside the batch's range: an earlier failure makes it FENCE_SKIPPED, and the
  // reads still run.
  if (auto f = e.queue->enqueue_fence(); !f) return std::unexpected(f.error());
  OpHandle first = 0, last = 0;
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    auto op = e.queue->enqueue_remote_read(h, offsets[i], DmaAddress::host(e.readback_iova() + 8 * i), 8);
    if (!op) return std::unexpected(op.error());
    if (trace::on()) trace::op_enqueued(e, *op, 8, trace::Role::kRead, h.fabric_id);
    if (i == 0) first = *op;
    last = *op;
  }
  Ep::Tx t;
  t.kind = Ep::Tx::kRead;
  t.first = first;
  t.last = last;
  t.ctx = &t;  // marks a waiter
  e.tx.push_back(t);
  if (auto s = e.queue->submit(); !s) return std::unexpected(s.error());
  if (trace::on()) trace::submitted<Ep::Tx>(e, nullptr);
  const auto end = std::chrono::steady_clock::now() + kRefreshTimeout;
  for (;;) {
    e.poll_dma();
    auto it = std::find_if(e.tx.begin(), e.tx.end(),
                           [&](const Ep::Tx& x) { return x.kind == Ep::Tx::kRead && x.last == last; });
    if (it != e.tx.end() && it->done) {
      const OpStatus st = it->worst;
      e.tx.erase(it);
      if (st != OpStatus::kOk) {
        if (status) *status = st;
        return fail(Code::kUnavailable, "remote read of the peer's ring: " + std::string(op_status_name(st)));
      }
      std::memcpy(out, e.readback(), 8 * offsets.size());
      return {};
    }
    if (std::chrono::steady_clock::now() >= end) {
      if (it != e.tx.end()) it->ctx = nullptr;  // abandoned: dropped when it completes
      return fail(Code::kDeadlineExceeded, "remote read of the peer's ring timed out");
    }
    std::this_thread::yield();
  }
}

// Reads 8 bytes at `offset` of the peer's ring window by remote DMA, waiting for them.
Result<std::uint64_t> read_peer_u64(Ep& e, const WindowHandle& h, std::uint64_t offset, OpStatus* status) {
  std::uint64_t v = 0;
  const std::uint64_t off[1] = {offset};
  if (auto r = read_peer_words(e, h, off, &v, status); !r) return std::unexpected(r.error());
  return v;
}

// Enqueues the writes of `t` -- the slot after its first word (the rest of the header and the
// payload, from the staging slot, in one write), a FIN's rendezvous chunk -- then, fenced, the
// header's first word, the seq the receiver polls, and submits them. The seq lands only after
// every other byte of the slot did: a write of several words may become visible in any order
// (a CPU-run engine's memcpy stores a 64-byte header as two 32-byte halves, the seq's first),
// so a receiver that saw the seq and read the header's sum from the older half would take a
// good message for a corrupt one. The fenced seq waits for the earlier writes and is skipped
// (FENCE_SKIPPED) if one failed (registers.md §5.7): the receiver never sees a seq whose slot
// or chunk did not land, whether the peer refused the write or the card could not read the
// source (a user buffer read in place).
Result<void> enqueue_tx(Ep& e, Ep::Tx& t) {
  constexpr std::uint64_t kSeqBytes = sizeof(SlotHeader::seq);
  static_assert(offsetof(SlotHeader, seq) == 0);
  const std::uint64_t dst = slot_offset(t.lanes, t.lane, t.slots, t.seq);
  bool first_set = false;
  auto mark = [&](OpHandle op) {
    if (!first_set) t.first = op;
    first_set = true;
  };
  {
    auto op = e.queue->enqueue_remote_write(DmaAddress::host(e.staging_iova(t.slot) + kSeqBytes), t.handle,
                                            dst + kSeqBytes, static_cast<std::uint32_t>(kHdr - kSeqBytes + t.len));
    if (!op) return std::unexpected(op.error());
    if (trace::on()) trace::op_enqueued(e, *op, kHdr - kSeqBytes + t.len, trace::Role::kPayload, t.dest_fabric);
    mark(*op);
  }
  if ((t.rndv_chunk >= 0 || t.rndv_src != 0) && t.data_len) {
    const std::uint64_t src =
        t.rndv_src != 0 ? t.rndv_src : e.rndv_staging->iova() + std::uint64_t(t.rndv_chunk) * kRndvChunk;
    auto op = e.queue->enqueue_remote_write(DmaAddress::host(src), t.handle, t.land_off,
                                            static_cast<std::uint32_t>(t.data_len));
    if (!op) return std::unexpected(op.error());
    if (trace::on()) trace::op_enqueued(e, *op, t.data_len, trace::Role::kChunk, t.dest_fabric);
    mark(*op);
  }
  e.queue->fence_next_op();
  auto hop = e.queue->enqueue_remote_write(DmaAddress::host(e.staging_iova(t.slot)), t.handle, dst, kSeqBytes);
  if (!hop) return std::unexpected(hop.error());
  if (trace::on()) trace::op_enqueued(e, *hop, kSeqBytes, trace::Role::kHeader, t.dest_fabric);
  mark(*hop);
  t.last = *hop;
  t.done = false;
  t.worst = OpStatus::kOk;
  if (e.defer_submit) {
    e.submit_pending = true;
  } else if (auto sub = e.queue->submit(); !sub) {
    return std::unexpected(sub.error());
  }
  if (trace::on()) trace::submitted(e, &t);
  return {};
}

// Writes one slot of the peer's ring: payload (if any), then the header fenced (so the
// receiver sees a header only after the payload landed, and none if the payload failed; the
// checksum would catch one that did not land all the same). A tombstone (flags kFlagSkip, no payload) stands for a seq
// whose header never landed. Returns 0 when posted, 1 when it failed and was reported on the CQ.
ssize_t post_slot(Ep& e, const Av::Entry& peer, Ep::Dest& d, std::uint64_t key, std::uint64_t seq, const iovec* iov,
                  std::size_t count, std::size_t len, void* ctx, std::uint64_t data, std::uint32_t flags,
                  bool completion, const SlotMeta& meta) {
  const WindowHandle& h = peer.handle;
  const unsigned lanes = peer.wire.lanes, slots = peer.wire.slots;
  const unsigned lane = e.my_lane % lanes;
  const unsigned s = e.free_slots.back();
  std::byte* st = e.staging_slot(s);
  std::size_t off = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (iov[i].iov_len) std::memcpy(st + kHdr + off, iov[i].iov_base, iov[i].iov_len);
    off += iov[i].iov_len;
  }
  SlotHeader hdr{};
  hdr.seq = seq;
  hdr.len = static_cast<std::uint32_t>(len);
  hdr.flags = flags;
  hdr.data = data;
  hdr.magic = kHdrMagic;
  hdr.src_fabric_id = e.domain->fabric_id;
  hdr.sum = payload_sum(st + kHdr, len);
  hdr.tag = meta.tag;
  hdr.src_window = e.window ? e.window->handle().window_id : 0;
  hdr.kind = meta.kind;
  hdr.src_ep = static_cast<std::uint8_t>(e.ep_no);
  // the ring's generation tells the receiver a successor from its predecessor (lane_shared)
  hdr.src_generation = e.window ? e.window->handle().generation : 0;
  if (e.rdm && e.window) {
    // piggybacked credits: how many of the peer's messages we consumed (docs/libfabric.md
    // "Data path"), so its sends need no remote read of our consumer counter
    if (auto it = e.lane_of_src.find(src_key_of(h.fabric_id, h.window_id)); it != e.lane_of_src.end()) {
      hdr.flags |= kFlagAck;
      hdr.ack = e.rx_consumed[it->second];
    }
  }
  std::memcpy(st, &hdr, sizeof hdr);
  Ep::Tx t;
  t.ctx = ctx;
  t.completion = completion;
  t.len = len;
  t.slot = s;
  t.cq_flags = meta.cq_flags;
  t.dest_fabric = h.fabric_id;
  t.dest_key = key;
  t.seq = seq;
  t.msg_kind = meta.kind;
  t.tag = meta.tag;
  t.cq_data = data;
  t.send_id = meta.send_id;
  t.rndv_chunk = meta.rndv_chunk;
  t.rndv_src = meta.rndv_src;
  t.land_off = meta.land_off;
  t.data_len = meta.data_len;
  t.lane = lane;
  t.slots = slots;
  t.lanes = lanes;
  t.handle = h;
  if (auto r = enqueue_tx(e, t); !r) {
    const Error& err = r.error();
    const std::string msg = "npo: send from " + e.where() + " failed: " + err.to_string();
    if (e.tx_cq && completion) e.tx_cq->push_error(ctx, meta.cq_flags, 0, 0, fi_errno_of(err), msg, meta.tag);
    e.report_fatal(msg, fi_errno_of(err));
    return 1;  // reported on the CQ; nothing was posted
  }
  e.free_slots.pop_back();
  e.tx.push_back(t);
  (void)d;
  return 0;
}

std::uint64_t dest_key_of(const WindowHandle& h) { return ring_key(h.fabric_id, h.window_id, h.generation); }

ssize_t do_send(Ep& e, const iovec* iov, std::size_t count, fi_addr_t dest, void* ctx, std::uint64_t data,
                bool has_data, bool completion, const SlotMeta& meta) {
  if (!e.enabled) return -FI_EOPBADSTATE;
  if (!e.av) return -FI_EINVAL;
  if (count > kIovLimit) return -FI_EINVAL;
  if (dest >= e.av->table.size() || !e.av->table[dest].valid) return -FI_EINVAL;
  const Av::Entry peer = e.av->table[dest];
  return send_to(e, peer, iov, count, ctx, data, has_data, completion, meta, kSendWait);
}

ssize_t send_to(Ep& e, const Av::Entry& peer, const iovec* iov, std::size_t count, void* ctx, std::uint64_t data,
                bool has_data, bool completion, const SlotMeta& meta, std::chrono::milliseconds wait) {
  std::size_t len = 0;
  for (std::size_t i = 0; i < count; ++i) len += iov[i].iov_len;
  if (len > kMaxMsg) return -FI_EMSGSIZE;
  e.poll_dma();
  const WindowHandle& h = peer.handle;
  const std::uint64_t key = dest_key_of(h);
  // the endpoint at that address was closed: its successor on the card wrote to us since
  // (predecessor_gone); nothing sent there will be read
  auto gone = [&] {
    if (!e.rdm || e.gone_rings.empty() || !e.gone_rings.count(key)) return false;
    warn(FI_LOG_EP_DATA, "npo: send from " + e.where() + " to the card with fabric id " + std::to_string(h.fabric_id) +
                             " refused: the endpoint at that address was closed (the endpoint opened next on that "
                             "card has written since)");
    return true;
  };
  if (gone()) return -FI_EIO;
  Ep::Dest& d = e.dests[key];
  // Resources short (staging slots, queue room, the peer's ring credits): wait for them up
  // to `wait` (kSendWait for an application's send), progressing this endpoint's completions
  // and receptions but never sending from inside (completions free staging; consuming the
  // own ring lets a peer that waits for us go on), then -FI_EAGAIN (see kSendWait).
  const auto wait_end = std::chrono::steady_clock::now() + wait;
  auto wait_a_bit = [&]() -> bool {
    if (std::chrono::steady_clock::now() >= wait_end) return false;
    e.poll_dma();
    if (e.rdm) {
      e.rdm_poll_rx();
    } else {
      e.poll_rx();
    }
    // sleep, not spin: on an oversubscribed host the card's engines need the CPU to free room
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    return true;
  };
  auto room = [&] { return !e.free_slots.empty() && e.queue->outstanding() + 6 <= e.queue->depth(); };
  // tombstones first: the peer's lane is stuck at the oldest seq whose header never landed
  // (our own failed headers, or a predecessor's gaps that sync_lane found below)
  auto post_holes = [&]() -> ssize_t {
    while (!d.holes.empty()) {
      while (!room())
        if (!wait_a_bit()) return -FI_EAGAIN;
      const std::uint64_t hole = d.holes.front();
      d.holes.erase(d.holes.begin());
      if (post_slot(e, peer, d, key, hole, nullptr, 0, 0, nullptr, 0, kFlagSkip, false, SlotMeta{}) != 0) {
        d.holes.insert(d.holes.begin(), hole);
        return 1;  // reported on the CQ; nothing more is posted now
      }
    }
    return 0;
  };
  if (const ssize_t r = post_holes(); r != 0) return r < 0 ? r : 0;
  while (!room())
    if (!wait_a_bit()) return -FI_EAGAIN;
  const unsigned slots = peer.wire.slots;
  while (!d.synced || d.next_seq - 1 - d.consumed >= slots) {
    OpStatus read_status = OpStatus::kRemoteUnreachable;  // what a failed read met, when it says
    Result<std::uint64_t> c = d.synced ? refresh_consumed(e, h, e.my_lane % peer.wire.lanes, &read_status)
                                       : sync_lane(e, peer, d, &read_status);
    if (d.synced) e.domain->credit_reads.fetch_add(1, std::memory_order_relaxed);
    if (!c) {
      if (c.error().code() == Code::kDeadlineExceeded) {
        if (!wait_a_bit()) return -FI_EAGAIN;
        continue;
      }
      if (gone()) return -FI_EIO;  // found closed while this send waited (rdm_poll_rx)
      if (e.rdm) {
        // RDM never drops: wait (the route may come back), a fault after FI_NPO_FAULT_MS
        e.send_failed(key, read_status,
                      "npo: send from " + e.where() + " to the card with fabric id " + std::to_string(h.fabric_id) +
                          " stalled: " + c.error().to_string());
        if (e.fatal_reported || !wait_a_bit()) return e.fatal_reported ? -FI_EIO : -FI_EAGAIN;
        continue;
      }
      // the peer's ring cannot be read: the datagram is dropped (see poll_dma)
      const std::string msg = "npo: send from " + e.where() + " to the card with fabric id " +
                              std::to_string(h.fabric_id) + " dropped: " + c.error().to_string();
      ++e.dropped_tx;
      e.domain->datagrams_dropped.fetch_add(1, std::memory_order_relaxed);
      warn(FI_LOG_EP_DATA, msg);
      if (e.tx_cq && completion) e.tx_cq->push({ctx, FI_SEND | FI_MSG, len, nullptr, 0});
      e.send_failed(key, read_status, msg);
      return 0;
    }
    if (!d.synced) {  // first contact: sync_lane placed next_seq
      d.synced = true;
      continue;
    }
    d.consumed = std::max(d.consumed, *c);
    if (d.next_seq - 1 - d.consumed < slots) break;
    if (!wait_a_bit()) return -FI_EAGAIN;
    std::this_thread::sleep_for(std::chrono::microseconds(50));  // the next remote read a little later
  }
  // a first contact's sync may have found gaps a predecessor left: they go before our message
  if (const ssize_t r = post_holes(); r != 0) return r < 0 ? r : 0;
  // staging and queue room may have been used by nothing else meanwhile (one thread per domain)
  while (!room())
    if (!wait_a_bit()) return -FI_EAGAIN;
  const ssize_t r = post_slot(e, peer, d, key, d.next_seq, iov, count, len, ctx, data,
                              (has_data ? kFlagData : 0) | (meta.tagged ? kFlagTagged : 0), completion, meta);
  if (r == 0) ++d.next_seq;
  return r == 1 ? 0 : r;
}

ssize_t ep_sendv(fid_ep* f, const iovec* iov, void**, std::size_t count, fi_addr_t dest, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return do_send(*e, iov, count, dest, ctx, 0, false, e->tx_default_completion());
}
ssize_t ep_send(fid_ep* f, const void* buf, std::size_t len, void* desc, fi_addr_t dest, void* ctx) {
  iovec iov{const_cast<void*>(buf), len};
  return ep_sendv(f, &iov, &desc, 1, dest, ctx);
}
ssize_t ep_sendmsg(fid_ep* f, const fi_msg* msg, std::uint64_t flags) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return do_send(*e, msg->msg_iov, msg->iov_count, msg->addr, msg->context, msg->data, (flags & FI_REMOTE_CQ_DATA) != 0,
                 !e->tx_selective || (flags & FI_COMPLETION));
}
ssize_t ep_inject(fid_ep* f, const void* buf, std::size_t len, fi_addr_t dest) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return do_send(*e, &iov, 1, dest, nullptr, 0, false, false);
}
ssize_t ep_senddata(fid_ep* f, const void* buf, std::size_t len, void*, std::uint64_t data, fi_addr_t dest, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return do_send(*e, &iov, 1, dest, ctx, data, true, e->tx_default_completion());
}
ssize_t ep_injectdata(fid_ep* f, const void* buf, std::size_t len, std::uint64_t data, fi_addr_t dest) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  iovec iov{const_cast<void*>(buf), len};
  return do_send(*e, &iov, 1, dest, nullptr, data, true, false);
}
ssize_t do_recv(Ep& e, const iovec* iov, std::size_t count, void* ctx, std::uint64_t flags) {
  if (!e.enabled) return -FI_EOPBADSTATE;
  if (count > kIovLimit) return -FI_EINVAL;
  if (e.rx.size() >= kRxSize) return -FI_EAGAIN;
  Ep::Rx r{};
  r.ctx = ctx;
  r.count = count;
  r.flags = flags;
  for (std::size_t i = 0; i < count; ++i) r.iov[i] = iov[i];
  e.rx.push_back(r);
  return 0;
}
ssize_t ep_recvv(fid_ep* f, const iovec* iov, void**, std::size_t count, fi_addr_t, void* ctx) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return do_recv(*e, iov, count, ctx, FI_COMPLETION);
}
ssize_t ep_recv(fid_ep* f, void* buf, std::size_t len, void* desc, fi_addr_t src, void* ctx) {
  iovec iov{buf, len};
  return ep_recvv(f, &iov, &desc, 1, src, ctx);
}
ssize_t ep_recvmsg(fid_ep* f, const fi_msg* msg, std::uint64_t flags) {
  Ep* e = ep_of(f);
  std::lock_guard lk(e->domain->mu);
  return do_recv(*e, msg->msg_iov, msg->iov_count, msg->context, flags);
}
fi_ops_msg ep_msg_ops{sizeof(fi_ops_msg), ep_recv,    ep_recvv,  ep_recvmsg,  ep_send,
                      ep_sendv,           ep_sendmsg, ep_inject, ep_senddata, ep_injectdata};
}  // namespace npo::fi
