// SPDX-License-Identifier: Apache-2.0
// npo::version(): the version of the library itself, compiled into libnpo-hal (the headers'
// NPO_HAL_VERSION_* are the program's), with the git commit of the build.
#include "npo/hal/version.hpp"

#include "npo_git_commit.h"  // <build>/hal/generated: NPO_HAL_GIT_COMMIT (cmake/npo-git-commit.cmake)

namespace npo {

Version version() noexcept {
  return {.major = NPO_HAL_VERSION_MAJOR,
          .minor = NPO_HAL_VERSION_MINOR,
          .patch = NPO_HAL_VERSION_PATCH,
          .string = NPO_HAL_VERSION_STRING,
          .commit = NPO_HAL_GIT_COMMIT};
}

}  // namespace npo
