// SPDX-License-Identifier: Apache-2.0
// The fake kernel behind the VFIO backend's syscall seam. See fake_kernel.hpp.
#include "fake_kernel.hpp"

#include <fcntl.h>
#include <linux/vfio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "vfio/uapi.hpp"

namespace npo::vfio::test {

namespace {

constexpr std::uint64_t kPage = 4096;

std::byte* alloc_pages(std::size_t bytes) {
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage));
  if (p != nullptr) std::memset(p, 0, bytes);
  return p;
}

template <typename T>
void put(std::byte* base, std::size_t off, const T& v) {
  std::memcpy(base + off, &v, sizeof v);
}

}  // namespace

// ==== MemoryDevice ===============================================================================

MemoryDevice::MemoryDevice(std::uint16_t vendor, std::uint16_t device) : config_(4096) {
  constexpr std::uint32_t kRw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
  regions[0] = {64u << 10, kRw | VFIO_REGION_INFO_FLAG_MMAP, std::nullopt};
  regions[2] = {1u << 20, kRw | VFIO_REGION_INFO_FLAG_MMAP, std::nullopt};
  regions[4] = {16u << 10, kRw | VFIO_REGION_INFO_FLAG_MMAP,
                std::vector<std::pair<std::uint64_t, std::uint64_t>>{{8u << 10, 8u << 10}}};
  regions[7] = {4096, kRw, std::nullopt};
  for (unsigned b : {0u, 2u, 4u}) bars_[b] = alloc_pages(regions[b].size);
  put<std::uint16_t>(config_.data(), 0x00, vendor);
  put<std::uint16_t>(config_.data(), 0x02, device);
  put<std::uint32_t>(config_.data(), 0x08, 0x12000001u);  // class 0x120000, revision 1
  put<std::uint32_t>(config_.data(), 0x10, 0xfe000004u);  // BAR0: 64-bit memory
  put<std::uint32_t>(config_.data(), 0x18, 0xd000000cu);  // BAR2: 64-bit prefetchable memory
  put<std::uint32_t>(config_.data(), 0x20, 0xfe100004u);  // BAR4: 64-bit memory
  vectors.assign(msix, -1);
}

MemoryDevice::~MemoryDevice() {
  for (auto& [b, p] : bars_) std::free(p);
}

std::byte* MemoryDevice::bar(unsigned b) noexcept {
  auto it = bars_.find(b);
  return it == bars_.end() ? nullptr : it->second;
}

DeviceModel::RegionSpec MemoryDevice::region(unsigned index) {
  auto it = regions.find(index);
  return it == regions.end() ? RegionSpec{} : it->second;
}

int MemoryDevice::read(unsigned index, std::uint64_t offset, void* buf, std::size_t n) {
  const RegionSpec r = region(index);
  if (offset > r.size || n > r.size - offset) return EINVAL;
  if (index == 7) {
    std::memcpy(buf, config_.data() + offset, n);
    return 0;
  }
  std::byte* b = bar(index);
  if (b == nullptr) return EINVAL;
  std::memcpy(buf, b + offset, n);
  return 0;
}

int MemoryDevice::write(unsigned index, std::uint64_t offset, const void* buf, std::size_t n) {
  const RegionSpec r = region(index);
  if (offset > r.size || n > r.size - offset) return EINVAL;
  if (index == 7) {
    std::memcpy(config_.data() + offset, buf, n);
    return 0;
  }
  std::byte* b = bar(index);
  if (b == nullptr) return EINVAL;
  std::memcpy(b + offset, buf, n);
  return 0;
}

std::byte* MemoryDevice::map(unsigned index, std::uint64_t offset, std::size_t len) {
  const RegionSpec r = region(index);
  std::byte* b = bar(index);
  if (b == nullptr || offset > r.size || len > r.size - offset) return nullptr;
  return b + offset;
}

int MemoryDevice::set_msix(unsigned vector, int fd) {
  if (vectors.size() < msix) vectors.resize(msix, -1);
  if (vector >= vectors.size()) return EINVAL;
  vectors[vector] = fd;
  return 0;
}

int MemoryDevice::reset() {
  ++resets;
  return 0;
}

int MemoryDevice::dma_map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length, bool read, bool write) {
  (void)vaddr;
  dma_log.push_back(fmt::format("map 0x{:x}+0x{:x} {}{}", iova, length, read ? "r" : "", write ? "w" : ""));
  return 0;
}

int MemoryDevice::dma_unmap(std::uint64_t iova, std::uint64_t length) {
  dma_log.push_back(fmt::format("unmap 0x{:x}+0x{:x}", iova, length));
  return 0;
}

// ==== FakeKernel: configuration and observation ===================================================

FakeKernel::FakeKernel(std::string dev_root) : dev_root_(std::move(dev_root)) {}

FakeKernel::~FakeKernel() = default;

void FakeKernel::add_group(int number, std::vector<std::string> bdfs, bool viable) {
  std::lock_guard lock(mu_);
  groups_[number] = Group{viable, std::move(bdfs), -1};
}

