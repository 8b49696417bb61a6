// SPDX-License-Identifier: Apache-2.0
// Test helper: runs a program as a child process with its stdout and stderr captured (merged),
// waits for a line of its output and stops it, every wait bounded. For tests that start a real
// component (npo-exporter, Debian's prometheus) beside npo-emud (emud_process.hpp).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace npo_test {

class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess() { stop(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// Starts `args[0]` (a path) with `args`. Returns false if it cannot be started.
  bool start(std::vector<std::string> args) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return false;
    pid_ = ::fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      ::dup2(p[1], 1);
      ::dup2(p[1], 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(p[1]);
    out_fd_ = p[0];
    return true;
  }
  /// Reads output until it contains `text` or `timeout_ms` pass (or the child closes its
  /// output). Returns whether the text was seen.
  bool wait_for(const std::string& text, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (output_.find(text) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      if (!pump(50)) break;
    }
    return output_.find(text) != std::string::npos;
  }
  /// Reads what the child printed for up to `ms`; false at EOF.
  bool pump(int ms) {
    if (out_fd_ < 0) return false;
    pollfd pf{out_fd_, POLLIN, 0};
    if (::poll(&pf, 1, ms) <= 0) return true;
    char buf[8192];
    const ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n <= 0) return false;
    output_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  /// SIGTERM, then waits up to `timeout_ms` (SIGKILL after). Returns the exit status (-1:
  /// killed by a signal or never started).
  int stop(int timeout_ms = 10000) { return end(SIGTERM, timeout_ms); }
  /// Waits up to `timeout_ms` for the child to exit by itself (SIGKILL after), draining the
  /// output. Returns the exit status (-1: killed by a signal or never started).
  int wait_exit(int timeout_ms) { return end(0, timeout_ms); }
  /// SIGKILL and reap: the child dies without cleaning up. Returns -1 (killed), or its exit
  /// status if it had already exited.
  int kill() { return end(SIGKILL, 10000); }
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] const std::string& output() const { return output_; }

 private:
  // Sends `sig` (0: none), then reaps within `timeout_ms` (SIGKILL after), draining the output.
  int end(int sig, int timeout_ms) {
    if (pid_ <= 0) return status_;
    if (sig != 0) ::kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    int st = 0;
    for (;;) {
      drain();
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    drain();
    if (out_fd_ >= 0) ::close(out_fd_);
    out_fd_ = -1;
    pid_ = -1;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return status_;
  }
  // Reads everything the child has written so far (a chatty child never blocks on the pipe).
  void drain() {
    while (pump(0)) {
      pollfd pf{out_fd_, POLLIN, 0};
      if (::poll(&pf, 1, 0) <= 0) break;
    }
  }
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int status_ = -1;
  std::string output_;
};

}  // namespace npo_test
