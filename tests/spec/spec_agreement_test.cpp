// SPDX-License-Identifier: Apache-2.0
// The spec in docs/spec/ and the device contract in firmware-iface/ must agree.
// This test reads the Markdown tables (docs/spec/README.md §6 lists which) and compares
// every row with the constants of npo::fw. A failure names the document line that drifted.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "npo/fw/dma.hpp"
#include "npo/fw/image.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "spec_doc.hpp"

namespace {

using namespace npo::spec_test;
namespace fw = npo::fw;
namespace regs = npo::fw::regs;
namespace dma = npo::fw::dma;
namespace mbox = npo::fw::mbox;
namespace pci = npo::fw::pci;

const std::string kSpecDir = std::string(NPO_SOURCE_DIR) + "/docs/spec/";

std::vector<Table> load(const std::string& doc) {
  bool ok = false;
  auto tables = read_tables(kSpecDir + doc, &ok);
  EXPECT_TRUE(ok) << "cannot open " << kSpecDir + doc;
  return tables;
}

const std::vector<std::string> kRegHeader{"Register", "Offset", "Width", "Access", "Description"};
const std::vector<std::string> kFieldHeader{"Field", "Bits", "Description"};

/// Tables of `doc` whose header row is exactly `header`.
std::vector<const Table*> with_header(const std::vector<Table>& tables, const std::vector<std::string>& header) {
  std::vector<const Table*> out;
  for (const auto& t : tables)
    if (t.header == header) out.push_back(&t);
  return out;
}

/// The table introduced by `<!-- table: marker -->`; fails the test if absent or duplicated.
const Table* by_marker(const std::vector<Table>& tables, std::string_view marker, std::string_view doc) {
  const Table* found = nullptr;
  for (const auto& t : tables) {
    if (t.marker != marker) continue;
    EXPECT_EQ(found, nullptr) << doc << ": two tables marked `" << marker << "`";
    found = &t;
  }
  EXPECT_NE(found, nullptr) << doc << ": no table marked `<!-- table: " << marker << " -->`";
  return found;
}

// ---- registers.md: register tables vs kRegisters ----------------------------------------

TEST(SpecAgreement, RegisterTablesMatchKRegisters) {
  const auto tables = load("registers.md");
  const auto reg_tables = with_header(tables, kRegHeader);
  ASSERT_FALSE(reg_tables.empty()) << "registers.md has no register table (header row changed?)";

  std::map<std::string, const regs::RegisterDesc*> hdr;
  for (const auto& r : regs::kRegisters) {
    const std::string key = std::string(r.block) + "." + std::string(r.name);
    EXPECT_TRUE(hdr.emplace(key, &r).second) << "regs.hpp: kRegisters lists " << key << " twice";
  }

  std::set<std::string> seen;
  for (const Table* t : reg_tables) {
    for (const Row& row : t->rows) {
      ASSERT_EQ(row.cells.size(), kRegHeader.size()) << where(*t, row) << ": expected 5 cells";
      const std::string& key = row.cells[0];
      EXPECT_TRUE(seen.insert(key).second) << where(*t, row) << ": register documented twice";
      const auto it = hdr.find(key);
      if (it == hdr.end()) {
        ADD_FAILURE() << where(*t, row) << ": register " << key << " is in the spec but not in regs.hpp kRegisters";
        continue;
      }
      const regs::RegisterDesc& r = *it->second;
      const auto off = parse_uint(row.cells[1]);
      const auto width = parse_uint(row.cells[2]);
      EXPECT_TRUE(off.has_value()) << where(*t, row) << ": offset `" << row.cells[1] << "` is not a number";
      EXPECT_TRUE(width.has_value()) << where(*t, row) << ": width `" << row.cells[2] << "` is not a number";
      if (off) {
        EXPECT_EQ(*off, r.offset) << where(*t, row) << ": offset " << hex(*off) << " in the spec, " << hex(r.offset)
                                  << " in regs.hpp";
      }
      if (width) {
        EXPECT_EQ(*width, r.width) << where(*t, row) << ": width " << *width << " in the spec, " << r.width
                                   << " in regs.hpp";
      }
      EXPECT_EQ(row.cells[3], regs::access_name(r.access))
          << where(*t, row) << ": access " << row.cells[3] << " in the spec, " << regs::access_name(r.access)
          << " in regs.hpp";
      EXPECT_FALSE(row.cells[4].empty()) << where(*t, row) << ": empty description";
    }
  }
  for (const auto& [key, r] : hdr)
    EXPECT_TRUE(seen.contains(key)) << "regs.hpp kRegisters has " << key << " (offset " << hex(r->offset)
                                    << ") but registers.md has no row for it";
}

// ---- registers.md: field tables vs kFields ------------------------------------------------

TEST(SpecAgreement, FieldTablesMatchKFields) {
  const auto tables = load("registers.md");
  const auto field_tables = with_header(tables, kFieldHeader);
  ASSERT_FALSE(field_tables.empty()) << "registers.md has no field table (header row changed?)";

  std::map<std::string, const regs::FieldDesc*> hdr;
  for (const auto& f : regs::kFields) {
    const std::string key = std::string(f.reg) + "." + std::string(f.name);
    EXPECT_TRUE(hdr.emplace(key, &f).second) << "regs.hpp: kFields lists " << key << " twice";
  }
  std::map<std::string, unsigned> reg_width;
  for (const auto& r : regs::kRegisters) reg_width[std::string(r.block) + "." + std::string(r.name)] = r.width;

  std::set<std::string> seen;
  for (const Table* t : field_tables) {
    for (const Row& row : t->rows) {
      ASSERT_EQ(row.cells.size(), kFieldHeader.size()) << where(*t, row) << ": expected 3 cells";
      const std::string& key = row.cells[0];
      EXPECT_TRUE(seen.insert(key).second) << where(*t, row) << ": field documented twice";
      const auto dot = key.rfind('.');
      ASSERT_NE(dot, std::string::npos) << where(*t, row) << ": field name must be BLOCK.REGISTER.FIELD";
      const std::string reg = key.substr(0, dot);
      const auto bits = parse_bits(row.cells[1]);
      EXPECT_TRUE(bits.has_value()) << where(*t, row) << ": bits `" << row.cells[1] << "` are not `hi:lo` or `n`";
      if (bits) {
        EXPECT_GE(bits->first, bits->second) << where(*t, row) << ": bits must be written hi:lo";
        if (const auto w = reg_width.find(reg); w != reg_width.end()) {
          EXPECT_LT(bits->first, w->second)
              << where(*t, row) << ": field exceeds the " << w->second << "-bit register " << reg;
        }
      }
      const auto it = hdr.find(key);
      if (it == hdr.end()) {
        ADD_FAILURE() << where(*t, row) << ": field " << key << " is in the spec but not in regs.hpp kFields";
        continue;
      }
      const regs::FieldDesc& f = *it->second;
      if (bits) {
        const unsigned hi = f.shift + f.width - 1;
        EXPECT_TRUE(bits->first == hi && bits->second == f.shift)
            << where(*t, row) << ": bits " << bits->first << ":" << bits->second << " in the spec, " << hi << ":"
            << f.shift << " in regs.hpp (shift " << f.shift << ", width " << f.width << ")";
      }
    }
  }
  for (const auto& [key, f] : hdr)
    EXPECT_TRUE(seen.contains(key)) << "regs.hpp kFields has " << key << " (shift " << f->shift << ", width "
                                    << f->width << ") but registers.md has no row for it";
}

// ---- registers.md: block map ---------------------------------------------------------------

TEST(SpecAgreement, BlockMapMatchesBases) {
  const auto tables = load("registers.md");
  const Table* t = by_marker(tables, "regs.blocks", "registers.md");
  ASSERT_NE(t, nullptr);
  struct Block {
    std::uint32_t base;
    std::optional<std::uint32_t> stride;
    unsigned count;
  };
  const std::map<std::string, Block> expected{
      {"GLOBAL", {regs::kGlobalBase, std::nullopt, 1}},
      {"MBOX", {regs::kMailboxBase, std::nullopt, 1}},
      {"QUEUE", {regs::kQueueBase, regs::kQueueStride, regs::kNumQueues}},
      {"WINDOW", {regs::kWindowBase, regs::kWindowStride, regs::kWindowEntries}},
      {"ROUTE", {regs::kRouteBase, 4, regs::kRouteEntries}},
      {"PORT", {regs::kPortBase, regs::kPortStride, regs::kMaxPorts}},
      {"LANE", {regs::kLaneBase, regs::kLaneStride, regs::kLanesPerPort}},
  };
  std::set<std::string> seen;
  for (const Row& row : t->rows) {
    ASSERT_GE(row.cells.size(), 4u) << where(*t, row);
    const auto it = expected.find(row.cells[0]);
    if (it == expected.end()) {
      ADD_FAILURE() << where(*t, row) << ": unknown block";
      continue;
    }
    seen.insert(row.cells[0]);
    const Block& b = it->second;
    EXPECT_EQ(parse_uint(row.cells[1]), std::optional<std::uint64_t>(b.base))
        << where(*t, row) << ": base in regs.hpp is " << hex(b.base);
    if (b.stride)
      EXPECT_EQ(parse_uint(row.cells[2]), std::optional<std::uint64_t>(*b.stride))
          << where(*t, row) << ": stride in regs.hpp is " << hex(*b.stride);
    else
      EXPECT_EQ(row.cells[2], "-") << where(*t, row) << ": single block has no stride";
    EXPECT_EQ(parse_uint(row.cells[3]), std::optional<std::uint64_t>(b.count))
        << where(*t, row) << ": count in regs.hpp is " << b.count;
  }
  for (const auto& [name, b] : expected) EXPECT_TRUE(seen.contains(name)) << "block map has no row for " << name;
  for (const auto& r : regs::kRegisters)
    EXPECT_TRUE(expected.contains(std::string(r.block)))
        << "kRegisters block " << r.block << " is not in the block map";
}

// ---- Generic structure layout tables ------------------------------------------------------

struct Member {
  std::string name;
  std::size_t offset;
  std::optional<std::size_t> size;  ///< nullopt: variable (the doc cell is not a number)
};

/// Compares a `| Offset | Size | Field | Description |` table with `expected`. Rows named
/// `reserved` are allowed in addition. With `tile_end`, the rows of numeric size must
/// cover [0, tile_end) without gap or overlap.
void check_layout(const std::vector<Table>& tables, std::string_view doc, std::string_view marker,
                  const std::vector<Member>& expected, std::optional<std::size_t> tile_end) {
  SCOPED_TRACE(std::string(doc) + " table " + std::string(marker));
  const Table* t = by_marker(tables, marker, doc);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->header, (std::vector<std::string>{"Offset", "Size", "Field", "Description"}))
      << doc << ":" << t->line << ": layout table header must be | Offset | Size | Field | Description |";
  std::map<std::string, const Member*> want;
  for (const auto& m : expected) want[m.name] = &m;
  std::set<std::string> seen;
  std::vector<std::pair<std::size_t, std::size_t>> spans;  // numeric rows
  for (const Row& row : t->rows) {
    ASSERT_EQ(row.cells.size(), 4u) << where(*t, row);
    const auto off = parse_uint(row.cells[0]);
    const auto size = parse_uint(row.cells[1]);
    const std::string& name = row.cells[2];
    EXPECT_TRUE(off.has_value()) << where(*t, row) << ": offset is not a number";
    if (off && size) spans.emplace_back(*off, *size);
    if (name == "reserved") continue;
    EXPECT_TRUE(seen.insert(name).second) << where(*t, row) << ": member documented twice";
    const auto it = want.find(name);
    if (it == want.end()) {
      ADD_FAILURE() << where(*t, row) << ": member " << name << " is not in the header";
      continue;
    }
    const Member& m = *it->second;
    if (off) {
      EXPECT_EQ(*off, m.offset) << where(*t, row) << ": offset " << hex(*off) << " in the spec, " << hex(m.offset)
                                << " in the header";
    }
    if (m.size) {
      EXPECT_EQ(size, std::optional<std::uint64_t>(*m.size))
          << where(*t, row) << ": size `" << row.cells[1] << "` in the spec, " << *m.size << " in the header";
    } else {
      EXPECT_FALSE(size.has_value()) << where(*t, row) << ": member has variable size in the header";
    }
  }
  for (const auto& m : expected) EXPECT_TRUE(seen.contains(m.name)) << "no row for header member " << m.name;
  if (tile_end) {
    std::sort(spans.begin(), spans.end());
    std::size_t pos = 0;
    for (const auto& [o, s] : spans) {
      EXPECT_EQ(o, pos) << doc << " " << marker << ": gap or overlap at offset " << hex(o) << " (expected " << hex(pos)
                        << ")";
      pos = o + s;
    }
    EXPECT_EQ(pos, *tile_end) << doc << " " << marker << ": rows end at " << hex(pos) << ", structure size is "
                              << hex(*tile_end);
  }
}

