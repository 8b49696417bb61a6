// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: endpoints -- the data path over the HAL (staged remote DMA into the peer's
// ring, ring polling), progress and faults (docs/libfabric.md "Data path", "Faults").
#include <sys/random.h>

#include "provider.hpp"

namespace npo::fi {

void Cq::progress() {
  for (Ep* e : eps) e->progress();
}

// Reaps the card's completions and finishes sends (CQ entries) and remote reads.
void Ep::poll_dma() {
  if (!queue) return;
  std::array<OpCompletion, 64> out;
  for (;;) {
    const std::size_t n = queue->poll(out);
    for (std::size_t i = 0; i < n; ++i) {
      const OpCompletion& c = out[i];
      if (trace::on()) trace::op_done(*this, c);
      if (c.status == OpStatus::kOk) {
        domain->ops_ok.fetch_add(1, std::memory_order_relaxed);
        domain->bytes_moved.fetch_add(c.info, std::memory_order_relaxed);
      } else {
        domain->ops_failed.fetch_add(1, std::memory_order_relaxed);
      }
      auto it =
          std::find_if(tx.begin(), tx.end(), [&](const Tx& t) { return c.handle >= t.first && c.handle <= t.last; });
      if (it == tx.end()) continue;
      if (c.status != OpStatus::kOk && it->worst == OpStatus::kOk) {
        it->worst = c.status;
        it->info = c.info;
      }
      if (c.handle != it->last) continue;
      if (rdm && it->kind == Tx::kSend) {
        note_activity();
        Tx t = *it;
        tx.erase(it);
        rdm_tx_done(std::move(t));
        continue;
      }
      if (c.status != OpStatus::kOk && it->kind == Tx::kSend) {
        // the header never landed: the peer waits for this seq; owe it a tombstone
        if (auto d = dests.find(it->dest_key); d != dests.end()) d->second.holes.push_back(it->seq);
      }
      it->done = true;
      if (it->kind == Tx::kSend) {
        note_activity();  // (a flow-control read alone is no progress)
        free_slots.push_back(it->slot);
        Cq* cq = tx_cq;
        if (it->worst != OpStatus::kOk) {
          const std::string msg = "npo: send of " + std::to_string(it->len) + " B from " + where() +
                                  " to the card with fabric id " + std::to_string(it->dest_fabric) +
                                  " failed: " + std::string(op_status_name(it->worst));
          // A queue timeout with the own card alive is a transient (send_failed judges both).
          const bool transient =
              is_path_failure(it->worst) ||
              ((it->worst == OpStatus::kTimeout || it->worst == OpStatus::kAborted) && !own_card_gone());
          if (transient) {
            // The fabric did not deliver the datagram (peer unreachable, its ring window gone):
            // like a UD/UDP datagram it is dropped and the send completes; a reliability layer
            // (ofi_rxd) retransmits. A peer that keeps failing is a fault (send_failed).
            ++dropped_tx;
            domain->datagrams_dropped.fetch_add(1, std::memory_order_relaxed);
            warn(FI_LOG_EP_DATA, msg);
            if (cq && it->completion) cq->push({it->ctx, it->cq_flags, it->len, nullptr, 0});
          } else if (cq) {
            cq->push_error(it->ctx, it->cq_flags, 0, 0, fi_errno_of(it->worst), msg);
          }
          send_failed(it->dest_key, it->worst, msg);
        } else {
          send_ok(it->dest_key);
          if (cq && it->completion) cq->push({it->ctx, it->cq_flags, it->len, nullptr, 0});
        }
        tx.erase(it);
      }
    }
    if (n < out.size()) break;
  }
  // finished reads are removed by their waiter; drop stale ones
  while (!tx.empty() && tx.front().kind == Tx::kRead && tx.front().done && tx.front().ctx == nullptr) tx.pop_front();
}

// Consumes arrived datagrams into posted receives, lane by lane.
void Ep::poll_rx() {
  if (!map || rx.empty()) return;
  std::byte* base = map->bytes().data();
  for (unsigned scanned = 0; scanned < lanes && !rx.empty(); ++scanned) {
    const unsigned lane = (rx_lane_cursor + scanned) % lanes;
    for (;;) {
      if (rx.empty()) break;
      const std::uint64_t want = rx_consumed[lane] + 1;
      const std::byte* slot = base + slot_offset(lanes, lane, slots, want);
      if (hw_load64(slot) != want) break;
      SlotHeader h;
      hw_copy(reinterpret_cast<std::byte*>(&h), slot, sizeof h);
      if (h.magic == kHdrMagic && lane_shared(lane, h.src_fabric_id, h.src_window, h.src_ep, h.src_generation, false))
        return;
      const bool bad_header = (h.flags & kFlagSkip) || h.magic != kHdrMagic || h.len > kMaxMsg;
      if (!bad_header) hw_copy(rx_scratch.data(), slot + kHdr, h.len);
      if (bad_header || payload_sum(rx_scratch.data(), h.len) != h.sum) {
        // a tombstone, or a payload write that failed: the datagram is dropped (DGRAM)
        ++dropped;
        rx_consumed[lane] = want;
        hw_store64(base + std::size_t{lane} * 64, want);
        continue;
      }
      note_activity();
      Rx r = rx.front();
      rx.pop_front();
      std::size_t cap = 0;
      for (std::size_t i = 0; i < r.count; ++i) cap += r.iov[i].iov_len;
      const std::size_t len = std::min<std::size_t>(h.len, kMaxMsg);
      std::size_t copied = 0;
      for (std::size_t i = 0; i < r.count && copied < len; ++i) {
        const std::size_t n = std::min(r.iov[i].iov_len, len - copied);
        std::memcpy(r.iov[i].iov_base, rx_scratch.data() + copied, n);
        copied += n;
      }
      const std::uint64_t flags = FI_RECV | FI_MSG | ((h.flags & kFlagData) ? FI_REMOTE_CQ_DATA : 0);
      if (rx_cq) {
        if (len > cap) {
          rx_cq->push_error(r.ctx, flags, copied, len - copied, FI_ETRUNC,
                            "npo: receive on " + where() + " truncated: message of " + std::to_string(len) +
                                " B, buffer of " + std::to_string(cap) + " B");
          rx_cq->errors.back().entry.data = h.data;
        } else if (!rx_selective || (r.flags & FI_COMPLETION)) {
          rx_cq->push({r.ctx, flags, len, r.count ? r.iov[0].iov_base : nullptr, (h.flags & kFlagData) ? h.data : 0});
        }
      }
      rx_consumed[lane] = want;
      hw_store64(base + std::size_t{lane} * 64, want);
    }
  }
  rx_lane_cursor = (rx_lane_cursor + 1) % lanes;
}

namespace {
std::chrono::milliseconds stall_dump_after() {
  static const std::chrono::milliseconds v{
      [] { return static_cast<int>(env_int("NPO_FI_STALL_MS", 0, 86'400'000, "the default 0 (off)").value_or(0)); }()};
  return v;
}
}  // namespace

void Ep::check_stall() {
  const auto after = stall_dump_after();
  if (after.count() == 0 || stall_dumped || !map) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_activity < after) return;
  stall_dumped = true;
  std::string m = "npo: stall: " + where() + " ep " + std::to_string(ep_no) + ": nothing for " +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_activity).count()) +
                  " ms; rx posted " + std::to_string(rx.size()) + ", tx in flight " + std::to_string(tx.size()) +
                  ", staging free " + std::to_string(free_slots.size()) + ", queue outstanding " +
                  std::to_string(queue ? queue->outstanding() : 0) + ", dropped rx " + std::to_string(dropped) +
                  " tx " + std::to_string(dropped_tx) + "; lanes:";
  const std::byte* base = map->bytes().data();
  for (unsigned lane = 0; lane < lanes; ++lane) {
    std::string seqs;
    bool any = rx_consumed[lane] != 0;
    for (unsigned k = 0; k < slots; ++k) {
      const std::uint64_t seq = hw_load64(base + ctrl_bytes(lanes) + (std::uint64_t{lane} * slots + k) * kSlot);
      if (seq) any = true;
      seqs += (k ? "," : "") + std::to_string(seq);
    }
    if (any)
      m += " [lane " + std::to_string(lane) + " consumed " + std::to_string(rx_consumed[lane]) + " slots " + seqs + "]";
  }
  m += "; dests:";
  for (const auto& [key, d] : dests) {
    m += " [fabric " + std::to_string(key >> 32) + " next_seq " + std::to_string(d.next_seq) + " consumed " +
         std::to_string(d.consumed) + " holes " + std::to_string(d.holes.size()) + "]";
  }
  for (const Tx& t : tx)
    m += " [tx " + std::string(t.kind == Tx::kSend ? "send" : "read") + " ops " + std::to_string(t.first) + ".." +
         std::to_string(t.last) + " seq " + std::to_string(t.seq) + (t.done ? " done" : "") + "]";
  warn(FI_LOG_EP_DATA, m);
}

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

