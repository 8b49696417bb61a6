// Allowed in drivers/: hal's public API and backend interface, firmware-iface, drivers' own.
#include "card/mailbox.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/backend.hpp"
#include "npo/hal/system.hpp"
