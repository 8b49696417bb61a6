// SPDX-License-Identifier: Apache-2.0
// The partition manager's state (private to hal/src/partition*.cpp): the pool's cabling, the
// partition table, card health, the journal. npo/hal/partition.hpp.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "npo/hal/partition.hpp"
#include "partition_journal.hpp"

namespace npo {

struct PartitionManager::Impl {
  /// Where one card port's cable leads: switch index and port.
  struct SwitchPort {
    std::uint32_t sw = 0;
    unsigned port = 0;
  };

  mutable std::mutex mu;
  FabricSpec pool;
  unsigned cards = 0;
  unsigned ports = 0;
  std::vector<std::vector<SwitchPort>> cable;  ///< [card][port]
  std::vector<OpticalCircuitSwitch*> sw;       ///< by pool switch index
  std::map<std::string, Partition, std::less<>> parts;
  std::vector<std::string> owner;  ///< per card: partition name, "" free
  std::vector<CardHealth> health;
  PartitionOptions opt;
  detail::Journal journal;
  std::uint64_t next_seq = 1;
  std::uint32_t next_id = 1;  ///< next partition ID (monotonic, never reused)
  RebuildReport report;
  std::string poisoned;  ///< non-empty: a change was left half-applied; refuse until reopened

  /// The cross-connect change that makes (adds) or removes link `l`.
  [[nodiscard]] SwitchChange change_of(const PartitionLink& l, bool add) const;
  /// Minimal changes turning `removed` off and `added` on: every disconnect (by switch), then
  /// every connect (by switch) -- the order they are journalled and applied in.
  [[nodiscard]] std::vector<SwitchChange> changes_of(const std::vector<PartitionLink>& removed,
                                                     const std::vector<PartitionLink>& added) const;
  /// Applies a journalled intent to the table (partitions, owners, health).
  void fold(const detail::JournalIntent& in);
  /// Partition ID card `card` has in the table (0: free).
  [[nodiscard]] std::uint32_t id_of(std::uint32_t card) const;
  /// Writes `ids` through the enforcer (none without one). Errors: the enforcer's, naming the card.
  Result<void> enforce(const std::vector<CardPartitionId>& ids);
  /// Index of switch `name` in `sw`, or sw.size().
  [[nodiscard]] std::size_t switch_index(std::string_view name) const;
  /// Journals `in` (intent), applies its changes on the switches, journals the outcome, folds
  /// it into the table and waits for `added` (when a System is set). Errors: see create().
  Result<PartitionChange> commit(detail::JournalIntent in, std::vector<PartitionLink> added,
                                 std::vector<PartitionLink> removed);
};

}  // namespace npo