// ---- dma.md ----------------------------------------------------------------------------------

TEST(SpecAgreement, DmaDescriptorLayout) {
  const auto tables = load("dma.md");
  using D = dma::Descriptor;
  // Sizes come from the accessors' return types, so a change of type is caught too.
  const std::vector<Member> m{
      {"opcode", dma::desc::kOpcode, sizeof(std::declval<const D&>().opcode())},
      {"flags", dma::desc::kFlags, sizeof(std::declval<const D&>().op_flags())},
      {"sg_count", dma::desc::kSgCount, sizeof(std::declval<const D&>().sg_count())},
      {"length", dma::desc::kLength, sizeof(std::declval<const D&>().length())},
      {"src", dma::desc::kSrc, sizeof(std::declval<const D&>().src())},
      {"dst", dma::desc::kDst, sizeof(std::declval<const D&>().dst())},
      {"remote_card", dma::desc::kRemoteCard, sizeof(std::declval<const D&>().remote_card())},
      {"window", dma::desc::kWindow, sizeof(std::declval<const D&>().window())},
      {"generation", dma::desc::kGeneration, sizeof(std::declval<const D&>().generation())},
      {"key", dma::desc::kKey, sizeof(std::declval<const D&>().key())},
      {"user", dma::desc::kUser, sizeof(std::declval<const D&>().user())},
  };
  check_layout(tables, "dma.md", "dma.desc", m, dma::desc::kSize);
}

