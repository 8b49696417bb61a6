// SPDX-License-Identifier: Apache-2.0
// npo-vfio-qemu-guest: runs inside a QEMU TCG guest (tests/vfio/qemu/run-vfio-qemu.sh) on a
// real Linux kernel with an emulated Intel IOMMU, and drives QEMU's `edu` and `nvme` devices
// through the VFIO backend only (the registry's "vfio:" URIs and backend::Device):
//   edu : config space, BAR0 identification (0x010000ed) and liveness registers, DMA into and
//         out of mapped host pages, the DMA completion interrupt on an eventfd (MSI), and the
//         IOMMU blocking DMA after the unmap;
//   nvme: config space and the capability walk, CAP/VS, an admin queue pair in mapped host
//         memory, Identify Controller into a page above 4 GiB with the completion interrupt
//         on an eventfd (MSI-X), the IOMMU blocking the same command after the unmap, FLR;
//   both: the generic parts of the backend conformance suite (config widths agree, out-of-range
//         config access, DMA map/unmap rules within the kernel's IOVA ranges, MSI-X argument
//         errors, exclusive open).
// Prints one "PASS"/"FAIL"/"SKIP" line per check and "NPO-VFIO-QEMU: <pass> passed, <fail>
// failed, <skip> skipped"; exits 0 only when nothing failed.
// Usage: npo-vfio-qemu-guest [type1|iommufd|auto]
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "npo/hal/backend/pci.hpp"
#include "npo/hal/backend/registry.hpp"

