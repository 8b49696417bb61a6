// fake source for tests/structure/check-deps-selftest.sh
#include <linux/vfio.h>
#include <sys/ioctl.h>

#include "vfio/register.hpp"
#include "card/device.hpp"
