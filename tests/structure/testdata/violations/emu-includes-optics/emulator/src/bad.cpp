// fake source for tests/structure/check-deps-selftest.sh
#include "optics/cmis.hpp"