TEST(SpecAgreement, DmaSgEntryLayout) {
  const auto tables = load("dma.md");
  check_layout(tables, "dma.md", "dma.sg", {{"addr", dma::sg::kAddr, 8}, {"length", dma::sg::kLength, 4}},
               dma::sg::kSize);
}

TEST(SpecAgreement, DmaCompletionLayout) {
  const auto tables = load("dma.md");
  using C = dma::Completion;
  const std::vector<Member> m{
      {"info", dma::cpl::kInfo, sizeof(std::declval<const C&>().info())},
      {"sq_index", dma::cpl::kSqIndex, sizeof(std::declval<const C&>().sq_index())},
      {"status", dma::cpl::kStatus, sizeof(std::declval<const C&>().status())},
      {"flags", dma::cpl::kFlags, sizeof(std::uint16_t)},
  };
  check_layout(tables, "dma.md", "dma.cpl", m, dma::cpl::kSize);
}

// Names as the spec writes them. A switch without default: -Wswitch (with -Werror) stops the
// build when an enumerator is added to the header without being added here and to the spec.
constexpr std::string_view opcode_name(dma::Opcode o) {
  switch (o) {
    case dma::Opcode::kNop: return "NOP";
    case dma::Opcode::kCopy: return "COPY";
    case dma::Opcode::kFill: return "FILL";
    case dma::Opcode::kGather: return "GATHER";
    case dma::Opcode::kFence: return "FENCE";
    case dma::Opcode::kRemoteWrite: return "REMOTE_WRITE";
    case dma::Opcode::kRemoteRead: return "REMOTE_READ";
  }
  return {};
}

