// SPDX-License-Identifier: Apache-2.0
// The composition root: the one place that names every backend compiled into the library.
// Explicit calls, no static-constructor self-registration (DESIGN.md, STYLE.md "Avoid").
// Built as its own object (CMake target npo_backends_root), the only code that sees both the
// emulator's and the VFIO backend's registration headers.
#include "npo/hal/backend/registry.hpp"
#include "vfio/register.hpp"
#if NPO_WITH_EMULATOR
#include "npo/emu/register.hpp"
#endif

namespace npo::backend {

Registry builtin_registry() {
  Registry r;
  // The calls can only fail on a duplicate scheme, which a fresh registry cannot have.
#if NPO_WITH_EMULATOR
  (void)npo::emu::register_backend(r);
  (void)npo::emu::register_remote_backend(r);
#endif
  (void)npo::vfio::register_backend(r);
  return r;
}

}  // namespace npo::backend