void FakeKernel::add_device(const std::string& bdf, DeviceModel* model, std::optional<std::string> cdev) {
  std::lock_guard lock(mu_);
  devs_[bdf] = Dev{model, std::move(cdev), 0};
}

void FakeKernel::fail_ioctl(unsigned long request, int err, int times, int skip) {
  std::lock_guard lock(mu_);
  ioctl_fail_[request] = {err, times, skip};
}

void FakeKernel::fail_open(const std::string& suffix, int err, int times) {
  std::lock_guard lock(mu_);
  open_fail_.push_back({suffix, {err, times}});
}

void FakeKernel::fail_op(const std::string& op, int err, int times) {
  std::lock_guard lock(mu_);
  op_fail_[op] = {err, times};
}

std::vector<Call> FakeKernel::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

std::size_t FakeKernel::ioctl_count(unsigned long request) const {
  std::lock_guard lock(mu_);
  return static_cast<std::size_t>(std::count_if(
      calls_.begin(), calls_.end(), [&](const Call& c) { return c.op == "ioctl" && c.request == request; }));
}

std::vector<unsigned long> FakeKernel::ioctl_sequence() const {
  std::lock_guard lock(mu_);
  std::vector<unsigned long> out;
  for (const auto& c : calls_) {
    if (c.op == "ioctl") out.push_back(c.request);
  }
  return out;
}

std::size_t FakeKernel::open_fds() const {
  std::lock_guard lock(mu_);
  return fds_.size();
}

std::size_t FakeKernel::dma_mappings() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [fd, s] : containers_) n += s.maps.size();
  for (const auto& [id, s] : ioases_) n += s.maps.size();
  return n;
}

bool FakeKernel::msi_enabled(const std::string& bdf) const {
  std::lock_guard lock(mu_);
  auto it = devs_.find(bdf);
  return it != devs_.end() && it->second.msi_enabled;
}

unsigned FakeKernel::msix_enabled(const std::string& bdf) const {
  std::lock_guard lock(mu_);
  auto it = devs_.find(bdf);
  return it == devs_.end() ? 0 : it->second.msix_enabled;
}

std::optional<int> FakeKernel::scripted_ioctl(unsigned long request) {
  auto it = ioctl_fail_.find(request);
  if (it == ioctl_fail_.end()) return std::nullopt;
  if (it->second.skip > 0) {
    --it->second.skip;
    return std::nullopt;
  }
  const int err = it->second.err;
  if (--it->second.times <= 0) ioctl_fail_.erase(it);
  return err;
}

std::optional<int> FakeKernel::scripted_op(const std::string& op) {
  auto it = op_fail_.find(op);
  if (it == op_fail_.end() || it->second.second <= 0) return std::nullopt;
  const int err = it->second.first;
  if (--it->second.second == 0) op_fail_.erase(it);
  return err;
}

int FakeKernel::new_fd(Node n) {
  const int fd = next_fd_++;
  fds_.emplace(fd, std::move(n));
  return fd;
}

FakeKernel::Node* FakeKernel::node(int fd) {
  auto it = fds_.find(fd);
  return it == fds_.end() ? nullptr : &it->second;
}

DeviceModel* FakeKernel::device_of(const Node& n) {
  auto it = devs_.find(n.bdf);
  return it == devs_.end() ? nullptr : it->second.model;
}

FakeKernel::Space& FakeKernel::space_of_container(int fd) { return containers_[fd]; }

std::vector<std::string> FakeKernel::devices_of_container(int container_fd) {
  std::vector<std::string> out;
  for (const auto& [fd, n] : fds_) {
    if (n.kind == Kind::kGroup && n.container == container_fd) {
      auto g = groups_.find(n.group);
      if (g != groups_.end()) out.insert(out.end(), g->second.bdfs.begin(), g->second.bdfs.end());
    }
  }
  return out;
}

std::vector<std::string> FakeKernel::devices_of_ioas(int iommufd, std::uint32_t ioas) {
  std::vector<std::string> out;
  for (const auto& [fd, n] : fds_) {
    if (n.kind == Kind::kCdev && n.iommufd == iommufd && n.ioas == ioas) out.push_back(n.bdf);
  }
  return out;
}

bool FakeKernel::usable_device(const Node& n) const {
  if (n.kind == Kind::kDevice) return true;
  return n.kind == Kind::kCdev && n.iommufd >= 0 && n.ioas != 0;
}

// ==== FakeKernel: Sys ==============================================================================

