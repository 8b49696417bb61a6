// SPDX-License-Identifier: Apache-2.0
// Runs the backend conformance suite on the emulator: once through the builtin registry
// (the URI path every tool uses), once on an Emulator built directly with a HBM size that is
// not a power of two (BAR2 must round it up), and once with the realtime clock.
#include "backend_conformance.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/hal/backend/registry.hpp"

namespace npo::conformance {
namespace {

std::unique_ptr<npo::backend::Backend> from_registry(const char* uri) {
  auto r = npo::backend::builtin_registry().open(uri);
  if (!r) {
    ADD_FAILURE() << uri << ": " << r.error().to_string();
    return nullptr;
  }
  return std::move(*r);
}

std::unique_ptr<npo::backend::Backend> direct_emulator() {
  npo::emu::SystemConfig cfg;
  cfg.name = "conformance-direct";
  cfg.num_cards = 1;
  cfg.card.hbm_bytes = 24u << 20;  // BAR2 = 32 MiB
  cfg.card.num_ports = 4;
  cfg.clock = npo::emu::ClockMode::kVirtual;
  cfg.seed = 3;
  auto emu = npo::emu::Emulator::create(cfg);
  if (!emu) {
    ADD_FAILURE() << emu.error().to_string();
    return nullptr;
  }
  return (*emu)->make_backend("emu:direct");
}

INSTANTIATE_TEST_SUITE_P(Emulator, BackendConformance,
                         ::testing::Values(
                             ConformanceTarget{
                                 "registry_emu2_virtual", [] { return from_registry("emu:2?clock=virtual"); }, {}},
                             ConformanceTarget{"direct_hbm24M", direct_emulator, {}},
                             ConformanceTarget{"registry_emu1_realtime", [] { return from_registry("emu:1"); }, {}}),
                         target_name);

}  // namespace
}  // namespace npo::conformance
