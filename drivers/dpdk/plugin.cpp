// SPDX-License-Identifier: Apache-2.0
// The DSO form of dma_npo (librte_dma_npo.so): like every DPDK driver it registers itself
// when EAL loads it (`-d librte_dma_npo.so` or the EAL plugin directory). The static library
// form has no constructor; applications call npo_dpdk_register() (npo/dpdk/dmadev.h).
#include <rte_common.h>

#include "npo/dpdk/dmadev.h"

RTE_INIT(npo_dpdk_plugin_init) { npo_dpdk_register(); }
