// SPDX-License-Identifier: Apache-2.0
// npo-hal: the explicit backend registry. Backends are added by name -- never by static
// constructors -- so a static build needs no --whole-archive and tests can hold several
// registries (and backends) in one process.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "npo/hal/backend/backend.hpp"
#include "npo/hal/error.hpp"

namespace npo::backend {

/// Opens a backend from the part of the URI after "scheme:" (`rest`); `uri` is the whole URI.
using Factory = std::function<Result<std::unique_ptr<Backend>>(std::string_view rest, std::string_view uri)>;

/// Maps URI schemes ("emu", "vfio") to backend factories.
/// Thread-safety: add() must not race with anything; open() and forms() are const and may
/// be called concurrently.
class Registry {
 public:
  /// Adds a scheme. `forms` documents the accepted URIs of the scheme, one per entry, e.g.
  /// {"emu:N", "emu:mesh8"}. Errors: kAlreadyExists if the scheme is taken; kInvalidArgument
  /// for an empty scheme or one containing ':'.
  Result<void> add(std::string scheme, std::vector<std::string> forms, Factory factory);

  /// Opens "scheme:rest". Errors: kInvalidArgument for a URI without a known scheme (the
  /// message lists every accepted form); otherwise what the backend's factory returns.
  [[nodiscard]] Result<std::unique_ptr<Backend>> open(std::string_view uri) const;

  /// Every accepted URI form of every scheme, in registration order.
  [[nodiscard]] std::vector<std::string> forms() const;

 private:
  struct Entry {
    std::string scheme;
    std::vector<std::string> forms;
    Factory factory;
  };
  std::vector<Entry> entries_;
};

/// A registry with the backends compiled into this build: "emu" when built with
/// NPO_WITH_EMULATOR=ON (the default), and "vfio".
/// Each call builds a new registry.
[[nodiscard]] Registry builtin_registry();

}  // namespace npo::backend
