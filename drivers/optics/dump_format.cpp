// SPDX-License-Identifier: Apache-2.0
// drivers/optics: module memory dumps (raw, `ethtool -m hex on`, tests/data/eeprom `.hex`),
// layout detection (decode_module), and the names and helpers the three decoders share.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "npo/hal/xcvr_decode.hpp"
#include "optics/xcvr_bytes.hpp"
#include "optics/xcvr_ids.hpp"

namespace npo::xcvr {

namespace {

constexpr std::size_t kMaxDumpBytes = 64 * 1024;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// Printable excerpt of a token for an error message (bounded, control bytes escaped).
std::string show(std::string_view t) {
  std::string s;
  for (char c : t.substr(0, 24)) {
    const auto u = static_cast<unsigned char>(c);
    s += (u >= 0x20 && u < 0x7f) ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  if (t.size() > 24) s += "...";
  return s;
}

/// The offset column of a data line: "0x0010:", "00000010", "0010:"; nullopt if not one.
std::optional<std::size_t> parse_offset(std::string_view t) {
  if (!t.empty() && t.back() == ':') t.remove_suffix(1);
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) t.remove_prefix(2);
  if (t.empty() || t.size() > 8) return std::nullopt;
  std::size_t v = 0;
  for (char c : t) {
    const int h = hex_value(c);
    if (h < 0) return std::nullopt;
    v = v * 16 + static_cast<std::size_t>(h);
  }
  return v;
}

bool is_binary(std::span<const std::byte> contents) {
  return std::any_of(contents.begin(), contents.end(), [](std::byte x) {
    const auto c = std::to_integer<unsigned char>(x);
    return (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f;
  });
}

}  // namespace

// ---- Names ---------------------------------------------------------------------------------

std::string_view spec_name(Spec s) noexcept {
  switch (s) {
    case Spec::kCmis: return "cmis";
    case Spec::kSff8636: return "sff8636";
    case Spec::kSff8472: return "sff8472";
  }
  return "unknown";
}

std::string_view identifier_name(std::uint8_t code) noexcept {
  // SFF-8024 Table 4-1.
  static constexpr std::array<std::string_view, 0x21> kNames{
      "unknown or unspecified",
      "GBIC",
      "module soldered to motherboard",
      "SFP/SFP+/SFP28",
      "300 pin XBI",
      "XENPAK",
      "XFP",
      "XFF",
      "XFP-E",
      "XPAK",
      "X2",
      "DWDM-SFP/SFP+",
      "QSFP",
      "QSFP+ or later (SFF-8636/SFF-8436)",
      "CXP or later",
      "shielded mini multilane HD 4X",
      "shielded mini multilane HD 8X",
      "QSFP28 or later (SFF-8636)",
      "CXP2 or later",
      "CDFP (style 1/2)",
      "shielded mini multilane HD 4X fanout",
      "shielded mini multilane HD 8X fanout",
      "CDFP (style 3)",
      "microQSFP",
      "QSFP-DD",
      "OSFP 8X",
      "SFP-DD",
      "DSFP",
      "x4 MiniLink/OcuLink",
      "x8 MiniLink",
      "QSFP+ or later with CMIS",
      "SFP-DD with CMIS",
      "SFP+ and later with CMIS",
  };
  if (code < kNames.size()) return kNames[code];
  return code >= 0x80 ? "vendor specific" : "reserved";
}

std::string_view lane_flag_name(LaneFlag f) noexcept {
  switch (f) {
    case LaneFlag::kTxPowerHighAlarm: return "tx_power_high_alarm";
    case LaneFlag::kTxPowerLowAlarm: return "tx_power_low_alarm";
    case LaneFlag::kTxPowerHighWarning: return "tx_power_high_warning";
    case LaneFlag::kTxPowerLowWarning: return "tx_power_low_warning";
    case LaneFlag::kTxBiasHighAlarm: return "tx_bias_high_alarm";
    case LaneFlag::kTxBiasLowAlarm: return "tx_bias_low_alarm";
    case LaneFlag::kTxBiasHighWarning: return "tx_bias_high_warning";
    case LaneFlag::kTxBiasLowWarning: return "tx_bias_low_warning";
    case LaneFlag::kRxPowerHighAlarm: return "rx_power_high_alarm";
    case LaneFlag::kRxPowerLowAlarm: return "rx_power_low_alarm";
    case LaneFlag::kRxPowerHighWarning: return "rx_power_high_warning";
    case LaneFlag::kRxPowerLowWarning: return "rx_power_low_warning";
    case LaneFlag::kTxLos: return "tx_los";
    case LaneFlag::kRxLos: return "rx_los";
    case LaneFlag::kTxCdrLol: return "tx_cdr_lol";
    case LaneFlag::kRxCdrLol: return "rx_cdr_lol";
    case LaneFlag::kTxFault: return "tx_fault";
    case LaneFlag::kTxAdaptiveEqFault: return "tx_adaptive_eq_fault";
  }
  return "unknown";
}

std::string_view module_flag_name(ModuleFlag f) noexcept {
  switch (f) {
    case ModuleFlag::kTemperatureHighAlarm: return "temperature_high_alarm";
    case ModuleFlag::kTemperatureLowAlarm: return "temperature_low_alarm";
    case ModuleFlag::kTemperatureHighWarning: return "temperature_high_warning";
    case ModuleFlag::kTemperatureLowWarning: return "temperature_low_warning";
    case ModuleFlag::kVccHighAlarm: return "vcc_high_alarm";
    case ModuleFlag::kVccLowAlarm: return "vcc_low_alarm";
    case ModuleFlag::kVccHighWarning: return "vcc_high_warning";
    case ModuleFlag::kVccLowWarning: return "vcc_low_warning";
  }
  return "unknown";
}

std::vector<LaneFlag> LaneFlags::on_lane(unsigned lane) const {
  std::vector<LaneFlag> out;
  for (std::size_t i = 0; i < kLaneFlagCount; ++i) {
    const auto f = static_cast<LaneFlag>(i);
    if (test(f, lane)) out.push_back(f);
  }
  return out;
}

std::optional<double> mw_to_dbm(double mw) noexcept {
  if (!std::isfinite(mw) || mw <= 0) return std::nullopt;
  return 10.0 * std::log10(mw);
}

// ---- Helpers shared by the decoders ------------------------------------------------------------

namespace detail {

std::string Bytes::oui(std::size_t off) const {
  return fmt::format("{:02x}:{:02x}:{:02x}", u8(off), u8(off + 1), u8(off + 2));
}

void parse_date_code(DecodedModule& m) {
  const std::string& d = m.date_code;
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  const auto num = [&](std::size_t i) {
    return digit(d[i]) && digit(d[i + 1]) ? (d[i] - '0') * 10 + (d[i + 1] - '0') : -1;
  };
  if (d.size() >= 6) {
    const int yy = num(0), mm = num(2), dd = num(4);
    if (yy >= 0 && mm >= 1 && mm <= 12 && dd >= 1 && dd <= 31) {
      m.manufacture_date = fmt::format("20{:02}-{:02}-{:02}", yy, mm, dd);
      return;
    }
  }
  if (!d.empty()) m.notes.push_back(fmt::format("date code '{}' does not start with a valid YYMMDD", d));
}

void make_lanes(DecodedModule& m, unsigned count) {
  count = std::min(count, 8u);
  m.media_lane_count = count;
  m.lanes.clear();
  for (unsigned i = 1; i <= count; ++i) {
    Lane l;
    l.lane = i;
    m.lanes.push_back(std::move(l));
  }
}

void apply_lane_flags(DecodedModule& m, LaneFlags flags) {
  const auto mask = static_cast<LaneBitmap>(m.media_lane_count >= 8 ? 0xffu : (1u << m.media_lane_count) - 1u);
  for (auto& b : flags.bitmap) b &= mask;
  for (Lane& l : m.lanes) l.flags = flags.on_lane(l.lane);
  m.lane_flags = flags;
}

Error wrong_identifier(std::string_view decoder, std::uint8_t id) {
  return Error(Code::kInvalidArgument, fmt::format("{}: identifier 0x{:02x} ({}) at byte 0 is not a {} module", decoder,
                                                   id, identifier_name(id), decoder));
}

Result<void> check_paged_image(std::span<const std::byte> linear, std::string_view decoder, std::string_view lower,
                               bool (*is_identifier)(std::uint8_t)) {
  if (linear.empty()) return fail(Code::kInvalidArgument, fmt::format("{}: empty module image", decoder));
  const auto id = std::to_integer<std::uint8_t>(linear[0]);
  if (!is_identifier(id)) return std::unexpected(wrong_identifier(decoder, id));
  if (linear.size() < 2 * kPageSize) {
    return fail(Code::kDataLoss, fmt::format("{}: {} bytes, need {} + page 00h (256 bytes): truncated dump", decoder,
                                             linear.size(), lower));
  }
  if (linear.size() % kPageSize != 0) {
    return fail(Code::kDataLoss, fmt::format("{}: {} bytes is not a whole number of 128-byte pages (partial page)",
                                             decoder, linear.size()));
  }
  return {};
}

}  // namespace detail

// ---- Layout detection ----------------------------------------------------------------------------

Result<DecodedModule> decode_module(std::span<const std::byte> linear) {
  if (linear.empty()) return fail(Code::kInvalidArgument, "empty module image: no bytes to decode");
  const auto id = std::to_integer<std::uint8_t>(linear[0]);
  if (detail::is_cmis_identifier(id)) return decode_cmis(linear);
  if (detail::is_sff8636_identifier(id)) return decode_sff8636(linear);
  if (detail::is_sff8472_identifier(id)) return decode_sff8472(linear);
  return fail(Code::kInvalidArgument,
              fmt::format("unknown identifier 0x{:02x} ({}) at byte 0: not a CMIS, SFF-8636 or SFF-8472 module", id,
                          identifier_name(id)));
}

// ---- Dump formats ------------------------------------------------------------------------------

Result<std::vector<std::byte>> parse_dump_text(std::string_view text) {
  std::vector<std::byte> out;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;

    std::vector<std::string_view> tok;
    for (std::size_t i = 0; i < line.size();) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      const std::size_t start = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
      if (i > start) tok.push_back(line.substr(start, i - start));
    }
    // ethtool's header: "Offset  Values" / "------  ------".
    if (tok.front() == "Offset" || tok.front().find_first_not_of('-') == std::string_view::npos) continue;

