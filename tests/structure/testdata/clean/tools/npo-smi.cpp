// fake source for tests/structure/check-deps-selftest.sh
#include <unistd.h>
#include <sys/ioctl.h>

#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/table.hpp"
#include "npo/hal/hal.hpp"
#include <npo/hal/system.hpp>
