// fake source for tests/structure/check-deps-selftest.sh
#include <spdlog/spdlog.h>
