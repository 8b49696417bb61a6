// SPDX-License-Identifier: Apache-2.0
// A program outside npo-hal's tree, built against the installed library (find_package or
// pkg-config): opens an emulated system and prints what it sees.
#include <cstdio>
#include <string>

#include <npo/hal/hal.hpp>

int main(int argc, char** argv) {
  const std::string uri = argc > 1 ? argv[1] : "emu:2";
  auto system = npo::System::open(uri);
  std::printf("npo-hal version: %.*s\n", static_cast<int>(npo::kVersion.size()), npo::kVersion.data());
  if (!system) {
    std::fprintf(stderr, "consumer: System::open(\"%s\") failed: %s\n", uri.c_str(),
                 system.error().to_string().c_str());
    return 1;
  }
  std::printf("backend: %.*s\n", static_cast<int>((*system)->backend_name().size()), (*system)->backend_name().data());
  std::printf("devices: %zu\n", (*system)->device_count());
  return 0;
}
