// SPDX-License-Identifier: Apache-2.0
// dma_npo: a DPDK dmadev driver over npo cards' DMA queues (docs/dpdk.md).
//
// One vdev = one card of one backend (devargs backend=URI, card=N); each vchan opens one
// DmaQueue of the card (engines round-robin). Only npo-hal's public API is used, so the
// driver runs on whatever backend the URI names.
//
// Addresses: DPDK runs in IOVA-as-VA mode and hands us virtual addresses. The card reaches
// host memory only through MemoryRegions registered with it, at IOVAs the HAL chose. At the
// first probe on a card every memseg-contiguous range of DPDK memory is registered with
// register_host_memory (pinned and IOMMU-mapped, zero-copy); memory DPDK allocates later is
// registered from a memory-event callback. Every op translates its addresses through that
// table. An address outside DPDK's memory is not sent to host memory at all: the op becomes
// a descriptor the card must reject (an HBM range past the end of HBM), so it completes in
// order, through the card, with RTE_DMA_STATUS_INVALID_SRC_ADDR / _DST_ADDR. There is no
// bounce buffer. The fast path is in datapath.cpp, the memory table in memory.cpp.

#include <pthread.h>
#include <rte_bus_vdev.h>
#include <rte_common.h>
#include <rte_eal.h>
#include <rte_log.h>
#include <rte_memory.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

// DPDK's driver-SDK headers (from Debian's dpdk source package, tools/dpdk-sdk-headers.sh).
#include <bus_vdev_driver.h>
#include <rte_dmadev_pmd.h>

#include "device.hpp"
#include "internal.hpp"
#include "npo/dpdk/dmadev.h"
#include "npo/hal/bring_up.hpp"

