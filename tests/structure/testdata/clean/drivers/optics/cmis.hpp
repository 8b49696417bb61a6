// fake source for tests/structure/check-deps-selftest.sh
#pragma once
#include "gpu/device.hpp"
#include "npo/fw/mailbox.hpp"
