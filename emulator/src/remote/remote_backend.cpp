// SPDX-License-Identifier: Apache-2.0
// The emu-remote backend: a client of npo-emud (docs/spec/emud-protocol.md). Each opened card
// is one SOCK_SEQPACKET connection. Config space and register reads are round trips; register
// writes are posted (one sendmsg, no reply), except the queues' doorbells (SQ_TAIL, CQ_HEAD),
// which go into a shadow page shared with the daemon with an eventfd to ring it (spec §5.11);
// the HBM aperture and host DMA memory are shared by fd, so data never crosses the socket.
// This file holds RemoteBackend itself (URI options, enumerate, open) and its registration.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "npo/emu/register.hpp"
#include "npo/fw/emud.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/host_memory.hpp"
#include "npo/hal/log.hpp"
#include "remote/remote_internal.hpp"

namespace npo::emu {
namespace remote {

namespace {

namespace pci = fw::pci;

constexpr std::string_view kForms =
    "emu-remote:DIR, emu-remote:DIR?card=K[,L...][&mode=ro|&owner=K[,L...]], and with or without those "
    "?doorbell=shadow|socket and ?engine=local|daemon (&doorbell=..., &engine=... after another option)";

Result<void> hello(Conn& c, bool read_only) {
  std::array<std::byte, emud::version::kBytes> b{};
  emud::store<std::uint16_t>(b, emud::version::kMajor, emud::kVersionMajor);
  emud::store<std::uint16_t>(b, emud::version::kMinor, emud::kVersionMinor);
  emud::store<std::uint32_t>(b, emud::version::kFlags, read_only ? emud::version::kAttachReadOnly : 0u);
  emud::store<std::uint32_t>(b, emud::version::kPid, static_cast<std::uint32_t>(::getpid()));
  auto r = c.call(emud::Command::kVersion, b);
  if (!r) return std::unexpected(r.error());
  if (r->body.size() < emud::version::kBytes) return fail(Code::kInternal, "emu-remote: short VERSION reply");
  return {};
}

Result<CardInfo> device_info(Conn& c) {
  auto r = c.call(emud::Command::kDeviceGetInfo, {});
  if (!r) return std::unexpected(r.error());
  const auto& b = r->body;
  if (b.size() < emud::info::kBytes) return fail(Code::kInternal, "emu-remote: short DEVICE_GET_INFO reply");
  CardInfo ci;
  ci.fi.address.domain = emud::load<std::uint16_t>(b, emud::info::kDomain);
  ci.fi.address.bus = emud::load<std::uint8_t>(b, emud::info::kBus);
  ci.fi.address.device = emud::load<std::uint8_t>(b, emud::info::kDevice);
  ci.fi.address.function = emud::load<std::uint8_t>(b, emud::info::kFunction);
  ci.fi.vendor_id = emud::load<std::uint16_t>(b, emud::info::kVendorId);
  ci.fi.device_id = emud::load<std::uint16_t>(b, emud::info::kDeviceId);
  ci.fi.subsystem_vendor_id = emud::load<std::uint16_t>(b, emud::info::kSubVendorId);
  ci.fi.subsystem_id = emud::load<std::uint16_t>(b, emud::info::kSubsystemId);
  ci.fi.class_code = emud::load<std::uint32_t>(b, emud::info::kClassCode);
  ci.fi.numa_node = emud::load<std::int32_t>(b, emud::info::kNumaNode);
  ci.fi.driver = "npo-emud";
  ci.msix_vectors = emud::load<std::uint32_t>(b, emud::info::kMsixVectors);
  ci.iova.first = emud::load<std::uint64_t>(b, emud::info::kIovaFirst);
  ci.iova.last = emud::load<std::uint64_t>(b, emud::info::kIovaLast);
  ci.card = emud::load<std::uint32_t>(b, emud::info::kCardIndex);
  return ci;
}

struct Options {
  std::filesystem::path dir;
  std::optional<std::set<std::uint32_t>> cards;
  bool read_only = false;
  /// owner=K[,L...]: attach only these cards as owner, every other one read-only (a tool
  /// that changes one card watches the rest without taking them from their jobs).
  std::optional<std::set<std::uint32_t>> owners;
  /// doorbell=shadow (the default): an owner rings its queues through the shadow page (spec
  /// §5.11); doorbell=socket: one posted REGION_WRITE per doorbell (protocol 1.3 and before).
  bool shadow_doorbells = true;
  /// engine=local (the default, unless doorbell=socket): an owner runs its card's DMA engines in
  /// this process (spec §5.12; its doorbells wait for posted writes through the shadow page, so
  /// it needs doorbell=shadow); engine=daemon: npo-emud's session thread runs them.
  bool local_engines = true;
};

Result<Options> parse(std::string_view rest) {
  Options o;
  const auto q = rest.find('?');
  o.dir = std::string(rest.substr(0, q));
  if (o.dir.empty()) return fail(Code::kInvalidArgument, fmt::format("emu-remote: no directory; forms: {}", kForms));
  if (q == std::string_view::npos) return o;
  bool engine_given = false;
  std::string_view opts = rest.substr(q + 1);
  while (!opts.empty()) {
    const auto amp = opts.find('&');
    const std::string_view kv = opts.substr(0, amp);
    opts = amp == std::string_view::npos ? std::string_view{} : opts.substr(amp + 1);
    const auto eq = kv.find('=');
    const std::string_view k = kv.substr(0, eq);
    const std::string_view v = eq == std::string_view::npos ? std::string_view{} : kv.substr(eq + 1);
    if (k == "card" || k == "owner") {
      auto& set = k == "card" ? o.cards : o.owners;
      set.emplace();
      std::string_view list = v;
      while (true) {
        const auto comma = list.find(',');
        const std::string_view item = list.substr(0, comma);
        std::uint32_t n = 0;
        const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
        if (item.empty() || ec != std::errc{} || p != item.data() + item.size()) {
          return fail(Code::kInvalidArgument,
                      fmt::format("emu-remote: {} list '{}' is not K[,L...]; forms: {}", k, v, kForms));
        }
        set->insert(n);
        if (comma == std::string_view::npos) break;
        list = list.substr(comma + 1);
      }
    } else if (k == "mode" && (v == "ro" || v == "rw")) {
      o.read_only = v == "ro";
    } else if (k == "doorbell") {
      if (v != "shadow" && v != "socket") {
        return fail(Code::kInvalidArgument,
                    fmt::format("emu-remote: doorbell={} is neither shadow nor socket; forms: {}", v, kForms));
      }
      o.shadow_doorbells = v == "shadow";
    } else if (k == "engine") {
      if (v != "local" && v != "daemon") {
        return fail(Code::kInvalidArgument,
                    fmt::format("emu-remote: engine={} is neither local nor daemon; forms: {}", v, kForms));
      }
      o.local_engines = v == "local";
      engine_given = true;
    } else {
      return fail(Code::kInvalidArgument, fmt::format("emu-remote: unknown option '{}'; forms: {}", kv, kForms));
    }
  }
  if (!o.shadow_doorbells) {
    if (engine_given && o.local_engines) {
      return fail(Code::kInvalidArgument,
                  fmt::format("emu-remote: engine=local needs doorbell=shadow (an owner's own engines order their "
                              "doorbells after its posted writes through the shadow page, spec §5.12); with "
                              "doorbell=socket the daemon runs the engines (engine=daemon); forms: {}",
                              kForms));
    }
    o.local_engines = false;  // doorbell=socket: the daemon's engines, rung by posted writes
  }
  if (o.owners && o.read_only) {
    return fail(Code::kInvalidArgument,
                fmt::format("emu-remote: owner= and mode=ro contradict each other; forms: {}", kForms));
  }
  return o;
}

std::filesystem::path socket_of(const std::filesystem::path& dir, std::uint32_t card) {
  return dir / fmt::format("{}{}{}", emud::kSocketPrefix, card, emud::kSocketSuffix);
}

class RemoteBackend final : public backend::Backend {
 public:
  RemoteBackend(Options o, std::string uri) : o_(std::move(o)), uri_(std::move(uri)) {}
  std::string_view name() const noexcept override { return "emu-remote"; }
  const std::string& uri() const noexcept override { return uri_; }

