/* SPDX-License-Identifier: Apache-2.0 */
/* npo libfabric provider: provider-specific extensions (docs/libfabric.md "Extensions").
 *
 * Open with fi_open_ops(&domain->fid, FI_NPO_DOMAIN_OPS_NAME, 0, (void **)&ops, NULL) on a
 * domain of the `npo` provider. Plain C, so C runtimes can include it. */
#ifndef NPO_FI_NPO_EXT_H
#define NPO_FI_NPO_EXT_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fi_domain.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Name of the domain ops below for fi_open_ops. */
#define FI_NPO_DOMAIN_OPS_NAME "npo_domain_ops_v1"

/** DMA traffic of the domain's card as its DMA engines reported it: every figure is summed
 *  from the completions the card wrote (docs/spec/dma.md §3), counted since the domain opened. */
struct fi_npo_dma_counters {
  uint64_t ops_ok;       /**< DMA ops the card completed with status OK */
  uint64_t ops_failed;   /**< DMA ops the card (or the driver) completed with another status */
  uint64_t bytes_moved;  /**< bytes the card reported moved by the OK ops */
  uint64_t datagrams_dropped; /**< sends the fabric did not deliver (completed, not delivered) */
  uint32_t card;         /**< card index of the supernode (domain npo<card>) */
  uint32_t fabric_id;    /**< the card's fabric ID */
};

/** One-sided operations of the domain's endpoints, counted since the domain opened: those its
 *  endpoints started as initiator (fi_write / fi_read / fi_atomic families, accepted by the
 *  call) and those they executed as target (after the key / range / access checks passed).
 *  Two-sided traffic (messages, tagged) moves none of them. Also printed to stderr when the
 *  domain closes if FI_NPO_STATS is set (docs/libfabric.md "Extensions"). */
struct fi_npo_op_counters {
  uint64_t rma_writes;        /**< RMA writes started */
  uint64_t rma_reads;         /**< RMA reads started */
  uint64_t atomics;           /**< atomics started (all three families) */
  uint64_t target_rma_writes; /**< RMA writes accepted as target */
  uint64_t target_rma_reads;  /**< RMA reads answered as target */
  uint64_t target_atomics;    /**< atomics executed as target */
  /** Rendezvous payload bytes the card read straight from the sender's buffer (zero-copy,
   *  through the process memory map; docs/libfabric.md "Native RDM"). */
  uint64_t rndv_zero_copy_bytes;
  /** Rendezvous payload bytes copied into staging memory first (no process memory map, a
   *  chunk spanning two iov entries, RMA read answers). */
  uint64_t rndv_staged_bytes;
  /** Remote reads of a peer's ring consumer counter (flow control) the domain's endpoints
   *  made: only when no message of that peer brought its credits (docs/libfabric.md
   *  "Data path and ring format"). */
  uint64_t credit_reads;
};

/** Domain extension ops. Thread-safety: as the domain (FI_THREAD_SAFE). */
struct fi_npo_domain_ops {
  size_t size; /**< sizeof(struct fi_npo_domain_ops); op_counters exists when it covers it */
  /** Fills *out. Returns 0, or -FI_EINVAL for a null argument. */
  int (*dma_counters)(struct fid_domain *domain, struct fi_npo_dma_counters *out);
  /** Fills *out. Returns 0, or -FI_EINVAL for a null argument. */
  int (*op_counters)(struct fid_domain *domain, struct fi_npo_op_counters *out);
};

#ifdef __cplusplus
}
#endif

#endif /* NPO_FI_NPO_EXT_H */
