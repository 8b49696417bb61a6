// fake source for tests/structure/check-deps-selftest.sh
#include "vfio/register.hpp"
