// SPDX-License-Identifier: Apache-2.0
// npo-fw end to end (docs/firmware.md): keygen, sign, verify, then update and query against a
// running npo-emud, so the update one process makes is what the next process's query sees.
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/emud_process.hpp"
#include "common/run_command.hpp"
#include "npo/fw/cdb.hpp"

namespace {

const std::string kFw = NPO_FW;
const std::string kEmud = NPO_EMUD;
const std::string kKeys = std::string(NPO_TEST_DATA_DIR) + "/firmware";

struct Dir {
  std::string path;
  Dir() {
    char t[] = "/tmp/npo-fw-test-XXXXXX";
    path = ::mkdtemp(t);
  }
  ~Dir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& f) const { return path + "/" + f; }
};

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

nlohmann::json query(const std::string& uri) {
  const auto r = npo_test::run_command(kFw + " query --backend " + uri + " --card 0 --json");
  EXPECT_EQ(r.status, 0) << r.out;
  return nlohmann::json::parse(r.out, nullptr, false);
}

TEST(NpoFwTool, SignVerifyUpdateQueryAcrossProcesses) {
  Dir d;
  write(d / "payload", std::string(6000, 'p'));
  write(d / "bootfail", std::string(100, 'x') + "NPO-EMU:BOOT-FAIL" + std::string(100, 'x'));
  // keygen: a pair of the right sizes, the secret not readable by others; refuses to overwrite.
  auto r = npo_test::run_command(kFw + " keygen --out " + (d / "mine") + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(std::filesystem::file_size(d / "mine.pub"), 32u);
  EXPECT_EQ(std::filesystem::file_size(d / "mine.sec"), 64u);
  EXPECT_EQ(std::filesystem::status(d / "mine.sec").permissions() & std::filesystem::perms::others_read,
            std::filesystem::perms::none);
  r = npo_test::run_command(kFw + " keygen --out " + (d / "mine") + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  // sign with the development key; verify with and without the key.
  r = npo_test::run_command(kFw + " sign --key " + kKeys + "/dev-key.sec --out " + (d / "good.img") + " " +
                            (d / "payload") + " --fw-version 1.3.0 --security 2 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  r = npo_test::run_command(kFw + " verify --json --key " + kKeys + "/dev-key.pub " + (d / "good.img") + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto v = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_EQ(v.value("version", ""), "1.3.0");
  EXPECT_EQ(v.value("security_version", 0), 2);
  EXPECT_EQ(v.value("signature_verified", false), true);
  r = npo_test::run_command(kFw + " verify --key " + (d / "mine.pub") + " " + (d / "good.img") + " 2>&1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("unknown_key"), std::string::npos) << r.out;
  r = npo_test::run_command(kFw + " sign --key " + (d / "mine.sec") + " --out " + (d / "foreign.img") + " " +
                            (d / "payload") + " --fw-version 1.4.0 --security 2 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  r = npo_test::run_command(kFw + " sign --key " + kKeys + "/dev-key.sec --out " + (d / "bootfail.img") + " " +
                            (d / "bootfail") + " --fw-version 1.5.0 --security 2 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  // A corrupt copy is refused by verify without any key.
  {
    std::ifstream in(d / "good.img", std::ios::binary);
    std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    b[b.size() - 1] ^= 1;
    write(d / "corrupt.img", b);
  }
  r = npo_test::run_command(kFw + " verify " + (d / "corrupt.img") + " 2>&1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("digest_mismatch"), std::string::npos) << r.out;

  npo_test::EmudProcess emud;
  ASSERT_TRUE(emud.start(kEmud, "emu:2")) << emud.output();
  const std::string uri = emud.uri();
  auto q = query(uri);
  ASSERT_TRUE(q.is_array() && q.size() == 1) << q.dump();
  EXPECT_EQ(q[0].value("running", ""), "1.2.0");
  // Refused before anything is written: another vendor's key; the flash is unchanged.
  r = npo_test::run_command(kFw + " update --backend " + uri + " --card 0 " + (d / "foreign.img") + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("unknown_key"), std::string::npos) << r.out;
  EXPECT_EQ(query(uri), q);
  // The good update, then a query from another process sees it committed in slot B.
  r = npo_test::run_command(kFw + " update --backend " + uri + " --card 0 " + (d / "good.img") + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("writing"), std::string::npos) << "progress on stderr: " << r.out;
  EXPECT_NE(r.out.find("1.2.0 -> 1.3.0 committed in slot B"), std::string::npos) << r.out;
  q = query(uri);
  EXPECT_EQ(q[0].value("running", ""), "1.3.0");
  EXPECT_EQ(q[0].value("committed", ""), "B");
  EXPECT_EQ(q[0].value("security_version", 0), 2);
  // Re-installing the running version needs --force.
  r = npo_test::run_command(kFw + " update --backend " + uri + " --card 0 " + (d / "good.img") + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("already runs firmware 1.3.0"), std::string::npos) << r.out;
  // An image that does not come up: exit 3, the card runs 1.3.0 still.
  r = npo_test::run_command(kFw + " update -q --backend " + uri + " --card 0 " + (d / "bootfail.img") + " 2>&1");
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_NE(r.out.find("rolled back"), std::string::npos) << r.out;
  q = query(uri);
  EXPECT_EQ(q[0].value("running", ""), "1.3.0");
  EXPECT_EQ(q[0].value("rolled_back", false), true);
  // --no-commit leaves a trial; rollback returns to the committed slot, commit makes it permanent.
  r = npo_test::run_command(kFw + " sign --key " + kKeys + "/dev-key.sec --out " + (d / "next.img") + " " +
                            (d / "payload") + " --fw-version 1.4.0 --security 2 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  r = npo_test::run_command(kFw + " update -q --no-commit --backend " + uri + " --card 0 " + (d / "next.img") +
                            " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("on trial, not committed in slot A"), std::string::npos) << r.out;
  EXPECT_EQ(query(uri)[0].value("state", ""), "trial");
  r = npo_test::run_command(kFw + " rollback --backend " + uri + " --card 0 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(query(uri)[0].value("running", ""), "1.3.0");
  r = npo_test::run_command(kFw + " update -q --no-commit --backend " + uri + " --card 0 " + (d / "next.img") +
                            " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  r = npo_test::run_command(kFw + " commit --backend " + uri + " --card 0 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  q = query(uri);
  EXPECT_EQ(q[0].value("running", ""), "1.4.0");
  EXPECT_EQ(q[0].value("committed", ""), "A");
  r = npo_test::run_command(kFw + " commit --backend " + uri + " --card 0 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  // The other card was never touched.
  r = npo_test::run_command(kFw + " query --backend " + uri + " --card 1");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("card 1: firmware 1.2.0 in slot A"), std::string::npos) << r.out;
  // Bad command lines exit 2; a bad version string is a refused operation (1).
  EXPECT_EQ(npo_test::run_command(kFw + " update " + (d / "good.img") + " 2>&1").status, 2);
  EXPECT_EQ(npo_test::run_command(kFw + " sign --key x --out y z --fw-version 1.2 2>&1").status, 1);
  EXPECT_EQ(npo_test::run_command(kFw + " frobnicate 2>&1").status, 2);
}

}  // namespace

// npo-fw module: a signed module image (target 0:0, the module's part number or any) whose
// payload is the vendor file (16-byte vendor header + image) goes into port 0's module through
// CMIS CDB; images for a card, for another part number, older, or signed with a key the card
// does not trust are refused before any CDB command, the banks unchanged.
TEST(NpoFwTool, ModuleUpdateFromASignedImageAndItsRefusals) {
  Dir d;
  std::string image(5000, '\0');
  for (std::size_t i = 0; i < image.size(); ++i) image[i] = static_cast<char>(i * 7 + 1);
  const auto bytes = std::as_bytes(std::span(image.data(), image.size()));
  const auto hdr = npo::fw::cdb::emu_header::make(bytes, 2, 1, 7);
  write(d / "vendor.bin", std::string(reinterpret_cast<const char*>(hdr.data()), hdr.size()) + image);
  auto sign = [&](const std::string& out, const std::string& args) {
    const auto r = npo_test::run_command(kFw + " sign --key " + kKeys + "/dev-key.sec --out " + (d / out) + " " +
                                         (d / "vendor.bin") + " " + args + " 2>&1");
    EXPECT_EQ(r.status, 0) << r.out;
  };
  sign("module.img", "--vendor 0 --device 0 --model '' --fw-version 2.1.7");
  sign("card.img", "--fw-version 2.1.7");
  sign("other-pn.img", "--vendor 0 --device 0 --model NOT-THIS-PART --fw-version 2.1.7");
  sign("older.img", "--vendor 0 --device 0 --model '' --fw-version 0.5.0");
  ASSERT_EQ(npo_test::run_command(kFw + " keygen --out " + (d / "other") + " 2>&1").status, 0);
  ASSERT_EQ(npo_test::run_command(kFw + " sign --key " + (d / "other.sec") + " --out " + (d / "foreign.img") + " " +
                                  (d / "vendor.bin") + " --vendor 0 --device 0 --model '' --fw-version 2.1.7 2>&1")
                .status,
            0);

  npo_test::EmudProcess emud;
  ASSERT_TRUE(emud.start(kEmud, "emu:mesh8")) << emud.output();  // cabled: every port has a module
  const std::string where = " --backend " + emud.uri() + " --card 0 --port 0";
  auto mquery = [&] {
    const auto r = npo_test::run_command(kFw + " module query --json" + where);
    EXPECT_EQ(r.status, 0) << r.out;
    return nlohmann::json::parse(r.out, nullptr, false);
  };
  const auto before = mquery();
  ASSERT_EQ(before.value("running", ""), "A") << before.dump();
  for (const auto& [img, why] : {std::pair{"card.img", "wrong_device"}, std::pair{"other-pn.img", "NOT-THIS-PART"},
                                 std::pair{"older.img", "older_version"}, std::pair{"foreign.img", "unknown_key"}}) {
    const auto r = npo_test::run_command(kFw + " module update" + where + " " + (d / img) + " 2>&1");
    EXPECT_EQ(r.status, 1) << img << ": " << r.out;
    EXPECT_NE(r.out.find(why), std::string::npos) << img << ": " << r.out;
    EXPECT_EQ(mquery(), before) << img << " changed the banks";
  }
  auto r = npo_test::run_command(kFw + " module update" + where + " " + (d / "module.img") + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("write"), std::string::npos) << "progress: " << r.out;
  const auto after = mquery();
  EXPECT_EQ(after.value("running", ""), "B") << after.dump();
  EXPECT_EQ(after.value("committed", ""), "B");
  EXPECT_EQ(after["images"]["B"].value("major", 0), 2);
  EXPECT_EQ(after["images"]["B"].value("minor", 0), 1);
  EXPECT_EQ(after["images"]["B"].value("build", 0), 7);
  r = npo_test::run_command(kFw + " module update" + where + " " + (d / "module.img") + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("same_version"), std::string::npos) << r.out;
}
