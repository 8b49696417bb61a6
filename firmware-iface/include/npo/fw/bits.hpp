// SPDX-License-Identifier: Apache-2.0
// npo-hal firmware interface: bit-field helpers.
//
// Registers and in-memory structures of the NPO reference card are described as
// plain integers with named (shift, width) fields -- never compiler bitfields,
// whose layout and access width are implementation-defined (docs/spec/README.md).
// This header depends on nothing but the standard library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace npo::fw {

/// A contiguous bit field inside an unsigned register value of type `T`.
/// `shift` is the index of the least significant bit, `width` the number of bits.
/// Thread-safety: constexpr value type, freely shareable.
template <typename T>
struct Field {
  static_assert(std::is_unsigned_v<T>);
  unsigned shift;
  unsigned width;

  /// The field's mask, in place (already shifted).
  [[nodiscard]] constexpr T mask() const noexcept {
    return width >= sizeof(T) * 8 ? static_cast<T>(~T{0}) : static_cast<T>(((T{1} << width) - 1) << shift);
  }
  /// Extracts the field from a full register value.
  [[nodiscard]] constexpr T get(T reg) const noexcept { return static_cast<T>((reg & mask()) >> shift); }
  /// Returns `reg` with the field replaced by `value` (excess high bits of `value` are dropped).
  [[nodiscard]] constexpr T set(T reg, T value) const noexcept {
    return static_cast<T>((reg & ~mask()) | ((static_cast<T>(value << shift)) & mask()));
  }
  /// Shorthand for `set(0, value)`.
  [[nodiscard]] constexpr T make(T value) const noexcept { return set(T{0}, value); }
};

using Field32 = Field<std::uint32_t>;
using Field64 = Field<std::uint64_t>;

/// A single bit.
[[nodiscard]] constexpr std::uint32_t bit(unsigned n) noexcept { return std::uint32_t{1} << n; }

/// Little-endian load/store of a `T` at byte offset `off` of a buffer.
/// The card is little-endian in every register and in-memory structure (spec §1.3).
template <typename T>
[[nodiscard]] inline T load_le(const void* base, std::size_t off) noexcept {
  static_assert(std::is_trivially_copyable_v<T>);
  T v;
  std::memcpy(&v, static_cast<const std::byte*>(base) + off, sizeof(T));
  return v;  // x86-64 and aarch64-le only; a big-endian host would byteswap here.
}
template <typename T>
inline void store_le(void* base, std::size_t off, T v) noexcept {
  static_assert(std::is_trivially_copyable_v<T>);
  std::memcpy(static_cast<std::byte*>(base) + off, &v, sizeof(T));
}

}  // namespace npo::fw
