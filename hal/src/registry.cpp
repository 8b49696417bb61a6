// SPDX-License-Identifier: Apache-2.0
#include "npo/hal/backend/registry.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace npo::backend {

Result<void> Registry::add(std::string scheme, std::vector<std::string> forms, Factory factory) {
  if (scheme.empty() || scheme.find(':') != std::string::npos) {
    return fail(Code::kInvalidArgument, fmt::format("invalid backend scheme '{}'", scheme));
  }
  for (const auto& e : entries_) {
    if (e.scheme == scheme)
      return fail(Code::kAlreadyExists, fmt::format("backend scheme '{}' already registered", scheme));
  }
  entries_.push_back(Entry{std::move(scheme), std::move(forms), std::move(factory)});
  return {};
}

Result<std::unique_ptr<Backend>> Registry::open(std::string_view uri) const {
  const auto colon = uri.find(':');
  const std::string_view scheme = colon == std::string_view::npos ? uri : uri.substr(0, colon);
  for (const auto& e : entries_) {
    if (e.scheme == scheme) {
      const std::string_view rest = colon == std::string_view::npos ? std::string_view{} : uri.substr(colon + 1);
      return e.factory(rest, uri);
    }
  }
  return fail(Code::kInvalidArgument,
              fmt::format("unknown backend URI '{}'; accepted forms: {}", uri, fmt::join(forms(), ", ")));
}

std::vector<std::string> Registry::forms() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.insert(out.end(), e.forms.begin(), e.forms.end());
  return out;
}

}  // namespace npo::backend