SysResult<int> FakeKernel::open(const std::string& path, int flags) {
  std::lock_guard lock(mu_);
  calls_.push_back({"open", 0, path});
  for (auto it = open_fail_.begin(); it != open_fail_.end(); ++it) {
    if (path.size() >= it->first.size() &&
        path.compare(path.size() - it->first.size(), it->first.size(), it->first) == 0) {
      const int err = it->second.first;
      if (--it->second.second <= 0) open_fail_.erase(it);
      return std::unexpected(err);
    }
  }
  if (!path.starts_with(dev_root_ + "/")) return real_sys().open(path, flags);
  if (::access(path.c_str(), F_OK) != 0) return std::unexpected(ENOENT);
  const std::string rel = path.substr(dev_root_.size() + 1);
  if (rel == "vfio/vfio") return new_fd(Node{Kind::kContainer});
  if (rel == "iommu") return new_fd(Node{Kind::kIommufd});
  if (rel.starts_with("vfio/devices/")) {
    const std::string name = rel.substr(std::string("vfio/devices/").size());
    for (const auto& [bdf, d] : devs_) {
      if (d.cdev == name) {
        for (const auto& [fd, n] : fds_) {
          if (n.kind == Kind::kCdev && n.bdf == bdf) return std::unexpected(EBUSY);
        }
        Node n{Kind::kCdev};
        n.bdf = bdf;
        return new_fd(std::move(n));
      }
    }
    return std::unexpected(ENODEV);
  }
  if (rel.starts_with("vfio/")) {
    const int g = std::atoi(rel.c_str() + 5);
    auto it = groups_.find(g);
    if (it == groups_.end()) return std::unexpected(ENODEV);
    if (it->second.open_fd >= 0) return std::unexpected(EBUSY);  // a group opens once
    Node n{Kind::kGroup};
    n.group = g;
    const int fd = new_fd(std::move(n));
    it->second.open_fd = fd;
    return fd;
  }
  return std::unexpected(ENXIO);
}

void FakeKernel::close(int fd) noexcept {
  std::lock_guard lock(mu_);
  calls_.push_back({"close", 0, std::to_string(fd)});
  auto it = fds_.find(fd);
  if (it == fds_.end()) {
    real_sys().close(fd);
    return;
  }
  Node n = it->second;
  fds_.erase(it);
  switch (n.kind) {
    case Kind::kGroup: {
      auto g = groups_.find(n.group);
      if (g != groups_.end()) {
        if (n.container >= 0) {
          // Leaving the container: when it was the last group, the container's IOMMU goes.
          auto devs = g->second.bdfs;
          bool others = false;
          for (const auto& [ofd, on] : fds_) others |= on.kind == Kind::kGroup && on.container == n.container;
          if (!others) {
            auto c = containers_.find(n.container);
            if (c != containers_.end()) {
              drop_space(c->second, devs);
              containers_.erase(c);
            }
            if (Node* cn = node(n.container)) cn->iommu_set = false;
          }
        }
        g->second.open_fd = -1;
      }
      break;
    }
    case Kind::kContainer: {
      auto c = containers_.find(fd);
      if (c != containers_.end()) {
        drop_space(c->second, devices_of_container(fd));
        containers_.erase(c);
      }
      break;
    }
    case Kind::kIommufd: {
      for (auto s = ioases_.begin(); s != ioases_.end();) {
        if (s->first.first == fd) {
          drop_space(s->second, devices_of_ioas(fd, s->first.second));
          s = ioases_.erase(s);
        } else {
          ++s;
        }
      }
      break;
    }
    case Kind::kDevice:
    case Kind::kCdev: {
      // Closing the device fd: vfio-pci disables its interrupts.
      auto d = devs_.find(n.bdf);
      if (d != devs_.end() && d->second.msix_enabled > 0) {
        for (unsigned v = 0; v < d->second.msix_enabled; ++v) (void)d->second.model->set_msix(v, -1);
        d->second.msix_enabled = 0;
      }
      if (d != devs_.end() && d->second.msi_enabled) {
        (void)d->second.model->set_msi(-1);
        d->second.msi_enabled = false;
      }
      break;
    }
  }
}

void FakeKernel::drop_space(Space& space, const std::vector<std::string>& devs) {
  for (const auto& [iova, m] : space.maps) {
    for (const auto& bdf : devs) {
      auto d = devs_.find(bdf);
      if (d != devs_.end()) (void)d->second.model->dma_unmap(iova, m.length);
    }
  }
  space.maps.clear();
}

SysResult<int> FakeKernel::ioctl(int fd, unsigned long request, void* arg) {
  std::lock_guard lock(mu_);
  Node* n = node(fd);
  calls_.push_back({"ioctl", request, n == nullptr ? "?" : fmt::format("{}", static_cast<int>(n->kind))});
  if (auto err = scripted_ioctl(request)) return std::unexpected(*err);
  if (n == nullptr) return std::unexpected(EBADF);
  const int r = do_ioctl(fd, *n, request, arg, 0);
  if (r < 0) return std::unexpected(-r);
  return r;
}

SysResult<int> FakeKernel::ioctl_int(int fd, unsigned long request, unsigned long value) {
  std::lock_guard lock(mu_);
  Node* n = node(fd);
  calls_.push_back({"ioctl", request, n == nullptr ? "?" : fmt::format("{}", static_cast<int>(n->kind))});
  if (auto err = scripted_ioctl(request)) return std::unexpected(*err);
  if (n == nullptr) return std::unexpected(EBADF);
  const int r = do_ioctl(fd, *n, request, nullptr, value);
  if (r < 0) return std::unexpected(-r);
  return r;
}

