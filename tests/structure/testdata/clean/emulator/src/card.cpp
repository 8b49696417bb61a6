// fake source for tests/structure/check-deps-selftest.sh
#include <yaml-cpp/yaml.h>

#include "npo/emu/register.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/backend.hpp"
#include "optics/channel.hpp"
