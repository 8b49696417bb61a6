// SPDX-License-Identifier: Apache-2.0
// FI_NPO_TRACE (issue 17 point 4; docs/libfabric.md "Traces"): the provider records every DMA
// op of an endpoint's queue, every send and receive from post to completion, and writes one
// Chrome trace-event JSON file per process when an endpoint closes. In-process on emu:mesh8
// (so it also runs under ASan and TSan): two RDM endpoints (cards 0 and 1) exchange tagged
// messages of the eager and rendezvous classes (data checked), a receive is canceled; the file
// is checked against the format's rules, every DMA op span against its own submit and
// completion, sends against the ops they caused, and the ok ops' bytes against the bytes the
// card reported for the domain (fi_npo_dma_counters).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "fi_fixture.hpp"
#include "fi_npo_ext.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace npo_fi_test;

fi_info* trace_hints() {
  fi_info* h = fi_allocinfo();
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM;
  h->domain_attr->av_type = FI_AV_TABLE;
  h->fabric_attr->prov_name = strdup("npo");
  return h;
}

void check_rdm(const fi_info* info, const std::string&) { ASSERT_EQ(info->ep_attr->type, FI_EP_RDM); }

const SideOptions kSide{.hints = trace_hints, .check_info = check_rdm};

// Progresses both sides until `want` has a completion (or an error); false after 20 s.
bool wait_entry(Side& want, Side& other, fi_cq_tagged_entry& e, bool& error) {
  const Entry r = npo_fi_test::wait_entry(want, other);
  if (r.timeout) return false;
  error = r.error;
  e = r.e;
  if (r.error) e.op_context = r.err.op_context;
  return true;
}

std::uint64_t ns_of(double us) { return static_cast<std::uint64_t>(us * 1000.0 + 0.5); }

