// SPDX-License-Identifier: Apache-2.0
// The shared in-process setup of the libfabric provider tests (provider_test, rdm_test, atomic_test,
// rma_test, trace_test): the provider loaded from the build tree on emu:mesh8, one endpoint
// on one card npoK with its fabric, domain, CQ and AV ("Side"), a pair of them as a gtest
// fixture, and the CQ poll helpers with bounded waits. What differs between the files (hints,
// checks of the getinfo entry, CQ format and size, bind flags) is a SideOptions value.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "fi_npo_ext.h"

namespace npo_fi_test {

/// Bytes of an `npo` endpoint name (fi_getname).
constexpr std::size_t kAddrLen = 48;

/// Points the provider of the build tree at `backend` (FI_NPO_BACKEND, e.g. "emu:mesh8" or an
/// npo-emud's "emu-remote:DIR"), with FI_NPO_CARD and FI_PROVIDER unset. Takes effect only
/// before libfabric initialises at the first fi_getinfo of the process.
inline void use_provider_on(const std::string& backend) {
  ::setenv("FI_PROVIDER_PATH", NPO_FI_DIR, 1);
  ::setenv("FI_NPO_BACKEND", backend.c_str(), 1);
  ::unsetenv("FI_NPO_CARD");
  ::unsetenv("FI_PROVIDER");
}

/// Loads the provider from the build tree on emu:mesh8 (once per process, before libfabric
/// initialises at the first fi_getinfo); FI_NPO_CARD and FI_PROVIDER unset.
inline void use_provider() {
  static const bool once = [] {
    use_provider_on("emu:mesh8");
    return true;
  }();
  (void)once;
}

/// New hints (fi_allocinfo; the caller frees them) for the provider's DGRAM core: FI_MSG on
/// FI_EP_DGRAM from `npo`.
inline fi_info* dgram_hints() {
  fi_info* h = fi_allocinfo();
  h->caps = FI_MSG;
  h->ep_attr->type = FI_EP_DGRAM;
  h->fabric_attr->prov_name = strdup("npo");
  return h;
}

/// New hints (fi_allocinfo) as Open MPI 4.1's mtl ofi asks (mtl_ofi_component.c): FI_TAGGED
/// with FI_DIRECTED_RECV on FI_EP_RDM, FI_ORDER_SAS, FI_CONTEXT | FI_CONTEXT2, 4 bytes of CQ
/// data, FI_AV_TABLE, FI_THREAD_SAFE; restricted to provider `npo`.
inline fi_info* mtl_ofi_hints() {
  fi_info* h = fi_allocinfo();
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV;
  h->tx_attr->msg_order = FI_ORDER_SAS;
  h->rx_attr->msg_order = FI_ORDER_SAS;
  h->rx_attr->op_flags = FI_COMPLETION;
  h->tx_attr->op_flags = FI_COMPLETION;
  h->domain_attr->threading = FI_THREAD_SAFE;
  h->domain_attr->cq_data_size = sizeof(int);
  h->domain_attr->av_type = FI_AV_TABLE;
  h->domain_attr->resource_mgmt = FI_RM_ENABLED;
  h->fabric_attr->prov_name = strdup("npo");
  return h;
}

/// Checks of getinfo's first entry for mtl ofi's hints: the native RDM endpoint of `npo`.
inline void check_native(const fi_info* info, const std::string&) {
  ASSERT_STREQ(info->fabric_attr->prov_name, "npo") << "the first entry must be the native endpoint";
  ASSERT_EQ(info->ep_attr->type, FI_EP_RDM);
}

/// What one test file asks of its endpoints.
struct SideOptions {
  /// New hints (fi_allocinfo) without a domain name: Side::open sets "npoK" and frees them.
  fi_info* (*hints)() = nullptr;
  /// The file's checks of getinfo's first entry (gtest assertions); `domain` is "npoK".
  void (*check_info)(const fi_info* info, const std::string& domain) = nullptr;
  fi_cq_format cq_format = FI_CQ_FORMAT_TAGGED;
  std::size_t cq_size = 1024;
  std::uint64_t cq_bind_flags = FI_TRANSMIT | FI_RECV;
  /// Asserts that fi_getname returns exactly kAddrLen bytes.
  bool check_addr_len = false;
  /// Opens one counter per event (Side::cntr, FI_SEND .. FI_REMOTE_WRITE) and binds it before
  /// fi_enable.
  bool counters = false;
};

/// The events of Side::cntr, in order (fi_ep_bind flags).
constexpr std::uint64_t kCntrEvents[] = {FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE};

/// The DMA counters of a domain's card (fi_npo_domain_ops).
inline fi_npo_dma_counters dma_counters(fid_domain* d) {
  fi_npo_domain_ops* ops = nullptr;
  fi_npo_dma_counters c{};
  EXPECT_EQ(fi_open_ops(&d->fid, FI_NPO_DOMAIN_OPS_NAME, 0, reinterpret_cast<void**>(&ops), nullptr), 0);
  if (ops) {
    EXPECT_EQ(ops->dma_counters(d, &c), 0);
  }
  return c;
}

/// One enabled endpoint on card npoK with its own fabric, domain, CQ and AV (FI_AV_TABLE).
struct Side {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  fid_cntr* cntr[6] = {};  // SideOptions::counters: one per kCntrEvents entry
  std::vector<std::uint8_t> addr = std::vector<std::uint8_t>(kAddrLen);

