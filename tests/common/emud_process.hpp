// SPDX-License-Identifier: Apache-2.0
// Test helper: starts npo-emud as a child process in a fresh socket directory and stops it,
// every wait bounded. The tests that use it get the daemon's path as NPO_EMUD (CMake).
#pragma once

#include <stdlib.h>

#include <string>
#include <vector>

#include "child_process.hpp"

namespace npo_test {

class EmudProcess {
 public:
  EmudProcess() = default;
  ~EmudProcess() { stop(); }
  EmudProcess(const EmudProcess&) = delete;
  EmudProcess& operator=(const EmudProcess&) = delete;

  /// Starts `npo-emud --topology TOPOLOGY --socket-dir DIR EXTRA...` (DIR: a new directory under
  /// /tmp) and waits up to `timeout_ms` for its "ready" line. Returns false (and kills it) if
  /// the line does not come; output() has what it printed.
  bool start(const std::string& daemon, const std::string& topology, std::vector<std::string> extra = {},
             int timeout_ms = 30000) {
    char tmpl[] = "/tmp/npo-emud-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return false;
    return start_in(daemon, topology, tmpl, std::move(extra), timeout_ms);
  }
  /// Same, in a given directory (e.g. a stale one).
  bool start_in(const std::string& daemon, const std::string& topology, const std::string& dir,
                std::vector<std::string> extra = {}, int timeout_ms = 30000) {
    dir_ = dir;
    std::vector<std::string> args = {daemon, "--topology", topology, "--socket-dir", dir_};
    args.insert(args.end(), extra.begin(), extra.end());
    if (!child_.start(std::move(args))) return false;
    if (child_.wait_for("ready ", timeout_ms)) return true;
    child_.kill();
    return false;
  }
  /// Reads what the daemon printed for up to `ms`; false at EOF.
  bool pump(int ms) { return child_.pump(ms); }
  /// SIGTERM, then waits up to 10 s (SIGKILL after). Returns the exit status (-1: killed).
  int stop() { return child_.stop(10000); }
  /// SIGKILL and reap: the daemon dies without cleaning up.
  void kill() { (void)child_.kill(); }
  [[nodiscard]] const std::string& dir() const { return dir_; }
  [[nodiscard]] std::string uri() const { return "emu-remote:" + dir_; }
  [[nodiscard]] pid_t pid() const { return child_.pid(); }
  [[nodiscard]] const std::string& output() const { return child_.output(); }

 private:
  std::string dir_;
  ChildProcess child_;
};

}  // namespace npo_test
