// SPDX-License-Identifier: Apache-2.0
// tools/common: how the tools print -- one JSON document per run, errors as
// "TOOL: WHAT: ERROR" lines, and fixed-width text tables.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "npo/hal/error.hpp"

namespace npo::tools {

// ---- JSON ----------------------------------------------------------------------------------

/// `j` as the tools print it: 2-space indentation, object keys sorted (nlohmann's default),
/// bytes that are not UTF-8 (a file name, a backend URI) replaced by U+FFFD instead of
/// throwing. Thread-safety: pure function.
[[nodiscard]] std::string json_text(const nlohmann::json& j);

/// Prints json_text(j) and a newline to stdout.
void print_json(const nlohmann::json& j);

/// The value of `v`, or JSON null when it is empty.
template <typename T>
[[nodiscard]] nlohmann::json or_null(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// ---- Errors --------------------------------------------------------------------------------

/// Prints "TOOL: WHAT: ERROR" (error.to_string()) to stderr; returns 1, the tools' exit
/// status for a failed operation.
int fail(std::string_view tool, std::string_view what, const Error& error);
/// Whether a duration option in seconds is usable: finite, > 0 (>= 0 with `allow_zero`)
/// and at most `max_s`. Otherwise prints "TOOL: NAME V: expected seconds in (0, MAX]" (or
/// "[0, MAX]") to stderr and returns false: NaN, infinities and negative values would hang a
/// loop or wrap when converted to nanoseconds.
bool check_seconds(std::string_view tool, std::string_view name, double v, double max_s = 86400.0,
                   bool allow_zero = false);
/// Prints "TOOL: ERROR" to stderr; returns 1.
int fail(std::string_view tool, const Error& error);

// ---- Tables --------------------------------------------------------------------------------

/// One column of a text table.
struct Column {
  enum class Align : unsigned char { kLeft, kRight };
  std::string_view header;        ///< printed by Table::header
  unsigned width = 0;             ///< minimum width; 0: the cell as it is (a last, free-text column)
  Align align = Align::kRight;    ///< numbers right, words left
  std::string_view before = " ";  ///< text before the cell (the first column: the row's indent)
};

/// A fixed-width text table: each cell padded to its column's width (longer cells are not
/// cut), cells joined by the columns' `before` separators, one line per row. Cells are
/// strings or integers; format floating-point values first (fmt::format("{:.2f}", x)), so
/// every figure shows the precision its column means.
class Table {
 public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

  /// The header line (the columns' headers), with a newline.
  [[nodiscard]] std::string header() const;

  /// One row with a newline, one cell per column (extra cells are dropped; missing cells end
  /// the line early).
  template <typename... Cells>
  [[nodiscard]] std::string row(const Cells&... cells) const {
    static_assert((!std::is_floating_point_v<Cells> && ...), "format floating-point cells first");
    return row_of({fmt::format("{}", cells)...});
  }
  /// As row(), for a row built at run time (e.g. one cell per card).
  [[nodiscard]] std::string row_of(const std::vector<std::string>& cells) const;

  /// Prints header() to stdout.
  void print_header() const;
  /// Prints row(cells...) to stdout.
  template <typename... Cells>
  void print_row(const Cells&... cells) const {
    std::fputs(row(cells...).c_str(), stdout);
  }

 private:
  std::vector<Column> columns_;
};

}  // namespace npo::tools