  Result<std::vector<backend::FunctionInfo>> enumerate() override {
    std::error_code ec;
    // A directory this user may not search is npo-emud's permissions, not a missing daemon.
    const auto denied = [&] {
      return fail(Code::kPermissionDenied,
                  fmt::format("emu-remote: cannot read {} ({}): npo-emud's socket directory does not let this user "
                              "in; start npo-emud with --socket-group GROUP (and --socket-mode 0660) and join that "
                              "group, or run as the daemon's user",
                              o_.dir.string(), ec.message()));
    };
    const bool is_dir = std::filesystem::is_directory(o_.dir, ec);
    if (ec == std::errc::permission_denied) return denied();
    if (!is_dir) {
      return fail(Code::kUnavailable,
                  fmt::format("emu-remote: {} is not a directory: start the daemon with `npo-emud --topology "
                              "emu:mesh8 --socket-dir {}`",
                              o_.dir.string(), o_.dir.string()));
    }
    std::set<std::uint32_t> cards;
    for (const auto& e : std::filesystem::directory_iterator(o_.dir, ec)) {
      const auto n = e.path().filename().string();
      if (!n.starts_with(emud::kSocketPrefix) || !n.ends_with(emud::kSocketSuffix)) continue;
      const auto digits =
          std::string_view(n).substr(std::strlen(emud::kSocketPrefix),
                                     n.size() - std::strlen(emud::kSocketPrefix) - std::strlen(emud::kSocketSuffix));
      std::uint32_t k = 0;
      const auto [p, err] = std::from_chars(digits.data(), digits.data() + digits.size(), k);
      if (err == std::errc{} && p == digits.data() + digits.size()) cards.insert(k);
    }
    if (ec == std::errc::permission_denied) return denied();
    if (cards.empty()) {
      // A cleanly stopped daemon removes its sockets and leaves the directory: that is no
      // supernode, not an empty one.
      return fail(Code::kUnavailable,
                  fmt::format("emu-remote: no npo-emud serving {} (no {}K{} socket in it): start it with `npo-emud "
                              "--topology emu:mesh8 --socket-dir {}`",
                              o_.dir.string(), emud::kSocketPrefix, emud::kSocketSuffix, o_.dir.string()));
    }
    if (o_.cards) {
      for (auto k : *o_.cards) {
        if (cards.count(k) == 0) {
          return fail(Code::kNotFound,
                      fmt::format("emu-remote: the daemon at {} serves no card {}", o_.dir.string(), k));
        }
      }
      cards = *o_.cards;
    }
    if (o_.owners) {
      for (auto k : *o_.owners) {
        if (cards.count(k) == 0) {
          return fail(Code::kNotFound, fmt::format("emu-remote: the daemon at {} serves no card {}{}", o_.dir.string(),
                                                   k, o_.cards ? " among the cards of card=" : ""));
        }
      }
    }
    std::vector<backend::FunctionInfo> out;
    std::lock_guard lock(mu_);
    by_address_.clear();
    for (auto k : cards) {
      auto c = Conn::connect(socket_of(o_.dir, k), fmt::format("card {}", k), daemon_);
      if (!c) return std::unexpected(c.error());
      if (auto h = hello(**c, true); !h) return std::unexpected(h.error());
      auto ci = device_info(**c);
      if (!ci) return std::unexpected(ci.error());
      by_address_[ci->fi.address] = k;
      out.push_back(ci->fi);
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.address < b.address; });
    return out;
  }

