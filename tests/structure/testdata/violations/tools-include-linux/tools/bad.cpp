// fake source for tests/structure/check-deps-selftest.sh
#include <linux/vfio.h>
