// SPDX-License-Identifier: Apache-2.0
#include "npo/hal/system.hpp"

#include <cstdlib>

#include <fmt/format.h>

#include "card/device_impl.hpp"
#include "npo/fw/pci.hpp"
#include "npo/hal/backend/registry.hpp"
#include "npo/hal/log.hpp"

namespace npo {

struct System::Impl {
  std::unique_ptr<backend::Backend> backend;
  std::vector<std::unique_ptr<Device>> devices;  // destroyed before the backend (member order)
  std::string uri;
  ~Impl() { devices.clear(); }
};

System::System(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
System::~System() = default;

Result<std::unique_ptr<System>> System::open(std::string_view uri, const SystemOptions& options) {
  backend::Registry builtin;
  const backend::Registry* reg = options.registry;
  if (reg == nullptr) {
    builtin = backend::builtin_registry();
    reg = &builtin;
  }
  auto be = reg->open(uri);
  if (!be) return std::unexpected(be.error());
  auto fns = (*be)->enumerate();
  if (!fns) return std::unexpected(fns.error());
  auto impl = std::make_unique<Impl>();
  impl->uri = std::string(uri);
  std::uint32_t index = 0;
  for (const auto& fi : *fns) {
    if (fi.vendor_id != fw::pci::kVendorId || fi.device_id != fw::pci::kDeviceId) continue;
    auto dev = (*be)->open(fi.address);
    if (!dev) return std::unexpected(Error(dev.error()).with({.card = index}));
    auto di = DeviceImpl::probe(std::move(*dev), index, (*be)->clock(), options.mailbox_timeout_ns);
    if (!di) return std::unexpected(di.error());
    impl->devices.push_back(detail::DriverAccess::make_device(std::move(*di)));
    ++index;
  }
  impl->backend = std::move(*be);
  npo::log::get(npo::log::Subsystem::kCore).info("system '{}': {} cards", uri, impl->devices.size());
  return std::unique_ptr<System>(new System(std::move(impl)));
}

const std::string& System::uri() const noexcept { return impl_->uri; }
std::string_view System::backend_name() const noexcept { return impl_->backend->name(); }
std::size_t System::device_count() const noexcept { return impl_->devices.size(); }

Device& System::device(std::size_t index) {
  if (index >= impl_->devices.size()) {
    npo::log::get(npo::log::Subsystem::kCore)
        .critical("System::device({}) out of range (0..{})", index, impl_->devices.size());
    std::abort();
  }
  return *impl_->devices[index];
}

Result<Device*> System::device_by_fabric_id(std::uint32_t fabric_id) {
  for (auto& d : impl_->devices) {
    if (d->info().fabric_id == fabric_id) return d.get();
  }
  return fail(Code::kNotFound, fmt::format("no card with fabric ID {}", fabric_id));
}

Clock System::clock() const noexcept { return Clock(impl_->backend->clock()); }

backend::Backend& detail::DriverAccess::backend(System& s) noexcept { return *s.impl_->backend; }

backend::Clock& card::clock_of(System& system) noexcept { return detail::DriverAccess::backend(system).clock(); }

}  // namespace npo
