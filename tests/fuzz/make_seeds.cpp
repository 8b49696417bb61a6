// SPDX-License-Identifier: Apache-2.0
// npo_fuzz_seeds EEPROM_DIR OUT_DIR [DEV_KEY_SEC]: the seed corpora of the fuzz targets, from the
// real dumps of tests/data/eeprom. OUT_DIR/{cmis,sff8636,sff8472}/ get the raw images (plus a paged
// CMIS image with pages 01h-11h and an externally calibrated SFF-8472 image, so the fuzzers start
// deep); OUT_DIR/dump_text/ gets each dump as .hex text, as ethtool -m hex text and as raw bytes.
// OUT_DIR/firmware_image/ gets signed firmware images (SHA-512 and BLAKE2b, with and without a
// model), signed with DEV_KEY_SEC (default: EEPROM_DIR/../firmware/dev-key.sec, the development key).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "npo/hal/firmware.hpp"
#include "npo/hal/xcvr_decode.hpp"

namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}
std::string str(const std::vector<std::byte>& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

std::string ethtool_hex(const std::vector<std::byte>& b) {
  std::string s = "Offset\t\tValues\n------\t\t------";
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i % 16 == 0) s += fmt::format("\n0x{:04x}:\t\t", i);
    s += fmt::format("{:02x} ", std::to_integer<unsigned>(b[i]));
  }
  return s + "\n";
}

/// Signed images for fuzz_firmware_image, with the development key `key_path`.
int firmware_seeds(const fs::path& key_path, const fs::path& dir) {
  std::ifstream kf(key_path, std::ios::binary);
  npo::FirmwareSecretKey key{};
  if (!kf.read(reinterpret_cast<char*>(key.data()), static_cast<std::streamsize>(key.size()))) {
    std::fprintf(stderr, "npo_fuzz_seeds: cannot read the 64-byte key %s\n", key_path.c_str());
    return 1;
  }
  fs::create_directories(dir);
  struct Seed {
    const char* name;
    std::size_t payload;
    npo::FirmwareDigest digest;
    const char* model;
  };
  for (const Seed& s : {Seed{"sha512", 700, npo::FirmwareDigest::kSha512, "NPO-REF-1"},
                        Seed{"blake2b", 300, npo::FirmwareDigest::kBlake2b512, "NPO-REF-1"},
                        Seed{"any-model", 64, npo::FirmwareDigest::kSha512, ""}}) {
    std::vector<std::byte> payload(s.payload);
    for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::byte>(i * 7 + 3);
    npo::FirmwareImageSpec spec;
    spec.model = s.model;
    spec.version = {1, 3, 0};
    spec.security_version = 2;
    spec.digest = s.digest;
    auto img = npo::sign_firmware_image(payload, key, spec);
    if (!img) {
      std::fprintf(stderr, "npo_fuzz_seeds: %s\n", img.error().to_string().c_str());
      return 1;
    }
    write(dir / fmt::format("{}.img", s.name), str(*img));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: %s EEPROM_DIR OUT_DIR [DEV_KEY_SEC]\n", argv[0]);
    return 2;
  }
  const fs::path in = argv[1], out = argv[2];
  if (int rc = firmware_seeds(argc == 4 ? fs::path(argv[3]) : in / ".." / "firmware" / "dev-key.sec",
                              out / "firmware_image");
      rc != 0) {
    return rc;
  }
  for (const char* d : {"cmis", "sff8636", "sff8472", "dump_text"}) fs::create_directories(out / d);
  int n = 0;
  for (const auto& e : fs::directory_iterator(in)) {
    if (e.path().extension() != ".hex") continue;
    auto bytes = npo::xcvr::load_dump_file(e.path());
    if (!bytes) {
      std::fprintf(stderr, "npo_fuzz_seeds: %s\n", bytes.error().to_string().c_str());
      return 1;
    }
    auto m = npo::xcvr::decode_module(*bytes);
    if (!m) {
      std::fprintf(stderr, "npo_fuzz_seeds: %s: %s\n", e.path().c_str(), m.error().to_string().c_str());
      return 1;
    }
    const std::string stem = e.path().stem().string();
    const fs::path dir = out / std::string(npo::xcvr::spec_name(m->spec));
    write(dir / (stem + ".bin"), str(*bytes));
    std::ifstream t(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << t.rdbuf();
    write(out / "dump_text" / (stem + ".hex"), ss.str());
    write(out / "dump_text" / (stem + ".ethtool"), ethtool_hex(*bytes));
    write(out / "dump_text" / (stem + ".bin"), str(*bytes));
    if (m->spec == npo::xcvr::Spec::kCmis && !m->flat_memory && bytes->size() == 256) {
      // Paged: add pages 01h, 02h, 10h, 11h with every monitor and flag advertised, thresholds,
      // lane monitors, raised flags and an active control set.
      auto b = *bytes;
      b.resize(768, std::byte{0});
      const auto set = [&b](std::size_t off, unsigned v) { b[off] = static_cast<std::byte>(v); };
      set(128 + 151, 0x10);
      set(128 + 157, 0x0f);
      set(128 + 158, 0x06);
      set(128 + 159, 0x03);
      set(128 + 160, 0x0f);
      for (std::size_t i = 0; i < 40; i += 2) set(256 + 128 + i, 0x40 - i);
      for (std::size_t i = 0; i < 16; ++i) set(512 + 135 + i, 1u << (i % 8));
      for (std::size_t i = 0; i < 48; i += 2) set(512 + 154 + i, 0x20 + i);
      for (std::size_t i = 0; i < 8; ++i) set(512 + 206 + i, 0x10 | ((i & ~1u) << 1));
      write(dir / (stem + "_paged768.bin"), str(b));
    }
    if (m->spec == npo::xcvr::Spec::kSff8472 && bytes->size() == 512) {
      auto b = *bytes;
      b[92] = std::byte{0x58};  // external calibration
      write(dir / (stem + "_extcal.bin"), str(b));
    }
    ++n;
  }
  std::printf("npo_fuzz_seeds: %d dumps -> %s\n", n, out.c_str());
  return n > 0 ? 0 : 1;
}
