// fake source for tests/structure/check-deps-selftest.sh
#include "npo/hal/backend/backend.hpp"