namespace npo::dpdk {

int g_logtype = RTE_LOGTYPE_PMD;
std::mutex g_mu;
std::vector<std::unique_ptr<Backend>> g_backends;

void log(unsigned level, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  rte_log(level, static_cast<std::uint32_t>(g_logtype), "dma_npo: %s\n", buf);
}

NpoDev* dev_of(const rte_dma_dev* dev) { return dev_of(dev->data->dev_private); }

namespace {

constexpr const char* kDriverName = "dma_npo";

// ---- control path ---------------------------------------------------------------------------

int npo_info_get(const rte_dma_dev* dev, rte_dma_info* info, std::uint32_t info_sz) {
  if (info_sz < sizeof(rte_dma_info)) return -EINVAL;
  const NpoDev& d = *dev_of(dev);
  info->dev_capa = RTE_DMA_CAPA_MEM_TO_MEM | RTE_DMA_CAPA_HANDLES_ERRORS;
  if (d.caps.copy) info->dev_capa |= RTE_DMA_CAPA_OPS_COPY;
  if (d.caps.gather) info->dev_capa |= RTE_DMA_CAPA_OPS_COPY_SG;
  if (d.caps.fill) info->dev_capa |= RTE_DMA_CAPA_OPS_FILL;
  info->max_vchans = static_cast<std::uint16_t>(std::min(d.caps.engines * d.caps.queues_per_engine, 65535u));
  info->max_desc = static_cast<std::uint16_t>(std::min(d.caps.max_depth, 32768u));
  info->min_desc = static_cast<std::uint16_t>(std::max(d.caps.min_depth, 32u));
  info->max_sges = static_cast<std::uint16_t>(std::min<unsigned>(kMaxSges, d.caps.max_sg_entries));
  return 0;
}

void close_vchans(NpoDev& d) {
  for (auto& v : d.vchans) {
    if (v.queue && v.queue->outstanding() != 0) {
      // Let in-flight ops finish before the rings go away (bounded by the HAL's hang watchdog).
      (void)v.queue->wait(std::chrono::milliseconds(100));
      poll_hw(v);
    }
  }
  d.vchans.clear();
}

int npo_configure(rte_dma_dev* dev, const rte_dma_conf* conf, std::uint32_t conf_sz) {
  if (conf_sz < sizeof(rte_dma_conf)) return -EINVAL;
  NpoDev& d = *dev_of(dev);
  const unsigned max = d.caps.engines * d.caps.queues_per_engine;
  if (conf->nb_vchans == 0 || conf->nb_vchans > max) {
    log(RTE_LOG_ERR, "%s: %u vchans asked, the card has %u DMA queues", d.name.c_str(), conf->nb_vchans, max);
    return -EINVAL;
  }
  if (conf->enable_silent) {
    log(RTE_LOG_ERR, "%s: silent mode is not supported (every op reports a status)", d.name.c_str());
    return -EINVAL;
  }
  close_vchans(d);
  d.vchans.resize(conf->nb_vchans);
  return 0;
}

int npo_vchan_setup(rte_dma_dev* dev, std::uint16_t vchan, const rte_dma_vchan_conf* conf, std::uint32_t conf_sz) {
  if (conf_sz < sizeof(rte_dma_vchan_conf)) return -EINVAL;
  NpoDev& d = *dev_of(dev);
  if (vchan >= d.vchans.size()) {
    log(RTE_LOG_ERR, "%s: vchan %u not configured (%zu vchans)", d.name.c_str(), vchan, d.vchans.size());
    return -EINVAL;
  }
  if (conf->direction != RTE_DMA_DIR_MEM_TO_MEM) {
    log(RTE_LOG_ERR, "%s: only memory-to-memory transfers are supported", d.name.c_str());
    return -EINVAL;
  }
  const unsigned depth = std::bit_ceil(std::max<unsigned>(conf->nb_desc, std::max(d.caps.min_depth, 32u)));
  if (depth > d.caps.max_depth) {
    log(RTE_LOG_ERR, "%s: %u descriptors asked, at most %u", d.name.c_str(), conf->nb_desc, d.caps.max_depth);
    return -EINVAL;
  }
  Vchan& v = d.vchans[vchan];
  v = Vchan{};
  QueueOptions qo;
  qo.engine = d.caps.engines == 0 ? 0 : vchan % d.caps.engines;
  qo.depth = depth;
  auto q = d.device->open_queue(qo);
  if (!q) {
    log(RTE_LOG_ERR, "%s: opening DMA queue of engine %u: %s", d.name.c_str(), qo.engine,
        q.error().to_string().c_str());
    return errno_of(q.error());
  }
  if (d.caps.gather) {
    auto m = allocate_host_memory(*d.device, std::size_t{depth} * kMaxSges * sizeof(SgEntry));
    if (!m) {
      log(RTE_LOG_ERR, "%s: SG table: %s", d.name.c_str(), m.error().to_string().c_str());
      return errno_of(m.error());
    }
    v.sg_table = std::move(*m);
  }
  v.queue = std::move(*q);
  v.depth = depth;
  v.slots.assign(depth, Slot{});
  return 0;
}

int npo_start(rte_dma_dev* dev) {
  NpoDev& d = *dev_of(dev);
  for (std::size_t i = 0; i < d.vchans.size(); ++i) {
    if (!d.vchans[i].queue) {
      log(RTE_LOG_ERR, "%s: vchan %zu was not set up", d.name.c_str(), i);
      return -EINVAL;
    }
  }
  for (auto& v : d.vchans) {  // ring indexes restart at 0 on start, as with other dmadevs
    poll_hw(v);
    if (v.enq == v.ret) {
      v.enq = v.ret = v.hal_done = 0;
    }
  }
  d.started = true;
  return 0;
}

int npo_stop(rte_dma_dev* dev) {
  dev_of(dev)->started = false;
  return 0;
}

int npo_stats_get(const rte_dma_dev* dev, std::uint16_t vchan, rte_dma_stats* stats, std::uint32_t stats_sz) {
  if (stats_sz < sizeof(rte_dma_stats)) return -EINVAL;
  const NpoDev& d = *dev_of(dev);
  *stats = rte_dma_stats{};
  for (std::size_t i = 0; i < d.vchans.size(); ++i) {
    if (vchan != RTE_DMA_ALL_VCHAN && i != vchan) continue;
    stats->submitted += d.vchans[i].stats.submitted;
    stats->completed += d.vchans[i].stats.completed;
    stats->errors += d.vchans[i].stats.errors;
  }
  return 0;
}

int npo_stats_reset(rte_dma_dev* dev, std::uint16_t vchan) {
  NpoDev& d = *dev_of(dev);
  for (std::size_t i = 0; i < d.vchans.size(); ++i) {
    if (vchan == RTE_DMA_ALL_VCHAN || i == vchan) d.vchans[i].stats = rte_dma_stats{};
  }
  return 0;
}

int npo_vchan_status(const rte_dma_dev* dev, std::uint16_t vchan, enum rte_dma_vchan_status* status) {
  NpoDev& d = *dev_of(dev);  // polls: call from the thread that owns the vchan's fast path
  if (vchan >= d.vchans.size() || !d.vchans[vchan].queue) return -EINVAL;
  Vchan& v = d.vchans[vchan];
  poll_hw(v);
  const std::uint64_t submitted = v.enq - v.unsubmitted;
  *status = v.hal_done < submitted ? RTE_DMA_VCHAN_ACTIVE : RTE_DMA_VCHAN_IDLE;
  return 0;
}

int npo_dump(const rte_dma_dev* dev, FILE* f) {
  const NpoDev& d = *dev_of(dev);
  std::fprintf(f, "  npo card %u of backend %s (%s), fabric id %u, model %s\n", d.card, d.backend->uri.c_str(),
               d.device->info().driver.c_str(), d.device->info().fabric_id, d.device->info().model.c_str());
  std::fprintf(f, "  DMA: %u engines x %u queues, max transfer %u B, max SG %u, ring depth %u..%u\n", d.caps.engines,
               d.caps.queues_per_engine, d.caps.max_transfer_bytes, d.caps.max_sg_entries, d.caps.min_depth,
               d.caps.max_depth);
  std::fprintf(f, "  DPDK memory registered with the card: %" PRIu64 " bytes in %zu ranges (zero-copy)\n",
               d.memory->registered_bytes, d.memory->regions.size());
  for (std::size_t i = 0; i < d.vchans.size(); ++i) {
    const Vchan& v = d.vchans[i];
    if (!v.queue) {
      std::fprintf(f, "  vchan %zu: not set up\n", i);
      continue;
    }
    std::fprintf(f,
                 "  vchan %zu: depth %u, enqueued %" PRIu64 ", returned %" PRIu64 ", HAL ops %" PRIu64
                 ", outstanding %" PRIu64 ", resets %" PRIu64 ", submitted %" PRIu64 ", completed %" PRIu64
                 ", errors %" PRIu64 "\n",
                 i, v.depth, v.enq, v.ret, v.hal_enq, v.queue->outstanding(), v.queue->resets(), v.stats.submitted,
                 v.stats.completed, v.stats.errors);
  }
  return 0;
}

void release_backend(NpoDev& d);

int npo_close(rte_dma_dev* dev) {
  NpoDev* d = dev_of(dev);
  if (d == nullptr) return 0;
  close_vchans(*d);
  release_backend(*d);
  delete d;
  *static_cast<NpoDev**>(dev->data->dev_private) = nullptr;
  return 0;
}

const rte_dma_dev_ops kOps = {
    .dev_info_get = npo_info_get,
    .dev_configure = npo_configure,
    .dev_start = npo_start,
    .dev_stop = npo_stop,
    .dev_close = npo_close,
    .vchan_setup = npo_vchan_setup,
    .stats_get = npo_stats_get,
    .stats_reset = npo_stats_reset,
    .vchan_status = npo_vchan_status,
    .dev_dump = npo_dump,
};

// ---- backends and memory ----------------------------------------------------------------------

/// System::open with the calling thread's CPU affinity changed for the duration, because the
/// threads a backend starts (the emulator's engine workers, for example) inherit it, and
/// rte_eal_init has pinned this thread (the main lcore, which DPDK applications typically poll
/// from) to one CPU. They get every online CPU except the caller's, or every CPU when the
/// caller has them all: otherwise the engines would share one core with the poller and every
/// doorbell would wait for a time slice (measured: 0.02 M ops/s at 64 B, burst 1). The
/// caller's affinity is restored afterwards.
Result<std::unique_ptr<System>> open_off_lcore(const std::string& uri) {
  cpu_set_t saved;
  const bool have = pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0;
  if (have) {
    cpu_set_t others;
    CPU_ZERO(&others);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n && i < CPU_SETSIZE; ++i) {
      if (!CPU_ISSET(static_cast<int>(i), &saved)) CPU_SET(static_cast<int>(i), &others);
    }
    if (CPU_COUNT(&others) == 0) {
      for (long i = 0; i < n && i < CPU_SETSIZE; ++i) CPU_SET(static_cast<int>(i), &others);
    }
    (void)pthread_setaffinity_np(pthread_self(), sizeof others, &others);
  }
  auto sys = System::open(uri);
  if (have) (void)pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  return sys;
}

/// Opens (or shares) the backend and the card's memory registration. g_mu held.
int acquire_backend(NpoDev& d, const std::string& uri, unsigned card, bool bring_up) {
  Backend* b = nullptr;
  for (auto& e : g_backends) {
    if (e->uri == uri) b = e.get();
  }
  if (b == nullptr) {
    auto sys = open_off_lcore(uri);
    if (!sys) {
      log(RTE_LOG_ERR, "%s: opening backend '%s': %s", d.name.c_str(), uri.c_str(), sys.error().to_string().c_str());
      return sys.error().code() == Code::kInvalidArgument ? -EINVAL : -ENODEV;
    }
    auto nb = std::make_unique<Backend>();
    nb->uri = uri;
    nb->system = std::move(*sys);
    b = nb.get();
    g_backends.push_back(std::move(nb));
  }
  ++b->users;
  d.backend = b;
  if (card >= b->system->device_count()) {
    log(RTE_LOG_ERR, "%s: card=%u but backend '%s' has %zu cards", d.name.c_str(), card, uri.c_str(),
        b->system->device_count());
    return -EINVAL;
  }
  d.card = card;
  d.device = &b->system->device(card);
  d.caps = d.device->dma_capabilities();
  d.poison_hbm = d.device->info().hbm_bytes;
  if (bring_up && !b->brought_up) {
    auto r = bring_up_fabric(*b->system);
    if (!r) {
      log(RTE_LOG_WARNING, "%s: bringing up the links of '%s': %s", d.name.c_str(), uri.c_str(),
          r.error().to_string().c_str());
    }
    b->brought_up = true;
  }
  auto& mem = b->memory[card];
  if (!mem) {
    mem = std::make_shared<CardMemory>();
    mem->device = d.device;
    if (rte_memseg_contig_walk(contig_walk, mem.get()) != 0) {
      b->memory.erase(card);
      return -ENOMEM;
    }
    mem->callback_name = "npo_dma:" + uri + ":" + std::to_string(card);
    if (rte_mem_event_callback_register(mem->callback_name.c_str(), mem_event, mem.get()) != 0) {
      // --no-huge / legacy memory: DPDK's memory never changes, so there are no events.
      mem->callback_name.clear();
    }
  }
  d.memory = mem;
  b->dmadevs[card].push_back(d.name);
  return 0;
}

void release_backend_locked(NpoDev& d) {
  Backend* b = d.backend;
  if (b == nullptr) return;
  if (auto it = b->dmadevs.find(d.card); it != b->dmadevs.end()) {
    std::erase(it->second, d.name);
    if (it->second.empty()) b->dmadevs.erase(it);
  }
  if (d.memory && d.memory.use_count() == 2) {  // this device and the backend's map
    if (!d.memory->callback_name.empty()) {
      rte_mem_event_callback_unregister(d.memory->callback_name.c_str(), d.memory.get());
    }
    b->memory.erase(d.card);
  }
  d.memory.reset();
  if (--b->users == 0) {
    std::erase_if(g_backends, [b](const std::unique_ptr<Backend>& e) { return e.get() == b; });
  }
  d.backend = nullptr;
}

void release_backend(NpoDev& d) {
  std::lock_guard lock(g_mu);
  release_backend_locked(d);
}

// ---- vdev probe/remove ------------------------------------------------------------------------

/// Parses "N" (decimal or 0x hex) in 0..max. Logs and returns false otherwise.
bool parse_uint(const std::string& key, const std::string& value, unsigned max, unsigned& out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long v = std::strtoul(value.c_str(), &end, 0);
  if (value.empty() || value[0] == '-' || errno != 0 || *end != '\0' || v > max) {
    log(RTE_LOG_ERR, "devarg %s=%s is not a number in 0..%u", key.c_str(), value.c_str(), max);
    return false;
  }
  out = static_cast<unsigned>(v);
  return true;
}

/// Devargs "key=value,key=value". Each pair splits at its FIRST '=', so a backend URI may hold
/// '=' (emu:file=PATH); DPDK's rte_kvargs would cut the value at the second '='.
bool parse_devargs(const char* name, const char* params, std::string& uri, unsigned& card, unsigned& bring_up) {
  const std::string all = params;
  std::size_t pos = 0;
  bool seen[3] = {false, false, false};
  while (pos <= all.size()) {
    const std::size_t comma = std::min(all.find(',', pos), all.size());
    const std::string item = all.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) {
      if (comma == all.size()) break;
      continue;
    }
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    const int k = key == "backend" ? 0 : key == "card" ? 1 : key == "bring_up" ? 2 : -1;
    if (k < 0 || eq == std::string::npos || seen[k]) {
      log(RTE_LOG_ERR, "%s: bad devarg '%s' in '%s' (accepted once each: backend=URI, card=N, bring_up=0|1)", name,
          item.c_str(), params);
      return false;
    }
    seen[k] = true;
    if (k == 0) {
      if (value.empty()) {
        log(RTE_LOG_ERR, "%s: empty backend URI", name);
        return false;
      }
      uri = value;
    } else if (k == 1) {
      if (!parse_uint(key, value, 1023, card)) return false;
    } else if (!parse_uint(key, value, 1, bring_up)) {
      return false;
    }
  }
  return true;
}

