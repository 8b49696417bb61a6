// SPDX-License-Identifier: Apache-2.0
// dma_npo's per-device state, shared by the control path (dmadev.cpp) and the fast path
// (datapath.cpp). Private to drivers/dpdk.
#pragma once

#include <rte_dmadev.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "internal.hpp"
#include "npo/hal/dma.hpp"

struct rte_dma_dev;

namespace npo::dpdk {

inline constexpr std::uint16_t kMaxSges = 64;     // SG entries per side of one copy_sg (SG-table slot size)
inline constexpr std::uint64_t kMisuseLogs = 16;  // fast-path misuse is logged this many times per device

/// Negative errno for a HAL error (kInvalidArgument -> -EINVAL, kResourceExhausted -> -ENOMEM, ...).
int errno_of(const Error& e);
/// HAL op status -> dmadev status code (the table in docs/dpdk.md).
rte_dma_status_code map_status(OpStatus s);

/// Per dmadev op: HAL completions still due, whether the first is a hidden fence, status.
struct Slot {
  std::uint16_t hal_left = 0;
  bool fence = false;
  std::uint16_t status = RTE_DMA_STATUS_SUCCESSFUL;  // first error of the op
  std::uint16_t forced = 0;                          // driver-known reason (bad address) replacing the card's status
};

/// One vchan: its HAL queue, the SG table the card reads gather lists from, the slot ring
/// and the sequence counters (enq >= hal_done >= ret), stats. Used by one thread at a time.
struct Vchan {
  std::unique_ptr<DmaQueue> queue;
  std::unique_ptr<MemoryRegion> sg_table;  // depth x kMaxSges SgEntry, slot = HAL op seq
  unsigned depth = 0;
  std::vector<Slot> slots;     // depth entries, indexed by dmadev op seq & (depth-1)
  std::uint64_t enq = 0;       // dmadev ops enqueued
  std::uint64_t hal_done = 0;  // dmadev ops whose HAL completions have all arrived
  std::uint64_t ret = 0;       // dmadev ops returned by completed/completed_status
  std::uint64_t hal_enq = 0;   // HAL ops enqueued (SG table slot)
  std::uint64_t unsubmitted = 0;
  rte_dma_stats stats{};
  std::array<OpCompletion, 64> cbuf{};
};

/// One dma_npo device: a card of a backend, its capabilities, the shared registration of
/// DPDK's memory with that card, and its vchans. dev_private holds a pointer to it.
struct NpoDev {
  Backend* backend = nullptr;
  Device* device = nullptr;
  unsigned card = 0;
  std::shared_ptr<CardMemory> memory;
  DmaCapabilities caps{};
  std::uint64_t poison_hbm = 0;  // first HBM byte past the end: the card rejects it
  std::string name;
  bool started = false;
  std::vector<Vchan> vchans;
  std::uint64_t misuse_logs = 0;  // fast-path misuse lines logged (a loop must not flood the log)
};

inline NpoDev* dev_of(const void* priv) { return *static_cast<NpoDev* const*>(priv); }
NpoDev* dev_of(const rte_dma_dev* dev);  // dmadev.cpp

/// Reaps the vchan's HAL completions into its slot ring. Same thread as the fast path.
void poll_hw(Vchan& v);

// The fast-path ops (rte_dma_fp_object), datapath.cpp.
int fp_copy(void* priv, std::uint16_t vchan, rte_iova_t src, rte_iova_t dst, std::uint32_t length, std::uint64_t flags);
int fp_fill(void* priv, std::uint16_t vchan, std::uint64_t pattern, rte_iova_t dst, std::uint32_t length,
            std::uint64_t flags);
int fp_copy_sg(void* priv, std::uint16_t vchan, const rte_dma_sge* src, const rte_dma_sge* dst, std::uint16_t nb_src,
               std::uint16_t nb_dst, std::uint64_t flags);
int fp_submit(void* priv, std::uint16_t vchan);
std::uint16_t fp_completed(void* priv, std::uint16_t vchan, std::uint16_t nb_cpls, std::uint16_t* last_idx,
                           bool* has_error);
std::uint16_t fp_completed_status(void* priv, std::uint16_t vchan, std::uint16_t nb_cpls, std::uint16_t* last_idx,
                                  rte_dma_status_code* status);
std::uint16_t fp_burst_capacity(const void* priv, std::uint16_t vchan);

}  // namespace npo::dpdk
