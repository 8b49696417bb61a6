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

/** Domain extension ops. Thread-safety: as the domain (FI_THREAD_SAFE). */
struct fi_npo_domain_ops {
  size_t size; /**< sizeof(struct fi_npo_domain_ops) */
  /** Fills *out. Returns 0, or -FI_EINVAL for a null argument. */
  int (*dma_counters)(struct fid_domain *domain, struct fi_npo_dma_counters *out);
};

#ifdef __cplusplus
}
#endif

#endif /* NPO_FI_NPO_EXT_H */
