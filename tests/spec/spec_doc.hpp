// SPDX-License-Identifier: Apache-2.0
// Minimal reader for the Markdown tables of docs/spec/ (README.md §6), used by
// spec_agreement_test.cpp. Test-only; not part of any library.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace npo::spec_test {

/// One body row of a Markdown table.
struct Row {
  std::size_t line = 0;            ///< 1-based line number in the document
  std::string text;                ///< the raw line, for failure messages
  std::vector<std::string> cells;  ///< trimmed cells, backticks removed
};

/// One Markdown table: header cells, optional marker `<!-- table: NAME -->` on the
/// line before it, and its body rows.
struct Table {
  std::string file;
  std::size_t line = 0;  ///< line of the header row
  std::string marker;    ///< empty if none
  std::vector<std::string> header;
  std::vector<Row> rows;
};

inline std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

/// Splits `| a | b |` into {"a", "b"}; `\|` does not split; backticks are dropped.
inline std::vector<std::string> split_row(std::string_view line) {
  std::string s = trim(line);
  if (!s.empty() && s.front() == '|') s.erase(0, 1);
  if (s.size() >= 2 && s.back() == '|' && s[s.size() - 2] != '\\')
    s.pop_back();
  else if (s.size() == 1 && s.back() == '|')
    s.pop_back();
  std::vector<std::string> cells;
  std::string cur;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '|') {
      cur += '|';
      ++i;
    } else if (s[i] == '|') {
      cells.push_back(trim(cur));
      cur.clear();
    } else if (s[i] != '`') {
      cur += s[i];
    }
  }
  cells.push_back(trim(cur));
  return cells;
}

inline bool is_separator(std::string_view line) {
  const std::string t = trim(line);
  if (t.size() < 3 || t.front() != '|') return false;
  for (char c : t)
    if (c != '|' && c != '-' && c != ':' && c != ' ') return false;
  return t.find('-') != std::string::npos;
}

/// Reads every table of a Markdown file. Returns an empty vector (and sets `ok` false)
/// when the file cannot be opened.
inline std::vector<Table> read_tables(const std::string& path, bool* ok = nullptr) {
  std::ifstream in(path);
  if (ok) *ok = static_cast<bool>(in);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<Table> tables;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    const std::string t = trim(lines[i]);
    if (t.empty() || t.front() != '|' || !is_separator(lines[i + 1])) continue;
    Table tab;
    tab.file = path;
    tab.line = i + 1;
    tab.header = split_row(lines[i]);
    if (i > 0) {
      const std::string prev = trim(lines[i - 1]);
      const std::string_view open = "<!-- table:";
      if (prev.starts_with(open) && prev.ends_with("-->"))
        tab.marker = trim(std::string_view(prev).substr(open.size(), prev.size() - open.size() - 3));
    }
    std::size_t j = i + 2;
    for (; j < lines.size(); ++j) {
      const std::string r = trim(lines[j]);
      if (r.empty() || r.front() != '|') break;
      tab.rows.push_back(Row{j + 1, lines[j], split_row(lines[j])});
    }
    tables.push_back(std::move(tab));
    i = j - 1;
  }
  return tables;
}

/// Whole file as text (for prose checks).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Parses "0x1f", "0X1F", "31"; nullopt for anything else (including trailing text).
inline std::optional<std::uint64_t> parse_uint(std::string_view s) {
  std::string t = trim(s);
  int base = 10;
  std::string_view v = t;
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
    base = 16;
    v.remove_prefix(2);
  }
  if (v.empty()) return std::nullopt;
  std::uint64_t out = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out, base);
  if (ec != std::errc{} || p != v.data() + v.size()) return std::nullopt;
  return out;
}

/// "hi:lo" or "n" -> {hi, lo}.
inline std::optional<std::pair<unsigned, unsigned>> parse_bits(std::string_view s) {
  const std::string t = trim(s);
  const auto colon = t.find(':');
  if (colon == std::string::npos) {
    auto n = parse_uint(t);
    if (!n) return std::nullopt;
    return std::pair<unsigned, unsigned>{static_cast<unsigned>(*n), static_cast<unsigned>(*n)};
  }
  auto hi = parse_uint(std::string_view(t).substr(0, colon));
  auto lo = parse_uint(std::string_view(t).substr(colon + 1));
  if (!hi || !lo) return std::nullopt;
  return std::pair<unsigned, unsigned>{static_cast<unsigned>(*hi), static_cast<unsigned>(*lo)};
}

inline std::string hex(std::uint64_t v) {
  std::ostringstream ss;
  ss << "0x" << std::hex << v;
  return ss.str();
}

/// "file:line: row '...'" for failure messages.
inline std::string where(const Table& t, const Row& r) {
  std::string f = t.file;
  if (const auto p = f.rfind("/docs/"); p != std::string::npos) f = f.substr(p + 1);
  return f + ":" + std::to_string(r.line) + ": row `" + trim(r.text) + "`";
}

inline std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

}  // namespace npo::spec_test
