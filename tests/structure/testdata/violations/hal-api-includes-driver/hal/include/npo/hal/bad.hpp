// fake source for tests/structure/check-deps-selftest.sh
#include "gpu/device.hpp"
