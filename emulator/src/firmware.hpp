// SPDX-License-Identifier: Apache-2.0
// Emulator internals: the firmware model -- the mailbox command processor of
// docs/spec/mailbox.md and the card's error log. It runs on the worker pool: the BAR0
// mailbox (mailbox.hpp) rings doorbell(); run_once() takes the request, answers it and posts
// the reply back through the Mailbox. Port commands go to the card's ports (port.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "firmware_flash.hpp"
#include "npo/fw/mailbox.hpp"
#include "sched.hpp"

namespace npo::emu {

class Card;
class Mailbox;

/// Firmware model of one card. Thread-safe.
class Firmware final : public Runnable {
 public:
  /// The flash starts in its factory state with `factory_version` in slot A.
  Firmware(Card& card, Mailbox& mailbox, const std::string& factory_version)
      : card_(card), mailbox_(mailbox), flash_(factory_version) {}
  /// Processes the pending request, if any (Runnable); the request stops counting as in
  /// flight (EmulatorImpl::mailbox_inflight) once handled, answered or not.
  bool run_once() override;
  [[nodiscard]] bool has_work() const noexcept override { return pending_.load(); }
  /// A request is waiting in the mailbox: counts it in flight and schedules run_once() on a
  /// worker.
  void doorbell();
  /// Card reset: no pending request, no injected faults, heartbeat count and log cleared; the
  /// firmware boots again (FirmwareFlash::boot: the committed slot runs, an uncommitted trial
  /// rolls back).
  void reset_state();
  /// mailbox_timeout fault: the next `n` requests are swallowed (BUSY stays set).
  void inject_timeout(std::uint32_t n) { drop_.fetch_add(n); }
  /// mailbox_corrupt fault: the next `n` replies get a corrupted byte after the CRC.
  void inject_corrupt(std::uint32_t n) { corrupt_.fetch_add(n); }
  /// The firmware flash and update state (mailbox.md §5). White-box access for tests.
  [[nodiscard]] FirmwareFlash& flash() noexcept { return flash_; }
  /// One error log entry (mailbox.md §3.8).
  struct LogEntry {
    std::uint64_t ts;
    std::uint16_t code;
    std::uint8_t severity;
    std::uint8_t source;
    std::uint32_t arg0;
    std::uint64_t arg1;
    std::uint64_t arg2;
  };
  /// Appends to the error log (the oldest entry drops at capacity).
  void log_error(LogEntry e);

  /// The observer's side channel (emud-protocol.md §5.10): answers one mailbox request message
  /// (header + payload, mailbox.md §2) without the BAR0 mailbox, so a read-only attach never
  /// touches the owner's mailbox exchange. Only commands that change nothing are served:
  /// IDENTIFY, GET_VERSIONS, XCVR_READ (latched flags are left set), TELEMETRY,
  /// ERROR_LOG_READ, FW_QUERY. Returns the reply message, or `refused` set to the opcode's name when
  /// the command would change the card. Serialised with the BAR0 mailbox's requests.
  /// Thread-safe.
  std::vector<std::byte> observe(std::span<const std::byte> request, std::string& refused);

 private:
  /// Handles one request; fills `rsp` payload and returns the status.
  fw::mbox::Status handle(fw::mbox::Command cmd, std::span<const std::byte> req, std::vector<std::byte>& rsp);
  /// run_once's work: takes the pending request and handles it.
  bool process();
  /// Stops counting this firmware's request in flight (idempotent).
  void settle() noexcept;
  Card& card_;
  Mailbox& mailbox_;
  FirmwareFlash flash_;
  std::atomic<bool> pending_{false};
  std::atomic<bool> inflight_{false};  ///< counted in EmulatorImpl::mailbox_inflight
  std::atomic<std::uint32_t> drop_{0};
  std::atomic<std::uint32_t> corrupt_{0};
  std::atomic<std::uint32_t> heartbeats_{0};
  std::mutex log_mu_;
  std::deque<LogEntry> log_;
  std::mutex handle_mu_;  ///< one handle() at a time: the BAR0 mailbox's and observe()'s
  /// Builds a reply message for `opcode`/`seq` with `st` and `payload`, CRC set.
  static std::vector<std::byte> reply_message(std::uint16_t opcode, std::uint32_t seq, fw::mbox::Status st,
                                              std::span<const std::byte> payload);
};

}  // namespace npo::emu
