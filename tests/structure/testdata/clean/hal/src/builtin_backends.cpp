// fake source for tests/structure/check-deps-selftest.sh
#include "npo/emu/register.hpp"
#include "npo/hal/backend/registry.hpp"
#include "vfio/register.hpp"
