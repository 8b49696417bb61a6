// SPDX-License-Identifier: Apache-2.0
// npo-hal: library version.
#pragma once

#include <string_view>

namespace npo {
/// Library version "major.minor.patch" (semantic versioning).
inline constexpr std::string_view kVersion = "0.1.0";
}  // namespace npo
