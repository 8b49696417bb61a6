// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: the receive ring format -- constants, slot header, endpoint address, ring layout,
// the keys of senders and rings, CPU access to the ring (docs/libfabric.md "Ring format").
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <rdma/fabric.h>

#include "npo/hal/hal.hpp"

namespace npo::fi {

// ---- Constants (docs/libfabric.md "Ring format") ------------------------------------------
constexpr std::size_t kMaxMsg = 4096;               // payload bytes per datagram
constexpr std::size_t kHdr = 64;                    // slot header bytes
constexpr std::size_t kSlot = kHdr + kMaxMsg;       // one ring slot
constexpr unsigned kDefaultLanes = 64;              // sender lanes per ring, at least
constexpr std::uint64_t kRingBudget = 16ull << 20;  // ring bytes above which slots per lane shrink
constexpr unsigned kSlotsPerLane = 16;              // slots per lane
constexpr unsigned kEpsPerCard = 4;                 // endpoints per card per process
constexpr unsigned kTxSize = 64;                    // tx context depth (staging slots)
constexpr unsigned kRxSize = 256;                   // posted receives
constexpr unsigned kIovLimit = 4;
constexpr std::uint32_t kHdrMagic = 0x46504f4e;   // "NOPF"
constexpr std::uint32_t kAddrMagic = 0x31414e50;  // "PNA1"
constexpr std::size_t kAddrLen = 48;              // fi_getname / fi_av_insert address bytes
constexpr std::uint64_t kCaps = FI_MSG | FI_SEND | FI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM;
constexpr auto kRefreshTimeout = std::chrono::milliseconds(200);
// How long a send waits for staging, queue room or the peer's ring credits (progressing the
// own endpoint meanwhile) before it answers -FI_EAGAIN. ofi_rxd drops an ACK whose fi_send
// says -FI_EAGAIN (rxd_ep_send_ack); when that was the last ACK of a message the receiving
// application stops progressing (its receive completed) and the sender retransmits forever.
constexpr auto kSendWait = std::chrono::milliseconds(500);

// Slot header, little-endian, at the start of a slot; written last (after the payload and a fence).
struct SlotHeader {
  std::uint64_t seq;    // lane sequence number of the message, 1-based; the "valid" mark
  std::uint32_t len;    // payload bytes
  std::uint32_t flags;  // bit0: data is valid (FI_REMOTE_CQ_DATA)
  std::uint64_t data;   // remote CQ data
  std::uint32_t magic;  // kHdrMagic
  std::uint32_t src_fabric_id;
  std::uint64_t sum;             // payload_sum() of the payload: a failed payload write is detected
  std::uint64_t tag;             // RDM: the tag of a tagged message (kFlagTagged)
  std::uint16_t src_window;      // RDM: the sender's ring window ID (with src_fabric_id: who sent it)
  std::uint8_t kind;             // RDM: MsgKind; 0 on the DGRAM core
  std::uint8_t src_ep;           // the sender's endpoint number on its card (lane_shared)
  std::uint16_t src_generation;  // RDM: the generation of the sender's ring window
  std::uint8_t pad1[2];
  std::uint64_t ack;  // RDM, kFlagAck: messages of the receiver the sender consumed from its own ring
};
static_assert(sizeof(SlotHeader) == 64 && offsetof(SlotHeader, ack) == 56);
constexpr std::uint32_t kFlagData = 1;    // data is valid
constexpr std::uint32_t kFlagSkip = 2;    // tombstone: the message of this seq was lost, skip the slot
constexpr std::uint32_t kFlagTagged = 4;  // RDM: a tagged message (FI_TAGGED), tag is valid
// RDM: `ack` is valid: the sender's consumer counter of the lane the receiver writes in the
// sender's ring -- the receiver's credits toward the sender, without a remote read
constexpr std::uint32_t kFlagAck = 8;

// ---- RDM protocol (docs/libfabric.md "Native RDM") ----------------------------------------
// Kinds of ring messages of an RDM endpoint. Eager: the payload is the message. RTS: a
// message larger than kEagerMax announces itself (RtsBody). CTS: the receiver grants a chunk of
// its landing zone for part of that message (CtsBody). FIN: the sender wrote a granted chunk
// (the data write, a fence, then this message, so FIN is seen only after the data landed).
// RMA (rma.cpp, docs/libfabric.md "RMA"): kRmaWrite carries a small write (RmaReq + data);
// kRmaWriteReq announces a large one (then CTS / FIN as a rendezvous into the target's landing
// zone); kRmaReadReq asks for data, answered by kRmaReadResp (small: the data) or kRmaReadGo
// (large: the initiator grants its landing zone, the target sends chunks + FIN); kRmaAck ends
// a write (or a refused read) with its status.
enum MsgKind : std::uint8_t {
  kEager = 0,
  kRts = 1,
  kCts = 2,
  kFin = 3,
  kRmaWrite = 4,
  kRmaWriteReq = 5,
  kRmaReadReq = 6,
  kRmaReadResp = 7,
  kRmaReadGo = 8,
  kRmaAck = 9,
  kAtomicReq = 10,  // atomic.cpp: an atomic (AtomicReq + operands), executed by the target's CPU
  kAtomicResp = 11  // atomic.cpp: its answer (op id, status, the fetched old values)
};
constexpr std::size_t kEagerMax = kMaxMsg;                        // RDM payloads up to this go eager
constexpr std::uint64_t kRdmMaxMsg = 1ull << 40;                  // max_msg_size of the RDM endpoint
constexpr std::size_t kRndvChunk = 256 * 1024;                    // rendezvous chunk (one grant, one FIN)
constexpr unsigned kLandingChunks = 16;                           // landing zone: 16 chunks = 4 MiB of HBM
constexpr unsigned kRndvStagingChunks = 8;                        // sender: chunks in flight per endpoint
constexpr unsigned kGrantsPerRecv = 16;                           // chunks granted ahead per message
constexpr std::size_t kUnexpMax = 64ull << 20;                    // buffered unexpected eager bytes
constexpr auto kRetryBackoff = std::chrono::milliseconds(1);      // RDM: first resend of a write the fabric failed
constexpr auto kRetryBackoffMax = std::chrono::milliseconds(64);  // doubling up to this (a retrain takes seconds)

// Checksum of a payload (64-bit multiply-xorshift over 8-byte words, length folded in). Not
// cryptographic: it tells a slot whose payload write failed (stale bytes) from a good one.
inline std::uint64_t payload_sum(const std::byte* p, std::size_t len) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ len;
  std::size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  std::uint64_t tail = 0;
  if (i < len) std::memcpy(&tail, p + i, len - i);
  h = (h ^ tail) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 29);
}
static_assert(sizeof(SlotHeader) == kHdr);

