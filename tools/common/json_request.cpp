// SPDX-License-Identifier: Apache-2.0
#include "common/json_request.hpp"

#include <pthread.h>

#include <csignal>

#include <fmt/format.h>

namespace npo::tools {

std::string error_reply(Code code, std::string_view message) {
  return nlohmann::json{{"error", {{"code", std::string(code_name(code))}, {"message", std::string(message)}}}}.dump();
}

std::string error_reply(const Error& e) { return error_reply(e.code(), e.message()); }

Result<nlohmann::json> parse_request(std::string_view line) {
  nlohmann::json req;
  try {
    req = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    return fail(Code::kInvalidArgument, fmt::format("malformed JSON: {}", e.what()));
  }
  if (!req.is_object() || !req.contains("op") || !req.at("op").is_string()) {
    return fail(Code::kInvalidArgument, "a request is an object with a string 'op'");
  }
  return req;
}

sigset_t block_termination_signals() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return sigs;
}

}  // namespace npo::tools