int FakeKernel::map_in(Space& space, const std::vector<std::string>& devs, std::uint64_t vaddr, std::uint64_t iova,
                       std::uint64_t length, bool read, bool write) {
  if (length == 0 || iova % kPage != 0 || length % kPage != 0 || vaddr % kPage != 0) return -EINVAL;
  if (iova + length - 1 < iova) return -EINVAL;
  const bool inside = std::any_of(iova_ranges.begin(), iova_ranges.end(), [&](const backend::IovaRange& r) {
    return iova >= r.first && iova + length - 1 <= r.last;
  });
  if (!inside) return -EINVAL;
  auto next = space.maps.lower_bound(iova);
  if (next != space.maps.end() && next->first < iova + length) return -EEXIST;
  if (next != space.maps.begin() && std::prev(next)->first + std::prev(next)->second.length > iova) return -EEXIST;
  for (std::size_t i = 0; i < devs.size(); ++i) {
    auto d = devs_.find(devs[i]);
    if (d == devs_.end()) continue;
    if (const int e = d->second.model->dma_map(vaddr, iova, length, read, write); e != 0) {
      for (std::size_t j = 0; j < i; ++j) (void)devs_[devs[j]].model->dma_unmap(iova, length);
      return -e;
    }
  }
  space.maps.emplace(iova, Mapping{length, {}});
  return 0;
}

int FakeKernel::unmap_in(Space& space, const std::vector<std::string>& devs, std::uint64_t iova, std::uint64_t length,
                         std::uint64_t& unmapped) {
  unmapped = 0;
  const std::uint64_t end = iova + length;
  // type1v2 and iommufd refuse to split a mapping.
  for (const auto& [start, m] : space.maps) {
    const std::uint64_t mend = start + m.length;
    const bool overlaps = start < end && mend > iova;
    const bool inside = start >= iova && mend <= end;
    if (overlaps && !inside) return -EINVAL;
  }
  for (auto it = space.maps.lower_bound(iova); it != space.maps.end() && it->first < end;) {
    for (const auto& bdf : devs) {
      auto d = devs_.find(bdf);
      if (d != devs_.end()) (void)d->second.model->dma_unmap(it->first, it->second.length);
    }
    unmapped += it->second.length;
    it = space.maps.erase(it);
  }
  return 0;
}

