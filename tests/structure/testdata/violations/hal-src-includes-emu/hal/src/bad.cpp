// fake source for tests/structure/check-deps-selftest.sh
#include "npo/emu/register.hpp"
