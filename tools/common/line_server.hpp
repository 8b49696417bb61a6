// SPDX-License-Identifier: Apache-2.0
// A management socket for the daemons: a UNIX stream socket created mode 0600 that serves one
// request per line with one reply per line (JSON lines), admitting only peers of the daemon's
// own uid or root (SO_PEERCRED). npo-emud's fabric socket (docs/spec/fabric-mgmt.md) and
// npo-fabric's CLI socket use it.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "npo/hal/error.hpp"

namespace npo::tools {

/// Serves `path` on one thread (poll over the listening socket and every connection).
/// Requests are handled one at a time in arrival order. Thread-safety: the handler runs on the
/// server's thread only; start and the destructor from one thread.
class LineServer {
 public:
  /// Turns one request line (without its newline) into one reply line (without newline).
  using Handler = std::function<std::string(std::string_view)>;
  /// Creates `path` (a stale socket there is replaced) mode 0600 -- bound under a temporary name,
  /// chmod'ed, then renamed into place, so it is never reachable with a wider mode -- and serves
  /// it. A peer whose uid is neither the daemon's nor root is refused (closed) and logged
  /// through `say`; a line longer than 1 MiB gets an error reply and the connection is closed.
  /// Errors: kInvalidArgument (path too long for sun_path), kUnavailable / kPermissionDenied
  /// (socket, bind, listen failed).
  static Result<std::unique_ptr<LineServer>> start(std::filesystem::path path, Handler handler,
                                                   std::function<void(const std::string&)> say);
  /// Stops the thread, closes every connection, removes the socket file.
  ~LineServer();
  LineServer(const LineServer&) = delete;
  LineServer& operator=(const LineServer&) = delete;

  struct Impl;

 private:
  explicit LineServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Sends `line` (a newline is added) to the socket `path` and returns the reply line (without
/// newline), waiting at most `timeout_ms`. Errors: kUnavailable (no server), kDeadlineExceeded,
/// kPermissionDenied (refused).
Result<std::string> line_request(const std::filesystem::path& path, std::string_view line, int timeout_ms = 120'000);

}  // namespace npo::tools
