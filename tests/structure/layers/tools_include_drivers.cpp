// Forbidden: a tool reaching below the public API into device logic.
#include "card/mailbox.hpp"