TEST(FiTrace, DmaOpsAndMessagesOfAnRdmEndpoint) {
  const fs::path dir = fs::temp_directory_path() / ("npo-fi-trace-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "trace.json";
  // read once, at the first endpoint of the process: this test's own process
  ::setenv("FI_NPO_TRACE", (dir / "trace-%p.json").c_str(), 1);
  use_provider();
  Side a, b;
  a.open(0, kSide);
  b.open(1, kSide);
  ASSERT_NE(a.ep, nullptr);
  ASSERT_NE(b.ep, nullptr);
  const fi_addr_t to_b = a.insert(b);
  (void)b.insert(a);

  // eager (8 B, 4 KiB) and rendezvous (64 KiB, 1 MiB, 3 MiB: several 256 KiB chunks) a -> b
  const std::vector<std::size_t> sizes = {8, 4096, 65536, 1 << 20, 3 << 20};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::vector<std::uint8_t> tx(sizes[i]), rx(sizes[i]);
    for (std::size_t k = 0; k < tx.size(); ++k) tx[k] = static_cast<std::uint8_t>(k * 13 + i);
    int sctx = 0, rctx = 0;
    ASSERT_EQ(fi_trecv(b.ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, 7 + i, 0, &rctx), 0);
    ASSERT_EQ(fi_tsend(a.ep, tx.data(), tx.size(), nullptr, to_b, 7 + i, &sctx), 0);
    fi_cq_tagged_entry e{};
    bool error = true;
    ASSERT_TRUE(wait_entry(b, a, e, error));
    EXPECT_FALSE(error);
    EXPECT_EQ(e.op_context, &rctx);
    ASSERT_TRUE(wait_entry(a, b, e, error));
    EXPECT_FALSE(error);
    EXPECT_EQ(e.op_context, &sctx);
    EXPECT_EQ(rx, tx) << sizes[i] << " B";
  }
  // a receive canceled: its span ends "canceled"
  std::vector<std::uint8_t> spare(64);
  int cctx = 0;
  ASSERT_EQ(fi_trecv(b.ep, spare.data(), spare.size(), nullptr, FI_ADDR_UNSPEC, 99, 0, &cctx), 0);
  EXPECT_EQ(fi_cancel(&b.ep->fid, &cctx), 0);

  // the file is written at each endpoint's close; the counters after it (ops reaped at close)
  a.close_ep();
  b.close_ep();
  const fi_npo_dma_counters ca = a.counters(), cb = b.counters();
  a.close();
  b.close();
  const fs::path written = dir / ("trace-" + std::to_string(::getpid()) + ".json");
  ASSERT_TRUE(fs::exists(written)) << written;
  std::ifstream in(written);
  const json t = json::parse(in);
  fs::remove_all(dir);
  (void)file;

  ASSERT_TRUE(t.is_object());
  ASSERT_TRUE(t["traceEvents"].is_array());
  EXPECT_EQ(t["displayTimeUnit"], "ns");
  EXPECT_EQ(t["otherData"]["tool"], "libnpo-fi");
  EXPECT_EQ(t["otherData"]["dropped_events"], 0);
  EXPECT_EQ(t["otherData"]["unfinished_ops"], 0);
  EXPECT_EQ(t["otherData"]["endpoints"].size(), 2u);

  std::map<int, std::string> track_names;
  std::map<std::uint64_t, json> msgs;  // msg id -> span
  std::vector<json> ops;
  for (const auto& e : t["traceEvents"]) {
    ASSERT_TRUE(e["name"].is_string()) << e.dump();
    ASSERT_TRUE(e["pid"].is_number_integer()) << e.dump();
    ASSERT_TRUE(e["tid"].is_number_integer()) << e.dump();
    const std::string ph = e["ph"];
    ASSERT_TRUE(ph == "X" || ph == "i" || ph == "M") << e.dump();
    if (ph == "M") {
      if (e["name"] == "thread_name") track_names[e["tid"]] = e["args"]["name"];
      continue;
    }
    ASSERT_TRUE(e["ts"].is_number()) << e.dump();
    ASSERT_TRUE(e["args"].is_object()) << e.dump();
    if (ph == "i") {
      EXPECT_EQ(e["s"], "t");
      continue;
    }
    ASSERT_TRUE(e["dur"].is_number()) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    const std::string cat = e["cat"];
    if (cat == "dma") ops.push_back(e);
    if (cat == "send" || cat == "recv") {
      EXPECT_TRUE(msgs.emplace(e["args"]["msg"].get<std::uint64_t>(), e).second);
    }
  }
  // Every op: its span between its submit and completion (the same clock, ns exactly).
  std::map<unsigned, std::uint64_t> ok_bytes;
  std::map<std::string, unsigned> kinds;
  std::map<int, std::pair<std::uint64_t, std::uint64_t>> last;  // per queue track: last span
  unsigned nested = 0;
  for (const auto& e : ops) {
    const auto& args = e["args"];
    const std::uint64_t start = ns_of(e["ts"]), end = ns_of(e["ts"].get<double>() + e["dur"].get<double>());
    const std::uint64_t sub = args["submit_ns"], comp = args["complete_ns"];
    EXPECT_LE(sub, start + 1) << e.dump();  // (+1: the double's rounding)
    EXPECT_LE(end, comp + 1) << e.dump();
    EXPECT_LE(sub, comp) << e.dump();
    EXPECT_NE(track_names[e["tid"]].find("DMA queue"), std::string::npos) << e.dump();
    auto& [ls, le] = last[e["tid"].get<int>() % 1'000'000];  // a queue's overlap layers: tid + k x 1e6
    EXPECT_GE(sub, ls) << "queue track goes backwards: " << e.dump();
    EXPECT_GE(comp, le) << "queue track goes backwards: " << e.dump();
    ls = sub;
    le = comp;
    if (args["status"] == "ok") ok_bytes[args["card"].get<unsigned>()] += args["bytes"].get<std::uint64_t>();
    ++kinds[e["name"]];
    if (args.contains("msg")) {
      auto m = msgs.find(args["msg"]);
      ASSERT_NE(m, msgs.end()) << "op of a message without a span: " << e.dump();
      const auto& ma = m->second["args"];
      if (m->second["cat"] == "send") {
        EXPECT_LE(ma["post_ns"].get<std::uint64_t>(), sub) << e.dump() << " in " << m->second.dump();
        EXPECT_LE(comp, ma["end_ns"].get<std::uint64_t>()) << e.dump() << " in " << m->second.dump();
        ++nested;
      }
    }
  }
  // Every track's spans nest (a viewer draws each track as one stack; spans that overlap
  // without nesting go to the track's "(overlap k)" layers).
  std::map<int, std::vector<std::pair<std::uint64_t, std::uint64_t>>> per_track;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::uint64_t start = ns_of(e["ts"]);
    per_track[e["tid"]].emplace_back(start, ns_of(e["ts"].get<double>() + e["dur"].get<double>()));
  }
  for (auto& [tid, spans] : per_track) {
    std::sort(spans.begin(), spans.end(), [](const auto& x, const auto& y) {
      return x.first != y.first ? x.first < y.first : x.second > y.second;
    });
    std::vector<std::uint64_t> open;
    for (const auto& [s0, e0] : spans) {
      while (!open.empty() && open.back() <= s0) open.pop_back();
      EXPECT_TRUE(open.empty() || e0 <= open.back() + 1) << "track " << tid << " [" << s0 << ", " << e0 << "]";
      open.push_back(e0);
    }
  }
  EXPECT_GT(kinds["eager write"], 0u);
  EXPECT_GT(kinds["rts write"], 0u);
  EXPECT_GT(kinds["cts write"], 0u);
  EXPECT_EQ(kinds["rendezvous chunk"], 1u + 4u + 12u);  // 64 KiB, 1 MiB, 3 MiB in 256 KiB chunks
  EXPECT_EQ(kinds["fin write"], 17u);
  EXPECT_GE(nested, 2u * 2u + 3u * 2u + 17u * 3u);  // eager: payload, header; rts: the same; fin: chunk too
  // The bytes the card reported moved (every ok completion), op by op in the trace.
  EXPECT_EQ(ok_bytes[0], ca.bytes_moved);
  EXPECT_EQ(ok_bytes[1], cb.bytes_moved);
  EXPECT_GT(ca.bytes_moved, std::uint64_t{4} << 20);
  // One span per message: 5 sends, 5 receives and the canceled one.
  unsigned sends = 0, recvs = 0, canceled = 0;
  for (const auto& [id, m] : msgs) {
    if (m["cat"] == "send") {
      ++sends;
      EXPECT_EQ(m["name"], "fi_tsend");
      EXPECT_EQ(m["args"]["status"], "ok");
    } else {
      ++recvs;
      EXPECT_EQ(m["name"], "fi_trecv");
      if (m["args"]["status"] == "canceled") ++canceled;
    }
  }
  EXPECT_EQ(sends, 5u);
  EXPECT_EQ(recvs, 6u);
  EXPECT_EQ(canceled, 1u);
}

}  // namespace
