// fake source for tests/structure/check-deps-selftest.sh
#include "card/device.hpp"
