// SPDX-License-Identifier: Apache-2.0
// OpticalCircuitSwitch: batch validation, the default step-by-step apply with undo, and the
// in-memory switch (npo/hal/ocs.hpp).
#include "npo/hal/ocs.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace npo {

std::string ocs_change_text(const OcsChange& c) {
  return fmt::format("{} {}-{}", c.kind == OcsChange::Kind::kConnect ? "connect" : "disconnect", c.a, c.b);
}

Result<std::vector<CrossConnect>> ocs_after(unsigned radix, std::vector<CrossConnect> current,
                                            const std::vector<OcsChange>& changes) {
  std::vector<unsigned> partner(radix, radix);
  for (const auto& [a, b] : current) {
    if (a >= radix || b >= radix)
      return fail(Code::kOutOfRange, fmt::format("cross-connect {}-{} beyond radix {}", a, b, radix));
    partner[a] = b;
    partner[b] = a;
  }
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const auto& c = changes[i];
    const std::string what = fmt::format("change {} ({})", i, ocs_change_text(c));
    if (c.a >= radix || c.b >= radix)
      return fail(Code::kOutOfRange, fmt::format("{}: port beyond radix {}", what, radix));
    if (c.a == c.b) return fail(Code::kInvalidArgument, fmt::format("{}: a port cannot join itself", what));
    if (c.kind == OcsChange::Kind::kConnect) {
      if (partner[c.a] != radix || partner[c.b] != radix) {
        return fail(Code::kFailedPrecondition, fmt::format("{}: a port is already cross-connected", what));
      }
      partner[c.a] = c.b;
      partner[c.b] = c.a;
    } else {
      if (partner[c.a] != c.b) return fail(Code::kFailedPrecondition, fmt::format("{}: no such cross-connect", what));
      partner[c.a] = radix;
      partner[c.b] = radix;
    }
  }
  std::vector<CrossConnect> out;
  for (unsigned p = 0; p < radix; ++p) {
    if (partner[p] != radix && p < partner[p]) out.emplace_back(p, partner[p]);
  }
  return out;
}

Result<void> OpticalCircuitSwitch::apply(const std::vector<OcsChange>& changes) {
  auto now = cross_connects();
  if (!now) return std::unexpected(std::move(now.error()));
  if (auto after = ocs_after(radix(), std::move(*now), changes); !after) {
    return std::unexpected(std::move(Error(after.error())).prefixed(fmt::format("{}: apply", name())));
  }
  auto step = [this](const OcsChange& c, bool undo) -> Result<void> {
    const bool connect_it = (c.kind == OcsChange::Kind::kConnect) != undo;
    return connect_it ? connect(c.a, c.b) : disconnect(c.a);
  };
  for (std::size_t i = 0; i < changes.size(); ++i) {
    auto r = step(changes[i], false);
    if (r) continue;
    for (std::size_t j = i; j-- > 0;) {
      if (!step(changes[j], true)) {
        return fail(
            Code::kAborted,
            fmt::format("{}: apply stopped at step {} of {} ({}: {}) and could not undo step {}: the switch "
                        "holds a partial batch, read its cross-connects",
                        name(), i + 1, changes.size(), ocs_change_text(changes[i]), r.error().to_string(), j + 1));
      }
    }
    return std::unexpected(std::move(r.error()).prefixed(fmt::format(
        "{}: apply step {} of {} ({}), undone", name(), i + 1, changes.size(), ocs_change_text(changes[i]))));
  }
  return {};
}

// ---- InMemoryOcs -----------------------------------------------------------------------------

InMemoryOcs::InMemoryOcs(std::string name, unsigned radix)
    : name_(std::move(name)), radix_(radix), partner_(radix, radix) {}

Result<void> InMemoryOcs::connect(unsigned a, unsigned b) {
  std::lock_guard lock(mu_);
  if (a >= radix_ || b >= radix_) {
    return fail(Code::kOutOfRange, fmt::format("{}: port {} beyond radix {}", name_, std::max(a, b), radix_));
  }
  if (a == b) return fail(Code::kInvalidArgument, fmt::format("{}: port {} cannot join itself", name_, a));
  if (partner_[a] != radix_ || partner_[b] != radix_) {
    return fail(Code::kFailedPrecondition,
                fmt::format("{}: connect {}-{}: a port is already cross-connected", name_, a, b));
  }
  partner_[a] = b;
  partner_[b] = a;
  ++operations_;
  return {};
}

Result<void> InMemoryOcs::disconnect(unsigned port) {
  std::lock_guard lock(mu_);
  if (port >= radix_) return fail(Code::kOutOfRange, fmt::format("{}: port {} beyond radix {}", name_, port, radix_));
  const unsigned q = partner_[port];
  if (q == radix_) return fail(Code::kFailedPrecondition, fmt::format("{}: port {} is idle", name_, port));
  partner_[port] = radix_;
  partner_[q] = radix_;
  ++operations_;
  return {};
}

Result<std::vector<CrossConnect>> InMemoryOcs::cross_connects() const {
  std::lock_guard lock(mu_);
  std::vector<CrossConnect> out;
  for (unsigned p = 0; p < radix_; ++p) {
    if (partner_[p] != radix_ && p < partner_[p]) out.emplace_back(p, partner_[p]);
  }
  return out;
}

std::uint64_t InMemoryOcs::operations() const noexcept {
  std::lock_guard lock(mu_);
  return operations_;
}

}  // namespace npo