/// Checks a `| Value | Name | ...` table against the (value, name) pairs of an enum.
void check_enum_table(const std::vector<Table>& tables, std::string_view doc, std::string_view marker,
                      std::string_view name_column, const std::map<std::uint64_t, std::string>& expected) {
  SCOPED_TRACE(std::string(doc) + " table " + std::string(marker));
  const Table* t = by_marker(tables, marker, doc);
  ASSERT_NE(t, nullptr);
  ASSERT_GE(t->header.size(), 2u);
  ASSERT_EQ(t->header[1], name_column) << doc << ":" << t->line << ": second column must be " << name_column;
  std::set<std::uint64_t> seen;
  for (const Row& row : t->rows) {
    ASSERT_GE(row.cells.size(), 2u) << where(*t, row);
    const auto v = parse_uint(row.cells[0]);
    if (!v) {
      ADD_FAILURE() << where(*t, row) << ": value `" << row.cells[0] << "` is not a number";
      continue;
    }
    EXPECT_TRUE(seen.insert(*v).second) << where(*t, row) << ": value documented twice";
    const auto it = expected.find(*v);
    if (it == expected.end()) {
      ADD_FAILURE() << where(*t, row) << ": value " << hex(*v) << " (" << row.cells[1]
                    << ") is in the spec but not in the header";
      continue;
    }
    EXPECT_EQ(row.cells[1], it->second) << where(*t, row) << ": the header calls value " << hex(*v) << " "
                                        << it->second;
  }
  for (const auto& [v, name] : expected)
    EXPECT_TRUE(seen.contains(v)) << "the header defines " << name << " = " << hex(v) << " but the spec has no row";
}

TEST(SpecAgreement, DmaOpcodes) {
  std::map<std::uint64_t, std::string> expected;
  for (unsigned v = 0; v < 256; ++v)
    if (const auto n = opcode_name(static_cast<dma::Opcode>(v)); !n.empty()) expected[v] = std::string(n);
  EXPECT_EQ(expected.size(), dma::kNumOpcodes);
  check_enum_table(load("dma.md"), "dma.md", "dma.opcodes", "Opcode", expected);
}

TEST(SpecAgreement, DmaFlags) {
  const auto tables = load("dma.md");
  const Table* t = by_marker(tables, "dma.flags", "dma.md");
  ASSERT_NE(t, nullptr);
  const std::map<std::string, std::uint8_t> expected{{"INTERRUPT", dma::flags::kInterrupt},
                                                     {"FENCE", dma::flags::kFence},
                                                     {"SRC_HBM", dma::flags::kSrcHbm},
                                                     {"DST_HBM", dma::flags::kDstHbm}};
  std::uint8_t all = 0;
  for (const auto& [n, m] : expected) all |= m;
  EXPECT_EQ(all, dma::flags::kValidMask) << "dma.hpp: kValidMask is not the union of the flags";
  std::set<std::string> seen;
  for (const Row& row : t->rows) {
    ASSERT_GE(row.cells.size(), 3u) << where(*t, row);
    const auto bit = parse_uint(row.cells[0]);
    const auto mask = parse_uint(row.cells[1]);
    const auto it = expected.find(row.cells[2]);
    if (it == expected.end()) {
      ADD_FAILURE() << where(*t, row) << ": flag not in dma.hpp";
      continue;
    }
    seen.insert(row.cells[2]);
    EXPECT_EQ(mask, std::optional<std::uint64_t>(it->second))
        << where(*t, row) << ": mask in dma.hpp is " << hex(it->second);
    if (bit) {
      EXPECT_EQ(1u << *bit, it->second) << where(*t, row) << ": bit number disagrees with the mask";
    }
  }
  for (const auto& [n, m] : expected) EXPECT_TRUE(seen.contains(n)) << "dma.md has no row for flag " << n;
}

TEST(SpecAgreement, DmaStatusCodes) {
  std::map<std::uint64_t, std::string> expected;
  for (unsigned v = 0; v < 256; ++v)
    if (const auto n = dma::status_name(static_cast<dma::Status>(v)); n != "unknown") expected[v] = upper(n);
  check_enum_table(load("dma.md"), "dma.md", "dma.status", "Name", expected);
  // The "Written by" column: the card never writes the software-only values.
  const auto tables = load("dma.md");
  const Table* t = by_marker(tables, "dma.status", "dma.md");
  ASSERT_NE(t, nullptr);
  for (const Row& row : t->rows) {
    const auto v = parse_uint(row.cells[0]);
    if (!v || row.cells.size() < 3) continue;
    if (*v >= 0x80)
      EXPECT_EQ(row.cells[2], "driver") << where(*t, row) << ": values from 0x80 are software-only";
    else
      EXPECT_NE(row.cells[2], "driver") << where(*t, row) << ": values below 0x80 are written by the card";
  }
}

// ---- mailbox.md --------------------------------------------------------------------------

TEST(SpecAgreement, MailboxHeaderLayout) {
  const auto tables = load("mailbox.md");
  namespace h = mbox::hdr;
  check_layout(tables, "mailbox.md", "mbox.hdr",
               {{"version", h::kVersion, 1},
                {"flags", h::kFlags, 1},
                {"opcode", h::kOpcode, 2},
                {"sequence", h::kSequence, 4},
                {"payload_len", h::kPayloadLen, 2},
                {"status", h::kStatus, 2},
                {"crc", h::kCrc, 4}},
               h::kSize);
}

