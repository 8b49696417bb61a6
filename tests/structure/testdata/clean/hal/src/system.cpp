// fake source for tests/structure/check-deps-selftest.sh
#include <fmt/format.h>

#include "card/device.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/system.hpp"