int FakeKernel::do_ioctl(int fd, Node& n, unsigned long request, void* arg, unsigned long value) {
  switch (n.kind) {
    case Kind::kContainer: {
      if (request == uapi::kGetApiVersion) return api_version;
      if (request == uapi::kCheckExtension) {
        return (type1v2 && (value == VFIO_TYPE1v2_IOMMU || value == VFIO_TYPE1_IOMMU)) ? 1 : 0;
      }
      if (request == uapi::kSetIommu) {
        if (devices_of_container(fd).empty()) return -EINVAL;  // no group yet
        if (n.iommu_set) return -EBUSY;
        if (value != VFIO_TYPE1v2_IOMMU || !type1v2) return -EINVAL;
        n.iommu_set = true;
        containers_[fd];
        return 0;
      }
      if (!n.iommu_set) return -EINVAL;
      if (request == uapi::kIommuGetInfo) {
        auto* info = static_cast<uapi::Type1Info*>(arg);
        if (info->argsz < offsetof(uapi::Type1Info, cap_offset)) return -EINVAL;
        const std::size_t cap_size =
            sizeof(uapi::Type1IovaRangeCap) + iova_ranges.size() * sizeof(uapi::Type1IovaRange);
        const std::size_t need = sizeof(uapi::Type1Info) + (report_iova_caps ? cap_size : 0);
        const std::uint32_t given = info->argsz;
        info->flags = VFIO_IOMMU_INFO_PGSIZES | (report_iova_caps ? VFIO_IOMMU_INFO_CAPS : 0u);
        info->iova_pgsizes = 0x40201000;  // 4K | 2M | 1G
        info->cap_offset = 0;
        if (given < need) {
          info->argsz = static_cast<std::uint32_t>(need);
          return 0;
        }
        if (report_iova_caps) {
          auto* base = static_cast<std::byte*>(arg);
          uapi::Type1IovaRangeCap cap{};
          cap.header.id = VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE;
          cap.header.version = 1;
          cap.header.next = 0;
          cap.nr_iovas = static_cast<std::uint32_t>(iova_ranges.size());
          std::memcpy(base + sizeof(uapi::Type1Info), &cap, sizeof cap);
          for (std::size_t i = 0; i < iova_ranges.size(); ++i) {
            uapi::Type1IovaRange r{iova_ranges[i].first, iova_ranges[i].last};
            std::memcpy(base + sizeof(uapi::Type1Info) + sizeof cap + i * sizeof r, &r, sizeof r);
          }
          info->cap_offset = sizeof(uapi::Type1Info);
        }
        return 0;
      }
      if (request == uapi::kIommuMapDma) {
        auto* m = static_cast<uapi::Type1DmaMap*>(arg);
        if (m->argsz < sizeof *m) return -EINVAL;
        const bool rd = (m->flags & VFIO_DMA_MAP_FLAG_READ) != 0;
        const bool wr = (m->flags & VFIO_DMA_MAP_FLAG_WRITE) != 0;
        if (!rd && !wr) return -EINVAL;
        return map_in(containers_[fd], devices_of_container(fd), m->vaddr, m->iova, m->size, rd, wr);
      }
      if (request == uapi::kIommuUnmapDma) {
        auto* u = static_cast<uapi::Type1DmaUnmap*>(arg);
        if (u->argsz < sizeof *u) return -EINVAL;
        std::uint64_t done = 0;
        const int r = unmap_in(containers_[fd], devices_of_container(fd), u->iova, u->size, done);
        if (r == 0) u->size = done;
        return r;
      }
      return -ENOTTY;
    }
    case Kind::kGroup: {
      auto& g = groups_[n.group];
      if (request == uapi::kGroupGetStatus) {
        auto* st = static_cast<uapi::GroupStatus*>(arg);
        if (st->argsz < sizeof *st) return -EINVAL;
        st->flags =
            (g.viable ? VFIO_GROUP_FLAGS_VIABLE : 0u) | (n.container >= 0 ? VFIO_GROUP_FLAGS_CONTAINER_SET : 0u);
        return 0;
      }
      if (request == uapi::kGroupSetContainer) {
        const int cfd = *static_cast<const int*>(arg);
        Node* c = node(cfd);
        if (c == nullptr || c->kind != Kind::kContainer) return -EBADF;
        if (n.container >= 0) return -EBUSY;
        if (!g.viable) return -EPERM;
        n.container = cfd;
        return 0;
      }
      if (request == uapi::kGroupGetDeviceFd) {
        if (n.container < 0) return -EINVAL;
        Node* c = node(n.container);
        if (c == nullptr || !c->iommu_set) return -EINVAL;
        const std::string name = static_cast<const char*>(arg);
        if (std::find(g.bdfs.begin(), g.bdfs.end(), name) == g.bdfs.end() || !devs_.contains(name)) return -ENODEV;
        Node d{Kind::kDevice};
        d.bdf = name;
        return new_fd(std::move(d));
      }
      return -ENOTTY;
    }
    case Kind::kIommufd: {
      if (request == uapi::kIoasAlloc) {
        auto* a = static_cast<uapi::IoasAlloc*>(arg);
        if (a->size < sizeof *a || a->flags != 0) return -EINVAL;
        a->out_ioas_id = n.next_ioas++;
        ioases_[{fd, a->out_ioas_id}];
        return 0;
      }
      if (request == uapi::kIoasIovaRanges) {
        auto* q = static_cast<uapi::IoasIovaRanges*>(arg);
        if (q->size < sizeof *q) return -EINVAL;
        if (!ioases_.contains({fd, q->ioas_id})) return -ENOENT;
        const auto need = static_cast<std::uint32_t>(iova_ranges.size());
        if (q->num_iovas < need) {
          q->num_iovas = need;
          return -EMSGSIZE;
        }
        auto* out = reinterpret_cast<uapi::IovaRange*>(static_cast<std::uintptr_t>(q->allowed_iovas));
        for (std::uint32_t i = 0; i < need; ++i) out[i] = uapi::IovaRange{iova_ranges[i].first, iova_ranges[i].last};
        q->num_iovas = need;
        q->out_iova_alignment = kPage;
        return 0;
      }
      if (request == uapi::kIoasMap) {
        auto* m = static_cast<uapi::IoasMap*>(arg);
        if (m->size < sizeof *m) return -EINVAL;
        auto s = ioases_.find({fd, m->ioas_id});
        if (s == ioases_.end()) return -ENOENT;
        if ((m->flags & uapi::kIoasMapFixedIova) == 0) return -EINVAL;  // the backend always fixes the IOVA
        const bool rd = (m->flags & uapi::kIoasMapReadable) != 0;
        const bool wr = (m->flags & uapi::kIoasMapWriteable) != 0;
        return map_in(s->second, devices_of_ioas(fd, m->ioas_id), m->user_va, m->iova, m->length, rd, wr);
      }
      if (request == uapi::kIoasUnmap) {
        auto* u = static_cast<uapi::IoasUnmap*>(arg);
        if (u->size < sizeof *u) return -EINVAL;
        auto s = ioases_.find({fd, u->ioas_id});
        if (s == ioases_.end()) return -ENOENT;
        std::uint64_t done = 0;
        const int r = unmap_in(s->second, devices_of_ioas(fd, u->ioas_id), u->iova, u->length, done);
        if (r != 0) return r;
        if (done == 0) return -ENOENT;
        u->length = done;
        return 0;
      }
      return -ENOTTY;
    }
    case Kind::kCdev: {
      if (request == uapi::kDeviceBindIommufd) {
        auto* b = static_cast<uapi::DeviceBindIommufd*>(arg);
        if (b->argsz < 16 || b->flags != 0) return -EINVAL;
        Node* i = node(b->iommufd);
        if (i == nullptr || i->kind != Kind::kIommufd) return -EBADF;
        if (n.iommufd >= 0) return -EINVAL;
        for (const auto& [gn, g] : groups_) {  // the group path holds the device: the cdev cannot bind
          if (g.open_fd >= 0 && std::find(g.bdfs.begin(), g.bdfs.end(), n.bdf) != g.bdfs.end()) return -EBUSY;
        }
        n.iommufd = b->iommufd;
        b->out_devid = 0x10 + static_cast<std::uint32_t>(fd % 1000);
        return 0;
      }
      if (request == uapi::kDeviceAttachIommufdPt) {
        auto* a = static_cast<uapi::DeviceAttachIommufdPt*>(arg);
        if (a->argsz < 12 || a->flags != 0 || n.iommufd < 0) return -EINVAL;
        if (!ioases_.contains({n.iommufd, a->pt_id})) return -ENOENT;
        n.ioas = a->pt_id;
        return 0;
      }
      if (!usable_device(n)) return -EINVAL;  // a cdev fd is inert until bound and attached
      return device_ioctl(n, request, arg);
    }
    case Kind::kDevice: return device_ioctl(n, request, arg);
  }
  return -ENOTTY;
}

