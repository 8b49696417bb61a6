// SPDX-License-Identifier: Apache-2.0
// Session: npo-emud's side of one client connection to one card (docs/spec/emud-protocol.md).
// Its members are defined by role in session.cpp, session_dispatch.cpp, session_engine.cpp and
// session_regions.cpp.
#pragma once

#include "server/server_impl.hpp"

namespace npo::emu {

namespace emud = fw::emud;
namespace pci = fw::pci;
using server::ParsedCommand;

struct Mapping {
  void* addr = nullptr;
  std::uint64_t size = 0;
  int guard_slot = -1;  ///< server::guard_mapping slot of unsealed memory, -1: sealed
};

/// One connection to one card.
class Session {
 public:
  Session(Server::Impl& srv, int conn, std::uint32_t card);
  ~Session() { release(); }

  static constexpr int kEvConn = 1, kEvWake = 2, kEvBell = 4;
  /// Adds `fd` to the epoll set, readable, reported as `tag` (kEv*). False if epoll_ctl failed.
  bool watch(int fd, int tag);
  /// Waits until the connection, the server's wake fd or the doorbell eventfd is readable and
  /// returns the tags (kEv*) of those that are; 0 on EINTR, -1 on another error (errno set).
  /// poll(2) when the epoll set could not be made.
  int wait_ready();

  // ServerOptions::follow_client_cpus: this thread runs where the client may run, if the
  // client is bound to a strict subset of the CPUs this thread may use.
  void follow_client_cpus();

  void run();

 private:
  Card& card() { return srv_.emu->card(card_); }

  void send(std::span<const std::byte> msg, int fd = -1);
  void reply_ok(const ParsedCommand& c, std::span<const std::byte> body = {}, int fd = -1);
  void reply_error(std::uint16_t id, std::uint16_t cmd, Code code, std::string_view text);
  void reply_error(const ParsedCommand& c, const Error& e);

  void handle(std::span<const std::byte> msg, std::vector<int>& fds);

  // ---- The owner runs its card's engines (spec §5.12) ----

  void engine_share(const ParsedCommand& c);

  void hbm_fd(const ParsedCommand& c);
  void engine_fd(const ParsedCommand& c);
  void window_fd(const ParsedCommand& c);
  void hbm_range_fd(const ParsedCommand& c);

  void engine_event(const ParsedCommand& c);

  // ---- Shadow doorbells (spec §5.11) ----

  std::atomic_ref<std::uint32_t> shadow_word(std::size_t offset);
  /// Queue q restarts from index 0 (enabled, reset): its shadows and what was applied follow.
  void zero_shadow(std::uint32_t q);
  /// Writes to the card every shadowed doorbell that changed since it was last applied: all
  /// CQ_HEADs first (room in a completion queue before its submissions run), then the SQ_TAILs.
  /// The card checks each value as it checks a REGION_WRITE (registers.md §5.3, §5.4).
  void apply_shadow();
  void doorbell_shadow(const ParsedCommand& c, std::vector<int>& fds);

  void version(const ParsedCommand& c);

  /// Faults are the emulator's test harness: any attach (owner or read-only) may inject them,
  /// into the card its socket serves.
  void inject_fault(const ParsedCommand& c);

  /// A read-only firmware request answered beside the card's BAR0 mailbox (spec §5.10): the
  /// owner's mailbox exchange is never touched. Allowed on every attach.
  void mailbox_observe(const ParsedCommand& c);

  void device_info(const ParsedCommand& c);

  void region_info(const ParsedCommand& c);

  void reply_read(const ParsedCommand& c, std::span<const std::byte> data);

  void region_read(const ParsedCommand& c);

  void region_write(const ParsedCommand& c);

  void read_only(const ParsedCommand& c);

  /// DMA_MAP with flag PROCESS_MEMORY (spec §5.2 "Process memory"): the client's own
  /// addresses, reached with process_vm_readv/writev on its pid; nothing is mapped here.
  void dma_map_process(const ParsedCommand& c);

  void dma_map(const ParsedCommand& c, std::vector<int>& fds);

  /// Unmaps the daemon's view of one client mapping (the card no longer reaches it).
  void drop_mapping(std::uint64_t iova, const Mapping& m);

  void dma_unmap(const ParsedCommand& c);

  void set_irqs(const ParsedCommand& c, std::vector<int>& fds);

  void release();

  Server::Impl& srv_;
  int conn_;
  std::uint32_t card_;
  pid_t pid_ = 0;
  bool attached_ = false;
  bool read_only_ = false;
  bool owner_ = false;
  Card::DmaTotals dma_at_attach_;  ///< the card's DMA totals when this owner attached
  std::unique_ptr<backend::Device> dev_;
  pid_t msg_pid_ = 0;  ///< sender of the message being handled (SCM_CREDENTIALS), 0: unknown
  int pidfd_ = -1;     ///< pidfd of pid_, opened at its first PROCESS_MEMORY map
  std::map<std::uint64_t, Mapping> maps_;
  std::array<int, pci::kMsixVectors> msix_fds_{};
  std::vector<std::byte> out_;
  // Shadow doorbells (spec §5.11): the page shared with the client, the eventfd it rings, what
  // was last written to the card from each slot, and the posted writes handled so far.
  std::byte* shadow_ = nullptr;
  backend::Mmio* bar0_ = nullptr;
  std::uint32_t shadow_queues_ = 0;
  int bell_fd_ = -1;
  int ep_ = -1;  ///< epoll set of conn_, the server's wake fd and bell_fd_; -1: poll(2) instead
  std::array<std::uint32_t, fw::emud::shadow::kMaxQueues> applied_sq_{};
  std::array<std::uint32_t, fw::emud::shadow::kMaxQueues> applied_cq_{};
  std::uint32_t posted_handled_ = 0;
  /// ENGINE_SHARE (spec §5.12): the lock tag of this owner's engines, 0: it runs none.
  std::uint32_t engine_tag_ = 0;
};

}  // namespace npo::emu
