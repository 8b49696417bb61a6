// fake source for tests/structure/check-deps-selftest.sh
#pragma once
#include "npo/hal/backend/backend.hpp"