int npo_probe(rte_vdev_device* vdev) {
  const char* name = rte_vdev_device_name(vdev);
  if (name == nullptr) return -EINVAL;
  if (rte_eal_process_type() != RTE_PROC_PRIMARY) {
    log(RTE_LOG_ERR, "%s: secondary processes are not supported", name);
    return -ENOTSUP;
  }
  if (rte_eal_iova_mode() != RTE_IOVA_VA) {
    log(RTE_LOG_ERR, "%s: needs IOVA-as-VA mode (--iova-mode=va): addresses are translated from virtual addresses",
        name);
    return -ENOTSUP;
  }
  std::string uri{kDefaultUri};
  unsigned card = 0, bring_up = 0;
  const char* params = rte_vdev_device_args(vdev);
  if (params != nullptr && params[0] != '\0') {
    if (!parse_devargs(name, params, uri, card, bring_up)) return -EINVAL;
  }
  auto* d = new NpoDev();
  d->name = name;
  {
    std::lock_guard lock(g_mu);
    if (int rc = acquire_backend(*d, uri, card, bring_up != 0); rc != 0) {
      release_backend_locked(*d);
      delete d;
      return rc;
    }
  }
  rte_dma_dev* dev = rte_dma_pmd_allocate(name, rte_socket_id(), sizeof(NpoDev*));
  if (dev == nullptr) {
    log(RTE_LOG_ERR, "%s: rte_dma_pmd_allocate failed", name);
    release_backend(*d);
    delete d;
    return -ENOMEM;
  }
  *static_cast<NpoDev**>(dev->data->dev_private) = d;
  dev->device = &vdev->device;
  dev->dev_ops = &kOps;
  dev->fp_obj->dev_private = dev->data->dev_private;
  dev->fp_obj->copy = fp_copy;
  dev->fp_obj->copy_sg = fp_copy_sg;
  dev->fp_obj->fill = fp_fill;
  dev->fp_obj->submit = fp_submit;
  dev->fp_obj->completed = fp_completed;
  dev->fp_obj->completed_status = fp_completed_status;
  dev->fp_obj->burst_capacity = fp_burst_capacity;
  dev->state = RTE_DMA_DEV_READY;
  log(RTE_LOG_INFO, "%s: card %u of %s, %u DMA queues, %" PRIu64 " bytes of DPDK memory registered", name, card,
      uri.c_str(), d->caps.engines * d->caps.queues_per_engine, d->memory->registered_bytes);
  return 0;
}

int npo_remove(rte_vdev_device* vdev) {
  const char* name = rte_vdev_device_name(vdev);
  if (name == nullptr) return -EINVAL;
  // Stop and close the device (npo_close) if the application did not.
  const int id = rte_dma_get_dev_id_by_name(name);
  if (id < 0) return 0;  // already closed by the application
  (void)rte_dma_stop(static_cast<std::int16_t>(id));
  return rte_dma_pmd_release(name);
}

rte_vdev_driver g_driver = [] {
  rte_vdev_driver d{};
  d.probe = npo_probe;
  d.remove = npo_remove;
  return d;
}();

}  // namespace
}  // namespace npo::dpdk

extern "C" int npo_dpdk_register(void) {
  static bool done = false;
  if (done) return 0;
  done = true;
  const int lt = rte_log_register_type_and_pick_level("pmd.dma.npo", RTE_LOG_INFO);
  if (lt >= 0) npo::dpdk::g_logtype = lt;
  npo::dpdk::g_driver.driver.name = npo::dpdk::kDriverName;
  rte_vdev_register(&npo::dpdk::g_driver);
  npo::dpdk::register_telemetry();
  return 0;
}
