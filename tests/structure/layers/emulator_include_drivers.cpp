// Forbidden: the emulator including device logic. It is the hardware, not a shortcut around it.
#include "card/mailbox.hpp"
