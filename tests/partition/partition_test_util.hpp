// SPDX-License-Identifier: Apache-2.0
// Tests of the partition manager: a switch wrapper that "crashes" the controller after k
// operations, a temporary journal path, and helpers comparing the table with the switches.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "npo/hal/ocs.hpp"
#include "npo/hal/partition.hpp"

namespace npo_test {

/// Shared operation budget of a set of CrashingOcs: after `left` connect/disconnect calls every
/// call of every wrapper fails with kUnavailable, as if the controller process had died.
struct CrashBudget {
  std::atomic<long> left{1L << 40};
};

/// An OCS that forwards to `inner` until the shared budget runs out.
class CrashingOcs final : public npo::OpticalCircuitSwitch {
 public:
  CrashingOcs(npo::OpticalCircuitSwitch& inner, CrashBudget& budget) : inner_(inner), budget_(budget) {}
  [[nodiscard]] std::string_view name() const noexcept override { return inner_.name(); }
  [[nodiscard]] unsigned radix() const noexcept override { return inner_.radix(); }
  npo::Result<void> connect(unsigned a, unsigned b) override {
    if (!take()) return dead();
    return inner_.connect(a, b);
  }
  npo::Result<void> disconnect(unsigned port) override {
    if (!take()) return dead();
    return inner_.disconnect(port);
  }
  [[nodiscard]] npo::Result<std::vector<npo::CrossConnect>> cross_connects() const override {
    if (budget_.left.load() <= 0) return dead();
    return inner_.cross_connects();
  }

 private:
  bool take() { return budget_.left.fetch_sub(1) > 0; }
  static std::unexpected<npo::Error> dead() { return npo::fail(npo::Code::kUnavailable, "controller crashed"); }
  npo::OpticalCircuitSwitch& inner_;
  CrashBudget& budget_;
};

/// A journal path in a fresh temporary directory, removed at destruction.
struct TempJournal {
  TempJournal() {
    char tmpl[] = "/tmp/npo-partition-XXXXXX";
    dir = ::mkdtemp(tmpl);
    path = dir / "journal.jsonl";
  }
  ~TempJournal() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::filesystem::path dir;
  std::filesystem::path path;
};

/// Every cross-connect of `switches` as "name:a-b".
inline std::set<std::string> switch_state(const std::vector<npo::OpticalCircuitSwitch*>& switches) {
  std::set<std::string> out;
  for (auto* s : switches) {
    for (const auto& [a, b] : s->cross_connects().value_or(std::vector<npo::CrossConnect>{})) {
      out.insert(std::string(s->name()) + ":" + std::to_string(a) + "-" + std::to_string(b));
    }
  }
  return out;
}

/// The cross-connects a table implies on a pool (card c port p = ocs<p> port c).
inline std::set<std::string> table_state(const std::vector<npo::Partition>& parts) {
  std::set<std::string> out;
  for (const auto& p : parts) {
    for (const auto& l : p.links) {
      out.insert("ocs" + std::to_string(l.port) + ":" + std::to_string(l.a) + "-" + std::to_string(l.b));
    }
  }
  return out;
}

}  // namespace npo_test
