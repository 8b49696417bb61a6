// Allowed in emulator/: hal's public headers and backend interface, firmware-iface, its own.
#include "npo/emu/emulator.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/backend.hpp"
