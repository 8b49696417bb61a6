// SPDX-License-Identifier: Apache-2.0
// drivers/card: what the other driver folders (drivers/optics) may use of a card beyond the
// public API -- its BAR0 registers, its mailbox client -- and the System's platform clock.
// The public headers expose none of it; the card's full driver state (device_impl.hpp) stays
// private to drivers/card.
#pragma once

#include "npo/hal/backend/backend.hpp"
#include "npo/hal/device.hpp"
#include "npo/hal/system.hpp"

namespace npo {

namespace card {

class MailboxClient;

/// A card's registers and mailbox, as the drivers reach them. Valid while the Device lives.
struct CardAccess {
  backend::Mmio* bar0;           ///< BAR0 control registers (docs/spec/registers.md)
  const DeviceInfo& info;        ///< what System::open read
  card::MailboxClient* mailbox;  ///< serialised firmware mailbox (card/mailbox.hpp)
  backend::Device* function;     ///< the backend function (check_connection() when BAR0 reads all-ones)
  backend::Clock* clock;         ///< the System's platform clock (the one time base of every driver deadline)
};

/// Access to `device`'s registers and mailbox (device.cpp).
[[nodiscard]] CardAccess access(Device& device) noexcept;

/// The platform clock of `system` (backend::Backend::clock()): the one time base of every
/// driver deadline. Valid while the System lives.
[[nodiscard]] backend::Clock& clock_of(System& system) noexcept;

}  // namespace card
}  // namespace npo
