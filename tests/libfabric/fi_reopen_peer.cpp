// SPDX-License-Identifier: Apache-2.0
// fi-reopen-peer: one side of run-reopen.sh, through the libfabric API only. The long-lived
// `peer` (card 1) talks to N `endpoint` processes on card 0, one after another: each new
// process gets the same card, endpoint number and window slot as the one before it (its
// predecessor), so the peer must reach a ring that replaced one it already wrote (window
// generations start at random per card open; docs/libfabric.md "Data path"). Per round, both
// ways: 20 tagged eager messages (more than a lane's 16 slots) and one 256 KiB rendezvous,
// data checked. Addresses travel as files in DIR (written to NAME.tmp, then renamed).
//
// Usage: fi-reopen-peer peer DIR ROUNDS | fi-reopen-peer endpoint DIR ROUND
// Exit 0 when every exchange arrived intact within its time, 1 otherwise, 2 on a setup error.
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

namespace {

struct Ep {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  std::string addr;
};

bool check(int rc, const char* what) {
  if (rc == 0) return true;
  std::fprintf(stderr, "fi-reopen-peer: %s: %s (%d)\n", what, fi_strerror(-rc), rc);
  return false;
}

// An RDM endpoint with tagged messages on card `card` (domain "npoK").
bool open_ep(unsigned card, Ep& e) {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED;
  hints->domain_attr->av_type = FI_AV_TABLE;
  hints->fabric_attr->prov_name = strdup("npo");
  hints->domain_attr->name = strdup(("npo" + std::to_string(card)).c_str());
  const int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &e.info);
  fi_freeinfo(hints);
  if (!check(rc, "fi_getinfo")) return false;
  fi_cq_attr cq{};
  cq.format = FI_CQ_FORMAT_TAGGED;
  cq.size = 256;
  fi_av_attr av{};
  av.type = FI_AV_TABLE;
  if (!check(fi_fabric(e.info->fabric_attr, &e.fabric, nullptr), "fi_fabric") ||
      !check(fi_domain(e.fabric, e.info, &e.domain, nullptr), "fi_domain") ||
      !check(fi_cq_open(e.domain, &cq, &e.cq, nullptr), "fi_cq_open") ||
      !check(fi_av_open(e.domain, &av, &e.av, nullptr), "fi_av_open") ||
      !check(fi_endpoint(e.domain, e.info, &e.ep, nullptr), "fi_endpoint") ||
      !check(fi_ep_bind(e.ep, &e.cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind cq") ||
      !check(fi_ep_bind(e.ep, &e.av->fid, 0), "fi_ep_bind av") || !check(fi_enable(e.ep), "fi_enable")) {
    return false;
  }
  std::vector<char> a(64);
  std::size_t len = a.size();
  if (!check(fi_getname(&e.ep->fid, a.data(), &len), "fi_getname")) return false;
  e.addr.assign(a.data(), len);
  return true;
}

void close_ep(Ep& e) {
  if (e.ep) fi_close(&e.ep->fid);
  if (e.av) fi_close(&e.av->fid);
  if (e.cq) fi_close(&e.cq->fid);
  if (e.domain) fi_close(&e.domain->fid);
  if (e.fabric) fi_close(&e.fabric->fid);
  if (e.info) fi_freeinfo(e.info);
  e = Ep{};
}

void put(const std::string& path, const std::string& bytes) {
  std::ofstream(path + ".tmp", std::ios::binary) << bytes;
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// The file's bytes once it exists, within 60 s; empty otherwise.
std::string get(const std::string& path) {
  for (int i = 0; i < 6000; ++i) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      std::ifstream f(path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(f), {});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {};
}

// Reads completions of `e` until `want` arrived or 10 s passed; false on an error entry.
bool wait_completions(Ep& e, int want) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int got = 0;
  while (got < want) {
    fi_cq_tagged_entry c{};
    const ssize_t n = fi_cq_read(e.cq, &c, 1);
    if (n == 1) {
      ++got;
      continue;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(e.cq, &err, 0);
      std::fprintf(stderr, "fi-reopen-peer: error completion: %s\n", fi_strerror(err.err));
      return false;
    }
    if (std::chrono::steady_clock::now() > end) {
      std::fprintf(stderr, "fi-reopen-peer: %d of %d completions within 10 s\n", got, want);
      return false;
    }
  }
  return true;
}

std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<std::uint8_t>(x);
  }
  return v;
}

