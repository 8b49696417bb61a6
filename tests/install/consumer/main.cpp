// SPDX-License-Identifier: Apache-2.0
// A program outside npo-hal's tree, built against the installed library (find_package or
// pkg-config): prints the version of the library it loaded, opens an emulated system and prints
// what it sees.
#include <cstdio>
#include <string>

#include <npo/hal/hal.hpp>

int main(int argc, char** argv) {
  const std::string uri = argc > 1 ? argv[1] : "emu:2";
  auto system = npo::System::open(uri);
  // The library loaded at run time (npo::version()), checked against the headers compiled in.
  const npo::Version v = npo::version();
  std::printf("npo-hal version: %.*s\n", static_cast<int>(v.string.size()), v.string.data());
  if (v.string != NPO_HAL_VERSION_STRING || v.major != NPO_HAL_VERSION_MAJOR || v.minor != NPO_HAL_VERSION_MINOR ||
      v.patch != NPO_HAL_VERSION_PATCH) {
    std::fprintf(stderr, "consumer: compiled against npo-hal %s, loaded %.*s\n", NPO_HAL_VERSION_STRING,
                 static_cast<int>(v.string.size()), v.string.data());
    return 1;
  }
  if (!system) {
    std::fprintf(stderr, "consumer: System::open(\"%s\") failed: %s\n", uri.c_str(),
                 system.error().to_string().c_str());
    return 1;
  }
  std::printf("backend: %.*s\n", static_cast<int>((*system)->backend_name().size()), (*system)->backend_name().data());
  std::printf("devices: %zu\n", (*system)->device_count());
  return 0;
}
