// fake source for tests/structure/check-deps-selftest.sh
#pragma once
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/backend.hpp"
#include "npo/hal/log.hpp"