  Result<std::unique_ptr<backend::Device>> open(const backend::PciAddress& address) override {
    std::optional<std::uint32_t> card;
    {
      std::lock_guard lock(mu_);
      if (auto it = by_address_.find(address); it != by_address_.end()) card = it->second;
    }
    if (!card) {
      if (auto e = enumerate(); !e) return std::unexpected(e.error());
      std::lock_guard lock(mu_);
      if (auto it = by_address_.find(address); it != by_address_.end()) card = it->second;
    }
    if (!card) return fail(Code::kNotFound, fmt::format("{}: no card at {}", uri_, address.to_string()));
    {
      std::lock_guard lock(open_->mu);
      if (!open_->open.insert(address).second) {
        return fail(Code::kAlreadyExists, fmt::format("{} is already open", address.to_string()), {.card = *card});
      }
    }
    auto undo = [&] {
      std::lock_guard lock(open_->mu);
      open_->open.erase(address);
    };
    auto c = Conn::connect(socket_of(o_.dir, *card), fmt::format("card {}", *card), daemon_);
    if (!c) {
      undo();
      return std::unexpected(c.error());
    }
    const bool read_only = o_.read_only || (o_.owners && o_.owners->count(*card) == 0);
    if (auto h = hello(**c, read_only); !h) {
      undo();
      return std::unexpected(Error(h.error()).with({.card = *card}));
    }
    auto ci = device_info(**c);
    if (!ci) {
      undo();
      return std::unexpected(ci.error());
    }
    ci->fi.read_only = read_only;
    if (!read_only && o_.shadow_doorbells) {
      bool armed = false;
      if (auto s = (*c)->enable_shadow(&armed); !s) {
        if (armed) {  // the daemon refuses REGION_WRITE doorbells now: this connection is unusable
          undo();
          return std::unexpected(Error(s.error()).with({.card = *card}));
        }
        npo::log::get(npo::log::Subsystem::kBackend)
            .debug("emu-remote: card {}: doorbells stay posted REGION_WRITEs: {}", *card, s.error().message());
      }
    }
    // Local engines need the shadow page's count of handled posted writes (spec §5.12).
    const bool local = !read_only && o_.local_engines && (*c)->has_shadow();
    return make_remote_device(std::move(*c), std::move(*ci), open_, local);
  }

 private:
  Options o_;
  std::string uri_;
  std::mutex mu_;
  std::map<backend::PciAddress, std::uint32_t> by_address_;
  std::shared_ptr<OpenSet> open_ = std::make_shared<OpenSet>();
  std::shared_ptr<Daemon> daemon_ = std::make_shared<Daemon>(o_.dir.string());
};

}  // namespace
}  // namespace remote

Result<void> register_remote_backend(backend::Registry& registry) {
  using namespace remote;
  return registry.add(
      "emu-remote", {std::string(kForms)},
      [](std::string_view rest, std::string_view uri) -> Result<std::unique_ptr<backend::Backend>> {
        auto o = parse(rest);
        if (!o) return std::unexpected(o.error());
        return std::unique_ptr<backend::Backend>(std::make_unique<RemoteBackend>(std::move(*o), std::string(uri)));
      });
}

}  // namespace npo::emu
