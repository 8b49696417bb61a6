// fake source for tests/structure/check-deps-selftest.sh
#pragma once
#include <bit>
#include <cstdint>