int FakeKernel::device_ioctl(Node& n, unsigned long request, void* arg) {
  DeviceModel* model = device_of(n);
  if (model == nullptr) return -ENODEV;
  Dev& dev = devs_[n.bdf];
  if (request == uapi::kDeviceGetInfo) {
    auto* di = static_cast<uapi::DeviceInfo*>(arg);
    if (di->argsz < 16) return -EINVAL;
    di->flags = VFIO_DEVICE_FLAGS_PCI | (model->can_reset() ? VFIO_DEVICE_FLAGS_RESET : 0u);
    di->num_regions = VFIO_PCI_NUM_REGIONS;
    di->num_irqs = VFIO_PCI_NUM_IRQS;
    return 0;
  }
  if (request == uapi::kDeviceGetRegionInfo) {
    auto* ri = static_cast<uapi::RegionInfo*>(arg);
    if (ri->argsz < sizeof *ri) return -EINVAL;
    if (ri->index >= VFIO_PCI_NUM_REGIONS) return -EINVAL;
    const auto spec = model->region(ri->index);
    const std::uint32_t given = ri->argsz;
    ri->flags = spec.size == 0 ? 0 : spec.flags;
    ri->size = spec.size;
    ri->offset = region_base(ri->index);
    ri->cap_offset = 0;
    if (spec.sparse && spec.size != 0) {
      ri->flags |= VFIO_REGION_INFO_FLAG_CAPS;
      const std::size_t need =
          sizeof(uapi::RegionInfo) + sizeof(uapi::SparseMmapCap) + spec.sparse->size() * sizeof(uapi::SparseMmapArea);
      if (given < need) {
        ri->argsz = static_cast<std::uint32_t>(need);
        return 0;
      }
      auto* base = static_cast<std::byte*>(arg);
      uapi::SparseMmapCap cap{};
      cap.header.id = VFIO_REGION_INFO_CAP_SPARSE_MMAP;
      cap.header.version = 1;
      cap.nr_areas = static_cast<std::uint32_t>(spec.sparse->size());
      std::memcpy(base + sizeof(uapi::RegionInfo), &cap, sizeof cap);
      for (std::size_t i = 0; i < spec.sparse->size(); ++i) {
        uapi::SparseMmapArea a{(*spec.sparse)[i].first, (*spec.sparse)[i].second};
        std::memcpy(base + sizeof(uapi::RegionInfo) + sizeof cap + i * sizeof a, &a, sizeof a);
      }
      ri->cap_offset = sizeof(uapi::RegionInfo);
    }
    return 0;
  }
  if (request == uapi::kDeviceGetIrqInfo) {
    auto* ii = static_cast<uapi::IrqInfo*>(arg);
    if (ii->argsz < sizeof *ii || ii->index >= VFIO_PCI_NUM_IRQS) return -EINVAL;
    ii->flags = VFIO_IRQ_INFO_EVENTFD;
    ii->count = 0;
    if (ii->index == VFIO_PCI_MSI_IRQ_INDEX) ii->count = model->msi_count();
    if (ii->index == VFIO_PCI_MSIX_IRQ_INDEX) {
      ii->flags |= VFIO_IRQ_INFO_NORESIZE;
      ii->count = model->msix_count();
    }
    return 0;
  }
  if (request == uapi::kDeviceSetIrqs) {
    auto* s = static_cast<uapi::IrqSet*>(arg);
    if (s->argsz < sizeof *s) return -EINVAL;
    if (s->index != VFIO_PCI_MSIX_IRQ_INDEX && s->index != VFIO_PCI_MSI_IRQ_INDEX) return -EINVAL;
    const std::uint32_t data = s->flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
    const std::uint32_t action = s->flags & VFIO_IRQ_SET_ACTION_TYPE_MASK;
    if (action != VFIO_IRQ_SET_ACTION_TRIGGER) return -EINVAL;
    if (s->index == VFIO_PCI_MSI_IRQ_INDEX) {  // vfio_pci_set_msi_trigger, one message here
      if (data == VFIO_IRQ_SET_DATA_NONE && s->count == 0) {
        if (dev.msi_enabled) (void)model->set_msi(-1);
        dev.msi_enabled = false;
        return 0;
      }
      if (data != VFIO_IRQ_SET_DATA_EVENTFD || model->msi_count() == 0) return -EINVAL;
      if (s->argsz < sizeof *s + s->count * sizeof(std::int32_t)) return -EINVAL;
      if (s->start != 0 || s->count == 0 || s->count > model->msi_count()) return -EINVAL;
      if (dev.msix_enabled > 0) return -EINVAL;  // one interrupt type at a time
      std::int32_t fd = -1;
      std::memcpy(&fd, s->data, sizeof fd);
      if (fd >= 0 && ::fcntl(fd, F_GETFD) < 0) return -EBADF;
      dev.msi_enabled = true;
      (void)model->set_msi(fd);
      return 0;
    }
    if (data == VFIO_IRQ_SET_DATA_NONE && s->count == 0) {  // disable the index
      for (unsigned v = 0; v < dev.msix_enabled; ++v) (void)model->set_msix(v, -1);
      dev.msix_enabled = 0;
      return 0;
    }
    if (data != VFIO_IRQ_SET_DATA_EVENTFD) return -EINVAL;
    if (s->argsz < sizeof *s + s->count * sizeof(std::int32_t)) return -EINVAL;
    if (s->start + s->count > model->msix_count() || s->count == 0) return -EINVAL;
    std::vector<int> fds(s->count);
    std::memcpy(fds.data(), s->data, s->count * sizeof(std::int32_t));
    if (dev.msi_enabled) return -EINVAL;  // one interrupt type at a time
    const bool enabling = dev.msix_enabled == 0;
    if (!enabling && s->start + s->count > dev.msix_enabled) return -EINVAL;  // NORESIZE
    for (int f : fds) {
      if (f >= 0 && ::fcntl(f, F_GETFD) < 0) return -EBADF;
    }
    if (enabling) dev.msix_enabled = s->start + s->count;
    for (std::uint32_t i = 0; i < s->count; ++i) (void)model->set_msix(s->start + i, fds[i] < 0 ? -1 : fds[i]);
    return 0;
  }
  if (request == uapi::kDeviceReset) {
    if (!model->can_reset()) return -EINVAL;
    return -model->reset();
  }
  return -ENOTTY;
}

