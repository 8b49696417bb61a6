// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: what the sources of the provider define for each other -- the ring transport
// (msg.cpp), AV and MR (av_mr.cpp), RDM matching and rendezvous (rdm*.cpp), RMA (rma.cpp),
// atomics (atomic.cpp), counters (cntr.cpp), EQ/CQ (cq_eq.cpp) and the endpoint (ep.cpp).
// Included at the end of provider.hpp (the objects behind each fid); not on its own.
#pragma once

namespace npo::fi {

// What a ring message carries besides its payload (RDM; the DGRAM core uses the defaults).
struct SlotMeta {
  MsgKind kind = kEager;
  bool tagged = false;
  std::uint64_t tag = 0;
  std::uint64_t cq_flags = FI_SEND | FI_MSG;
  std::uint64_t send_id = 0;
  int rndv_chunk = -1;
  std::uint64_t rndv_src = 0;  // zero-copy FIN: IOVA of the chunk in the user's buffer (ProcessMemoryMap)
  std::uint64_t land_off = 0, data_len = 0;
};

// ---- Defined in the other sources of the module --------------------------------------------
// msg.cpp: the ring transport shared by DGRAM and RDM endpoints
// The payload is copied into a ring slot (or staging) before the call returns, so every send
// is also an inject (FI_INJECT: the buffer is the caller's again at once); `completion` alone
// says whether the send reports a CQ entry (fi_inject passes false, fi_sendmsg(FI_INJECT)
// with FI_COMPLETION true, fi_msg(3)).
ssize_t do_send(Ep& e, const iovec* iov, std::size_t count, fi_addr_t dest, void* ctx, std::uint64_t data,
                bool has_data, bool completion, const SlotMeta& meta = SlotMeta{});
// Sends one ring message of at most kMaxMsg payload bytes to `peer`, waiting up to `wait` for
// resources (0: answer -FI_EAGAIN at once). Returns 0 (posted, or failed and reported on the
// CQ), -FI_EAGAIN, -FI_EMSGSIZE or -FI_EIO (a fault was reported).
ssize_t send_to(Ep& e, const Av::Entry& peer, const iovec* iov, std::size_t count, void* ctx, std::uint64_t data,
                bool has_data, bool completion, const SlotMeta& meta, std::chrono::milliseconds wait);
Result<void> enqueue_tx(Ep& e, Ep::Tx& t);
// Remote reads of the peer's ring (8 bytes, waited for up to kRefreshTimeout): our lane's
// consumer counter, or any 8 bytes (a slot's seq). Errors: kUnavailable (the read failed),
// kDeadlineExceeded.
// A read the card failed sets *status (if given) to the op's status.
Result<std::uint64_t> refresh_consumed(Ep& e, const WindowHandle& h, unsigned lane, OpStatus* status = nullptr);
Result<std::uint64_t> read_peer_u64(Ep& e, const WindowHandle& h, std::uint64_t offset, OpStatus* status = nullptr);
// Words per batch of read_peer_words (the readback area after the staging slots is 4 KiB).
constexpr std::size_t kReadbackWords = 64;
Result<void> read_peer_words(Ep& e, const WindowHandle& h, std::span<const std::uint64_t> offsets, std::uint64_t* out,
                             OpStatus* status = nullptr);
// First contact with a peer: continue our lane of its ring after an earlier endpoint's
// messages (msg.cpp). Sets d.consumed and d.next_seq; the peer's consumer counter.
Result<std::uint64_t> sync_lane(Ep& e, const Av::Entry& peer, Ep::Dest& d, OpStatus* status = nullptr);
std::uint64_t dest_key_of(const WindowHandle& h);
// av_mr.cpp: an address from fi_getname of a peer, imported (its window checked)
Result<Av::Entry> decode_addr(Domain& d, const void* addr);
// rdm.cpp
std::size_t iov_bytes(const iovec* iov, std::size_t count);
// Copies `len` bytes into / out of an iov list at byte offset `off`; returns bytes copied.
std::size_t copy_to_iov(const iovec* iov, std::size_t count, std::size_t off, const std::byte* src, std::size_t len,
                        bool device_src);
void copy_from_iov(const iovec* iov, std::size_t count, std::size_t off, std::byte* dst, std::size_t len);
// Grants landing chunks to the rendezvous receive `q` (queued CTS).
void queue_grants(Ep& e, std::uint64_t recv_id, Ep::RecvReq& q);
// RDM tag matching (rdm.cpp; used by rdm_msg.cpp): whether posted receive `p` takes a message of
// this kind, tag and source; whether unexpected message `u` is unclaimed and matches `p`.
bool matches(const Ep::Posted& p, bool tagged, std::uint64_t tag, fi_addr_t src);
// The receive a message of `len` bytes (tagged, tag, from src) goes to: the first posted one it
// matches, taken off `posted` -- or, for an FI_MULTI_RECV buffer, the next slice of it (the
// buffer leaves `posted` once less than min_multi_recv bytes are left). nullopt: none matches.
std::optional<Ep::Posted> take_posted(Ep& e, bool tagged, std::uint64_t tag, fi_addr_t src, std::uint64_t len);
// The next slice of FI_MULTI_RECV buffer `p` for a message of `len` bytes (see Posted::Multi).
Ep::Posted multi_slice(Ep& e, Ep::Posted& p, std::uint64_t len);
// A message of a slice ended (completed or failed): FI_MULTI_RECV when it was the buffer's
// last, else 0. 0 for a receive that is not a slice.
std::uint64_t multi_done(const Ep::Posted& r);
bool matches(const Ep::Unexp& u, const Ep::Posted& p);
// The completion flags of a receive.
std::uint64_t recv_flags(bool tagged, bool has_data);
// A posted receive meets an unexpected message: deliver it (eager) or start its rendezvous.
void deliver_unexp(Ep& e, const Ep::Posted& r, std::list<Ep::Unexp>::iterator u);
// Drops unexpected message `u` (FI_DISCARD); a rendezvous one is still drained, without a completion.
void discard_unexp(Ep& e, std::list<Ep::Unexp>::iterator u);
// The RTS of a rendezvous message (rdm_msg.cpp sends it, rdm.cpp receives it).
struct RtsBody {
  std::uint64_t send_id;
  std::uint64_t total;
  WireAddr sender;  // where to send the CTS
};
// The FIN of a rendezvous chunk (the word `err` is an RMA source's status, 0 otherwise).
struct FinBody {
  std::uint64_t recv_id, msg_off, land_off, len, err;
};
// rma.cpp: the RMA ops of the RDM endpoint and the target / initiator sides of its messages
extern fi_ops_rma rdm_rma_ops;
constexpr std::size_t kRmaReqBytes = 32 + kAddrLen;           // RmaReq: op, key, addr, len, sender address
constexpr std::size_t kRmaEagerMax = kMaxMsg - kRmaReqBytes;  // RMA writes up to this go in one ring message
// A ring message of an RMA kind arrived (from rdm_poll_rx; never sends, queues control messages).
void rma_on_message(Ep& e, const SlotHeader& h, const std::byte* payload, fi_addr_t src, std::uint64_t src_key);
// A FIN chunk of a large RMA write (target) lands: place it into the MR (checked again).
void rma_place_chunk(Ep& e, Ep::RecvReq& r, std::uint64_t msg_off, const std::byte* src, std::uint64_t len);
// All chunks of a large RMA write (target: ack it) or read (initiator: complete it) arrived.
void rma_recv_done(Ep& e, Ep::RecvReq& r);
// A large read's chunk leaves the target: staged from the MR (looked up again).
void rma_stage_chunk(Ep& e, Ep::SendReq& q, std::uint64_t msg_off, std::byte* dst, std::uint64_t len);
// The ring write of RMA op `id` failed for good: its error completion.
void rma_fail(Ep& e, std::uint64_t id, int err, const std::string& msg);
// Target side of an RMA or atomic: may `len` bytes at remote address `addr` of MR `key` be
// accessed with every access bit of `need` (FI_REMOTE_READ / FI_REMOTE_WRITE)? 0 and the
// region, or FI_EKEYREJECTED (no such key), FI_EACCES (access), FI_EINVAL (range).
std::uint64_t mr_check(Ep& e, std::uint64_t key, std::uint64_t addr, std::uint64_t len, std::uint64_t need,
                       const Domain::MrRegion** out);
// The sender of a request `src_key`, to answer it: from the AV when known, else decoded from
// its wire address `w`. False when neither works.
bool learn_peer(Ep& e, std::uint64_t src_key, fi_addr_t src, const WireAddr& w);
// atomic.cpp: FI_ATOMIC of the RDM endpoint (docs/libfabric.md "Atomics")
extern fi_ops_atomic rdm_atomic_ops;
// A ring message kAtomicReq (target: execute, queue the answer) or kAtomicResp (initiator).
void atomic_on_message(Ep& e, const SlotHeader& h, const std::byte* payload, fi_addr_t src, std::uint64_t src_key);
// fi_query_atomic of a domain.
int query_atomic(fid_domain* domain, fi_datatype datatype, fi_op op, fi_atomic_attr* attr, std::uint64_t flags);
extern fi_ops_msg rdm_msg_ops;
extern fi_ops_msg ep_msg_ops;  // the DGRAM endpoint's (msg.cpp)
extern fi_ops_tagged rdm_tagged_ops;
int rdm_setup(Ep& e);
ssize_t rdm_cancel(Ep& e, void* ctx);
// cq_eq.cpp
ssize_t eq_write(fid_eq* f, std::uint32_t event, const void* buf, std::size_t len, std::uint64_t flags);
int eq_open(fid_fabric* fabric, fi_eq_attr* attr, fid_eq** out, void* context);
int cq_open(fid_domain* domain, fi_cq_attr* attr, fid_cq** out, void* context);
// av_mr.cpp
int av_open(fid_domain* domain, fi_av_attr* attr, fid_av** out, void* context);
extern fi_ops_mr mr_ops;
// cntr.cpp
int cntr_open(fid_domain* domain, fi_cntr_attr* attr, fid_cntr** out, void* context);
// fi_ep_bind of a counter: FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE
// (FI_TRANSMIT is FI_SEND). -FI_EBADFLAGS for none of them, -FI_EINVAL for another domain's
// counter or an event that has one already, -FI_ENOSYS on a DGRAM endpoint.
int cntr_bind(Ep& e, Cntr& c, std::uint64_t flags);
// ep_close: the endpoint's counters let it go.
void cntr_unbind(Ep& e);
// ep.cpp
int ep_open(fid_domain* domain, fi_info* info, fid_ep** out, void* context);

}  // namespace npo::fi
