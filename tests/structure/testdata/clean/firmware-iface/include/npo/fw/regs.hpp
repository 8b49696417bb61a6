// fake source for tests/structure/check-deps-selftest.sh
#pragma once
#include <stdint.h>

#include <array>

#include "npo/fw/bits.hpp"
#include "bits.hpp"
