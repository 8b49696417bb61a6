// SPDX-License-Identifier: Apache-2.0
// Test helper: starts npo-emud as a child process in a fresh socket directory and stops it,
// every wait bounded. The tests that use it get the daemon's path as NPO_EMUD (CMake).
#pragma once

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
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

/// Waits (up to 5 s) until every thread of `pid` is stopped (state T in /proc/PID/task/*/stat):
/// kill(2) returns before a running thread has taken SIGSTOP.
inline bool all_threads_stopped(pid_t pid) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  while (std::chrono::steady_clock::now() < end) {
    bool all = true;
    std::error_code ec;
    for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
      std::ifstream f(t.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const auto paren = stat.rfind(')');  // the state follows the command name in parentheses
      if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'T') all = false;
    }
    if (!ec && all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace npo_test