TEST(SpecAgreement, MailboxPayloadLayouts) {
  const auto tables = load("mailbox.md");
  const std::string d = "mailbox.md";
  {
    namespace p = mbox::identify;
    check_layout(tables, d, "mbox.identify",
                 {{"vendor_id", p::kVendorId, 2},
                  {"device_id", p::kDeviceId, 2},
                  {"fabric_id", p::kFabricId, 4},
                  {"serial", p::kSerial, 8},
                  {"hbm_bytes", p::kHbmBytes, 8},
                  {"num_engines", p::kNumEngines, 1},
                  {"queues_per_engine", p::kQueuesPerEngine, 1},
                  {"num_ports", p::kNumPorts, 1},
                  {"lanes_per_port", p::kLanesPerPort, 1},
                  {"model", p::kModel, 32}},
                 p::kSize);
  }
  {
    namespace p = mbox::versions;
    check_layout(tables, d, "mbox.versions",
                 {{"firmware", p::kFirmware, 4},
                  {"interface", p::kInterface, 4},
                  {"protocol", p::kProtocol, 4},
                  {"build_id", p::kBuildId, 4},
                  {"firmware_string", p::kFirmwareString, 32}},
                 p::kSize);
  }
  check_layout(tables, d, "mbox.reset", {{"scope", mbox::reset::kScope, 4}}, mbox::reset::kSize);
  {
    namespace p = mbox::heartbeat;
    check_layout(tables, d, "mbox.heartbeat.req", {{"cookie", p::kCookie, 8}}, p::kReqSize);
    check_layout(tables, d, "mbox.heartbeat.rsp",
                 {{"cookie", p::kCookie, 8}, {"uptime_ns", p::kUptimeNs, 8}, {"count", p::kCount, 4}}, p::kRspSize);
  }
  {
    namespace p = mbox::xcvr;
    check_layout(tables, d, "mbox.xcvr",
                 {{"port", p::kPort, 1},
                  {"bank", p::kBank, 1},
                  {"page", p::kPage, 1},
                  {"offset", p::kOffset, 1},
                  {"length", p::kLength, 1},
                  {"data", p::kData, std::nullopt}},
                 p::kHdrSize);
  }
  {
    namespace p = mbox::link;
    check_layout(tables, d, "mbox.link", {{"port", p::kPort, 1}, {"action", p::kAction, 1}, {"arg", p::kArg, 1}},
                 p::kSize);
    check_layout(tables, d, "mbox.link.rsp", {{"port_status", p::kRspStatus, 4}}, p::kRspSize);
  }
  {
    namespace p = mbox::telemetry;
    check_layout(tables, d, "mbox.telemetry",
                 {{"timestamp_ns", p::kTimestampNs, 8},
                  {"temp_q8", p::kTempQ8, 2},
                  {"power_mw", p::kPowerMw, 4},
                  {"ports", p::kPorts, p::kPortRecord}},
                 p::kPorts + p::kPortRecord);
    check_layout(tables, d, "mbox.telemetry.port",
                 {{"status", p::kPortStatus, 4},
                  {"flaps", p::kPortFlaps, 4},
                  {"mod_temp_q8", p::kPortModTempQ8, 2},
                  {"mod_vcc", p::kPortModVcc, 2},
                  {"max_ber", p::kPortMaxBer, 4}},
                 p::kPortRecord);
  }
  {
    namespace p = mbox::power;
    check_layout(tables, d, "mbox.power",
                 {{"timestamp_ns", p::kTimestampNs, 8},
                  {"power_mw", p::kPowerMw, 4},
                  {"power_avg_mw", p::kPowerAvgMw, 4},
                  {"energy_mj", p::kEnergyMj, 8},
                  {"limit_mw", p::kLimitMw, 4},
                  {"default_limit_mw", p::kDefaultLimitMw, 4},
                  {"min_limit_mw", p::kMinLimitMw, 4},
                  {"max_limit_mw", p::kMaxLimitMw, 4},
                  {"throttle", p::kThrottle, 4},
                  {"throttled_ns", p::kThrottledNs, 8},
                  {"temp_q8", p::kTempQ8, 2},
                  {"engines_active", p::kEnginesActive, 1},
                  {"num_ports", p::kNumPorts, 1},
                  {"idle_mw", p::kIdleMw, 4},
                  {"dma_mw", p::kDmaMw, 4},
                  {"serdes_mw", p::kSerdesMw, 4},
                  {"modules_mw", p::kModulesMw, 4},
                  {"ports", p::kPorts, p::kPortRecord}},
                 p::kPorts + p::kPortRecord);
    check_layout(tables, d, "mbox.power.port",
                 {{"flags", p::kPortFlags, 1},
                  {"power_class", p::kPortPowerClass, 1},
                  {"max_power_q", p::kPortMaxPowerQ, 2},
                  {"draw_mw", p::kPortDrawMw, 4},
                  {"temp_q8", p::kPortTempQ8, 2},
                  {"trained_lanes", p::kPortTrainedLanes, 1}},
                 p::kPortRecord);
  }
  {
    namespace p = mbox::power_limit;
    check_layout(tables, d, "mbox.power_limit.req", {{"action", p::kAction, 1}, {"limit_mw", p::kLimitMw, 4}},
                 p::kReqSize);
    check_layout(tables, d, "mbox.power_limit.rsp",
                 {{"limit_mw", p::kRspLimitMw, 4},
                  {"default_mw", p::kRspDefaultMw, 4},
                  {"min_mw", p::kRspMinMw, 4},
                  {"max_mw", p::kRspMaxMw, 4}},
                 p::kRspSize);
  }
  {
    namespace p = mbox::errlog;
    check_layout(tables, d, "mbox.errlog.req", {{"start", p::kStart, 2}, {"max", p::kMax, 2}}, p::kReqSize);
    check_layout(tables, d, "mbox.errlog.rsp",
                 {{"total", p::kTotal, 2}, {"count", p::kCount, 2}, {"entries", p::kEntries, p::kEntrySize}},
                 p::kEntries + p::kEntrySize);
    {
      namespace f = mbox::fwu;
      check_layout(tables, d, "mbox.fwu.query",
                   {{"active_slot", f::kActiveSlot, 1},
                    {"committed_slot", f::kCommittedSlot, 1},
                    {"state", f::kState, 1},
                    {"flags", f::kFlags, 1},
                    {"security_version", f::kSecurityVersion, 4},
                    {"max_chunk", f::kQueryMaxChunk, 4},
                    {"max_image", f::kMaxImage, 4},
                    {"vendor_id", f::kVendorId, 2},
                    {"device_id", f::kDeviceId, 2},
                    {"received", f::kReceived, 4},
                    {"board_model", f::kBoardModel, 32},
                    {"trusted_key", f::kTrustedKey, 32},
                    {"slots", f::kSlots, f::kSlotRecord}},
                   f::kSlots + f::kSlotRecord);
      check_layout(tables, d, "mbox.fwu.slot",
                   {{"valid", f::kSlotValid, 1},
                    {"version", f::kSlotVersion, 4},
                    {"security_version", f::kSlotSecurityVersion, 4},
                    {"image_bytes", f::kSlotBytes, 8}},
                   f::kSlotRecord);
      check_layout(tables, d, "mbox.fwu.begin", {{"total_bytes", f::kBeginTotal, 8}, {"slot", f::kBeginSlot, 1}},
                   f::kBeginReqSize);
      check_layout(
          tables, d, "mbox.fwu.write",
          {{"offset", f::kWriteOffset, 4}, {"length", f::kWriteLength, 2}, {"data", f::kWriteData, std::nullopt}},
          std::nullopt);
      check_layout(tables, d, "mbox.fwu.finish",
                   {{"slot", f::kFinishSlot, 1},
                    {"version", f::kFinishVersion, 4},
                    {"security_version", f::kFinishSecurityVersion, 4}},
                   f::kFinishRspSize);
    }
    check_layout(tables, d, "mbox.errlog.entry",
                 {{"timestamp", p::kEntryTimestamp, 8},
                  {"code", p::kEntryCode, 2},
                  {"severity", p::kEntrySeverity, 1},
                  {"source", p::kEntrySource, 1},
                  {"arg0", p::kEntryArg0, 4},
                  {"arg1", p::kEntryArg1, 8},
                  {"arg2", p::kEntryArg2, 8}},
                 p::kEntrySize);
  }
}

