// Forbidden: hal including device logic.
#include "card/mailbox.hpp"
