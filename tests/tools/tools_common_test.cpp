// SPDX-License-Identifier: Apache-2.0
// tools/common: the backend URI order (and the default: real cards, else the emulator), the JSON text, error lines,
// tables and the one bring-up every tool calls (on the emulator's virtual clock).
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/backend.hpp"
#include "common/bring_up.hpp"
#include "common/fake_sysfs.hpp"
#include "common/output.hpp"
#include "npo/hal/system.hpp"

namespace {

TEST(ToolsBackend, OwnerUriOwnsOnlyTheCardsAskedForOnEmuRemote) {
  using npo::tools::owner_uri;
  EXPECT_EQ(owner_uri("emu-remote:/tmp/d", {2}), "emu-remote:/tmp/d?owner=2");
  EXPECT_EQ(owner_uri("emu-remote:/tmp/d", {2, 0}), "emu-remote:/tmp/d?owner=2,0");
  // The user's choice stands: a mode, an owner list, a card list (its indices renumber).
  EXPECT_EQ(owner_uri("emu-remote:/tmp/d?mode=rw", {2}), "emu-remote:/tmp/d?mode=rw");
  EXPECT_EQ(owner_uri("emu-remote:/tmp/d?owner=1", {2}), "emu-remote:/tmp/d?owner=1");
  EXPECT_EQ(owner_uri("emu-remote:/tmp/d?card=2,3", {0}), "emu-remote:/tmp/d?card=2,3");
  EXPECT_EQ(owner_uri("emu-remote:/tmp/d", {}), "emu-remote:/tmp/d");
  EXPECT_EQ(owner_uri("emu:mesh8", {2}), "emu:mesh8");
}

using npo::tools::Column;
using npo::tools::Table;

/// Sets (or with nullptr unsets) environment variable `name` for one test, restoring it
/// afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// NPO_BACKEND for one test.
class BackendEnv : public ScopedEnv {
 public:
  explicit BackendEnv(const char* value) : ScopedEnv(npo::tools::kBackendEnv, value) {}
};

using npo_test::FakeSysfs;

TEST(ToolsBackend, GivenThenEnvironmentThenDefault) {
  const FakeSysfs none;  // no card bound to vfio-pci, whatever this machine has
  const ScopedEnv sysfs(npo::tools::kSysfsRootEnv, none.root().c_str());
  const auto uri = [](const std::optional<std::string>& given) { return npo::tools::resolve_backend(given).uri; };
  {
    const BackendEnv env(nullptr);
    EXPECT_EQ(uri(std::nullopt), npo::kDefaultUri);
    EXPECT_EQ(uri(std::string("emu:2")), "emu:2");
  }
  {
    const BackendEnv env("emu:3");
    EXPECT_EQ(uri(std::nullopt), "emu:3");
    EXPECT_EQ(uri(std::string("emu:2")), "emu:2");
    EXPECT_EQ(uri(std::string()), "");  // an explicit empty --backend is kept (open fails)
  }
  {
    const BackendEnv env("");  // set but empty: as unset
    EXPECT_EQ(uri(std::nullopt), npo::kDefaultUri);
  }
}

// Issue 35: with no choice given, a tool uses real cards when an NPO card is bound to vfio-pci
// (what vfio:all opens), else the emulator, and says so.
TEST(ToolsBackend, DefaultIsVfioWhenACardIsBoundElseTheEmulator) {
  using npo::tools::BackendSource;
  const BackendEnv env(nullptr);
  FakeSysfs tree;
  const ScopedEnv sysfs(npo::tools::kSysfsRootEnv, tree.root().c_str());
  // Another device bound to vfio-pci, and an NPO card bound to another driver or to none: no
  // card vfio:all would open.
  tree.add("0000:01:00.0", 0x8086, 0x1234, "vfio-pci");
  tree.add("0000:3b:00.0", NPO_PCI_VENDOR_ID, NPO_PCI_DEVICE_ID, "npo-kmd");
  tree.add("0000:3c:00.0", NPO_PCI_VENDOR_ID, NPO_PCI_DEVICE_ID, "");
  auto cards = npo::vfio_bound_cards(tree.root());
  ASSERT_TRUE(cards.has_value()) << cards.error().to_string();
  EXPECT_TRUE(cards->empty());
  auto choice = npo::tools::resolve_backend(std::nullopt);
  EXPECT_EQ(choice.uri, npo::kDefaultUri);
  EXPECT_EQ(choice.source, BackendSource::kEmulator);
  EXPECT_EQ(npo::tools::emulator_fallback_warning("npo-smi", choice.uri),
            "npo-smi: no NPO card is bound to vfio-pci; running on the emulator (emu:mesh8); pass --backend to choose");

  tree.add("0000:5e:00.0", NPO_PCI_VENDOR_ID, NPO_PCI_DEVICE_ID, "vfio-pci");
  cards = npo::vfio_bound_cards(tree.root());
  ASSERT_TRUE(cards.has_value());
  EXPECT_EQ(*cards, std::vector<std::string>{"0000:5e:00.0"});
  EXPECT_EQ(npo::default_uri(tree.root()), "vfio:all");
  choice = npo::tools::resolve_backend(std::nullopt);
  EXPECT_EQ(choice.uri, "vfio:all");
  EXPECT_EQ(choice.source, BackendSource::kCards);
  // A choice given wins over the cards.
  EXPECT_EQ(npo::tools::resolve_backend(std::string("emu:2")).source, BackendSource::kOption);
  const BackendEnv chosen("emu:3");
  EXPECT_EQ(npo::tools::resolve_backend(std::nullopt).source, BackendSource::kEnvironment);
}

TEST(ToolsBackend, NoSysfsMeansTheEmulator) {
  const auto cards = npo::vfio_bound_cards("/nonexistent-npo-sysfs");
  ASSERT_FALSE(cards.has_value());
  EXPECT_EQ(cards.error().code(), npo::Code::kUnavailable);
  EXPECT_EQ(npo::default_uri("/nonexistent-npo-sysfs"), npo::kDefaultUri);
}

TEST(ToolsBackend, OptionBindsTheGivenValue) {
  CLI::App app;
  std::optional<std::string> given;
  std::string level;
  npo::tools::add_backend_option(app, given, "-b,--backend", "backend URI");
  npo::tools::add_log_level_option(app, level);
  app.parse("-b emu:4 --log-level debug", false);
  EXPECT_EQ(given, "emu:4");
  EXPECT_EQ(level, "debug");
  EXPECT_FALSE(npo::tools::configure_logging("loud"));
  EXPECT_TRUE(npo::tools::configure_logging("warn"));
}

TEST(ToolsOutput, JsonIsIndentedAndSurvivesBytesThatAreNotUtf8) {
  const nlohmann::json j = {
      {"file", std::string("a\xff.hex")}, {"n", 1}, {"x", npo::tools::or_null(std::optional<int>())}};
  EXPECT_EQ(npo::tools::json_text(j), "{\n  \"file\": \"a\xEF\xBF\xBD.hex\",\n  \"n\": 1,\n  \"x\": null\n}");
  EXPECT_EQ(npo::tools::or_null(std::optional<double>(2.5)), nlohmann::json(2.5));
}

TEST(ToolsOutput, FailPrintsToolWhatAndErrorAndReturnsOne) {
  const npo::Error e(npo::Code::kNotFound, "no such card");
  testing::internal::CaptureStderr();
  EXPECT_EQ(npo::tools::fail("npo-x", "open emu:9", e), 1);
  EXPECT_EQ(npo::tools::fail("npo-x", e), 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "npo-x: open emu:9: " + e.to_string() + "\nnpo-x: " + e.to_string() + "\n");
}

TEST(ToolsTable, PadsCellsToTheColumnWidthWithTheColumnSeparators) {
  using Align = Column::Align;
  const Table t(
      {{"CARD", 4, Align::kRight, ""}, {"STATE", 7, Align::kLeft, "  "}, {"Gb/s", 6}, {"WHY", 0, Align::kLeft}});
  EXPECT_EQ(t.header(), "CARD  STATE     Gb/s WHY\n");
  EXPECT_EQ(t.row(3, "UP", "800", "fine"), "   3  UP         800 fine\n");
  // A cell longer than its column is not cut; the free-text column takes any length.
  EXPECT_EQ(t.row(12345, "DEGRADED", "12.5", ""), "12345  DEGRADED   12.5 \n");
  EXPECT_EQ(t.row_of({"1", "A", "2", "x y z"}), "   1  A            2 x y z\n");
  // Same as the format strings the tools used before: "{:>4}  {:<7} {:>6} {}".
  EXPECT_EQ(t.row(7, "DOWN", fmt::format("{:g}", 0.5), "-"),
            fmt::format("{:>4}  {:<7} {:>6} {}\n", 7, "DOWN", 0.5, "-"));
}

TEST(ToolsBringUp, TrainsEveryCabledPortAndProgramsRoutesOnRequest) {
  auto sys = npo::System::open("emu:mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(sys) << sys.error().to_string();
  auto links = npo::tools::bring_up(**sys);
  ASSERT_TRUE(links) << links.error().step << ": " << links.error().error.to_string();
  EXPECT_EQ(links->links.ports_with_module, 56u);  // 8 cards x 7 cabled ports
  EXPECT_EQ(links->links.up, 56u);
  EXPECT_EQ(links->routes.diameter(), 1);  // computed from the discovered full mesh
  EXPECT_EQ(links->topology.cards.size(), 8u);
  auto routed = npo::tools::bring_up(**sys, {.program_routes = true});
  ASSERT_TRUE(routed) << routed.error().step << ": " << routed.error().error.to_string();
  EXPECT_TRUE(routed->complete());
  EXPECT_EQ(routed->routes.diameter(), 1);
}

TEST(ToolsBringUp, TheTimeoutCapsTheBringUp) {
  auto sys = npo::System::open("emu:mesh8?clock=virtual&hbm=1M");
  ASSERT_TRUE(sys) << sys.error().to_string();
  // 1 ms of platform clock is far less than a training takes (~60 ms): ports end by timeout.
  auto up = npo::tools::bring_up(**sys, {.timeout_ns = 1'000'000});
  ASSERT_TRUE(up) << up.error().error.to_string();
  EXPECT_EQ(up->links.ports_with_module, 56u);
  EXPECT_LT(up->links.up, 56u);
  EXPECT_GT(up->links.failed, 0u);
}

}  // namespace
