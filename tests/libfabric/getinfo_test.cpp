// SPDX-License-Identifier: Apache-2.0
// fi_getinfo as libfabric's own test programs (fabtests 1.17: getinfo_test, and every
// two-process test's node/service) use it (issue 34; docs/libfabric.md "Addresses and service
// names", "Capabilities"), in-process on emu:mesh8:
//  - every entry has a source address; node/service without FI_SOURCE give a destination one;
//  - a service address inserted into an AV resolves to the endpoint published under it, and
//    traffic flows to it; a second endpoint cannot take a service in use;
//  - what is not offered is refused at getinfo with -FI_ENODATA, and what is offered is what
//    the entry says (caps, ordering, mr_mode);
//  - error completions of a cancel write nothing through an uninitialised err_data.
#include <array>
#include <string>

#include "fi_fixture.hpp"

namespace {

using npo_fi_test::kAddrLen;

fi_info* rdm_hints(std::uint64_t caps) {
  fi_info* h = fi_allocinfo();
  h->caps = caps;
  h->ep_attr->type = FI_EP_RDM;
  h->fabric_attr->prov_name = strdup("npo");
  return h;
}

// fi_getinfo's return code for `hints` (freed), the entries freed.
int getinfo_rc(fi_info* hints, const char* node = nullptr, const char* service = nullptr, std::uint64_t flags = 0) {
  fi_info* info = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 17), node, service, flags, hints, &info);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  return rc;
}

TEST(Getinfo, EveryEntryWithoutHintsHasASourceAddressAndNoDestination) {
  npo_fi_test::use_provider();
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, nullptr, &info), 0);
  int n = 0;
  for (fi_info* i = info; i; i = i->next) {
    if (std::string(i->fabric_attr->prov_name).rfind("npo", 0) != 0) continue;
    ++n;
    EXPECT_NE(i->src_addr, nullptr) << i->domain_attr->name;
    EXPECT_EQ(i->src_addrlen, kAddrLen) << i->domain_attr->name;
    EXPECT_EQ(i->dest_addr, nullptr) << i->domain_attr->name;
  }
  EXPECT_EQ(n, 16) << "8 cards x (native RDM + DGRAM core)";
  fi_freeinfo(info);
}

TEST(Getinfo, NodeAndServiceGiveADestinationOnThisHostOnly) {
  npo_fi_test::use_provider();
  fi_info* info = nullptr;
  fi_info* h = rdm_hints(FI_TAGGED);
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "9228", 0, h, &info), 0);
  ASSERT_NE(info->dest_addr, nullptr);
  EXPECT_EQ(info->dest_addrlen, kAddrLen);
  EXPECT_NE(info->src_addr, nullptr);
  fi_freeinfo(info);
  info = nullptr;
  // FI_SOURCE: node/service are this side's; no destination
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), "localhost", "9228", FI_SOURCE, h, &info), 0);
  EXPECT_EQ(info->dest_addr, nullptr);
  EXPECT_EQ(info->src_addrlen, kAddrLen);
  fi_freeinfo(info);
  fi_freeinfo(h);
  // another host (TEST-NET-1, RFC 5737) and a service that is not a number reach nothing
  EXPECT_EQ(getinfo_rc(rdm_hints(FI_TAGGED), "192.0.2.1", "9228"), -FI_ENODATA);
  EXPECT_EQ(getinfo_rc(rdm_hints(FI_TAGGED), "127.0.0.1", "http"), -FI_ENODATA);
  EXPECT_EQ(getinfo_rc(rdm_hints(FI_TAGGED), "127.0.0.1", "70000"), -FI_ENODATA);
}

// One endpoint from fi_getinfo(node, service, flags) on card `card` (the hints name it).
struct Ep {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  int open(unsigned card, const char* node, const char* service, std::uint64_t flags) {
    fi_info* h = rdm_hints(FI_TAGGED);
    h->domain_attr->name = strdup(("npo" + std::to_string(card)).c_str());
    int rc = fi_getinfo(FI_VERSION(1, 17), node, service, flags, h, &info);
    fi_freeinfo(h);
    if (rc) return rc;
    if ((rc = fi_fabric(info->fabric_attr, &fabric, nullptr))) return rc;
    if ((rc = fi_domain(fabric, info, &domain, nullptr))) return rc;
    fi_cq_attr ca{};
    ca.format = FI_CQ_FORMAT_TAGGED;
    if ((rc = fi_cq_open(domain, &ca, &cq, nullptr))) return rc;
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    if ((rc = fi_av_open(domain, &aa, &av, nullptr))) return rc;
    if ((rc = fi_endpoint(domain, info, &ep, nullptr))) return rc;
    if ((rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV))) return rc;
    if ((rc = fi_ep_bind(ep, &av->fid, 0))) return rc;
    return fi_enable(ep);
  }
  void close_ep() {
    if (ep) {
      EXPECT_EQ(fi_close(&ep->fid), 0);
    }
    ep = nullptr;
  }
  ~Ep() {
    close_ep();
    if (av) fi_close(&av->fid);
    if (cq) fi_close(&cq->fid);
    if (domain) fi_close(&domain->fid);
    if (fabric) fi_close(&fabric->fid);
    fi_freeinfo(info);
  }
};

