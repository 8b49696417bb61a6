// SPDX-License-Identifier: Apache-2.0
// npo::vfio_bound_cards and npo::default_uri (npo/hal/system.hpp): whether real cards are
// bound to vfio-pci, read from sysfs with the filter `vfio:all` uses.
#include <string>
#include <vector>

#include "npo/hal/system.hpp"
#include "vfio/backend.hpp"
#include "vfio/sysfs.hpp"

namespace npo {

Result<std::vector<std::string>> vfio_bound_cards(std::string_view sysfs_root) {
  vfio::Options all;  // the filter of vfio:all (the reference card's IDs)
  if (auto r = vfio::parse_uri("all", "vfio:all", all); !r) return std::unexpected(r.error());
  vfio::Sysfs sysfs(vfio::real_sys(), std::string(sysfs_root));
  auto functions = sysfs.list(all.filter);
  if (!functions) return std::unexpected(functions.error());
  std::vector<std::string> out;
  for (const auto& f : *functions) {
    if (f.driver == "vfio-pci") out.push_back(f.address.to_string());
  }
  return out;
}

std::string default_uri(std::string_view sysfs_root) {
  auto cards = vfio_bound_cards(sysfs_root);
  return cards && !cards->empty() ? std::string("vfio:all") : std::string(kDefaultUri);
}

}  // namespace npo
