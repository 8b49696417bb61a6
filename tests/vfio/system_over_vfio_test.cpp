// SPDX-License-Identifier: Apache-2.0
// The whole stack over the VFIO backend: npo::System (drivers/card: probe through config
// space, BAR0 and the mailbox; queues; host memory registration through dma_map) on the VFIO
// backend, over the fake kernel with the emulator's card behind it, through both IOMMU APIs.
// The driver code cannot tell it from the emulator backend: that is the point of the seam.
#include <array>
#include <chrono>
#include <cstring>

#include <gtest/gtest.h>

#include "emulator_model.hpp"
#include "npo/hal/backend/registry.hpp"
#include "npo/hal/hal.hpp"

namespace npo::vfio {
namespace {

using namespace std::chrono_literals;

class SystemOverVfio : public ::testing::TestWithParam<IommuApi> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        registry_
            .add("vfio", {"vfio:fake"},
                 [api = GetParam()](std::string_view, std::string_view) -> Result<std::unique_ptr<backend::Backend>> {
                   auto be = test::vfio_over_emulator("emu:1?clock=virtual&hbm=64M", api);
                   if (!be) return fail(Code::kInternal, "fake VFIO rig failed");
                   return be;
                 })
            .has_value());
  }
  backend::Registry registry_;
};

TEST_P(SystemOverVfio, ProbesAndMovesDataThroughTheDriver) {
  SystemOptions opts;
  opts.registry = &registry_;
  auto sys = System::open("vfio:fake", opts);
  ASSERT_TRUE(sys.has_value()) << sys.error().to_string();
  EXPECT_EQ((*sys)->backend_name(), "vfio");
  ASSERT_EQ((*sys)->device_count(), 1u);
  auto& d = (*sys)->device(0);

  auto q = d.open_queue({.engine = 0, .depth = 64});
  ASSERT_TRUE(q.has_value()) << q.error().to_string();
  constexpr std::size_t kBytes = 3 * 4096 + 123;
  auto a = allocate_host_memory(d, kBytes);
  auto b = allocate_host_memory(d, kBytes);
  ASSERT_TRUE(a.has_value()) << a.error().to_string();
  ASSERT_TRUE(b.has_value()) << b.error().to_string();
  auto h = allocate_hbm(d, kBytes);
  ASSERT_TRUE(h.has_value()) << h.error().to_string();
  for (std::size_t i = 0; i < kBytes; ++i) (*a)->bytes()[i] = static_cast<std::byte>(i * 7 + 1);
  std::memset((*b)->bytes().data(), 0, kBytes);

  ASSERT_TRUE((*q)->enqueue_copy(DmaAddress::host((*a)->iova()), DmaAddress::hbm(h->offset), kBytes));
  ASSERT_TRUE((*q)->enqueue_copy(DmaAddress::hbm(h->offset), DmaAddress::host((*b)->iova()), kBytes));
  ASSERT_TRUE((*q)->submit().has_value());
  std::vector<OpCompletion> done;
  std::array<OpCompletion, 8> buf;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (done.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    const auto n = (*q)->poll(buf);
    done.insert(done.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
  }
  ASSERT_EQ(done.size(), 2u);
  for (const auto& c : done) EXPECT_EQ(c.status, OpStatus::kOk) << op_status_name(c.status);
  EXPECT_EQ(std::memcmp((*a)->bytes().data(), (*b)->bytes().data(), kBytes), 0);
}

INSTANTIATE_TEST_SUITE_P(Api, SystemOverVfio, ::testing::Values(IommuApi::kType1, IommuApi::kIommufd),
                         [](const auto& p) { return std::string(iommu_api_name(p.param)); });

}  // namespace
}  // namespace npo::vfio
