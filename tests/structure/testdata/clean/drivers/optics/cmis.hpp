// fake source for tests/structure/check-deps-selftest.sh
#pragma once
#include "card/device.hpp"
#include "npo/fw/mailbox.hpp"
