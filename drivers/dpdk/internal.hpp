// SPDX-License-Identifier: Apache-2.0
// Shared state of the DPDK integration (drivers/dpdk): the backends opened by dma_npo vdevs,
// their cards' DPDK-memory registrations, and the logging helpers. Private to drivers/dpdk.
#pragma once

#include <rte_memory.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "npo/hal/device.hpp"
#include "npo/hal/memory.hpp"
#include "npo/hal/system.hpp"

namespace npo::dpdk {

/// DPDK log type of the driver ("pmd.dma.npo"), registered by npo_dpdk_register.
extern int g_logtype;

/// printf-style log through rte_log at `level` (RTE_LOG_ERR, ...), prefixed "dma_npo: ".
void log(unsigned level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/// One host range registered with a card: DPDK VA [va, va+len) is card IOVA [iova, ...).
struct MemEntry {
  std::uintptr_t va = 0;
  std::size_t len = 0;
  std::uint64_t iova = 0;
};

/// Immutable, sorted by va. The fast path reads the current table without a lock.
struct MemTable {
  std::vector<MemEntry> entries;
  /// Card IOVA of DPDK IOVA (=VA) `va` for `len` bytes, or false when [va, va+len) is not
  /// inside one registered range.
  bool translate(std::uintptr_t va, std::size_t len, std::uint64_t& iova) const noexcept;
};

/// DPDK's memory registered with one card (docs/dpdk.md "IOVA"): every memseg-contiguous
/// range at the first probe on that card, and ranges DPDK allocates later (memory events).
struct CardMemory {
  Device* device = nullptr;
  std::mutex mu;  // guards regions, tables (not the fast path)
  std::vector<std::unique_ptr<MemoryRegion>> regions;
  std::vector<std::unique_ptr<MemTable>> tables;  // all published tables, newest last
  std::atomic<const MemTable*> current{nullptr};
  std::string callback_name;  // rte_mem_event callback, "" if none
  std::uint64_t registered_bytes = 0;
  /// Registers [va, va+len) and publishes a new table. Errors from register_host_memory.
  Result<void> add(std::uintptr_t va, std::size_t len);
  /// Drops every range inside [va, va+len) and publishes a new table.
  void remove(std::uintptr_t va, std::size_t len);
};

/// rte_mem_event callback (arg: CardMemory*): registers ranges DPDK allocates, drops freed ones.
void mem_event(rte_mem_event type, const void* addr, std::size_t len, void* arg);
/// rte_memseg_contig_walk callback (arg: CardMemory*): registers one contiguous range.
int contig_walk(const rte_memseg_list* msl, const rte_memseg* ms, std::size_t len, void* arg);

/// A backend opened by dma_npo devices: one System per URI, shared by every vdev naming it.
struct Backend {
  std::string uri;
  std::unique_ptr<System> system;
  unsigned users = 0;
  bool brought_up = false;
  std::map<unsigned, std::shared_ptr<CardMemory>> memory;  // by card index
  std::map<unsigned, std::vector<std::string>> dmadevs;    // dmadev names by card index
};

/// Every open backend. Lock g_mu to read or change (telemetry callbacks do).
extern std::mutex g_mu;
extern std::vector<std::unique_ptr<Backend>> g_backends;

/// Registers the /npo/cards, /npo/links and /npo/lane telemetry commands (once).
void register_telemetry();

}  // namespace npo::dpdk
