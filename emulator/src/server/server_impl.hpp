// SPDX-License-Identifier: Apache-2.0
// npo-emud's server state shared by its files: the listening sockets, the card slots (who owns
// each card) and the session threads.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "card.hpp"
#include "npo/emu/server.hpp"
#include "npo/fw/emud.hpp"
#include "npo/fw/pci.hpp"
#include "server/protocol.hpp"
#include "system.hpp"

namespace npo::emu {

struct CardSlot {
  std::mutex mu;
  std::condition_variable released;
  pid_t owner = 0;
};

struct Server::Impl {
  std::shared_ptr<Emulator> emu;
  std::unique_ptr<backend::Backend> backend;
  ServerOptions opts;
  int lock_fd = -1;
  int wake_fd = -1;
  std::vector<int> listen_fds;
  std::vector<std::filesystem::path> socket_paths;
  std::vector<std::unique_ptr<CardSlot>> slots;
  std::thread acceptor;
  std::mutex sessions_mu;
  struct SessionThread {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::list<SessionThread> session_threads;
  std::atomic<bool> stopping{false};
  std::mutex log_mu;
  bool stopped = false;

  void log(const std::string& line) {
    if (!opts.log) return;
    std::lock_guard lock(log_mu);
    opts.log(line);
  }
  void accept_loop();
  void serve(int conn, std::uint32_t card);
};

}  // namespace npo::emu
