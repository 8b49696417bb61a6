// SPDX-License-Identifier: Apache-2.0
// The emulator's card behind the fake kernel. See emulator_model.hpp.
#include "emulator_model.hpp"

#include <linux/vfio.h>
#include <sys/mman.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "npo/hal/backend/registry.hpp"
#include "vfio/backend.hpp"

namespace npo::vfio::test {

namespace {

constexpr std::uint64_t kPage = 4096;

int errno_of(const Error& e) {
  switch (e.code()) {
    case Code::kAlreadyExists: return EEXIST;
    case Code::kOutOfRange:
    case Code::kInvalidArgument: return EINVAL;
    case Code::kNotFound: return ENOENT;
    case Code::kResourceExhausted: return ENOMEM;
    case Code::kPermissionDenied: return EPERM;
    default: return EIO;
  }
}

}  // namespace

std::unique_ptr<EmulatorDevice> EmulatorDevice::open(const std::string& emu_uri) {
  std::unique_ptr<EmulatorDevice> d(new EmulatorDevice());
  auto be = npo::backend::builtin_registry().open(emu_uri);
  if (!be) {
    ADD_FAILURE() << emu_uri << ": " << be.error().to_string();
    return nullptr;
  }
  d->be_ = std::move(*be);
  auto fns = d->be_->enumerate();
  if (!fns || fns->empty()) {
    ADD_FAILURE() << emu_uri << ": no card";
    return nullptr;
  }
  auto dev = d->be_->open(fns->front().address);
  if (!dev) {
    ADD_FAILURE() << dev.error().to_string();
    return nullptr;
  }
  d->dev_ = std::move(*dev);
  auto m0 = d->dev_->mmio(0);
  auto m4 = d->dev_->mmio(4);
  auto r2 = d->dev_->region_info(2);
  auto ap = d->dev_->aperture_fd(2);
  if (!m0 || !m4 || !r2 || !ap) {
    ADD_FAILURE() << "emulated card lacks BAR0/BAR4/BAR2";
    return nullptr;
  }
  d->bar0_ = *m0;
  d->bar4_ = *m4;
  d->bar2_size_ = r2->size;
  // The BAR as the CPU sees it: anonymous memory of the BAR's size, with the card's HBM (the
  // emulator's memfd) mapped over its start, so stores reach the HBM the card's engines use.
  void* base = ::mmap(nullptr, d->bar2_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    ADD_FAILURE() << "mmap of " << d->bar2_size_ << " bytes: " << std::strerror(errno);
    return nullptr;
  }
  d->bar2_ = static_cast<std::byte*>(base);
  const std::uint64_t hbm = (ap->size + kPage - 1) / kPage * kPage;
  if (ap->offset % kPage != 0 || hbm > d->bar2_size_ ||
      ::mmap(base, hbm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ap->fd, static_cast<off_t>(ap->offset)) ==
          MAP_FAILED) {
    ADD_FAILURE() << "cannot map the card's HBM memfd into BAR2: " << std::strerror(errno);
    return nullptr;
  }
  return d;
}

EmulatorDevice::~EmulatorDevice() {
  if (bar2_ != nullptr) ::munmap(bar2_, bar2_size_);
  dev_.reset();
  be_.reset();
}

DeviceModel::RegionSpec EmulatorDevice::region(unsigned index) {
  constexpr std::uint32_t kRw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
  if (index == VFIO_PCI_CONFIG_REGION_INDEX) return {4096, kRw, std::nullopt};
  if (index > 5) return {};
  auto r = dev_->region_info(index);
  if (!r || r->size == 0) return {};
  if (index == 2) return {bar2_size_, kRw | VFIO_REGION_INFO_FLAG_MMAP, std::nullopt};
  return {r->size, kRw, std::nullopt};
}

int EmulatorDevice::read(unsigned index, std::uint64_t offset, void* buf, std::size_t n) {
  if (index == VFIO_PCI_CONFIG_REGION_INDEX) {
    auto r = dev_->config_read(static_cast<std::uint32_t>(offset), {static_cast<std::byte*>(buf), n});
    return r ? 0 : errno_of(r.error());
  }
  if (index == 2) {
    if (offset > bar2_size_ || n > bar2_size_ - offset) return EINVAL;
    std::memcpy(buf, bar2_ + offset, n);
    return 0;
  }
  backend::Mmio* m = index == 0 ? bar0_ : index == 4 ? bar4_ : nullptr;
  if (m == nullptr) return EINVAL;
  if (n == 4) {
    const std::uint32_t v = m->read32(offset);
    std::memcpy(buf, &v, 4);
    return 0;
  }
  if (n == 8) {
    const std::uint64_t v = m->read64(offset);
    std::memcpy(buf, &v, 8);
    return 0;
  }
  return EINVAL;  // the backend only makes 4- and 8-byte BAR accesses
}

int EmulatorDevice::write(unsigned index, std::uint64_t offset, const void* buf, std::size_t n) {
  if (index == VFIO_PCI_CONFIG_REGION_INDEX) {
    auto r = dev_->config_write(static_cast<std::uint32_t>(offset), {static_cast<const std::byte*>(buf), n});
    return r ? 0 : errno_of(r.error());
  }
  if (index == 2) {
    if (offset > bar2_size_ || n > bar2_size_ - offset) return EINVAL;
    std::memcpy(bar2_ + offset, buf, n);
    return 0;
  }
  backend::Mmio* m = index == 0 ? bar0_ : index == 4 ? bar4_ : nullptr;
  if (m == nullptr) return EINVAL;
  if (n == 4) {
    std::uint32_t v = 0;
    std::memcpy(&v, buf, 4);
    m->write32(offset, v);
    return 0;
  }
  if (n == 8) {
    std::uint64_t v = 0;
    std::memcpy(&v, buf, 8);
    m->write64(offset, v);
    return 0;
  }
  return EINVAL;
}

std::byte* EmulatorDevice::map(unsigned index, std::uint64_t offset, std::size_t len) {
  if (index != 2 || offset > bar2_size_ || len > bar2_size_ - offset) return nullptr;
  return bar2_ + offset;
}

int EmulatorDevice::set_msix(unsigned vector, int fd) {
  const std::array<int, 1> fds{fd};
  auto r = dev_->set_msix_eventfds(vector, fds);
  return r ? 0 : errno_of(r.error());
}

int EmulatorDevice::reset() {
  auto r = dev_->reset();
  return r ? 0 : errno_of(r.error());
}

int EmulatorDevice::dma_map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length, bool read, bool write) {
  const auto access = static_cast<backend::DmaAccess>((read ? 1 : 0) | (write ? 2 : 0));
  auto r = dev_->dma_map(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(vaddr)), iova, length, access);
  return r ? 0 : errno_of(r.error());
}