constexpr std::string_view command_name(mbox::Command c) {
  switch (c) {
    case mbox::Command::kIdentify: return "IDENTIFY";
    case mbox::Command::kGetVersions: return "GET_VERSIONS";
    case mbox::Command::kReset: return "RESET";
    case mbox::Command::kHeartbeat: return "HEARTBEAT";
    case mbox::Command::kXcvrRead: return "XCVR_READ";
    case mbox::Command::kXcvrWrite: return "XCVR_WRITE";
    case mbox::Command::kLinkControl: return "LINK_CONTROL";
    case mbox::Command::kTelemetry: return "TELEMETRY";
    case mbox::Command::kErrorLogRead: return "ERROR_LOG_READ";
    case mbox::Command::kErrorLogClear: return "ERROR_LOG_CLEAR";
    case mbox::Command::kPowerRead: return "POWER_READ";
    case mbox::Command::kPowerLimit: return "POWER_LIMIT";
    case mbox::Command::kFwQuery: return "FW_QUERY";
    case mbox::Command::kFwBegin: return "FW_BEGIN";
    case mbox::Command::kFwWrite: return "FW_WRITE";
    case mbox::Command::kFwFinish: return "FW_FINISH";
    case mbox::Command::kFwActivate: return "FW_ACTIVATE";
    case mbox::Command::kFwCommit: return "FW_COMMIT";
    case mbox::Command::kFwAbort: return "FW_ABORT";
  }
  return {};
}

