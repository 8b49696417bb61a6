// SPDX-License-Identifier: Apache-2.0
// Test helper: run a command line through the shell and capture its stdout and exit status.
// Used by the tests that exercise the tools as a user runs them.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace npo_test {

struct CommandResult {
  int status = -1;  ///< exit status; -1 if the command could not start or was killed
  std::string out;  ///< everything written to stdout (redirect 2>&1 in `cmd` to include stderr)
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace npo_test
