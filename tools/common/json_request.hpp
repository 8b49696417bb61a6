// SPDX-License-Identifier: Apache-2.0
// The request and error shapes both management sockets share (npo-emud's fabric socket,
// docs/spec/fabric-mgmt.md, and npo-fabric's CLI socket): one JSON object per line with a string
// "op"; an error reply is {"error": {"code": NAME, "message": TEXT}}.
#pragma once

#include <csignal>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "npo/hal/error.hpp"

namespace npo::tools {

/// The error reply line of `e` (code_name of its code, its message). Thread-safe.
[[nodiscard]] std::string error_reply(const Error& e);
/// The error reply line of `code` and `message`. Thread-safe.
[[nodiscard]] std::string error_reply(Code code, std::string_view message);

/// Parses one request line: a JSON object whose "op" is a string. Errors: kInvalidArgument
/// ("malformed JSON: ..." with the parser's reason, or the shape it lacks). Thread-safe.
[[nodiscard]] Result<nlohmann::json> parse_request(std::string_view line);

/// Blocks SIGTERM and SIGINT in the calling thread (and every thread it starts later), for a
/// daemon that takes them with sigwait, and ignores SIGPIPE (a client that went away). Call it
/// before any thread starts; returns the blocked set.
sigset_t block_termination_signals();

}  // namespace npo::tools
