// fake source for tests/structure/check-deps-selftest.sh
#pragma once
#include <spdlog/logger.h>

#include "npo/hal/error.hpp"
