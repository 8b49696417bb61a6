// SPDX-License-Identifier: Apache-2.0
// npo-exporter: serves the fabric's cards, ports and lanes as Prometheus metrics (text
// exposition format 0.0.4) on http://ADDR:PORT/metrics, one LinkMonitor snapshot per scrape.
// An `emu-remote:` backend is attached read-only (mode=ro), so the exporter watches a
// running npo-emud without taking any card from its owner. docs/observability.md lists the
// metrics. HTTP: Debian's cpp-httplib (libcpp-httplib-dev), loopback by default.
#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/backend.hpp"
#include "common/cli.hpp"
#include "common/output.hpp"
#include "exporter.hpp"

namespace {

constexpr std::string_view kTool = "npo-exporter";

/// Splits "HOST:PORT" (HOST may be empty: 127.0.0.1). Returns false on a bad port.
bool split_listen(const std::string& s, std::string& host, int& port) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos) return false;
  host = s.substr(0, colon);
  if (host.empty()) host = "127.0.0.1";
  try {
    std::size_t used = 0;
    port = std::stoi(s.substr(colon + 1), &used);
    if (used != s.size() - colon - 1) return false;
  } catch (const std::exception&) {
    return false;
  }
  return port >= 0 && port <= 65535;
}

/// SO_REUSEADDR only (a restarted exporter binds at once over TIME_WAIT). cpp-httplib's
/// default also sets SO_REUSEPORT, which lets a second exporter bind the same port and take
/// every other scrape: that one must fail instead.
void listen_socket_options(int fd) {
  const int yes = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
}

/// Why binding HOST:PORT fails: one bind attempt with the server's socket options, its errno
/// as lower-case text ("address already in use"), or "" when it binds now.
std::string bind_failure(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc));
  }
  int err = 0;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    listen_socket_options(fd);
    const bool ok = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1) == 0;
    if (!ok) err = errno;
    ::close(fd);
    if (ok) {
      err = 0;
      break;
    }
  }
  ::freeaddrinfo(res);
  if (err == 0) return {};
  std::string text = std::strerror(err);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"npo-exporter: Prometheus metrics of every card, port and lane (text format 0.0.4)"};
  npo::tools::add_version_flag(app, "npo-exporter");
  std::optional<std::string> backend;
  npo::tools::add_backend_option(
      app, backend, "-b,--backend",
      std::string("backend URI (") + npo::tools::kBackendDefaultHelp + "); emu-remote: is attached read-only");
  std::string listen = "127.0.0.1:9410";
  app.add_option("--listen", listen, "HOST:PORT to serve /metrics on (port 0: any free port, printed on stdout)");
  bool bring_up = false;
  app.add_flag("--bring-up", bring_up,
               "train the links after opening the backend (an in-process emu: backend starts with links down)");
  npo::tools::LogOptions log;
  npo::tools::add_log_options(app, log);
  if (auto rc = npo::tools::parse_command_line(app, argc, argv, "npo-exporter")) return *rc;
  if (auto r = npo::tools::configure_logging(log); !r) return npo::tools::fail(kTool, "--log-level", r.error());

  std::string host;
  int port = 0;
  if (!split_listen(listen, host, port)) {
    std::fprintf(stderr, "%s: --listen %s: expected HOST:PORT\n", kTool.data(), listen.c_str());
    return 2;
  }

  // SIGINT/SIGTERM are taken by a thread (sigwait) that stops the server: blocked in every
  // thread, set before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  npo::exporter::Exporter exporter(
      {.uri = npo::tools::observer_uri(npo::tools::backend_uri(backend, "npo-exporter")), .bring_up = bring_up});
  std::mutex mu;  // one scrape at a time (LinkMonitor is single-threaded)

  httplib::Server server;
  server.set_socket_options(listen_socket_options);
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_keep_alive_timeout(2);
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    std::string body;
    {
      std::lock_guard lock(mu);
      body = exporter.scrape();
    }
    res.set_content(body, npo::exporter::kContentType);
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("<html><body><h1>npo-exporter</h1><a href=\"/metrics\">/metrics</a></body></html>\n", "text/html");
  });

  int bound = port;
  if (port == 0) {
    bound = server.bind_to_any_port(host.c_str());
  } else if (!server.bind_to_port(host.c_str(), port)) {
    bound = -1;
  }
  if (bound < 0) {
    const std::string why = bind_failure(host, port);
    std::fprintf(stderr, "%s: cannot listen on %s:%d%s%s\n", kTool.data(), host.c_str(), port, why.empty() ? "" : ": ",
                 why.c_str());
    return 1;
  }
  std::printf("listening on %s:%d\n", host.c_str(), bound);
  std::fflush(stdout);

  std::thread stopper([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    server.stop();
  });
  const bool ok = server.listen_after_bind();
  // The server stopped: wake the stopper if it still waits (listen failed on its own).
  if (stopper.joinable()) {
    pthread_kill(stopper.native_handle(), SIGTERM);
    stopper.join();
  }
  return ok ? 0 : 1;
}