SysResult<void*> FakeKernel::mmap(std::size_t length, int prot, int fd, std::uint64_t offset) {
  std::lock_guard lock(mu_);
  calls_.push_back({"mmap", 0, fmt::format("0x{:x}+0x{:x}", offset, length)});
  Node* n = node(fd);
  if (n == nullptr) return real_sys().mmap(length, prot, fd, offset);
  if (auto err = scripted_op("mmap")) return std::unexpected(*err);
  if (!usable_device(*n) || (n->kind != Kind::kDevice && n->kind != Kind::kCdev)) return std::unexpected(EINVAL);
  DeviceModel* model = device_of(*n);
  if (model == nullptr) return std::unexpected(ENODEV);
  const unsigned index = static_cast<unsigned>(offset >> kRegionShift);
  const std::uint64_t off = offset & ((std::uint64_t{1} << kRegionShift) - 1);
  const auto spec = model->region(index);
  if ((spec.flags & VFIO_REGION_INFO_FLAG_MMAP) == 0 || off % kPage != 0) return std::unexpected(EINVAL);
  if (spec.sparse) {
    const bool ok = std::any_of(spec.sparse->begin(), spec.sparse->end(), [&](const auto& a) {
      return off >= a.first && off - a.first < a.second && length <= a.second - (off - a.first);
    });
    if (!ok) return std::unexpected(EINVAL);
  }
  std::byte* p = model->map(index, off, length);
  if (p == nullptr) return std::unexpected(EINVAL);
  fake_maps_.insert(p);
  return static_cast<void*>(p);
}

void FakeKernel::munmap(void* addr, std::size_t length) noexcept {
  std::lock_guard lock(mu_);
  calls_.push_back({"munmap", 0, {}});
  if (fake_maps_.erase(addr) == 0) real_sys().munmap(addr, length);
}

SysResult<std::size_t> FakeKernel::pread(int fd, void* buf, std::size_t count, std::uint64_t offset) {
  std::lock_guard lock(mu_);
  Node* n = node(fd);
  if (n == nullptr) return real_sys().pread(fd, buf, count, offset);
  if (auto err = scripted_op("pread")) return std::unexpected(*err);
  if ((n->kind != Kind::kDevice && n->kind != Kind::kCdev) || !usable_device(*n)) return std::unexpected(EINVAL);
  DeviceModel* model = device_of(*n);
  if (model == nullptr) return std::unexpected(ENODEV);
  const unsigned index = static_cast<unsigned>(offset >> kRegionShift);
  const std::uint64_t off = offset & ((std::uint64_t{1} << kRegionShift) - 1);
  const auto spec = model->region(index);
  if ((spec.flags & VFIO_REGION_INFO_FLAG_READ) == 0 || off >= spec.size) return std::unexpected(EINVAL);
  const std::size_t n_ = std::min<std::uint64_t>(count, spec.size - off);
  if (const int e = model->read(index, off, buf, n_); e != 0) return std::unexpected(e);
  return n_;
}

