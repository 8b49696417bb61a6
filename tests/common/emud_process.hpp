// SPDX-License-Identifier: Apache-2.0
// Test helper: starts npo-emud as a child process in a fresh socket directory and stops it,
// every wait bounded. The tests that use it get the daemon's path as NPO_EMUD (CMake).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

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
    dir_ = tmpl;
    return start_in(daemon, topology, dir_, std::move(extra), timeout_ms);
  }
  /// Same, in a given directory (e.g. a stale one).
  bool start_in(const std::string& daemon, const std::string& topology, const std::string& dir,
                std::vector<std::string> extra = {}, int timeout_ms = 30000) {
    dir_ = dir;
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return false;
    std::vector<std::string> args = {daemon, "--topology", topology, "--socket-dir", dir_};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(p[1], 1);
      ::dup2(p[1], 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(p[1]);
    out_fd_ = p[0];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      if (output_.find("ready ") != std::string::npos) return true;
      if (!pump(100)) break;
    }
    if (output_.find("ready ") != std::string::npos) return true;
    kill();
    return false;
  }
  /// Reads what the daemon printed for up to `ms`; false at EOF.
  bool pump(int ms) {
    if (out_fd_ < 0) return false;
    pollfd pf{out_fd_, POLLIN, 0};
    if (::poll(&pf, 1, ms) <= 0) return true;
    char buf[4096];
    const ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n <= 0) return false;
    output_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  /// SIGTERM, then waits up to 10 s (SIGKILL after). Returns the exit status (-1: killed).
  int stop() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGTERM);
    return reap(10000);
  }
  /// SIGKILL and reap: the daemon dies without cleaning up.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    (void)reap(10000);
  }
  [[nodiscard]] const std::string& dir() const { return dir_; }
  [[nodiscard]] std::string uri() const { return "emu-remote:" + dir_; }
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] const std::string& output() const { return output_; }

 private:
  int reap(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    int st = 0;
    for (;;) {
      while (pump(0) && out_fd_ >= 0) {
        pollfd pf{out_fd_, POLLIN, 0};
        if (::poll(&pf, 1, 0) <= 0) break;
      }
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    while (pump(0)) {
      pollfd pf{out_fd_, POLLIN, 0};
      if (::poll(&pf, 1, 0) <= 0) break;
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    out_fd_ = -1;
    pid_ = -1;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return status_;
  }
  std::string dir_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int status_ = -1;
  std::string output_;
};

}  // namespace npo_test