ssize_t send_retry(Ep& e, const void* buf, std::size_t len, fi_addr_t to, std::uint64_t tag) {
  for (;;) {
    const ssize_t r = fi_tsend(e.ep, buf, len, nullptr, to, tag, nullptr);
    if (r != -FI_EAGAIN) return r;
    fi_cq_tagged_entry none{};
    (void)fi_cq_read(e.cq, &none, 0);
  }
}

// One round, seen from `e` talking to `to`: `first` sends first, then receives what the
// other side sends; data checked. Tags: 1 eager, 2 rendezvous.
bool exchange(Ep& e, fi_addr_t to, bool first, unsigned round) {
  constexpr int kEager = 20;
  constexpr std::size_t kLarge = 256 << 10;
  auto send_side = [&](unsigned seed) {
    std::vector<std::uint32_t> v(kEager);
    for (int i = 0; i < kEager; ++i) v[i] = seed * 1000 + static_cast<unsigned>(i);
    const auto big = pattern(kLarge, seed);
    for (int i = 0; i < kEager; ++i)
      if (send_retry(e, &v[i], sizeof v[i], to, 1) != 0) return false;
    if (send_retry(e, big.data(), big.size(), to, 2) != 0) return false;
    return wait_completions(e, kEager + 1);
  };
  auto recv_side = [&](unsigned seed) {
    std::vector<std::uint32_t> v(kEager, 0);
    std::vector<std::uint8_t> big(kLarge);
    for (int i = 0; i < kEager; ++i)
      if (fi_trecv(e.ep, &v[i], sizeof v[i], nullptr, FI_ADDR_UNSPEC, 1, 0, nullptr) != 0) return false;
    if (fi_trecv(e.ep, big.data(), big.size(), nullptr, FI_ADDR_UNSPEC, 2, 0, nullptr) != 0) return false;
    if (!wait_completions(e, kEager + 1)) return false;
    for (int i = 0; i < kEager; ++i) {
      if (v[i] != seed * 1000 + static_cast<unsigned>(i)) {
        std::fprintf(stderr, "fi-reopen-peer: eager message %d of round %u: %u\n", i, round, v[i]);
        return false;
      }
    }
    if (big != pattern(kLarge, seed)) {
      std::fprintf(stderr, "fi-reopen-peer: the 256 KiB message of round %u differs\n", round);
      return false;
    }
    return true;
  };
  const unsigned mine = 2 * round + (first ? 1 : 2), theirs = 2 * round + (first ? 2 : 1);
  return first ? send_side(mine) && recv_side(theirs) : recv_side(theirs) && send_side(mine);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: fi-reopen-peer peer DIR ROUNDS | fi-reopen-peer endpoint DIR ROUND\n");
    return 2;
  }
  const std::string role = argv[1], dir = argv[2];
  const unsigned n = static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10));
  Ep e;
  if (role == "peer") {
    if (!open_ep(1, e)) return 2;
    put(dir + "/peer.addr", e.addr);
    for (unsigned round = 0; round < n; ++round) {
      const std::string a = get(dir + "/endpoint" + std::to_string(round) + ".addr");
      fi_addr_t to = FI_ADDR_NOTAVAIL;
      if (a.empty() || fi_av_insert(e.av, a.data(), 1, &to, 0, nullptr) != 1) return 2;
      const bool ok = exchange(e, to, false, round);
      std::printf("peer: round %u with endpoint process %u: %s\n", round, round, ok ? "ok" : "FAILED");
      std::fflush(stdout);
      put(dir + "/peer" + std::to_string(round) + ".done", ok ? "ok" : "failed");
      if (!ok) return 1;
    }
    close_ep(e);
    return 0;
  }
  if (role != "endpoint" || !open_ep(0, e)) return 2;
  put(dir + "/endpoint" + std::to_string(n) + ".addr", e.addr);
  const std::string p = get(dir + "/peer.addr");
  fi_addr_t to = FI_ADDR_NOTAVAIL;
  if (p.empty() || fi_av_insert(e.av, p.data(), 1, &to, 0, nullptr) != 1) return 2;
  const bool ok = exchange(e, to, true, n);
  // Stay until the peer has checked its side (its receive of our data completes on its own
  // progress), then go: the next process takes our card, number and window slot.
  const bool peer_ok = get(dir + "/peer" + std::to_string(n) + ".done") == "ok";
  std::printf("endpoint process %u: %s\n", n, ok && peer_ok ? "ok" : "FAILED");
  close_ep(e);
  return ok && peer_ok ? 0 : 1;
}