ssize_t wait_cq(fid_cq* want, fid_cq* other) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  fi_cq_tagged_entry e{};
  while (std::chrono::steady_clock::now() < end) {
    const ssize_t r = fi_cq_read(want, &e, 1);
    if (r != -FI_EAGAIN) return r;
    (void)fi_cq_read(other, &e, 0);
  }
  return -FI_ETIMEDOUT;
}

TEST(Getinfo, AServiceAddressResolvesToTheEndpointPublishedUnderIt) {
  npo_fi_test::use_provider();
  const std::string service = std::to_string(40000 + ::getpid() % 20000);
  Ep server;
  ASSERT_EQ(server.open(0, nullptr, service.c_str(), FI_SOURCE), 0);
  // a second endpoint cannot take the service while the first lives
  {
    Ep again;
    EXPECT_EQ(again.open(2, nullptr, service.c_str(), FI_SOURCE), -FI_EADDRINUSE);
  }
  Ep client;
  ASSERT_EQ(client.open(1, "127.0.0.1", service.c_str(), 0), 0);
  ASSERT_NE(client.info->dest_addr, nullptr);
  std::array<char, 128> text{};
  std::size_t tl = text.size();
  fi_av_straddr(client.av, client.info->dest_addr, text.data(), &tl);
  EXPECT_EQ(std::string(text.data()), "npo://service/127.0.0.1:" + service);
  fi_addr_t to_server = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(client.av, client.info->dest_addr, 1, &to_server, 0, nullptr), 1);
  // the AV holds the server's own address (fi_getname), not the service address
  std::array<std::uint8_t, kAddrLen> name{}, looked{};
  std::size_t nl = name.size(), ll = looked.size();
  ASSERT_EQ(fi_getname(&server.ep->fid, name.data(), &nl), 0);
  ASSERT_EQ(fi_av_lookup(client.av, to_server, looked.data(), &ll), 0);
  EXPECT_EQ(name, looked);
  // and a tagged message reaches the server
  std::array<char, 16> rx{}, tx{"via service"};
  ASSERT_EQ(fi_trecv(server.ep, rx.data(), rx.size(), nullptr, FI_ADDR_UNSPEC, 7, 0, nullptr), 0);
  ASSERT_EQ(fi_tsend(client.ep, tx.data(), tx.size(), nullptr, to_server, 7, nullptr), 0);
  EXPECT_EQ(wait_cq(server.cq, client.cq), 1);
  EXPECT_STREQ(rx.data(), "via service");
  EXPECT_EQ(wait_cq(client.cq, server.cq), 1);
  // the service is gone with its endpoint: a new insert resolves nothing
  server.close_ep();
  fi_addr_t none = 0;
  EXPECT_EQ(fi_av_insert(client.av, client.info->dest_addr, 1, &none, 0, nullptr), 0);
  EXPECT_EQ(none, FI_ADDR_NOTAVAIL);
}

TEST(Getinfo, WhatIsNotOfferedIsNoDataAtGetinfo) {
  npo_fi_test::use_provider();
  for (const std::uint64_t cap : {FI_VARIABLE_MSG, FI_HMEM, FI_TRIGGER, FI_COLLECTIVE, FI_MULTICAST, FI_NAMED_RX_CTX})
    EXPECT_EQ(getinfo_rc(rdm_hints(FI_MSG | cap)), -FI_ENODATA) << fi_tostr(&cap, FI_TYPE_CAPS);
  fi_info* h = rdm_hints(FI_MSG);
  h->domain_attr->caps = FI_SHARED_AV;
  EXPECT_EQ(getinfo_rc(h), -FI_ENODATA) << "FI_SHARED_AV";
  h = rdm_hints(FI_MSG);
  h->tx_attr->msg_order = FI_ORDER_STRICT;
  EXPECT_EQ(getinfo_rc(h), -FI_ENODATA) << "FI_ORDER_STRICT";
  h = rdm_hints(FI_MSG);
  h->tx_attr->comp_order = FI_ORDER_STRICT;
  EXPECT_EQ(getinfo_rc(h), -FI_ENODATA) << "comp_order FI_ORDER_STRICT";
  h = rdm_hints(FI_MSG);
  h->domain_attr->data_progress = FI_PROGRESS_AUTO;
  EXPECT_EQ(getinfo_rc(h), -FI_ENODATA) << "FI_PROGRESS_AUTO";
  h = rdm_hints(FI_RMA);
  h->domain_attr->mr_mode = FI_MR_BASIC;
  EXPECT_EQ(getinfo_rc(h), -FI_ENODATA) << "FI_MR_BASIC (provider keys, virtual addresses)";
}