namespace {

namespace be = npo::backend;
using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kPage = 4096;

int g_pass = 0, g_fail = 0, g_skip = 0;

void check(bool ok, const std::string& name, const std::string& detail = {}) {
  if (ok) {
    ++g_pass;
    std::printf("PASS %s%s%s\n", name.c_str(), detail.empty() ? "" : ": ", detail.c_str());
  } else {
    ++g_fail;
    std::printf("FAIL %s%s%s\n", name.c_str(), detail.empty() ? "" : ": ", detail.c_str());
  }
  std::fflush(stdout);
}
void skip(const std::string& name, const std::string& why) {
  ++g_skip;
  std::printf("SKIP %s: %s\n", name.c_str(), why.c_str());
  std::fflush(stdout);
}
std::string hex(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}
template <typename T>
npo::Code code(const npo::Result<T>& r) {
  return r ? npo::Code::kOk : r.error().code();
}

struct Pages {
  explicit Pages(std::size_t n) : size(n * kPage), p(static_cast<std::byte*>(std::aligned_alloc(kPage, n * kPage))) {
    std::memset(p, 0, size);
  }
  ~Pages() { std::free(p); }
  std::size_t size;
  std::byte* p;
};

template <typename Pred>
bool wait_for(Pred pred, std::chrono::milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

std::uint64_t wait_eventfd(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return 0;
  std::uint64_t v = 0;
  return ::read(fd, &v, sizeof v) == sizeof v ? v : 0;
}

bool inside_ranges(be::Device& d, std::uint64_t iova, std::uint64_t len) {
  for (const auto& r : d.iova_ranges()) {
    if (iova >= r.first && iova + len - 1 <= r.last) return true;
  }
  return false;
}

struct Opened {
  std::unique_ptr<be::Backend> backend;
  std::unique_ptr<be::Device> dev;
};

Opened open_first(const std::string& ids, const std::string& api, const std::string& name) {
  Opened o;
  const std::string uri = "vfio:all?ids=" + ids + "&iommu=" + api;
  auto b = be::builtin_registry().open(uri);
  check(b.has_value(), name + " backend " + uri, b ? "" : b.error().to_string());
  if (!b) return o;
  o.backend = std::move(*b);
  auto fns = o.backend->enumerate();
  check(fns && fns->size() == 1, name + " enumerated",
        fns ? std::to_string(fns->size()) + " function(s)" : fns.error().to_string());
  if (!fns || fns->empty()) return o;
  const auto& fi = fns->front();
  check(fi.driver == "vfio-pci" && fi.iommu_group >= 0, name + " bound to vfio-pci with an IOMMU group",
        fi.address.to_string() + " driver " + fi.driver + " group " + std::to_string(fi.iommu_group));
  auto d = o.backend->open(fi.address);
  check(d.has_value(), name + " open " + fi.address.to_string(), d ? "" : d.error().to_string());
  if (d) o.dev = std::move(*d);
  if (o.dev) {
    auto again = o.backend->open(fi.address);
    check(code(again) == npo::Code::kAlreadyExists, name + " second open refused (exclusive)");
  }
  return o;
}

// ---- Generic checks: the device-independent part of the conformance suite --------------------

void generic_checks(be::Device& d, const std::string& name) {
  // Config access widths agree, bulk and unaligned reads agree.
  std::array<std::byte, 0x100> all{};
  check(d.config_read(0, all).has_value(), name + " config bulk read");
  bool agree = true;
  for (std::uint32_t off = 0; off < all.size(); off += 4) {
    auto d32 = be::config_read32(d, off);
    auto lo = be::config_read16(d, off);
    auto hi = be::config_read16(d, off + 2);
    std::uint32_t bulk = 0;
    std::memcpy(&bulk, all.data() + off, 4);
    // The status register's RW1C bits may change between reads; compare the rest.
    const std::uint32_t mask = off == 4 ? 0x0000ffffu : 0xffffffffu;
    if (!d32 || !lo || !hi || ((*d32 ^ (*lo | (std::uint32_t{*hi} << 16))) & mask) || ((*d32 ^ bulk) & mask))
      agree = false;
  }
  check(agree, name + " config dword/word/bulk reads agree");
  std::array<std::byte, 2> two{};
  check(code(d.config_read(4095, two)) == npo::Code::kOutOfRange, name + " config read past 4 KiB refused");
  std::array<std::byte, 4> four{};
  check(d.config_read(4092, four).has_value(), name + " last config dword readable");

  // DMA map/unmap rules within the kernel's IOVA ranges.
  const auto ranges = d.iova_ranges();
  std::string rs;
  for (const auto& r : ranges) rs += "[" + hex(r.first) + "," + hex(r.last) + "] ";
  check(!ranges.empty(), name + " IOVA ranges from the kernel", rs);
  Pages mem(4);
  const std::uint64_t iova = 0x800000;
  check(inside_ranges(d, iova, 4 * kPage), name + " test IOVA inside the ranges");
  check(d.dma_map(mem.p, iova, 3 * kPage, be::DmaAccess::kReadWrite).has_value(), name + " dma_map");
  check(code(d.dma_map(mem.p + 3 * kPage, iova + 2 * kPage, kPage, be::DmaAccess::kRead)) == npo::Code::kAlreadyExists,
        name + " overlapping map refused");
  check(code(d.dma_map(mem.p + 1, iova + 3 * kPage, kPage, be::DmaAccess::kRead)) == npo::Code::kInvalidArgument,
        name + " misaligned map refused");
  if (!ranges.empty() && ranges.back().last < ~std::uint64_t{0} - 2 * kPage) {
    const std::uint64_t past = (ranges.back().last + kPage) / kPage * kPage;
    check(code(d.dma_map(mem.p + 3 * kPage, past, kPage, be::DmaAccess::kRead)) == npo::Code::kOutOfRange,
          name + " map past the last IOVA range refused");
  }
  // The MSI window 0xfee00000 is reserved on x86: the kernel leaves it out of the ranges.
  check(!inside_ranges(d, 0xfee00000, kPage), name + " MSI window excluded from the IOVA ranges");
  check(code(d.dma_unmap(iova, 2 * kPage)) == npo::Code::kNotFound, name + " partial unmap refused");
  check(d.dma_unmap(iova, 3 * kPage).has_value(), name + " dma_unmap");
  check(code(d.dma_unmap(iova, 3 * kPage)) == npo::Code::kNotFound, name + " second unmap: not found");
  check(d.dma_map(mem.p, iova, 3 * kPage, be::DmaAccess::kRead).has_value() && d.dma_unmap(iova, 3 * kPage).has_value(),
        name + " the range maps again after the unmap");
}

// ---- edu ---------------------------------------------------------------------------------------

void run_edu(const std::string& api) {
  auto o = open_first("1234:11e8", api, "edu");
  if (!o.dev) return;
  auto& d = *o.dev;
  auto vid = be::config_read16(d, 0);
  auto did = be::config_read16(d, 2);
  check(vid && *vid == 0x1234 && did && *did == 0x11e8, "edu config IDs",
        vid && did ? hex(*vid) + ":" + hex(*did) : "");
  generic_checks(d, "edu");
  auto ri = d.region_info(0);
  check(ri && ri->size == (1u << 20), "edu BAR0 is 1 MiB", ri ? hex(ri->size) : ri.error().to_string());
  auto m = d.mmio(0);
  check(m.has_value(), "edu BAR0 mmio", m ? "" : m.error().to_string());
  if (!m) return;
  auto& bar = **m;
  const std::uint32_t ident = bar.read32(0x00);
  check(ident == 0x010000edu, "edu identification register", hex(ident));
  bar.write32(0x04, 0x12345678u);
  check(bar.read32(0x04) == ~0x12345678u, "edu liveness register inverts", hex(bar.read32(0x04)));
  bar.write32(0x08, 10);  // factorial: computed asynchronously, status bit 0 while busy
  check(wait_for([&] { return (bar.read32(0x20) & 1) == 0; }, std::chrono::seconds(2)) && bar.read32(0x08) == 3628800,
        "edu factorial 10! through BAR0", std::to_string(bar.read32(0x08)));

  // Bus mastering: the driver's job (drivers/card does it for our card).
  auto cmd = be::config_read16(d, 4);
  check(cmd && be::config_write16(d, 4, static_cast<std::uint16_t>(*cmd | 0x6)).has_value(),
        "edu memory + bus master on");

  Pages src(1), dst(1);
  constexpr std::uint64_t kSrcIova = 0x100000, kDstIova = 0x200000;  // below edu's 28-bit DMA mask
  constexpr std::uint32_t kLen = 4095;                               // edu: at most 4095 bytes per transfer
  constexpr std::uint64_t kEduBuf = 0x40000;
  for (std::size_t i = 0; i < kPage; ++i) src.p[i] = static_cast<std::byte>(i * 13 + 7);
  check(d.dma_map(src.p, kSrcIova, kPage, be::DmaAccess::kRead).has_value(), "edu map source page");
  check(d.dma_map(dst.p, kDstIova, kPage, be::DmaAccess::kWrite).has_value(), "edu map destination page");
  const auto dma = [&](std::uint64_t from, std::uint64_t to, bool to_ram) {
    bar.write64(0x80, from);
    bar.write64(0x88, to);
    bar.write64(0x90, kLen);
    bar.write64(0x98, 1u | (to_ram ? 2u : 0u));
    return wait_for([&] { return (bar.read32(0x98) & 1) == 0; }, std::chrono::seconds(5));
  };
  const auto t0 = Clock::now();
  check(dma(kSrcIova, kEduBuf, false), "edu DMA host -> device completes");
  check(dma(kEduBuf, kDstIova, true), "edu DMA device -> host completes");
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  check(std::memcmp(src.p, dst.p, kLen) == 0 && dst.p[kLen] == std::byte{0}, "edu DMA round trip through the IOMMU",
        std::to_string(kLen) + " bytes, " + std::to_string(ms) + " ms");

  // Completion interrupt over MSI (edu has MSI, no MSI-X): bit 2 of the DMA command raises
  // interrupt status 0x100 (register 0x24) when the transfer is done; 0x64 acknowledges it.
  check(d.msix_vectors() == 0, "edu has no MSI-X", std::to_string(d.msix_vectors()));
  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  auto irq = d.set_msi_eventfd(efd);
  check(irq.has_value(), "edu MSI -> eventfd", irq ? "" : irq.error().to_string());
  bar.write64(0x80, kSrcIova);
  bar.write64(0x88, kEduBuf);
  bar.write64(0x90, kLen);
  bar.write64(0x98, 1u | 4u);
  const std::uint64_t fired = wait_eventfd(efd, 5000);
  const std::uint32_t status = bar.read32(0x24);
  check(fired >= 1 && (status & 0x100u) != 0, "edu DMA completion interrupt on the eventfd (MSI)",
        "status " + hex(status));
  bar.write32(0x64, status);
  check(d.set_msi_eventfd(-1).has_value(), "edu MSI disconnect");
  ::close(efd);

  // Unmapped: the IOMMU blocks the device's write; the page stays untouched.
  check(d.dma_unmap(kDstIova, kPage).has_value(), "edu unmap destination page");
  std::memset(dst.p, 0x5a, kPage);
  check(dma(kEduBuf, kDstIova, true), "edu DMA to the unmapped IOVA finishes (faulted)");
  bool untouched = true;
  for (std::size_t i = 0; i < kPage; ++i) untouched &= dst.p[i] == std::byte{0x5a};
  check(untouched, "edu DMA after unmap blocked by the IOMMU, buffer untouched");
  check(d.dma_unmap(kSrcIova, kPage).has_value(), "edu unmap source page");

  auto r = d.reset();
  check(r.has_value() || r.error().code() == npo::Code::kUnimplemented, "edu reset: done or kUnimplemented",
        r ? "reset" : r.error().to_string());
}

// ---- nvme --------------------------------------------------------------------------------------

void run_nvme(const std::string& api, const std::string& serial) {
  auto o = open_first("1b36:0010", api, "nvme");
  if (!o.dev) return;
  auto& d = *o.dev;
  generic_checks(d, "nvme");
  auto caps = be::walk_capabilities(d);
  check(caps.has_value(), "nvme capability walk",
        caps ? std::to_string(caps->size()) + " capabilities" : caps.error().to_string());
  if (caps) {
    auto mx = be::find_capability(*caps, 0x11, false);
    check(mx.has_value(), "nvme MSI-X capability");
    if (mx) {
      auto ctl = be::config_read16(d, mx->offset + 2);
      check(ctl && (*ctl & 0x7ffu) + 1 == d.msix_vectors(), "nvme MSI-X table size == msix_vectors()",
            std::to_string(d.msix_vectors()));
    }
    auto pcie = be::find_capability(*caps, 0x10, false);
    if (pcie) {
      auto link = be::read_pcie_link(d, *caps);
      check(link.has_value(), "nvme PCIe capability readable",
            link ? "FLR " + std::string(link->flr_capable ? "yes" : "no") : link.error().to_string());
    } else {
      skip("nvme PCIe link", "no PCI Express capability on this machine type");
    }
  }
  auto m = d.mmio(0);
  check(m.has_value(), "nvme BAR0 mmio", m ? "" : m.error().to_string());
  if (!m) return;
  auto& bar = **m;
  const std::uint64_t cap = bar.read64(0x00);
  const std::uint32_t vs = bar.read32(0x08);
  check((cap & 0xffff) >= 15 && ((cap >> 37) & 1) == 1, "nvme CAP (MQES, CSS NVM)", hex(cap));
  check((vs >> 16) == 1, "nvme VS major 1", hex(vs));
  const unsigned stride = 4u << ((cap >> 32) & 0xf);

  auto cmd = be::config_read16(d, 4);
  check(cmd && be::config_write16(d, 4, static_cast<std::uint16_t>(*cmd | 0x6)).has_value(),
        "nvme memory + bus master on");

  Pages sq(1), cq(1), data(1);
  constexpr std::uint64_t kSqIova = 0x10000, kCqIova = 0x20000;
  constexpr std::uint64_t kDataIova = 0x100000000ull + 0x200000;  // above 4 GiB
  check(inside_ranges(d, kDataIova, kPage), "nvme IOVA above 4 GiB allowed by the IOMMU");
  check(d.dma_map(sq.p, kSqIova, kPage, be::DmaAccess::kRead).has_value(), "nvme map SQ");
  check(d.dma_map(cq.p, kCqIova, kPage, be::DmaAccess::kWrite).has_value(), "nvme map CQ");
  check(d.dma_map(data.p, kDataIova, kPage, be::DmaAccess::kWrite).has_value(), "nvme map data page above 4 GiB");

  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const std::array<int, 1> fds{efd};
  auto irq = d.set_msix_eventfds(0, fds);
  check(irq.has_value(), "nvme MSI-X vector 0 -> eventfd", irq ? "" : irq.error().to_string());
  const std::array<int, 1> bad{-2};
  check(code(d.set_msix_eventfds(0, bad)) == npo::Code::kInvalidArgument, "nvme MSI-X fd -2 refused");
  check(code(d.set_msix_eventfds(d.msix_vectors(), fds)) == npo::Code::kOutOfRange,
        "nvme MSI-X vector past the table refused");

  // Controller: disable, admin queues (16 entries), enable with 64/16-byte entries.
  bar.write32(0x14, 0);
  check(wait_for([&] { return (bar.read32(0x1c) & 1) == 0; }, std::chrono::seconds(5)), "nvme CSTS.RDY clears");
  bar.write32(0x24, (15u << 16) | 15u);
  bar.write64(0x28, kSqIova);
  bar.write64(0x30, kCqIova);
  bar.write32(0x14, (4u << 20) | (6u << 16) | 1u);
  check(wait_for([&] { return (bar.read32(0x1c) & 1) == 1; }, std::chrono::seconds(5)), "nvme CSTS.RDY sets",
        hex(bar.read32(0x1c)));

  const auto identify = [&](std::uint16_t cid, unsigned slot) {
    std::array<std::uint32_t, 16> c{};
    c[0] = 0x06u | (std::uint32_t{cid} << 16);  // Identify
    c[6] = static_cast<std::uint32_t>(kDataIova);
    c[7] = static_cast<std::uint32_t>(kDataIova >> 32);
    c[10] = 1;  // CNS 1: controller
    std::memcpy(sq.p + slot * 64, c.data(), 64);
    bar.write32(0x1000, slot + 1);  // SQ0 tail doorbell (a release: the entry is visible first)
  };
  const auto completion = [&](unsigned slot) {
    std::uint32_t dw3 = 0;
    std::memcpy(&dw3, cq.p + slot * 16 + 12, 4);
    return dw3;
  };

  identify(1, 0);
  const std::uint64_t fired = wait_eventfd(efd, 5000);
  check(fired >= 1, "nvme completion interrupt on the eventfd (MSI-X)");
  check(wait_for([&] { return (completion(0) >> 16 & 1) == 1; }, std::chrono::seconds(2)), "nvme completion posted");
  const std::uint32_t dw3 = completion(0);
  check((dw3 & 0xffff) == 1 && (dw3 >> 17) == 0, "nvme Identify status success", hex(dw3));
  bar.write32(0x1000 + stride, 1);  // CQ0 head doorbell
  std::uint16_t vid = 0;
  std::memcpy(&vid, data.p, 2);
  const std::string sn(reinterpret_cast<const char*>(data.p) + 4, 20);
  check(vid == 0x1b36, "nvme Identify data in the page above 4 GiB: PCI vendor", hex(vid));
  check(sn.rfind(serial, 0) == 0, "nvme Identify data: serial number", "'" + sn + "'");

  // Unmapped: the same command's data write is blocked; the page stays untouched.
  check(d.dma_unmap(kDataIova, kPage).has_value(), "nvme unmap data page");
  std::memset(data.p, 0xa5, kPage);
  identify(2, 1);
  (void)wait_eventfd(efd, 5000);
  check(wait_for([&] { return (completion(1) >> 16 & 1) == 1; }, std::chrono::seconds(5)),
        "nvme second command completes",
        "status " + hex(completion(1) >> 17) + " (QEMU reports a blocked DMA as success)");
  bool untouched = true;
  for (std::size_t i = 0; i < kPage; ++i) untouched &= data.p[i] == std::byte{0xa5};
  check(untouched, "nvme Identify after unmap blocked by the IOMMU, page untouched");
  bar.write32(0x1000 + stride, 2);

  const std::array<int, 1> off{-1};
  check(d.set_msix_eventfds(0, off).has_value(), "nvme MSI-X disconnect");
  bar.write32(0x14, 0);
  (void)wait_for([&] { return (bar.read32(0x1c) & 1) == 0; }, std::chrono::seconds(5));
  auto r = d.reset();
  if (r) {
    check(bar.read32(0x14) == 0 && (bar.read32(0x1c) & 1) == 0, "nvme FLR (VFIO_DEVICE_RESET): controller disabled");
    auto v = be::config_read16(d, 0);
    check(v && *v == 0x1b36, "nvme config space restored after FLR");
  } else {
    check(r.error().code() == npo::Code::kUnimplemented, "nvme reset: kUnimplemented", r.error().to_string());
  }
  check(d.dma_unmap(kSqIova, kPage).has_value() && d.dma_unmap(kCqIova, kPage).has_value(), "nvme unmap queues");
  ::close(efd);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string api = argc > 1 ? argv[1] : "auto";
  const char* serial = std::getenv("NPO_QEMU_NVME_SERIAL");
  const auto t0 = Clock::now();
  run_edu(api);
  run_nvme(api, serial != nullptr ? serial : "npo0001");
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  std::printf("NPO-VFIO-QEMU: %d passed, %d failed, %d skipped (%s, %lld ms)\n", g_pass, g_fail, g_skip, api.c_str(),
              static_cast<long long>(ms));
  std::fflush(stdout);
  return g_fail == 0 && g_pass > 0 ? 0 : 1;
}
