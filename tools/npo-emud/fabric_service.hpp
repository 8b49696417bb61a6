// SPDX-License-Identifier: Apache-2.0
// npo-emud's fabric management socket DIR/fabric.sock (docs/spec/fabric-mgmt.md): the optical
// circuit switches and the cards' partition IDs, for a fabric manager (npo-fabric) in another
// process.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/line_server.hpp"
#include "npo/emu/emulator.hpp"
#include "npo/emu/ocs.hpp"

namespace npo::tools {

/// Answers fabric-management requests (one JSON object per line) about `emulator`.
/// Thread-safety: handle() is called from one thread at a time.
class FabricService {
 public:
  explicit FabricService(std::shared_ptr<emu::Emulator> emulator);
  /// One request line -> one reply line: {"op":"switches"}, {"op":"cross_connects","switch":S},
  /// {"op":"apply","switch":S,"changes":[{"kind":"connect|disconnect","a":A,"b":B}...]},
  /// {"op":"set_partition","card":K,"id":P}, {"op":"partition","card":K}, {"op":"cards"}, {"op":"routes","card":K}.
  /// Errors are replies {"error":{"code":"invalid_argument","message":"..."}}; a request that
  /// fails changes nothing. Changes are logged through `say` when set.
  std::string handle(std::string_view line);
  void set_log(std::function<void(const std::string&)> say) { say_ = std::move(say); }

 private:
  std::shared_ptr<emu::Emulator> emu_;
  std::map<std::string, std::unique_ptr<emu::EmulatedOcs>, std::less<>> switches_;
  std::vector<std::string> order_;  ///< switch names, in the topology's order
  std::function<void(const std::string&)> say_;
};

/// Starts the service on `socket` (mode 0600, same uid or root: LineServer). Errors: LineServer::start's.
Result<std::unique_ptr<LineServer>> start_fabric_service(std::shared_ptr<emu::Emulator> emulator,
                                                         const std::filesystem::path& socket,
                                                         std::function<void(const std::string&)> say);

}  // namespace npo::tools
