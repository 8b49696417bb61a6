// SPDX-License-Identifier: Apache-2.0
// npo-hal emulator: RemoteFabric -- a client of npo-emud's fabric management socket
// (DIR/fabric.sock, docs/spec/fabric-mgmt.md): the daemon's optical circuit switches behind the
// HAL's switch interface and the cards' partition IDs behind PartitionEnforcer, so the same
// PartitionManager code that drives an in-process emulator drives a served supernode.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "npo/hal/ocs.hpp"
#include "npo/hal/partition.hpp"

namespace npo::emu {

/// One card as the fabric socket lists it.
struct RemoteCard {
  std::uint32_t index = 0;
  std::uint32_t fabric_id = 0;
  std::uint32_t partition = 0;  ///< GLOBAL.PARTITION (registers.md §3.8)
  bool removed = false;
};

/// A connection to DIR/fabric.sock. Thread-safety: every method is safe from any thread (one
/// mutex; one request at a time on the connection). Errors of every call: kUnavailable (the
/// daemon is gone or closed the connection), the daemon's error replies with their code.
class RemoteFabric final : public PartitionEnforcer {
 public:
  /// Connects to `dir`/fabric.sock (or to `dir` itself when it names a socket) and reads the
  /// switch list. Errors: kUnavailable (no daemon), kPermissionDenied (refused: another uid).
  static Result<std::shared_ptr<RemoteFabric>> open(const std::filesystem::path& dir);
  ~RemoteFabric() override;
  RemoteFabric(const RemoteFabric&) = delete;
  RemoteFabric& operator=(const RemoteFabric&) = delete;

  /// The daemon's switches (name, radix), in its topology's order; each forwards to the daemon
  /// (apply is the daemon's all-or-nothing EmulatedOcs::apply). They share this connection and
  /// must not outlive it.
  [[nodiscard]] std::vector<OpticalCircuitSwitch*> switches() const;
  /// {"op":"set_partition"}. Errors: kOutOfRange (no such card).
  Result<void> set_partition(std::uint32_t card, std::uint32_t id) override;
  /// {"op":"partition"}. Errors: kOutOfRange.
  Result<std::uint32_t> partition(std::uint32_t card);
  /// {"op":"cards"}.
  Result<std::vector<RemoteCard>> cards();
  /// Sends one raw request line and returns the reply line (tests, tools).
  Result<std::string> request(std::string_view line);

  class Switch;

 private:
  explicit RemoteFabric(int fd);
  /// request() that turns an {"error":...} reply into an Error.
  Result<std::string> call(const std::string& line);
  int fd_;
  std::mutex mu_;
  std::string buf_;
  std::vector<std::unique_ptr<Switch>> switches_;
};

}  // namespace npo::emu
