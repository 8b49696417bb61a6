// Forbidden: device logic (drivers/) including the emulator. Must not compile with the
// drivers layer's include path (DESIGN.md "Dependency rules").
#include "npo/emu/emulator.hpp"
