// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: provider-side tracing (issue 17 point 4; docs/libfabric.md "Traces").
//
// FI_NPO_TRACE=PATH turns it on: every process records in memory, per endpoint,
//   - each DMA op the endpoint hands its card's queue (a span from the doorbell that submitted
//     it to the poll that reaped its completion; name by kind: "eager write", "rts write",
//     "cts write", "fin write", "rendezvous chunk", "ring header", "credit read", ...;
//     track: the endpoint's queue on its card; args bytes, peer fabric id, handle, status,
//     submit_ns, complete_ns, msg),
//   - each message-level operation (fi_tsend / fi_send / fi_tinject ... from the call to its
//     completion: delivered, the CQ entry written; fi_trecv / fi_recv from the post to its CQ
//     entry), one track for sends and one for receives per endpoint,
//   - faults as instants: a failed ring write resent ("resend"), a peer that keeps failing
//     ("send failed"), a fatal report ("fatal").
// The file is written (replaced) whenever an endpoint closes and before a fatal fault ends the
// process: PATH with "%p" replaced by the pid and "%r" by the MPI rank, else PATH + ".PID.json"
// (PATH's ".json" kept last). Chrome trace-event JSON ({"traceEvents": [...]}; ph X, i, M;
// ts/dur in microseconds of CLOCK_MONOTONIC, the same clock as the ns args, so several
// processes of one host line up). At most FI_NPO_TRACE_MAX events (default 1 000 000); the
// rest are counted in otherData.dropped_events.
//
// Cost when off: on() is one relaxed atomic load and a branch per hook. Thread-safety: every
// function may be called from any thread (one mutex, taken only when tracing is on).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "npo/hal/dma.hpp"

namespace npo::fi {

struct Ep;

namespace trace {

class Tracer;
/// The process's tracer; null while tracing is off (FI_NPO_TRACE unset).
extern std::atomic<Tracer*> g_tracer;

/// True when FI_NPO_TRACE turned tracing on (init() ran). One relaxed load.
inline bool on() noexcept { return g_tracer.load(std::memory_order_relaxed) != nullptr; }

/// Reads FI_NPO_TRACE once per process and, when set, creates the tracer. Idempotent.
void init();

// ---- DMA ops (msg.cpp) ---------------------------------------------------------------------
/// What a DMA op of a ring write is: a rendezvous chunk, the message's payload, the slot
/// header; or a remote read of the peer's ring (credits, a delivery check).
enum class Role : std::uint8_t { kChunk, kPayload, kHeader, kRead };
/// Op `handle` of `bytes` enqueued on e's queue, towards the card with `peer_fabric_id`.
void op_enqueued(Ep& e, OpHandle handle, std::uint64_t bytes, Role role, std::uint32_t peer_fabric_id);
/// The doorbell rang for every op enqueued since: their submit time. For a ring write (`tx`,
/// an Ep::Tx) the ops are named by its kind and attributed to the message the ring message
/// belongs to; null for a read.
template <typename Tx>
void submitted(Ep& e, const Tx* tx);
/// A completion reaped by poll_dma (fences and unknown handles are ignored).
void op_done(Ep& e, const OpCompletion& c);

// ---- Messages (rdm.cpp) ---------------------------------------------------------------------
/// A send call posted (rdm_send, after its checks): starts the message span and makes it the
/// endpoint's current message until send_end(). `len` message bytes.
void send_begin(Ep& e, std::uint64_t len, std::uint32_t peer_fabric_id, bool tagged, bool inject, bool has_data,
                std::uint64_t tag);
/// The send call returns `rc` (0: posted; else the message was not posted and is forgotten).
/// `send_id`: its rendezvous id (0 for an eager message).
void send_end(Ep& e, long rc, std::uint64_t send_id);
/// A ring write (an Ep::Tx) of e was delivered (rdm_tx_delivered): ends the eager message, or
/// counts a rendezvous chunk of its message (the message ends with its last chunk).
template <typename Tx>
void tx_delivered(Ep& e, const Tx& tx);
/// A ring write failed: `resent` true: it will be resent (instant "resend"); false: its message
/// fails (span ends with status `status`, instant "send failed").
template <typename Tx>
void tx_failed(Ep& e, const Tx& tx, bool resent, std::string_view status);
/// A receive posted with context `ctx` (not FI_PEEK / FI_CLAIM), `cap` buffer bytes.
void recv_begin(Ep& e, void* ctx, std::uint64_t cap, bool tagged, std::uint64_t tag);
/// The receive of `ctx` became a rendezvous receive with id `recv_id` (its CTS writes belong to it).
void recv_rendezvous(Ep& e, void* ctx, std::uint64_t recv_id);
/// The receive of `ctx` completed with `bytes` (`status` "ok", "truncated", "canceled").
void recv_end(Ep& e, void* ctx, std::uint64_t bytes, const char* status);

// ---- Faults (provider.hpp) ------------------------------------------------------------------
/// An instant on e's fault track: `what` ("send failed", "fatal", ...), with a message.
void fault(Ep& e, const char* what, const std::string& msg);
/// Writes the trace file now (a fatal fault is about to end the process; an endpoint closed).
void flush();
/// The endpoint closes: its unfinished ops and messages are counted, its state dropped; the
/// file is written.
void ep_closed(Ep& e);

}  // namespace trace
}  // namespace npo::fi
