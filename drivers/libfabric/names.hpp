// SPDX-License-Identifier: Apache-2.0
// libnpo-fi.so: service names -- what fi_getinfo's node and service mean to the provider
// (docs/libfabric.md "Addresses and service names").
//
// An endpoint's address (WireAddr, ring.hpp) exists only once the endpoint's ring window does,
// but libfabric users ask for addresses before: fi_getinfo(node, service, flags) fills
// info->src_addr (FI_SOURCE, or no node) and info->dest_addr (node or service without
// FI_SOURCE), and programs such as fabtests insert info->dest_addr into their AV. The provider
// answers with a *service address*: 48 bytes (kAddrLen, magic kSvcMagic) naming a service
// number on this host. An endpoint opened from an info whose src_addr is a service address with
// a service publishes its real address under that service while it lives (a small file in
// /dev/shm, one per backend and service, like a port bound); fi_av_insert of a service
// address resolves it to the endpoint published under it. Services are host-local: npo-emud
// serves one host, and a node that names another host is refused at getinfo.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "hal_state.hpp"
#include "ring.hpp"

namespace npo::fi {

constexpr std::uint32_t kSvcMagic = 0x31534e50;  // "PNS1"

/// A service address: kAddrLen bytes; `service` 0 is "any" (a source address that publishes
/// nothing); `card` the card of the info (source) or ~0u (destination: any card).
struct SvcAddr {
  std::uint32_t magic = kSvcMagic;
  std::uint32_t service = 0;
  std::uint32_t card = ~0u;
  std::uint32_t pad = 0;
  char node[32] = {};  // the node string given to fi_getinfo, truncated (for fi_av_straddr)
};
static_assert(sizeof(SvcAddr) == kAddrLen);

/// Whether the kAddrLen bytes at `addr` are a service address.
bool is_svc_addr(const void* addr);
/// The service number of fi_getinfo's `service` string: decimal 0..65535 (as a port), or
/// nullopt (not a number: getinfo answers -FI_ENODATA).
std::optional<std::uint32_t> parse_service(const char* service);
/// Whether `node` names this host: NULL, "", "localhost", a loopback address, this host's name
/// or one of its interface addresses.
bool node_is_local(const char* node);
/// A malloc'd service address for an fi_info (caller stores it with src/dest_addrlen kAddrLen).
void* make_svc_addr(std::uint32_t service, std::uint32_t card, const char* node);

/// Publishes endpoint address `w` under `service` of backend `b` until unpublish_service:
/// 0, or -FI_EADDRINUSE when a live process (another endpoint) publishes the service already,
/// -errno when the file cannot be written. Thread-safety: any thread.
int publish_service(const BackendChoice& b, std::uint32_t service, const WireAddr& w);
/// Removes what publish_service(b, service, w) wrote (only if it is still ours).
void unpublish_service(const BackendChoice& b, std::uint32_t service, const WireAddr& w);
/// The endpoint address published under the service of service address `svc` on backend `b`:
/// errors kNotFound (nothing published, or its publisher is gone).
Result<WireAddr> resolve_service(const BackendChoice& b, const SvcAddr& svc);

}  // namespace npo::fi
