// SPDX-License-Identifier: Apache-2.0
// npo-fw's module subcommand functions (tools/npo-fw/module.hpp) over the emulated module,
// linked straight into this test until npo-fw's main wires them: the printed banks, the
// progress lines, the exit statuses.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "npo-fw/module.hpp"
#include "npo/fw/cdb.hpp"
#include "optics/optics_emu_rig.hpp"

namespace {

using optics_test::EmuRig;

TEST(NpoFwModule, QueryAndUpdatePrintTheBanksAndProgress) {
  EmuRig rig("2?clock=virtual&hbm=1M&ports=1");
  ASSERT_TRUE(rig.ok());
  // emu:2 has no cables: no module, exit status 1 with the error.
  testing::internal::CaptureStderr();
  EXPECT_EQ(npo::tools::firmware::module_query(rig.sys->device(0), 0), 1);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("not_found"), std::string::npos);

  auto cfg = npo::emu::parse_uri("2?clock=virtual&hbm=1M&ports=1");
  ASSERT_TRUE(cfg.has_value());
  cfg->cables.push_back({.card_a = 0, .port_a = 0, .card_b = 1, .port_b = 0, .channel = {}});
  EmuRig cabled(*cfg);
  ASSERT_TRUE(cabled.ok());
  auto& dev = cabled.sys->device(0);
  testing::internal::CaptureStdout();
  EXPECT_EQ(npo::tools::firmware::module_query(dev, 0), 0);
  const std::string q = testing::internal::GetCapturedStdout();
  EXPECT_NE(q.find("image A  1.0 build 100"), std::string::npos) << q;
  EXPECT_NE(q.find("running committed"), std::string::npos) << q;

  std::vector<std::byte> image(2000, std::byte{0x5a});
  const auto header = npo::fw::cdb::emu_header::make(image, 3, 0, 1);
  testing::internal::CaptureStdout();
  EXPECT_EQ(npo::tools::firmware::module_update(dev, 0, header, image), 0);
  const std::string u = testing::internal::GetCapturedStdout();
  EXPECT_NE(u.find("port 0: start"), std::string::npos) << u;
  EXPECT_NE(u.find("write 2000/2000 bytes (100%)"), std::string::npos) << u;
  EXPECT_NE(u.find("port 0: commit"), std::string::npos) << u;
  EXPECT_NE(u.find("image B runs 3.0 build 1, committed"), std::string::npos) << u;

  testing::internal::CaptureStdout();
  EXPECT_EQ(npo::tools::firmware::module_query(dev, 0, /*json=*/true), 0);
  const std::string j = testing::internal::GetCapturedStdout();
  EXPECT_NE(j.find("\"running\":\"B\""), std::string::npos) << j;

  // A corrupt image: exit status 1, the message names Complete and its CDB status.
  image[3] = std::byte{0};
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  EXPECT_EQ(npo::tools::firmware::module_update(dev, 0, header, image), 1);
  (void)testing::internal::GetCapturedStdout();
  const std::string e = testing::internal::GetCapturedStderr();
  EXPECT_NE(e.find("0107h (Complete Firmware Download)"), std::string::npos) << e;
  EXPECT_NE(e.find("0x71"), std::string::npos) << e;
}

}  // namespace
