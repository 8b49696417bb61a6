// SPDX-License-Identifier: Apache-2.0
// The partition manager's journal (private): one JSON object per line, fsync'd after each
// line. A change is an "intent" line (everything needed to redo or undo it: the partitions it
// writes or removes, the health it sets, the cross-connect changes in order), then an
// outcome line ("applied", "rolled_back", "finished"). docs/partitions.md "Journal".
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "npo/hal/error.hpp"
#include "npo/hal/partition.hpp"

namespace npo::detail {

/// What a change writes.
struct JournalIntent {
  std::uint64_t seq = 0;
  std::string what;
  std::vector<Partition> upsert;                             ///< partitions created or changed
  std::vector<std::string> remove;                           ///< partitions removed
  std::vector<std::pair<std::uint32_t, CardHealth>> health;  ///< health set
  std::vector<SwitchChange> changes;                         ///< cross-connect changes, in order
};

/// How a journalled change ended.
enum class JournalOutcome : std::uint8_t { kNone, kApplied, kRolledBack, kFinished };

/// One intent and its outcome (kNone: interrupted).
struct JournalEntry {
  JournalIntent intent;
  JournalOutcome outcome = JournalOutcome::kNone;
};

/// Everything a journal file holds.
struct JournalContents {
  std::vector<JournalEntry> entries;
  std::uint64_t lines = 0;
  bool torn_tail = false;  ///< the last line was incomplete or unreadable (and was cut off)
};

/// The journal file. Not thread-safe (the manager's mutex serialises it).
class Journal {
 public:
  Journal() = default;
  ~Journal();
  Journal(Journal&& o) noexcept;
  Journal& operator=(Journal&& o) noexcept;
  /// Opens (creating) `path` and reads it; an incomplete last line is truncated away. An empty
  /// path gives a journal that keeps nothing. Errors: kDataLoss (an unreadable line before the
  /// last, an outcome without intent), the file's errno errors.
  static Result<std::pair<Journal, JournalContents>> open(const std::filesystem::path& path);
  /// Appends and fsyncs an intent line. Errors: errno errors.
  Result<void> intent(const JournalIntent& in);
  /// Appends and fsyncs an outcome line. Errors: errno errors.
  Result<void> outcome(std::uint64_t seq, JournalOutcome out);
  [[nodiscard]] bool enabled() const noexcept { return fd_ >= 0; }

 private:
  Result<void> append(const std::string& line);
  int fd_ = -1;
  std::filesystem::path path_;
};

}  // namespace npo::detail
