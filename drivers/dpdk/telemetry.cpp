// SPDX-License-Identifier: Apache-2.0
// Link and card telemetry as DPDK telemetry commands (docs/dpdk.md "Telemetry"):
//   /npo/cards                 every card of every backend a dma_npo device opened
//   /npo/links[,<card>]        every optical port (of one card)
//   /npo/lane,<card>,<port>    per-lane counters and health inputs of one port
// DPDK telemetry containers are one level deep and hold arrays only, so each answer is a
// dict of equally long arrays (one column per field, one row per card/port/lane).
// Callbacks run on DPDK's telemetry thread; they take g_mu, so a device cannot go away
// while they read it, and use only read-only HAL calls (info(), read_port()).

#include <rte_telemetry.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "internal.hpp"
#include "npo/hal/port.hpp"

namespace npo::dpdk {
namespace {

rte_tel_data* column(rte_tel_value_type t) {
  rte_tel_data* c = rte_tel_data_alloc();
  if (c != nullptr) rte_tel_data_start_array(c, t);
  return c;
}

std::string fmt_double(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

/// Parses "a" or "a,b" into up to two unsigned numbers; returns how many, -1 on bad input.
int parse_params(const char* params, unsigned (&out)[2]) {
  if (params == nullptr || params[0] == '\0') return 0;
  int n = 0;
  const char* p = params;
  while (*p != '\0') {
    if (n == 2) return -1;
    char* end = nullptr;
    const unsigned long v = std::strtoul(p, &end, 10);
    if (end == p || v > 65535) return -1;
    out[n++] = static_cast<unsigned>(v);
    if (*end == ',') {
      p = end + 1;
      if (*p == '\0') return -1;
    } else if (*end == '\0') {
      p = end;
    } else {
      return -1;
    }
  }
  return n;
}

/// Card `global` across backends in g_backends order, or nullptr.
Device* card_at(unsigned global, Backend** owner = nullptr) {
  for (auto& b : g_backends) {
    if (global < b->system->device_count()) {
      if (owner != nullptr) *owner = b.get();
      return &b->system->device(global);
    }
    global -= static_cast<unsigned>(b->system->device_count());
  }
  return nullptr;
}

int cmd_cards(const char* /*cmd*/, const char* /*params*/, rte_tel_data* d) {
  std::lock_guard lock(g_mu);
  rte_tel_data_start_dict(d);
  auto* backend = column(RTE_TEL_STRING_VAL);
  auto* index = column(RTE_TEL_U64_VAL);
  auto* bdf = column(RTE_TEL_STRING_VAL);
  auto* fabric = column(RTE_TEL_U64_VAL);
  auto* serial = column(RTE_TEL_U64_VAL);
  auto* hbm = column(RTE_TEL_U64_VAL);
  auto* engines = column(RTE_TEL_U64_VAL);
  auto* queues = column(RTE_TEL_U64_VAL);
  auto* ports = column(RTE_TEL_U64_VAL);
  auto* dmadev = column(RTE_TEL_STRING_VAL);
  // Power (mailbox POWER_READ, docs/spec/mailbox.md §3.9); 0 / "" when the card cannot say.
  auto* power = column(RTE_TEL_U64_VAL);
  auto* power_avg = column(RTE_TEL_U64_VAL);
  auto* energy = column(RTE_TEL_U64_VAL);
  auto* limit = column(RTE_TEL_U64_VAL);
  auto* throttled = column(RTE_TEL_U64_VAL);
  auto* temp = column(RTE_TEL_STRING_VAL);
  unsigned count = 0;
  for (auto& b : g_backends) {
    for (std::size_t i = 0; i < b->system->device_count() && count < RTE_TEL_MAX_ARRAY_ENTRIES; ++i, ++count) {
      const auto& info = b->system->device(i).info();
      rte_tel_data_add_array_string(backend, b->uri.c_str());
      rte_tel_data_add_array_u64(index, i);
      rte_tel_data_add_array_string(bdf, info.bdf.c_str());
      rte_tel_data_add_array_u64(fabric, info.fabric_id);
      rte_tel_data_add_array_u64(serial, info.serial);
      rte_tel_data_add_array_u64(hbm, info.hbm_bytes);
      rte_tel_data_add_array_u64(engines, info.num_engines);
      rte_tel_data_add_array_u64(queues, info.queues_per_engine);
      rte_tel_data_add_array_u64(ports, info.num_ports);
      std::string names;
      if (auto it = b->dmadevs.find(static_cast<unsigned>(i)); it != b->dmadevs.end()) {
        for (const auto& n : it->second) names += (names.empty() ? "" : " ") + n;
      }
      rte_tel_data_add_array_string(dmadev, names.c_str());
      const auto pw = info.removed ? Result<PowerReading>(PowerReading{}) : b->system->device(i).power();
      const PowerReading pr = pw.value_or(PowerReading{});
      rte_tel_data_add_array_u64(power, pr.power_mw);
      rte_tel_data_add_array_u64(power_avg, pr.power_avg_mw);
      rte_tel_data_add_array_u64(energy, pr.energy_mj);
      rte_tel_data_add_array_u64(limit, pr.limit_mw);
      rte_tel_data_add_array_u64(throttled, pr.throttled() ? 1 : 0);
      rte_tel_data_add_array_string(temp, pw && !info.removed ? fmt_double(pr.temp_c).c_str() : "");
    }
  }
  rte_tel_data_add_dict_u64(d, "count", count);
  rte_tel_data_add_dict_container(d, "backend", backend, 0);
  rte_tel_data_add_dict_container(d, "card", index, 0);
  rte_tel_data_add_dict_container(d, "bdf", bdf, 0);
  rte_tel_data_add_dict_container(d, "fabric_id", fabric, 0);
  rte_tel_data_add_dict_container(d, "serial", serial, 0);
  rte_tel_data_add_dict_container(d, "hbm_bytes", hbm, 0);
  rte_tel_data_add_dict_container(d, "dma_engines", engines, 0);
  rte_tel_data_add_dict_container(d, "queues_per_engine", queues, 0);
  rte_tel_data_add_dict_container(d, "ports", ports, 0);
  rte_tel_data_add_dict_container(d, "dmadev", dmadev, 0);
  rte_tel_data_add_dict_container(d, "power_mw", power, 0);
  rte_tel_data_add_dict_container(d, "power_avg_mw", power_avg, 0);
  rte_tel_data_add_dict_container(d, "energy_mj", energy, 0);
  rte_tel_data_add_dict_container(d, "power_limit_mw", limit, 0);
  rte_tel_data_add_dict_container(d, "throttled", throttled, 0);
  rte_tel_data_add_dict_container(d, "temp_c", temp, 0);
  return 0;
}

int cmd_links(const char* /*cmd*/, const char* params, rte_tel_data* d) {
  unsigned p[2] = {0, 0};
  const int np = parse_params(params, p);
  if (np < 0 || np > 1) return -EINVAL;
  std::lock_guard lock(g_mu);
  if (np == 1 && card_at(p[0]) == nullptr) return -EINVAL;
  rte_tel_data_start_dict(d);
  auto* card = column(RTE_TEL_U64_VAL);
  auto* port = column(RTE_TEL_U64_VAL);
  auto* state = column(RTE_TEL_STRING_VAL);
  auto* up = column(RTE_TEL_INT_VAL);
  auto* lanes = column(RTE_TEL_U64_VAL);
  auto* speed = column(RTE_TEL_U64_VAL);
  auto* nfab = column(RTE_TEL_INT_VAL);
  auto* nport = column(RTE_TEL_INT_VAL);
  auto* flaps = column(RTE_TEL_U64_VAL);
  auto* uncorr = column(RTE_TEL_U64_VAL);
  // the port's optical module (mailbox POWER_READ, mailbox.md §3.9): CMIS power class (0: no
  // module or not known), cage draw in mW, temperature in °C ("" without a module)
  auto* mclass = column(RTE_TEL_U64_VAL);
  auto* mdraw = column(RTE_TEL_U64_VAL);
  auto* mtemp = column(RTE_TEL_STRING_VAL);
  unsigned rows = 0, total_cards = 0;
  bool truncated = false;
  for (auto& b : g_backends) total_cards += static_cast<unsigned>(b->system->device_count());
  for (unsigned c = (np == 1 ? p[0] : 0); c < (np == 1 ? p[0] + 1 : total_cards); ++c) {
    Device* dev = card_at(c);
    const auto modules = dev->module_power();
    for (unsigned q = 0; q < dev->port_count(); ++q) {
      if (rows == RTE_TEL_MAX_ARRAY_ENTRIES) {
        truncated = true;
        break;
      }
      auto st = read_port(*dev, q);
      if (!st) continue;
      std::uint64_t unc = 0;
      for (const auto& l : st->lanes) unc += l.uncorrectable;
      rte_tel_data_add_array_u64(card, c);
      rte_tel_data_add_array_u64(port, q);
      rte_tel_data_add_array_string(state, std::string(link_state_name(st->state)).c_str());
      rte_tel_data_add_array_int(up, st->link_up ? 1 : 0);
      rte_tel_data_add_array_u64(lanes, st->lane_count);
      rte_tel_data_add_array_u64(speed, static_cast<std::uint64_t>(st->speed_gbps()));
      rte_tel_data_add_array_int(nfab, st->neighbor_fabric_id ? static_cast<int>(*st->neighbor_fabric_id) : -1);
      rte_tel_data_add_array_int(nport, st->neighbor_port ? static_cast<int>(*st->neighbor_port) : -1);
      rte_tel_data_add_array_u64(flaps, st->flap_count);
      rte_tel_data_add_array_u64(uncorr, unc);
      const ModulePower* m = nullptr;
      if (modules) {
        for (const auto& x : *modules)
          if (x.port == q && x.present) m = &x;
      }
      rte_tel_data_add_array_u64(mclass, m ? m->power_class : 0);
      rte_tel_data_add_array_u64(mdraw, m ? m->draw_mw : 0);
      rte_tel_data_add_array_string(mtemp, m && m->temp_c ? fmt_double(*m->temp_c).c_str() : "");
      ++rows;
    }
  }
  rte_tel_data_add_dict_u64(d, "rows", rows);
  rte_tel_data_add_dict_int(d, "truncated", truncated ? 1 : 0);
  rte_tel_data_add_dict_container(d, "card", card, 0);
  rte_tel_data_add_dict_container(d, "port", port, 0);
  rte_tel_data_add_dict_container(d, "state", state, 0);
  rte_tel_data_add_dict_container(d, "link_up", up, 0);
  rte_tel_data_add_dict_container(d, "lanes", lanes, 0);
  rte_tel_data_add_dict_container(d, "speed_gbps", speed, 0);
  rte_tel_data_add_dict_container(d, "neighbor_fabric_id", nfab, 0);
  rte_tel_data_add_dict_container(d, "neighbor_port", nport, 0);
  rte_tel_data_add_dict_container(d, "flaps", flaps, 0);
  rte_tel_data_add_dict_container(d, "fec_uncorrectable", uncorr, 0);
  rte_tel_data_add_dict_container(d, "module_power_class", mclass, 0);
  rte_tel_data_add_dict_container(d, "module_draw_mw", mdraw, 0);
  rte_tel_data_add_dict_container(d, "module_temp_c", mtemp, 0);
  return 0;
}

int cmd_lane(const char* /*cmd*/, const char* params, rte_tel_data* d) {
  unsigned p[2] = {0, 0};
  if (parse_params(params, p) != 2) return -EINVAL;
  std::lock_guard lock(g_mu);
  Device* dev = card_at(p[0]);
  if (dev == nullptr || p[1] >= dev->port_count()) return -EINVAL;
  auto st = read_port(*dev, p[1]);
  if (!st) return -EIO;
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "card", p[0]);
  rte_tel_data_add_dict_u64(d, "port", p[1]);
  rte_tel_data_add_dict_string(d, "state", std::string(link_state_name(st->state)).c_str());
  rte_tel_data_add_dict_int(d, "fec_lock", st->fec_lock ? 1 : 0);
  auto* signal = column(RTE_TEL_INT_VAL);
  auto* cdr = column(RTE_TEL_INT_VAL);
  auto* snr = column(RTE_TEL_STRING_VAL);
  auto* ber = column(RTE_TEL_STRING_VAL);
  auto* cw = column(RTE_TEL_U64_VAL);
  auto* corr = column(RTE_TEL_U64_VAL);
  auto* unc = column(RTE_TEL_U64_VAL);
  auto* sym = column(RTE_TEL_U64_VAL);
  auto* rx = column(RTE_TEL_STRING_VAL);
  for (const auto& l : st->lanes) {
    rte_tel_data_add_array_int(signal, l.signal ? 1 : 0);
    rte_tel_data_add_array_int(cdr, l.cdr_lock ? 1 : 0);
    rte_tel_data_add_array_string(snr, fmt_double(l.snr_db).c_str());
    rte_tel_data_add_array_string(ber, l.pre_fec_ber ? fmt_double(*l.pre_fec_ber).c_str() : "none");
    rte_tel_data_add_array_u64(cw, l.codewords);
    rte_tel_data_add_array_u64(corr, l.corrected);
    rte_tel_data_add_array_u64(unc, l.uncorrectable);
    rte_tel_data_add_array_u64(sym, l.symbol_errors);
    rte_tel_data_add_array_string(rx, l.rx_power_dbm ? fmt_double(*l.rx_power_dbm).c_str() : "none");
  }
  rte_tel_data_add_dict_u64(d, "lanes", st->lanes.size());
  rte_tel_data_add_dict_container(d, "signal", signal, 0);
  rte_tel_data_add_dict_container(d, "cdr_lock", cdr, 0);
  rte_tel_data_add_dict_container(d, "snr_db", snr, 0);
  rte_tel_data_add_dict_container(d, "pre_fec_ber", ber, 0);
  rte_tel_data_add_dict_container(d, "codewords", cw, 0);
  rte_tel_data_add_dict_container(d, "fec_corrected", corr, 0);
  rte_tel_data_add_dict_container(d, "fec_uncorrectable", unc, 0);
  rte_tel_data_add_dict_container(d, "symbol_errors", sym, 0);
  rte_tel_data_add_dict_container(d, "rx_power_dbm", rx, 0);
  return 0;
}

}  // namespace

void register_telemetry() {
  rte_telemetry_register_cmd("/npo/cards", cmd_cards,
                             "Cards of the npo backends opened by dma_npo devices. No parameters.");
  rte_telemetry_register_cmd("/npo/links", cmd_links,
                             "Optical ports of every card (one row per port). Parameter: optional card index.");
  rte_telemetry_register_cmd("/npo/lane", cmd_lane, "Per-lane FEC, SNR and BER of one port. Parameters: card,port.");
}

}  // namespace npo::dpdk
