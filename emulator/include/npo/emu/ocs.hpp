// SPDX-License-Identifier: Apache-2.0
// npo-hal emulator: EmulatedOcs -- one of the emulator's optical circuit switches behind the
// HAL's switch interface (npo/hal/ocs.hpp), so the partition manager and tools drive the
// emulated fabric as they would drive a real OCS controller. docs/partitions.md.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "npo/emu/emulator.hpp"
#include "npo/hal/ocs.hpp"
#include "npo/hal/partition.hpp"

namespace npo::emu {

/// Switch `name` of an Emulator (Emulator::connect / disconnect / cross_connects). Card ports
/// whose light path a change moves flap and retrain by themselves (docs/topology.md
/// "Optical switches"). Thread-safety: every method is safe from any thread (the emulator's
/// fabric lock); apply() is all-or-nothing against other calls of this object only.
class EmulatedOcs final : public OpticalCircuitSwitch {
 public:
  /// The switch called `name` of `emulator`. Errors: kNotFound (no such switch).
  static Result<std::unique_ptr<EmulatedOcs>> open(std::shared_ptr<Emulator> emulator, std::string_view name);
  /// Every switch of `emulator`, in the order of its SystemConfig::switches.
  static std::vector<std::unique_ptr<EmulatedOcs>> open_all(const std::shared_ptr<Emulator>& emulator);

  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  [[nodiscard]] unsigned radix() const noexcept override { return radix_; }
  /// Emulator::connect. Errors: as OpticalCircuitSwitch::connect (kFailedPrecondition for an
  /// uncabled port).
  Result<void> connect(unsigned a, unsigned b) override;
  /// Emulator::disconnect. Errors: as OpticalCircuitSwitch::disconnect.
  Result<void> disconnect(unsigned port) override;
  /// Emulator::cross_connects.
  [[nodiscard]] Result<std::vector<CrossConnect>> cross_connects() const override;
  /// All or nothing: the batch is checked against the current cross-connects and the
  /// switch's cabling (an uncabled port is refused before any port moves), so no step can fail
  /// afterwards unless another controller changes the switch meanwhile (not detected). On the
  /// virtual clock no emulated time passes during the batch, so the cards only ever see the
  /// final state; on the realtime clock a card may see an intermediate one for microseconds.
  Result<void> apply(const std::vector<OcsChange>& changes) override;

 private:
  EmulatedOcs(std::shared_ptr<Emulator> emulator, std::string name, unsigned radix, std::vector<bool> cabled);
  std::shared_ptr<Emulator> emu_;
  std::string name_;
  unsigned radix_;
  std::vector<bool> cabled_;  ///< per switch port: a cable leads to it
};

/// The partition manager's enforcer over an Emulator: Emulator::set_partition (GLOBAL.PARTITION,
/// registers.md §3.8), pool card index = emulator card index. Thread-safety: any thread.
class EmulatedEnforcer final : public PartitionEnforcer {
 public:
  explicit EmulatedEnforcer(std::shared_ptr<Emulator> emulator) : emu_(std::move(emulator)) {}
  /// Emulator::set_partition. Errors: kOutOfRange (no such card).
  Result<void> set_partition(std::uint32_t card, std::uint32_t id) override { return emu_->set_partition(card, id); }

 private:
  std::shared_ptr<Emulator> emu_;
};

}  // namespace npo::emu
