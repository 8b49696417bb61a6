// fake source for tests/structure/check-deps-selftest.sh
#include <npo/drivers/card/queue.hpp>
