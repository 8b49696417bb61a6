// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: OpticalCircuitSwitch -- the control interface of one optical circuit
// switch (OCS), small enough that a real switch driver (a vendor's REST/gRPC/TL1 controller
// API) can implement it: name, radix, connect, disconnect, read the cross-connects, and a
// batched apply. The emulator implements it over npo::emu::Emulator (npo/emu/ocs.hpp);
// InMemoryOcs below is a switch with no light behind it, for planning and benchmarks.
// The partition manager (npo/hal/partition.hpp) drives any of them. docs/partitions.md.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "npo/hal/error.hpp"

namespace npo {

/// One port pair joined inside an OCS (a bidirectional light path), lower port first.
using CrossConnect = std::pair<unsigned, unsigned>;

/// One step of a batched reconfiguration (OpticalCircuitSwitch::apply).
struct OcsChange {
  enum class Kind : std::uint8_t {
    kConnect,     ///< join ports a and b (both idle before)
    kDisconnect,  ///< remove the cross-connect a-b (it must exist as a-b)
  };
  Kind kind = Kind::kConnect;
  unsigned a = 0;
  unsigned b = 0;
  friend bool operator==(const OcsChange&, const OcsChange&) = default;
};

/// "connect 3-17" / "disconnect 3-17".
[[nodiscard]] std::string ocs_change_text(const OcsChange& c);

/// One optical circuit switch: `radix()` ports, each idle or cross-connected to exactly one
/// other port. A cross-connect is a mirror setting (MEMS) or a liquid-crystal state, not a
/// packet path: it carries whatever light enters, so the card ports at its ends see their far
/// end change at once and retrain.
///
/// Real OCS controllers (e.g. the batched "apply a list of port pairs" of MEMS switch
/// management APIs) take a whole list of pairs in one call and move the mirrors together;
/// apply() is that call. A switch without a batched call inherits the default apply(), which
/// validates the whole batch against the current cross-connects first, then issues connect
/// and disconnect one by one and undoes the done steps if one fails.
///
/// Thread-safety: implementations make every method safe from any thread (each call is atomic
/// on its own); a sequence of calls is not. The partition manager assumes it is the only
/// controller changing its switches.
class OpticalCircuitSwitch {
 public:
  virtual ~OpticalCircuitSwitch() = default;

  /// The switch's name (unique in a fabric, as in FabricSwitch::name: "ocs0").
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// Number of ports, 0..radix()-1.
  [[nodiscard]] virtual unsigned radix() const noexcept = 0;

  /// Cross-connects ports `a` and `b`. Errors: kOutOfRange (a port >= radix), kInvalidArgument
  /// (a == b), kFailedPrecondition (a port already cross-connected, or not cabled where the
  /// switch knows its cabling), kUnavailable (the switch does not answer; the state is then
  /// unknown: read cross_connects()).
  virtual Result<void> connect(unsigned a, unsigned b) = 0;
  /// Removes the cross-connect holding `port` (both its ports go idle). Errors: kOutOfRange,
  /// kFailedPrecondition (the port is idle), kUnavailable as connect.
  virtual Result<void> disconnect(unsigned port) = 0;
  /// Every cross-connect, each pair once, lower port first, sorted. Errors: kUnavailable.
  [[nodiscard]] virtual Result<std::vector<CrossConnect>> cross_connects() const = 0;

  /// Applies `changes` in order, all or nothing: a batch that does not fit the current state
  /// (a disconnect of a pair that is not there, a connect of a busy port, a port out of range,
  /// a port twice in one state) fails with kFailedPrecondition / kOutOfRange / kInvalidArgument
  /// before any port moves. The default implementation then runs connect/disconnect one by
  /// one; when step k fails (a port without cable, a switch error) it undoes steps k-1..0 in
  /// reverse and returns that step's error. What it cannot guarantee: when the switch stops
  /// answering mid-batch (kUnavailable) the undo fails too, and the state is partial; the
  /// error is then kAborted naming how many steps were done, and the caller must read
  /// cross_connects(). Another controller changing the switch between the validation read and
  /// the steps is not detected. A real OCS with a transactional batch overrides this.
  virtual Result<void> apply(const std::vector<OcsChange>& changes);
};

/// Checks `changes` against the cross-connects `current` of a switch of `radix` ports as
/// OpticalCircuitSwitch::apply does, and returns the cross-connects after them (sorted).
/// Errors: as apply's validation. Pure function; thread-safe.
Result<std::vector<CrossConnect>> ocs_after(unsigned radix, std::vector<CrossConnect> current,
                                            const std::vector<OcsChange>& changes);

/// An OCS that only keeps its cross-connects in memory (no light, no cabling check): for
/// planning, tests of the algorithms and benchmarks. Thread-safety: every method is safe from
/// any thread (one mutex).
class InMemoryOcs final : public OpticalCircuitSwitch {
 public:
  /// A switch called `name` with `radix` ports, all idle.
  InMemoryOcs(std::string name, unsigned radix);
  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  [[nodiscard]] unsigned radix() const noexcept override { return radix_; }
  Result<void> connect(unsigned a, unsigned b) override;
  Result<void> disconnect(unsigned port) override;
  [[nodiscard]] Result<std::vector<CrossConnect>> cross_connects() const override;
  /// Switch operations (connect + disconnect calls that succeeded) since creation.
  [[nodiscard]] std::uint64_t operations() const noexcept;

 private:
  std::string name_;
  unsigned radix_;
  mutable std::mutex mu_;
  std::vector<unsigned> partner_;  ///< partner port of each port, or radix_ when idle
  std::uint64_t operations_ = 0;
};

}  // namespace npo
