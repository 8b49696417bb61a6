// SPDX-License-Identifier: Apache-2.0
// Runs the backend conformance suite (tests/conformance) on the VFIO backend:
//   - over the fake kernel with the emulator's card behind it, once per IOMMU API
//     (type1v2 container/group, iommufd + device cdev): every line of the VFIO backend runs,
//     the kernel is scripted;
//   - on a real card when NPO_VFIO_BDF names one bound to vfio-pci (e.g. in the QEMU guest or
//     on a lab machine): NPO_VFIO_BDF=0000:3b:00.0 [NPO_VFIO_IOMMU=type1|iommufd].
// Without NPO_VFIO_BDF the real-card target is not instantiated and one test says why.
#include <cstdlib>
#include <string>
#include <vector>

#include "../conformance/backend_conformance.hpp"
#include "emulator_model.hpp"
#include "npo/hal/backend/registry.hpp"

namespace npo::conformance {
namespace {

using npo::vfio::IommuApi;

std::unique_ptr<npo::backend::Backend> real_card() {
  const char* bdf = std::getenv("NPO_VFIO_BDF");
  const char* api = std::getenv("NPO_VFIO_IOMMU");
  std::string uri = std::string("vfio:") + (bdf != nullptr ? bdf : "");
  if (api != nullptr && *api != '\0') uri += std::string("?iommu=") + api;
  auto be = npo::backend::builtin_registry().open(uri);
  if (!be) {
    ADD_FAILURE() << uri << ": " << be.error().to_string();
    return nullptr;
  }
  return std::move(*be);
}

std::vector<ConformanceTarget> targets() {
  std::vector<ConformanceTarget> t = {
      {"fake_type1_emu",
       [] { return npo::vfio::test::vfio_over_emulator("emu:1?clock=virtual", IommuApi::kType1); },
       {}},
      {"fake_iommufd_emu",
       [] { return npo::vfio::test::vfio_over_emulator("emu:1?clock=virtual", IommuApi::kIommufd); },
       {}},
      // HBM not a power of two: BAR2 is larger than the memory behind it.
      {"fake_type1_emu_hbm24M",
       [] { return npo::vfio::test::vfio_over_emulator("emu:1?clock=realtime&hbm=24M", IommuApi::kType1); },
       {}},
  };
  if (const char* bdf = std::getenv("NPO_VFIO_BDF"); bdf != nullptr && *bdf != '\0') {
    auto addr = npo::backend::PciAddress::parse(bdf);
    t.push_back({"real_card", real_card, addr ? std::optional(*addr) : std::nullopt});
  }
  return t;
}

INSTANTIATE_TEST_SUITE_P(Vfio, BackendConformance, ::testing::ValuesIn(targets()), target_name);

TEST(VfioRealCardConformance, NeedsNpoVfioBdf) {
  const char* bdf = std::getenv("NPO_VFIO_BDF");
  if (bdf == nullptr || *bdf == '\0') {
    GTEST_SKIP() << "no real card: set NPO_VFIO_BDF=<domain:bus:dev.fn> of a card bound to vfio-pci (and optionally "
                    "NPO_VFIO_IOMMU=type1|iommufd) to run the conformance suite on it (target Vfio/real_card)";
  }
  SUCCEED() << "the real_card target runs on " << bdf;
}

}  // namespace
}  // namespace npo::conformance