TEST(SpecAgreement, MailboxCommands) {
  std::map<std::uint64_t, std::string> expected;
  for (unsigned v = 0; v < 0x10000; ++v)
    if (const auto n = command_name(static_cast<mbox::Command>(v)); !n.empty()) expected[v] = std::string(n);
  const auto tables = load("mailbox.md");
  check_enum_table(tables, "mailbox.md", "mbox.commands", "Command", expected);

  // Fixed payload sizes in the command table agree with the payload constants.
  const Table* t = by_marker(tables, "mbox.commands", "mailbox.md");
  ASSERT_NE(t, nullptr);
  using C = mbox::Command;
  const std::map<C, std::pair<std::optional<std::size_t>, std::optional<std::size_t>>> sizes{
      {C::kIdentify, {0, mbox::identify::kSize}},
      {C::kGetVersions, {0, mbox::versions::kSize}},
      {C::kReset, {mbox::reset::kSize, 0}},
      {C::kHeartbeat, {mbox::heartbeat::kReqSize, mbox::heartbeat::kRspSize}},
      {C::kXcvrRead, {mbox::xcvr::kHdrSize, std::nullopt}},
      {C::kXcvrWrite, {std::nullopt, 0}},
      {C::kLinkControl, {mbox::link::kSize, mbox::link::kRspSize}},
      {C::kTelemetry, {0, std::nullopt}},
      {C::kErrorLogRead, {mbox::errlog::kReqSize, std::nullopt}},
      {C::kErrorLogClear, {0, 0}},
      {C::kPowerRead, {0, std::nullopt}},
      {C::kPowerLimit, {mbox::power_limit::kReqSize, mbox::power_limit::kRspSize}},
      {C::kFwQuery, {0, mbox::fwu::kQuerySize}},
      {C::kFwBegin, {mbox::fwu::kBeginReqSize, mbox::fwu::kBeginRspSize}},
      {C::kFwWrite, {std::nullopt, mbox::fwu::kWriteRspSize}},
      {C::kFwFinish, {0, mbox::fwu::kFinishRspSize}},
      {C::kFwActivate, {0, 0}},
      {C::kFwCommit, {0, mbox::fwu::kCommitRspSize}},
      {C::kFwAbort, {0, 0}},
  };
  for (const Row& row : t->rows) {
    const auto v = parse_uint(row.cells[0]);
    if (!v || row.cells.size() < 4) continue;
    const auto it = sizes.find(static_cast<C>(*v));
    if (it == sizes.end()) continue;
    const auto req = parse_uint(row.cells[2]);
    const auto rsp = parse_uint(row.cells[3]);
    if (it->second.first) {
      EXPECT_EQ(req, std::optional<std::uint64_t>(*it->second.first))
          << where(*t, row) << ": request payload size in mailbox.hpp is " << *it->second.first;
    }
    if (it->second.second) {
      EXPECT_EQ(rsp, std::optional<std::uint64_t>(*it->second.second))
          << where(*t, row) << ": response payload size in mailbox.hpp is " << *it->second.second;
    }
  }

  // §5 states the firmware-update range with the header's bounds.
  const std::string text = read_text(kSpecDir + "mailbox.md");
  const auto sec5 = text.find("## 5. Firmware update");
  ASSERT_NE(sec5, std::string::npos) << "mailbox.md: §5 \"Firmware update\" is missing";
  auto hex4 = [](unsigned v) {
    std::string s = hex(v).substr(2);
    s = upper(s);
    return "0x" + std::string(4 - s.size(), '0') + s;
  };
  const std::string range = "`" + hex4(mbox::kFwUpdateFirst) + "`–`" + hex4(mbox::kFwUpdateLast) + "`";
  EXPECT_NE(text.find(range, sec5), std::string::npos) << "mailbox.md §5 must state the range " << range;
}

TEST(SpecAgreement, MailboxFirmwareUpdateStates) {
  using S = mbox::fwu::State;
  const std::map<std::uint64_t, std::string> expected{{static_cast<unsigned>(S::kIdle), "IDLE"},
                                                      {static_cast<unsigned>(S::kReceiving), "RECEIVING"},
                                                      {static_cast<unsigned>(S::kStaged), "STAGED"},
                                                      {static_cast<unsigned>(S::kTrial), "TRIAL"}};
  check_enum_table(load("mailbox.md"), "mailbox.md", "mbox.fwu.states", "State", expected);
}

TEST(SpecAgreement, FirmwareImageHeaderLayout) {
  namespace h = npo::fw::image::hdr;
  check_layout(load("firmware-image.md"), "firmware-image.md", "fwimage.header",
               {{"magic", h::kMagic, 8},
                {"format_version", h::kFormatVersion, 2},
                {"header_size", h::kHeaderSize, 2},
                {"flags", h::kFlags, 4},
                {"vendor_id", h::kVendorId, 2},
                {"device_id", h::kDeviceId, 2},
                {"model", h::kModel, h::kModelLen},
                {"fw_version", h::kFwVersion, 4},
                {"security_version", h::kSecurityVersion, 4},
                {"payload_len", h::kPayloadLen, 8},
                {"digest_alg", h::kDigestAlg, 1},
                {"digest", h::kDigest, h::kDigestLen},
                {"signer_key", h::kSignerKey, h::kKeyLen},
                {"signature", h::kSignature, h::kSignatureLen}},
               h::kSize);
}

TEST(SpecAgreement, MailboxStatusCodes) {
  std::map<std::uint64_t, std::string> expected;
  for (unsigned v = 0; v < 0x10000; ++v)
    if (const auto n = mbox::status_name(static_cast<mbox::Status>(v)); n != "unknown") expected[v] = upper(n);
  check_enum_table(load("mailbox.md"), "mailbox.md", "mbox.status", "Name", expected);
}

