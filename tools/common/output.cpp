// SPDX-License-Identifier: Apache-2.0
#include "common/output.hpp"

#include <cmath>
#include <cstdio>

namespace npo::tools {

namespace {

/// The column's separator and `text` padded to the column's width.
std::string pad(const Column& c, std::string_view text) {
  return c.align == Column::Align::kLeft ? fmt::format("{}{:<{}}", c.before, text, c.width)
                                         : fmt::format("{}{:>{}}", c.before, text, c.width);
}

}  // namespace

std::string json_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

void print_json(const nlohmann::json& j) { std::puts(json_text(j).c_str()); }

int fail(std::string_view tool, std::string_view what, const Error& error) {
  fmt::print(stderr, "{}: {}: {}\n", tool, what, error.to_string());
  return 1;
}

int fail(std::string_view tool, const Error& error) {
  fmt::print(stderr, "{}: {}\n", tool, error.to_string());
  return 1;
}

bool check_seconds(std::string_view tool, std::string_view name, double v, double max_s, bool allow_zero) {
  if (std::isfinite(v) && (v > 0 || (allow_zero && v == 0)) && v <= max_s) return true;
  fmt::print(stderr, "{}: {} {}: expected seconds in {}0, {}]\n", tool, name, v, allow_zero ? "[" : "(", max_s);
  return false;
}

std::string Table::header() const {
  std::string out;
  for (const auto& c : columns_) out += pad(c, c.header);
  out += '\n';
  return out;
}

void Table::print_header() const { std::fputs(header().c_str(), stdout); }

std::string Table::row_of(const std::vector<std::string>& cells) const {
  std::string out;
  auto cell = cells.begin();
  for (const auto& c : columns_) {
    if (cell == cells.end()) break;
    out += pad(c, *cell++);
  }
  out += '\n';
  return out;
}

}  // namespace npo::tools
