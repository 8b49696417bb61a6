// SPDX-License-Identifier: Apache-2.0
// Runs the backend conformance suite, unchanged, on emu-remote: a client of an npo-emud daemon
// this test starts (emu:2, links left down) and stops. The suite's host memory comes from
// aligned_alloc, so it also exercises emu-remote's re-backing of anonymous memory by a memfd.
#include "backend_conformance.hpp"
#include "common/emud_process.hpp"
#include "npo/hal/backend/registry.hpp"

namespace npo::conformance {
namespace {

npo_test::EmudProcess* g_daemon = nullptr;

class DaemonEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    g_daemon = &daemon_;
    ASSERT_TRUE(daemon_.start(NPO_EMUD, "emu:2?hbm=24M", {"--no-bring-up"})) << daemon_.output();
  }
  void TearDown() override { EXPECT_EQ(daemon_.stop(), 0) << daemon_.output(); }

 private:
  npo_test::EmudProcess daemon_;
};

[[maybe_unused]] auto* const g_env = ::testing::AddGlobalTestEnvironment(new DaemonEnvironment);

std::unique_ptr<npo::backend::Backend> open_uri(const std::string& uri) {
  auto r = npo::backend::builtin_registry().open(uri);
  if (!r) {
    ADD_FAILURE() << uri << ": " << r.error().to_string();
    return nullptr;
  }
  return std::move(*r);
}
/// The owner runs its card's engines (the default, emud-protocol.md §5.12).
std::unique_ptr<npo::backend::Backend> remote() { return open_uri(g_daemon->uri()); }
/// npo-emud's session thread runs them.
std::unique_ptr<npo::backend::Backend> remote_daemon_engines() { return open_uri(g_daemon->uri() + "?engine=daemon"); }

// The suite on both placements of the engines: the same card whichever process runs them.
INSTANTIATE_TEST_SUITE_P(EmuRemote, BackendConformance,
                         ::testing::Values(ConformanceTarget{"emu_remote_daemon", remote, {}},
                                           ConformanceTarget{"emu_remote_daemon_engines", remote_daemon_engines, {}}),
                         target_name);

}  // namespace
}  // namespace npo::conformance
