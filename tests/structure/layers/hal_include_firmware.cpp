// Forbidden: hal (the public API layer) including the device contract or anything below it.
#include "npo/fw/regs.hpp"