constexpr std::string_view action_name(mbox::link::Action a) {
  using A = mbox::link::Action;
  switch (a) {
    case A::kDown: return "DOWN";
    case A::kUp: return "UP";
    case A::kRetrain: return "RETRAIN";
    case A::kPrbsStart: return "PRBS_START";
    case A::kPrbsStop: return "PRBS_STOP";
    case A::kLoopbackOn: return "LOOPBACK_ON";
    case A::kLoopbackOff: return "LOOPBACK_OFF";
  }
  return {};
}

TEST(SpecAgreement, MailboxLinkActions) {
  std::map<std::uint64_t, std::string> expected;
  for (unsigned v = 0; v < 256; ++v)
    if (const auto n = action_name(static_cast<mbox::link::Action>(v)); !n.empty()) expected[v] = std::string(n);
  EXPECT_EQ(expected.size(), mbox::link::kNumActions);
  check_enum_table(load("mailbox.md"), "mailbox.md", "mbox.link.actions", "Name", expected);
}

// ---- registers.md §7.2 link states ---------------------------------------------------------

constexpr std::string_view state_name(regs::port::LinkState s) {
  using S = regs::port::LinkState;
  switch (s) {
    case S::kDisabled: return "Disabled";
    case S::kModuleWait: return "ModuleWait";
    case S::kDataPathInit: return "DataPathInit";
    case S::kTraining: return "Training";
    case S::kFecLock: return "FecLock";
    case S::kUp: return "Up";
    case S::kFault: return "Fault";
  }
  return {};
}

TEST(SpecAgreement, LinkStates) {
  std::map<std::uint64_t, std::string> expected;
  for (unsigned v = 0; v < 16; ++v)
    if (const auto n = state_name(static_cast<regs::port::LinkState>(v)); !n.empty()) expected[v] = std::string(n);
  check_enum_table(load("registers.md"), "registers.md", "port.states", "State", expected);
}

// ---- pci.md ----------------------------------------------------------------------------------

TEST(SpecAgreement, PciConstants) {
  const auto tables = load("pci.md");
  const Table* t = by_marker(tables, "pci.constants", "pci.md");
  ASSERT_NE(t, nullptr);
  const std::map<std::string, std::uint64_t> expected{
      {"kRevisionId", pci::kRevisionId},
      {"kClassCode", pci::kClassCode},
      {"kBarRegs", pci::kBarRegs},
      {"kBar0Size", pci::kBar0Size},
      {"kBarHbm", pci::kBarHbm},
      {"kBar2MinSize", pci::kBar2MinSize},
      {"kBarMsix", pci::kBarMsix},
      {"kBar4Size", pci::kBar4Size},
      {"kMsixTableOffset", pci::kMsixTableOffset},
      {"kMsixPbaOffset", pci::kMsixPbaOffset},
      {"kMsixVectors", pci::kMsixVectors},
      {"kMsixVectorGlobal", pci::kMsixVectorGlobal},
      {"kMsixVectorQueueBase", pci::kMsixVectorQueueBase},
      {"cfg::kCardPcieCap", pci::cfg::kCardPcieCap},
      {"cfg::kCardMsixCap", pci::cfg::kCardMsixCap},
      {"cfg::kCardAcsCap", pci::cfg::kCardAcsCap},
      {"cfg::kCardAtsCap", pci::cfg::kCardAtsCap},
      {"cfg::kCardRebarCap", pci::cfg::kCardRebarCap},
      {"cfg::acs::kCardCaps", pci::cfg::acs::kCardCaps},
  };
  std::set<std::string> seen;
  for (const Row& row : t->rows) {
    ASSERT_GE(row.cells.size(), 2u) << where(*t, row);
    const auto it = expected.find(row.cells[0]);
    if (it == expected.end()) {
      ADD_FAILURE() << where(*t, row) << ": constant not checked (add it to this test) or not in pci.hpp";
      continue;
    }
    seen.insert(row.cells[0]);
    EXPECT_EQ(parse_uint(row.cells[1]), std::optional<std::uint64_t>(it->second))
        << where(*t, row) << ": pci.hpp says " << hex(it->second);
  }
  for (const auto& [n, v] : expected) EXPECT_TRUE(seen.contains(n)) << "pci.md §6 has no row for " << n;
  // Vectors: 1 + queue for every queue must exist.
  EXPECT_LE(pci::kMsixVectorQueueBase + regs::kNumQueues, pci::kMsixVectors);
}

// ---- The reader itself ----------------------------------------------------------------------

TEST(SpecDocReader, SplitsEscapesAndNumbers) {
  EXPECT_EQ(split_row("| `A.B` | 0x1c | 32 | RO | x \\| y |"),
            (std::vector<std::string>{"A.B", "0x1c", "32", "RO", "x | y"}));
  EXPECT_EQ(parse_uint("0x00c"), std::optional<std::uint64_t>(12));
  EXPECT_EQ(parse_uint("64"), std::optional<std::uint64_t>(64));
  EXPECT_EQ(parse_uint("8 + length"), std::nullopt);
  EXPECT_EQ(parse_bits("31:16"), (std::optional<std::pair<unsigned, unsigned>>{{31u, 16u}}));
  EXPECT_EQ(parse_bits("5"), (std::optional<std::pair<unsigned, unsigned>>{{5u, 5u}}));
  EXPECT_TRUE(is_separator("|---|---|"));
  EXPECT_FALSE(is_separator("| a | b |"));
}

}  // namespace