TEST(Getinfo, AnEntryIsWhatItSays) {
  npo_fi_test::use_provider();
  fi_info* info = nullptr;
  // FI_MSG alone on RDM: an untagged endpoint
  fi_info* h = rdm_hints(FI_MSG);
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), 0);
  EXPECT_EQ(info->ep_attr->type, FI_EP_RDM);
  EXPECT_NE(info->caps & FI_MSG, 0u);
  EXPECT_EQ(info->caps & (FI_TAGGED | FI_RMA | FI_ATOMIC), 0u);
  fi_freeinfo(info);
  fi_freeinfo(h);
  // FI_MR_SCALABLE (v1.0 name of application keys and offsets) is answered as such
  h = rdm_hints(FI_RMA);
  h->domain_attr->mr_mode = FI_MR_SCALABLE;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), 0);
  EXPECT_EQ(info->domain_attr->mr_mode, FI_MR_SCALABLE);
  fi_freeinfo(info);
  fi_freeinfo(h);
  // FI_ORDER_SAS is given when asked
  h = rdm_hints(FI_TAGGED);
  h->tx_attr->msg_order = FI_ORDER_SAS;
  h->rx_attr->msg_order = FI_ORDER_SAS;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), 0);
  EXPECT_EQ(info->tx_attr->msg_order & FI_ORDER_SAS, FI_ORDER_SAS);
  fi_freeinfo(info);
  fi_freeinfo(h);
  // an API 1.0 caller with mr_mode FI_MR_UNSPEC gets a mode (FI_MR_SCALABLE), never UNSPEC
  h = rdm_hints(FI_RMA);
  h->domain_attr->mr_mode = FI_MR_UNSPEC;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 0), nullptr, nullptr, 0, h, &info), 0);
  for (fi_info* i = info; i; i = i->next) {
    if (std::string(i->fabric_attr->prov_name) == "npo") {
      EXPECT_EQ(i->domain_attr->mr_mode, FI_MR_SCALABLE);
    }
  }
  fi_freeinfo(info);
  fi_freeinfo(h);
  // no AV type asked: FI_AV_UNSPEC (both work); a program that sees FI_AV_TABLE may take its
  // first insert for fi_addr 0 (fabtests' ft_init_av); one asked is answered
  h = rdm_hints(FI_MSG);
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), 0);
  EXPECT_EQ(info->domain_attr->av_type, FI_AV_UNSPEC);
  fi_freeinfo(info);
  h->domain_attr->av_type = FI_AV_MAP;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, h, &info), 0);
  EXPECT_EQ(info->domain_attr->av_type, FI_AV_MAP);
  fi_freeinfo(info);
  fi_freeinfo(h);
}

TEST(Getinfo, ACanceledReceiveWritesNothingThroughAnUninitialisedErrData) {
  npo_fi_test::use_provider();
  Ep e;
  ASSERT_EQ(e.open(3, nullptr, nullptr, 0), 0);
  std::array<char, 64> buf{};
  int ctx = 0;
  ASSERT_EQ(fi_trecv(e.ep, buf.data(), buf.size(), nullptr, FI_ADDR_UNSPEC, 1, 0, &ctx), 0);
  ASSERT_EQ(fi_cancel(&e.ep->fid, &ctx), 0);
  fi_cq_tagged_entry c{};
  ASSERT_EQ(fi_cq_read(e.cq, &c, 1), -FI_EAVAIL);
  fi_cq_err_entry err;
  std::memset(&err, 0xab, sizeof err);  // as fabtests' recv_cancel leaves it: garbage err_data
  ASSERT_EQ(fi_cq_readerr(e.cq, &err, 0), 1);
  EXPECT_EQ(err.err, FI_ECANCELED);
  EXPECT_EQ(err.op_context, &ctx);
  EXPECT_EQ(err.err_data_size, 0u);
  EXPECT_EQ(err.err_data, nullptr);
}

}  // namespace