    const auto off = parse_offset(tok.front());
    if (!off) {
      return fail(Code::kInvalidArgument,
                  fmt::format("line {}: expected an offset then hex bytes, got '{}'", line_no, show(tok.front())));
    }
    std::size_t n = 0;
    const std::size_t pos = out.size();
    for (std::size_t k = 1; k < tok.size(); ++k) {
      const std::string_view t = tok[k];
      if (t.front() == '|') break;  // the |ascii| column of the .hex format
      for (char c : t) {
        if (hex_value(c) < 0) {
          return fail(Code::kInvalidArgument, fmt::format("line {}: '{}' is not hex", line_no, show(t)));
        }
      }
      if (t.size() % 2 != 0) {
        return fail(Code::kInvalidArgument,
                    fmt::format("line {}: '{}' has an odd number of hex digits", line_no, show(t)));
      }
      for (std::size_t i = 0; i < t.size(); i += 2) {
        out.push_back(static_cast<std::byte>(hex_value(t[i]) * 16 + hex_value(t[i + 1])));
        ++n;
      }
      if (out.size() > kMaxDumpBytes) {
        return fail(Code::kInvalidArgument, fmt::format("line {}: dump larger than {} bytes", line_no, kMaxDumpBytes));
      }
    }
    if (n == 0) return fail(Code::kInvalidArgument, fmt::format("line {}: offset without data bytes", line_no));
    // Offsets restart per page in the .hex format and run linearly in ethtool's: both agree
    // with the byte's position inside its 128-byte page. A mismatch means a missing line.
    if (*off % detail::kPageSize != pos % detail::kPageSize) {
      return fail(Code::kDataLoss, fmt::format("line {}: offset 0x{:x} where dump byte {} (page offset 0x{:02x}) was "
                                               "expected: a line is missing",
                                               line_no, *off, pos, pos % detail::kPageSize));
    }
  }
  if (out.empty()) return fail(Code::kInvalidArgument, "no data lines in the text dump");
  if (out.size() % detail::kPageSize != 0) {
    return fail(Code::kDataLoss,
                fmt::format("{} bytes: not a whole number of 128-byte pages (truncated dump?)", out.size()));
  }
  return out;
}

