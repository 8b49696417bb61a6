// Allowed in tools/: hal's public API.
#include "npo/hal/hal.hpp"