// Enqueues the writes of `t` -- its payload from the staging slot, a FIN's rendezvous chunk
// -- then its header, fenced, and submits them. The fenced header waits for both and is
// skipped (FENCE_SKIPPED) if either failed (registers.md §5.7): the receiver never sees a
// header whose payload or chunk did not land, whether the peer refused the write or the card
// could not read the source (a user buffer read in place).
Result<void> enqueue_tx(Ep& e, Ep::Tx& t) {
  const std::uint64_t dst = slot_offset(t.lanes, t.lane, t.slots, t.seq);
  bool first_set = false;
  auto mark = [&](OpHandle op) {
    if (!first_set) t.first = op;
    first_set = true;
  };
  if (t.len) {
    auto op = e.queue->enqueue_remote_write(DmaAddress::host(e.staging_iova(t.slot) + kHdr), t.handle, dst + kHdr,
                                            static_cast<std::uint32_t>(t.len));
    if (!op) return std::unexpected(op.error());
    if (trace::on()) trace::op_enqueued(e, *op, t.len, trace::Role::kPayload, t.dest_fabric);
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
  if (first_set) e.queue->fence_next_op();
  auto hop = e.queue->enqueue_remote_write(DmaAddress::host(e.staging_iova(t.slot)), t.handle, dst, kHdr);
  if (!hop) return std::unexpected(hop.error());
  if (trace::on()) trace::op_enqueued(e, *hop, kHdr, trace::Role::kHeader, t.dest_fabric);
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
        // RDM never drops: wait (the route may come back), a fault after NPO_FI_FAULT_MS
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

Ep* ep_of(fid_ep* f) { return reinterpret_cast<Ep*>(f); }

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
int ep_getopt(fid_t, int level, int optname, void* optval, std::size_t* optlen) {
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  if (optname == FI_OPT_MIN_MULTI_RECV) return -FI_ENOPROTOOPT;
  (void)optval;
  (void)optlen;
  return -FI_ENOPROTOOPT;
}
int ep_setopt(fid_t, int level, int, const void*, std::size_t) {
  return level == FI_OPT_ENDPOINT ? -FI_ENOPROTOOPT : -FI_ENOPROTOOPT;
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
  trace::init();  // NPO_FI_TRACE, read once per process
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
  // A bad NPO_FI_FAULT / NPO_FI_FAULT_MS / NPO_FI_STALL_MS is reported now, not at the first fault.
  (void)abort_on_fault();
  (void)fault_persistence();
  (void)stall_dump_after();
  // One lane per possible sender (fabric IDs 1..N, kEpsPerCard endpoints each), at least 64.
  e->lanes =
      std::clamp(kEpsPerCard * (static_cast<unsigned>(count_cards(d->fabric->backend)) + 1), kDefaultLanes, 4096u);
  if (auto l = env_int("NPO_FI_RING_LANES", 1, 4096, "the default (4 per card + 4, at least 64)"))
    e->lanes = static_cast<unsigned>(*l);
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
  d->refs.fetch_add(1);
  *out = &e.release()->ep;
  return 0;
}

}  // namespace npo::fi