SysResult<std::size_t> FakeKernel::pwrite(int fd, const void* buf, std::size_t count, std::uint64_t offset) {
  std::lock_guard lock(mu_);
  Node* n = node(fd);
  if (n == nullptr) return real_sys().pwrite(fd, buf, count, offset);
  if (auto err = scripted_op("pwrite")) return std::unexpected(*err);
  if ((n->kind != Kind::kDevice && n->kind != Kind::kCdev) || !usable_device(*n)) return std::unexpected(EINVAL);
  DeviceModel* model = device_of(*n);
  if (model == nullptr) return std::unexpected(ENODEV);
  const unsigned index = static_cast<unsigned>(offset >> kRegionShift);
  const std::uint64_t off = offset & ((std::uint64_t{1} << kRegionShift) - 1);
  const auto spec = model->region(index);
  if ((spec.flags & VFIO_REGION_INFO_FLAG_WRITE) == 0 || off >= spec.size) return std::unexpected(EINVAL);
  const std::size_t n_ = std::min<std::uint64_t>(count, spec.size - off);
  if (const int e = model->write(index, off, buf, n_); e != 0) return std::unexpected(e);
  return n_;
}

SysResult<int> FakeKernel::eventfd(unsigned initval, int flags) { return real_sys().eventfd(initval, flags); }
SysResult<std::string> FakeKernel::readlink(const std::string& path) { return real_sys().readlink(path); }
SysResult<std::string> FakeKernel::read_file(const std::string& path, std::size_t max_bytes) {
  return real_sys().read_file(path, max_bytes);
}
SysResult<std::vector<std::string>> FakeKernel::list_dir(const std::string& path) { return real_sys().list_dir(path); }
SysResult<void> FakeKernel::access(const std::string& path, int mode) {
  {
    std::lock_guard lock(mu_);
    calls_.push_back({"access", 0, path});
  }
  return real_sys().access(path, mode);
}

// ==== FakeTree =======================================================================================

FakeTree::FakeTree() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/npo-vfio-test.XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
  dir_ = tmpl;
  std::filesystem::create_directories(dir_ / "sys/bus/pci/devices");
  std::filesystem::create_directories(dir_ / "sys/kernel/iommu_groups");
  std::filesystem::create_directories(dir_ / "dev");
}

FakeTree::~FakeTree() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void FakeTree::write(const std::string& relative, const std::string& text) {
  const auto p = dir_ / relative;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

void FakeTree::link(const std::string& relative, const std::string& target) {
  const auto p = dir_ / relative;
  std::filesystem::create_directories(p.parent_path());
  std::error_code ec;
  std::filesystem::remove(p, ec);
  std::filesystem::create_symlink(target, p);
}

void FakeTree::add_function(const Function& f) {
  // The real tree: /sys/bus/pci/devices/<bdf> -> ../../../devices/pci0000:00/<bdf>.
  const std::string real = "sys/devices/pci0000:00/" + f.bdf;
  write(real + "/vendor", fmt::format("0x{:04x}\n", f.vendor));
  write(real + "/device", fmt::format("0x{:04x}\n", f.device));
  write(real + "/subsystem_vendor", fmt::format("0x{:04x}\n", f.vendor));
  write(real + "/subsystem_device", "0x0001\n");
  write(real + "/class", fmt::format("0x{:06x}\n", f.class_code));
  write(real + "/numa_node", fmt::format("{}\n", f.numa_node));
  link("sys/bus/pci/devices/" + f.bdf, "../../../devices/pci0000:00/" + f.bdf);
  if (f.iommu_group >= 0) {
    link(real + "/iommu_group", fmt::format("../../../kernel/iommu_groups/{}", f.iommu_group));
    link(fmt::format("sys/kernel/iommu_groups/{}/devices/{}", f.iommu_group, f.bdf),
         "../../../../devices/pci0000:00/" + f.bdf);
  }
  if (!f.driver.empty()) {
    link(real + "/driver", "../../../bus/pci/drivers/" + f.driver);
    if (f.driver == "vfio-pci" && f.iommu_group >= 0) write(fmt::format("dev/vfio/{}", f.iommu_group), "");
  }
  if (f.cdev) {
    std::filesystem::create_directories(dir_ / real / "vfio-dev" / *f.cdev);
    write("dev/vfio/devices/" + *f.cdev, "");
  }
}

void FakeTree::add_vfio_nodes(bool iommufd) {
  write("dev/vfio/vfio", "");
  if (iommufd) write("dev/iommu", "");
}

}  // namespace npo::vfio::test