// CPU access to the ring in HBM (the BAR aperture), which the card writes by DMA while we
// poll it, as a CPU polls device-written memory: acquire load of the seq, release store of
// the consumer counter. ThreadSanitizer cannot see the card's side as synchronisation (the
// in-process emulator's engines are threads that memcpy into HBM), so under TSan these few
// accesses are left uninstrumented; everything else stays checked.
#if defined(__SANITIZE_THREAD__)
#define NPO_HW_ACCESS __attribute__((no_sanitize_thread, noinline))
inline NPO_HW_ACCESS std::uint64_t hw_load64(const std::byte* p) {
  return __atomic_load_n(reinterpret_cast<const volatile std::uint64_t*>(p), __ATOMIC_ACQUIRE);
}
inline NPO_HW_ACCESS void hw_store64(std::byte* p, std::uint64_t v) {
  __atomic_store_n(reinterpret_cast<volatile std::uint64_t*>(p), v, __ATOMIC_RELEASE);
}
inline NPO_HW_ACCESS void hw_copy(std::byte* dst, const std::byte* src, std::size_t n) {
  auto* vs = reinterpret_cast<const volatile std::byte*>(src);
  auto* vd = reinterpret_cast<volatile std::byte*>(dst);
  for (std::size_t i = 0; i < n; ++i) vd[i] = vs[i];
}
#else
inline std::uint64_t hw_load64(const std::byte* p) {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(const_cast<std::byte*>(p)))
      .load(std::memory_order_acquire);
}
inline void hw_store64(std::byte* p, std::uint64_t v) {
  std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(p)).store(v, std::memory_order_release);
}
inline void hw_copy(std::byte* dst, const std::byte* src, std::size_t n) { std::memcpy(dst, src, n); }
#endif

// Endpoint address: the window handle of the ring plus its geometry.
struct WireAddr {
  std::array<std::byte, WindowHandle::kSerializedSize> handle;
  std::uint16_t lanes;
  std::uint16_t slots;
  std::uint32_t magic;
};
static_assert(sizeof(WireAddr) == kAddrLen);

// Ring layout (docs/libfabric.md "Ring format"): one 64-byte consumer counter per lane (the
// block rounded up to 4 KiB), then lanes x slots slots.
inline std::uint64_t ctrl_bytes(unsigned lanes) { return (std::uint64_t{lanes} * 64 + 4095) & ~std::uint64_t{4095}; }
inline std::uint64_t ring_bytes(unsigned lanes, unsigned slots) {
  const std::uint64_t b = ctrl_bytes(lanes) + std::uint64_t{lanes} * slots * kSlot;
  return (b + 4095) & ~std::uint64_t{4095};
}
inline std::uint64_t slot_offset(unsigned lanes, unsigned lane, unsigned slots, std::uint64_t seq) {
  return ctrl_bytes(lanes) + (std::uint64_t{lane} * slots + (seq - 1) % slots) * kSlot;
}
// Who sent a ring message: its card's fabric ID and its ring window ID (SlotHeader).
inline std::uint64_t src_key_of(std::uint32_t fabric_id, std::uint32_t window_id) {
  return (std::uint64_t{fabric_id} << 16) | (window_id & 0xffffu);
}
// One ring window (one endpoint's life): its card's fabric ID, window ID and generation. The
// key of `dests` (dest_key_of) and of the rings a receiver tracks (lane_shared, gone_rings).
inline std::uint64_t ring_key(std::uint32_t fabric_id, std::uint32_t window_id, std::uint16_t generation) {
  return (std::uint64_t{fabric_id} << 32) | (std::uint64_t{window_id & 0xffffu} << 16) | generation;
}
// The ring of a slot header's sender; 0 when the sender does not say its generation.
inline std::uint64_t ring_of(const SlotHeader& h) {
  return h.src_generation == 0 ? 0 : ring_key(h.src_fabric_id, h.src_window, h.src_generation);
}
}  // namespace npo::fi