Result<std::vector<std::byte>> parse_dump(std::span<const std::byte> contents) {
  if (contents.empty()) return fail(Code::kInvalidArgument, "empty dump: no bytes");
  if (!is_binary(contents)) {
    const std::string_view text(reinterpret_cast<const char*>(contents.data()), contents.size());
    return parse_dump_text(text);
  }
  if (contents.size() > kMaxDumpBytes) {
    return fail(Code::kInvalidArgument,
                fmt::format("raw dump of {} bytes: larger than {} bytes", contents.size(), kMaxDumpBytes));
  }
  if (contents.size() % detail::kPageSize != 0) {
    return fail(Code::kDataLoss, fmt::format("raw dump of {} bytes: not a whole number of 128-byte pages (truncated?)",
                                             contents.size()));
  }
  return std::vector<std::byte>(contents.begin(), contents.end());
}

Result<std::vector<std::byte>> load_dump_file(const std::filesystem::path& path) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return fail_errno(errno, fmt::format("{}: cannot open", path.string()));
  // Text dumps of the largest layout stay far below 1 MiB; anything bigger is not a dump.
  constexpr std::size_t kMaxFile = 1u << 20;
  std::vector<std::byte> buf(kMaxFile + 1);
  const std::size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
  if (std::ferror(f.get()) != 0) return fail_errno(errno, fmt::format("{}: read failed", path.string()));
  if (n > kMaxFile)
    return fail(Code::kInvalidArgument, fmt::format("{}: larger than 1 MiB, not a dump", path.string()));
  buf.resize(n);
  auto r = parse_dump(buf);
  if (!r) return std::unexpected(std::move(r.error()).prefixed(path.string()));
  return r;
}

}  // namespace npo::xcvr
