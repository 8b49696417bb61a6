// SPDX-License-Identifier: Apache-2.0
// Test helper for window_test: the "other process". Receives a window over the AF_UNIX
// socket passed as argv[1] (send_window: handle + fd via SCM_RIGHTS), maps it, checks the
// marker the exporter wrote at offset 0, writes its own reply at offset 4096, and exits
// 0 on success (10+ on each kind of failure).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "npo/hal/window.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return 10;
  const int sock = std::atoi(argv[1]);
  auto m = npo::receive_window(sock);
  if (!m) {
    std::fprintf(stderr, "window_peer: %s\n", m.error().to_string().c_str());
    return 11;
  }
  constexpr std::string_view kMarker = "exporter-was-here";
  constexpr std::string_view kReply = "peer-process-was-here";
  auto b = (*m)->bytes();
  if (b.size() < 8192 || std::memcmp(b.data(), kMarker.data(), kMarker.size()) != 0) return 12;
  if (!(*m)->write(4096, std::as_bytes(std::span(kReply.data(), kReply.size())))) return 13;
  if ((*m)->write(b.size() - 4, std::as_bytes(std::span(kReply.data(), kReply.size())))) return 14;  // must fail
  return 0;
}
