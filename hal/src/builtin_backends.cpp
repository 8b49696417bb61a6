// SPDX-License-Identifier: Apache-2.0
// The composition root: the one place that names every backend compiled into the library.
// Explicit calls, no static-constructor self-registration (DESIGN.md, STYLE.md "Avoid").
#include "npo/emu/register.hpp"
#include "npo/hal/backend/registry.hpp"
#include "vfio/register.hpp"

namespace npo::backend {

Registry builtin_registry() {
  Registry r;
  // Both calls can only fail on a duplicate scheme, which a fresh registry cannot have.
  (void)npo::emu::register_backend(r);
  (void)npo::vfio::register_backend(r);
  return r;
}

}  // namespace npo::backend
