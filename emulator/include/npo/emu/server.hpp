// SPDX-License-Identifier: Apache-2.0
// npo-emud's server: serves every card of one Emulator to clients over UNIX sockets, one
// socket per card, with the protocol of docs/spec/emud-protocol.md (npo/fw/emud.hpp).
// A card is owned by one client at a time; read-only attaches may watch it meanwhile. A
// client's disconnect (or death) resets its card's queues, revokes its windows, drops its DMA
// maps and interrupt fds; routes and links stay up.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "npo/emu/emulator.hpp"
#include "npo/hal/error.hpp"

namespace npo::emu {

/// What Server::start needs.
struct ServerOptions {
  std::filesystem::path socket_dir;  ///< created if missing; holds card-<K>.sock and npo-emud.lock
  /// Receives one line per connect/disconnect and notable event (may be empty: no logging).
  /// Called from the server's threads, one call at a time.
  std::function<void(const std::string&)> log;
  /// Runs each session thread on the CPUs its client process may run on, when the client is
  /// bound to fewer CPUs than the machine has (mpirun binds each rank to a core). The session
  /// thread is the card's engine for inline doorbells, so a doorbell then wakes a thread on
  /// the ringer's own CPU instead of a cross-CPU wake-up (an IPI, several microseconds on a
  /// VM), and each rank's DMA copies run on that rank's core. Read once, at connect time.
  bool follow_client_cpus = true;
};

/// A running server. Thread-safety: stop() and the destructor may be called from any one thread.
class Server {
 public:
  /// Locks `socket_dir` (flock on npo-emud.lock: a second daemon on the same directory is
  /// refused; a stale directory of a killed daemon is reused, its sockets replaced), binds one
  /// SOCK_SEQPACKET socket per card and starts serving. Errors: kAlreadyExists (another
  /// daemon holds the directory; the message names its pid), kInvalidArgument (path too long
  /// for a UNIX socket), system call errors.
  static Result<std::unique_ptr<Server>> start(std::shared_ptr<Emulator> emu, ServerOptions options);
  /// Stops serving: closes every connection (their clients see kUnavailable), removes the
  /// sockets and the lock file.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  /// Same as the destructor's work; idempotent.
  void stop();
  /// Waits until no card has an owner (every owning client has disconnected and its card is
  /// released), at most `timeout_ms`. Returns whether that happened.
  bool wait_unowned(int timeout_ms);
  /// Number of card sockets served.
  [[nodiscard]] std::size_t card_count() const noexcept;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace npo::emu
