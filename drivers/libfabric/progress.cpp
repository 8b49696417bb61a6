// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: endpoint progress -- polling the card's DMA completions and the own receive ring,
// and the stall dump (docs/libfabric.md "Data path", "Faults").
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

std::chrono::milliseconds stall_dump_after() {
  static const std::chrono::milliseconds v{
      [] { return static_cast<int>(param_int(Param::kStallMs, 0, 86'400'000).value_or(0)); }()};
  return v;
}

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
}  // namespace npo::fi
