// SPDX-License-Identifier: Apache-2.0
// Emulator internals: process isolation of a card's HBM in npo-emud (docs/spec/emud-protocol.md
// §5.13). Each card's HBM is one memfd, mapped side by side in the daemon; a process given that
// fd reaches the whole card. So that an importer of a window reaches the window's bytes and no
// others, the range of an open window moves into a memfd of its own while the window is open:
// opening copies the range into a new memfd and maps that over the daemon's view; closing (after
// the remote ops inside it drained) copies it back into the card's memfd and maps that again. An
// importer's mapping of a closed window's memfd then reaches nothing any card reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "npo/hal/error.hpp"
#include "shared_state.hpp"

namespace npo::emu {

/// The window memfds of every card of one emulator. Thread-safety: every method may be called
/// from any thread (one mutex; the copy runs with the card's 32 queue locks held, so that no
/// engine of the daemon moves bytes of the card meanwhile).
class HbmWindows {
 public:
  /// `base`: the daemon's view of card 0's HBM, card i at base + i * stride; `card_fds`: each
  /// card's HBM memfd (offset 0 is the card's first byte). Not owned.
  HbmWindows(std::byte* base, std::uint64_t stride, const std::vector<int>& card_fds, FabricState& fabric,
             std::uint32_t lock_tag);
  ~HbmWindows();
  HbmWindows(const HbmWindows&) = delete;
  HbmWindows& operator=(const HbmWindows&) = delete;

  /// A window of `card` opens over [off, off+size) (4 KiB aligned, inside the card's HBM).
  /// The same range as an open window shares its memfd (counted). Errors: kAlreadyExists (the
  /// range overlaps another open window's without being equal to it), memfd_create / ftruncate
  /// / mmap errno codes; on an error nothing changed.
  Result<void> open(std::uint32_t card, std::uint64_t off, std::uint64_t size);
  /// The window over [off, off+size) closed: the last one on the range copies the bytes back.
  /// Call it after the window's remote ops drained (STATUS.INFLIGHT = 0). A range that is not
  /// open is ignored.
  void close(std::uint32_t card, std::uint64_t off, std::uint64_t size);
  /// Card reset: every range of `card` closes.
  void close_all(std::uint32_t card);
  /// The memfd holding [off, off+size) of `card` now (the daemon keeps it; dup before sending),
  /// or -1 when the range is not an open window's.
  [[nodiscard]] int fd_of(std::uint32_t card, std::uint64_t off, std::uint64_t size) const;

 private:
  struct Range {
    std::uint64_t size = 0;
    int fd = -1;
    unsigned refs = 0;
  };
  void lock_queues(std::uint32_t card) noexcept;
  void unlock_queues(std::uint32_t card) noexcept;
  void move_back(std::uint32_t card, std::uint64_t off, const Range& r);

  std::byte* base_;
  std::uint64_t stride_;
  const std::vector<int>& card_fds_;
  FabricState& fabric_;
  std::uint32_t tag_;
  mutable std::mutex mu_;
  std::vector<std::map<std::uint64_t, Range>> ranges_;  ///< per card, by first byte
};

}  // namespace npo::emu
