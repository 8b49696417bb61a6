// SPDX-License-Identifier: Apache-2.0
// The partition manager's journal: JSON lines, fsync'd (partition_journal.hpp).
#include "partition_journal.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace npo::detail {

namespace {
using nlohmann::json;

json to_json(const Partition& p) {
  json links = json::array();
  for (const auto& l : p.links) links.push_back({l.a, l.b, l.port});
  return {{"name", p.name}, {"shape", p.shape}, {"cards", p.cards}, {"links", links}, {"id", p.id}};
}

Partition partition_of(const json& j) {
  Partition p;
  p.name = j.at("name").get<std::string>();
  p.shape = j.at("shape").get<std::string>();
  p.cards = j.at("cards").get<std::vector<std::uint32_t>>();
  p.id = j.value("id", std::uint32_t{0});  // journals before partition IDs: 0, assigned at replay
  for (const auto& l : j.at("links")) {
    p.links.push_back({l.at(0).get<std::uint32_t>(), l.at(1).get<std::uint32_t>(), l.at(2).get<unsigned>()});
  }
  return p;
}

CardHealth health_of(std::string_view s) {
  if (s == "spare") return CardHealth::kSpare;
  if (s == "failed") return CardHealth::kFailed;
  if (s == "healthy") return CardHealth::kHealthy;
  throw std::invalid_argument(fmt::format("unknown health '{}'", s));
}

std::string_view outcome_name(JournalOutcome o) {
  switch (o) {
    case JournalOutcome::kApplied: return "applied";
    case JournalOutcome::kRolledBack: return "rolled_back";
    case JournalOutcome::kFinished: return "finished";
    case JournalOutcome::kNone: break;
  }
  return "none";
}

JournalIntent intent_of(const json& j) {
  JournalIntent in;
  in.seq = j.at("seq").get<std::uint64_t>();
  in.what = j.at("what").get<std::string>();
  for (const auto& p : j.at("upsert")) in.upsert.push_back(partition_of(p));
  in.remove = j.at("remove").get<std::vector<std::string>>();
  for (const auto& h : j.at("health"))
    in.health.emplace_back(h.at(0).get<std::uint32_t>(), health_of(h.at(1).get<std::string>()));
  for (const auto& c : j.at("changes")) {
    const auto kind = c.at(1).get<std::string>();
    if (kind != "connect" && kind != "disconnect") throw std::invalid_argument("unknown change " + kind);
    in.changes.push_back(
        SwitchChange{c.at(0).get<std::string>(),
                     OcsChange{kind == "connect" ? OcsChange::Kind::kConnect : OcsChange::Kind::kDisconnect,
                               c.at(2).get<unsigned>(), c.at(3).get<unsigned>()}});
  }
  return in;
}
}  // namespace

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}
Journal::Journal(Journal&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}
Journal& Journal::operator=(Journal&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

Result<std::pair<Journal, JournalContents>> Journal::open(const std::filesystem::path& path) {
  Journal jn;
  JournalContents jc;
  if (path.empty()) return std::pair{std::move(jn), std::move(jc)};
  jn.path_ = path;
  jn.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (jn.fd_ < 0) return fail_errno(errno, fmt::format("partition journal {}: open", path.string()));
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::pread(jn.fd_, buf, sizeof buf, static_cast<off_t>(text.size()));
    if (n < 0) return fail_errno(errno, fmt::format("partition journal {}: read", path.string()));
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  std::map<std::uint64_t, std::size_t> by_seq;
  std::size_t pos = 0, good_end = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const bool last = nl == std::string::npos || nl + 1 == text.size();
    const std::string_view line(text.data() + pos, (nl == std::string::npos ? text.size() : nl) - pos);
    ++jc.lines;
    try {
      if (nl == std::string::npos) throw std::invalid_argument("no newline");
      const json j = json::parse(line);
      const auto type = j.at("type").get<std::string>();
      if (type == "intent") {
        auto in = intent_of(j);
        by_seq[in.seq] = jc.entries.size();
        jc.entries.push_back(JournalEntry{std::move(in), JournalOutcome::kNone});
      } else {
        const auto seq = j.at("seq").get<std::uint64_t>();
        const auto it = by_seq.find(seq);
        if (it == by_seq.end()) {
          return fail(Code::kDataLoss, fmt::format("partition journal {}: line {}: outcome of seq {} without intent",
                                                   path.string(), jc.lines, seq));
        }
        auto& out = jc.entries[it->second].outcome;
        if (type == "applied")
          out = JournalOutcome::kApplied;
        else if (type == "rolled_back")
          out = JournalOutcome::kRolledBack;
        else if (type == "finished")
          out = JournalOutcome::kFinished;
        else
          throw std::invalid_argument("unknown type " + type);
      }
    } catch (const std::exception& e) {
      if (!last) {
        return fail(Code::kDataLoss,
                    fmt::format("partition journal {}: line {} unreadable: {}", path.string(), jc.lines, e.what()));
      }
      jc.torn_tail = true;
      --jc.lines;
      break;
    }
    pos = nl + 1;
    good_end = pos;
  }
  if (jc.torn_tail && ::ftruncate(jn.fd_, static_cast<off_t>(good_end)) != 0) {
    return fail_errno(errno, fmt::format("partition journal {}: cut the torn last line", path.string()));
  }
  return std::pair{std::move(jn), std::move(jc)};
}

Result<void> Journal::append(const std::string& line) {
  if (fd_ < 0) return {};
  std::string_view rest = line;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(errno, fmt::format("partition journal {}: write", path_.string()));
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  if (::fsync(fd_) != 0) return fail_errno(errno, fmt::format("partition journal {}: fsync", path_.string()));
  return {};
}

Result<void> Journal::intent(const JournalIntent& in) {
  json up = json::array(), health = json::array(), changes = json::array();
  for (const auto& p : in.upsert) up.push_back(to_json(p));
  for (const auto& [c, h] : in.health) health.push_back({c, std::string(card_health_name(h))});
  for (const auto& c : in.changes) {
    changes.push_back(
        {c.switch_name, c.change.kind == OcsChange::Kind::kConnect ? "connect" : "disconnect", c.change.a, c.change.b});
  }
  const json j = {{"type", "intent"},    {"seq", in.seq},    {"what", in.what},   {"upsert", up},
                  {"remove", in.remove}, {"health", health}, {"changes", changes}};
  return append(j.dump() + "\n");
}

Result<void> Journal::outcome(std::uint64_t seq, JournalOutcome out) {
  const json j = {{"type", std::string(outcome_name(out))}, {"seq", seq}};
  return append(j.dump() + "\n");
}

}  // namespace npo::detail