int EmulatorDevice::dma_unmap(std::uint64_t iova, std::uint64_t length) {
  auto r = dev_->dma_unmap(iova, length);
  return r ? 0 : errno_of(r.error());
}

// ---- The whole rig as one backend ----------------------------------------------------------------

namespace {

struct World {
  FakeTree tree;
  std::unique_ptr<EmulatorDevice> model;
  std::unique_ptr<FakeKernel> kernel;
};

/// Forwards to the VFIO backend and owns what it runs on (destroyed after it).
class WorldBackend final : public backend::Backend {
 public:
  WorldBackend(std::unique_ptr<World> world, std::unique_ptr<backend::Backend> inner)
      : world_(std::move(world)), inner_(std::move(inner)) {}
  std::string_view name() const noexcept override { return inner_->name(); }
  const std::string& uri() const noexcept override { return inner_->uri(); }
  Result<std::vector<backend::FunctionInfo>> enumerate() override { return inner_->enumerate(); }
  Result<std::unique_ptr<backend::Device>> open(const backend::PciAddress& a) override { return inner_->open(a); }

 private:
  std::unique_ptr<World> world_;
  std::unique_ptr<backend::Backend> inner_;  // destroyed first
};

}  // namespace

std::unique_ptr<backend::Backend> vfio_over_emulator(const std::string& emu_uri, IommuApi api) {
  auto w = std::make_unique<World>();
  w->model = EmulatorDevice::open(emu_uri);
  if (!w->model) return nullptr;
  const auto& fi = w->model->info();
  const std::string bdf = fi.address.to_string();
  FakeTree::Function f;
  f.bdf = bdf;
  f.vendor = fi.vendor_id;
  f.device = fi.device_id;
  f.class_code = fi.class_code;
  f.numa_node = 0;
  f.iommu_group = 7;
  f.driver = "vfio-pci";
  f.cdev = "vfio0";
  w->tree.add_function(f);
  w->tree.add_vfio_nodes(/*iommufd=*/true);
  w->kernel = std::make_unique<FakeKernel>(w->tree.dev_root());
  w->kernel->add_group(7, {bdf});
  w->kernel->add_device(bdf, w->model.get(), "vfio0");
  w->kernel->iova_ranges = w->model->iova_ranges();

  Options o;
  o.uri = std::string("vfio:all?iommu=") + std::string(iommu_api_name(api));
  if (auto r = parse_uri(o.uri.substr(5), o.uri, o); !r) {
    ADD_FAILURE() << r.error().to_string();
    return nullptr;
  }
  o.sys = w->kernel.get();
  o.paths = {w->tree.sys_root(), w->tree.dev_root()};
  auto be = open_backend(std::move(o));
  if (!be) {
    ADD_FAILURE() << be.error().to_string();
    return nullptr;
  }
  return std::make_unique<WorldBackend>(std::move(w), std::move(*be));
}

}  // namespace npo::vfio::test
