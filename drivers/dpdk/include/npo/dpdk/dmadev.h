// SPDX-License-Identifier: Apache-2.0
// npo-hal DPDK integration, public entry points (docs/dpdk.md).
//
// The dmadev driver "dma_npo" exposes DMA queues of an npo card as dmadev vchans. As a DPDK
// driver DSO (librte_dma_npo.so, loaded with `-d`) it registers itself when loaded, like every
// DPDK driver. Linked as a library (npo::dpdk), the application registers it explicitly,
// before rte_eal_init(), so that `--vdev dma_npo0,backend=emu:mesh8,card=0` finds it:
//
//     npo_dpdk_register();
//     rte_eal_init(argc, argv);
//
// Devargs: backend=<npo URI> (default "emu:mesh8"), card=<index> (default 0),
// bring_up=0|1 (train the optical links once per backend, default 0).
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/// Registers the "dma_npo" vdev driver and the /npo/ telemetry commands with DPDK. Call
/// before rte_eal_init(). Idempotent: a second call does nothing. Returns 0.
/// Thread-safety: call from the main thread before EAL starts other threads.
int npo_dpdk_register(void);

#ifdef __cplusplus
}
#endif