  /// Opens everything on card `card`; fails the test (fatally) on any error.
  void open(unsigned card, const SideOptions& o) {
    fi_info* hints = o.hints();
    const std::string name = "npo" + std::to_string(card);
    hints->domain_attr->name = strdup(name.c_str());
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info), 0);
    fi_freeinfo(hints);
    if (o.check_info) {
      const bool failed_before = ::testing::Test::HasFatalFailure();
      o.check_info(info, name);
      if (!failed_before && ::testing::Test::HasFatalFailure()) return;
    }
    ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
    fi_cq_attr cq_attr{};
    cq_attr.format = o.cq_format;
    cq_attr.size = o.cq_size;
    ASSERT_EQ(fi_cq_open(domain, &cq_attr, &cq, nullptr), 0);
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(domain, &av_attr, &av, nullptr), 0);
    ASSERT_EQ(fi_endpoint(domain, info, &ep, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(ep, &cq->fid, o.cq_bind_flags), 0);
    ASSERT_EQ(fi_ep_bind(ep, &av->fid, 0), 0);
    for (std::size_t k = 0; o.counters && k < std::size(kCntrEvents); ++k) {
      fi_cntr_attr ca{};
      ca.events = FI_CNTR_EVENTS_COMP;
      ca.wait_obj = FI_WAIT_UNSPEC;
      ASSERT_EQ(fi_cntr_open(domain, &ca, &cntr[k], nullptr), 0);
      ASSERT_EQ(fi_ep_bind(ep, &cntr[k]->fid, kCntrEvents[k]), 0);
    }
    ASSERT_EQ(fi_enable(ep), 0);
    std::size_t len = addr.size();
    ASSERT_EQ(fi_getname(&ep->fid, addr.data(), &len), 0);
    if (o.check_addr_len) {
      ASSERT_EQ(len, kAddrLen);
    }
  }
  /// Inserts `peer` into this side's AV; its fi_addr_t (FI_ADDR_NOTAVAIL on failure).
  fi_addr_t insert(const Side& peer) {
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    EXPECT_EQ(fi_av_insert(av, peer.addr.data(), 1, &a, 0, nullptr), 1);
    return a;
  }
  /// This side's card DMA counters.
  fi_npo_dma_counters counters() { return dma_counters(domain); }
  /// Closes the endpoint only (the provider writes its trace then).
  void close_ep() {
    if (ep) {
      EXPECT_EQ(fi_close(&ep->fid), 0);
    }
    ep = nullptr;
  }
  /// Closes in reverse order of opening; the Side is empty afterwards.
  void close() {
    close_ep();
    for (fid_cntr* c : cntr) {
      if (c) {
        EXPECT_EQ(fi_close(&c->fid), 0);
      }
    }
    if (av) {
      EXPECT_EQ(fi_close(&av->fid), 0);
    }
    if (cq) {
      EXPECT_EQ(fi_close(&cq->fid), 0);
    }
    if (domain) {
      EXPECT_EQ(fi_close(&domain->fid), 0);
    }
    if (fabric) {
      EXPECT_EQ(fi_close(&fabric->fid), 0);
    }
    if (info) fi_freeinfo(info);
    *this = Side{};
  }
};

/// Closes two sides (b first) when it goes out of scope, also when an assertion ends a test
/// early.
struct CloseSides {
  Side& a;
  Side& b;
  ~CloseSides() {
    b.close();
    a.close();
  }
};

/// A completion (or error completion) of a tagged-format CQ.
struct Entry {
  bool error = false;
  bool timeout = false;
  fi_cq_tagged_entry e{};
  fi_cq_err_entry err{};
  fi_addr_t src = FI_ADDR_NOTAVAIL;
};

/// Progresses `s`'s endpoint (the provider's progress is manual; a count-0 read reads nothing).
inline void progress(Side& s) {
  fi_cq_tagged_entry none{};
  (void)fi_cq_read(s.cq, &none, 0);
}

/// Progresses every side in `others` until `want` has an entry; returns it. Fails the test
/// (non-fatally, `timeout` set) after 20 s.
inline Entry wait_entry(Side& want, std::initializer_list<Side*> others) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    Entry out;
    const ssize_t r = fi_cq_readfrom(want.cq, &out.e, 1, &out.src);
    if (r == 1) return out;
    if (r == -FI_EAVAIL) {
      out.error = true;
      EXPECT_EQ(fi_cq_readerr(want.cq, &out.err, 0), 1);
      return out;
    }
    EXPECT_EQ(r, -FI_EAGAIN);
    for (Side* s : others) progress(*s);
    if (std::chrono::steady_clock::now() > end) {
      ADD_FAILURE() << "no completion within 20 s";
      out.timeout = true;
      return out;
    }
  }
}

/// `n` bytes of a repeatable pseudo-random pattern (mt19937 seeded with `seed`).
inline std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> v(n);
  std::mt19937 g(seed);
  for (auto& b : v) b = static_cast<std::uint8_t>(g());
  return v;
}

/// wait_entry with one other side.
inline Entry wait_entry(Side& want, Side& other) { return wait_entry(want, {&other}); }

/// Two sides a_ (card 0) and b_ (card 1) that know each other, for a gtest fixture; the
/// derived fixture passes its SideOptions.
template <typename Base = ::testing::Test>
class SidePair : public Base {
 protected:
  explicit SidePair(const SideOptions& options) : options_(options) {}
  void SetUp() override {
    use_provider();
    a_.open(0, options_);
    b_.open(1, options_);
    ASSERT_NE(a_.ep, nullptr);
    ASSERT_NE(b_.ep, nullptr);
    a_to_b_ = a_.insert(b_);
    b_to_a_ = b_.insert(a_);
  }
  void TearDown() override {
    a_.close();
    b_.close();
  }
  SideOptions options_;
  Side a_, b_;
  fi_addr_t a_to_b_ = FI_ADDR_NOTAVAIL, b_to_a_ = FI_ADDR_NOTAVAIL;
};

}  // namespace npo_fi_test
