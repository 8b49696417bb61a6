// Forbidden: a tool reaching into the emulator.
#include "npo/emu/emulator.hpp"
