// Allowed in hal/: hal's own headers.
#include "npo/hal/backend/registry.hpp"
#include "npo/hal/system.hpp"
