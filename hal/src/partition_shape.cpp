// SPDX-License-Identifier: Apache-2.0
// Partition shapes and their edge colourings: colour = port index = optical switch, so every
// link joins the same port index on both cards and no card uses a port twice
// (npo/hal/partition.hpp).
#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "npo/hal/partition.hpp"
#include "npo/hal/topology_gen.hpp"

namespace npo {

namespace {
std::unexpected<Error> bad(std::string msg) { return fail(Code::kInvalidArgument, std::move(msg)); }

constexpr std::string_view kShapeForms = "mesh:N, ring:N, torus2d:AxB, torus3d:AxBxC";

PartitionLink link(std::uint32_t u, std::uint32_t v, unsigned port) {
  return u < v ? PartitionLink{u, v, port} : PartitionLink{v, u, port};
}

/// Round-robin 1-factorisation: even n uses n-1 colours; odd n adds a phantom vertex (n colours).
std::vector<PartitionLink> mesh_links(unsigned n) {
  std::vector<PartitionLink> out;
  if (n < 2) return out;
  const unsigned m = n % 2 == 0 ? n : n + 1;  // vertices incl. the phantom m-1 when n is odd
  for (unsigned r = 0; r + 1 < m; ++r) {
    const unsigned fixed = m - 1;
    if (fixed < n) out.push_back(link(r, fixed, r));
    for (unsigned k = 1; k < m / 2; ++k) {
      const unsigned u = (r + k) % (m - 1), v = (r + m - 1 - k) % (m - 1);
      out.push_back(link(u, v, r));
    }
  }
  return out;
}

/// An even-length ring of positions `pos` on ports base, base+1 (alternating); length 2 gives
/// two parallel links, length 1 none.
void ring_links(const std::vector<std::uint32_t>& pos, unsigned base, std::vector<PartitionLink>& out) {
  const std::size_t k = pos.size();
  if (k < 2) return;
  for (std::size_t i = 0; i < k; ++i)
    out.push_back(link(pos[i], pos[(i + 1) % k], base + static_cast<unsigned>(i % 2)));
}
}  // namespace

unsigned PartitionShape::cards() const noexcept {
  unsigned n = 1;
  for (unsigned d : dims) n *= d;
  return dims.empty() ? 0 : n;
}

std::string PartitionShape::text() const {
  switch (kind) {
    case Kind::kMesh: return fmt::format("mesh:{}", cards());
    case Kind::kRing: return fmt::format("ring:{}", cards());
    case Kind::kTorus2d: return fmt::format("torus2d:{}", fmt::join(dims, "x"));
    case Kind::kTorus3d: return fmt::format("torus3d:{}", fmt::join(dims, "x"));
    case Kind::kCustom: return fmt::format("custom:{}", cards());
  }
  return "unknown";
}

Result<PartitionShape> parse_partition_shape(std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) {
    return bad(fmt::format("shape '{}': expected one of {}", text, kShapeForms));
  }
  const std::string_view kind = text.substr(0, colon), arg = text.substr(colon + 1);
  PartitionShape s;
  if (kind == "mesh" || kind == "ring" || kind == "custom") {
    // Each error says what is wrong with N: missing, not a number, followed by more, or out
    // of range.
    const std::string range = fmt::format("{}:N needs N in 1..{}", kind, kFabricMaxCards);
    if (arg.empty()) return bad(fmt::format("shape '{}': no N after ':' ({})", text, range));
    unsigned n = 0;
    auto [p, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), n);
    const std::string_view digits(arg.data(), p), rest(p, arg.data() + arg.size());
    if (digits.empty()) {
      const auto end = std::min(arg.find_first_of(" \t"), arg.size());
      return bad(fmt::format("shape '{}': '{}' is not a whole number ({})", text, arg.substr(0, end), range));
    }
    if (!rest.empty()) {
      const bool blank = rest.find_first_not_of(" \t\r\n") == std::string_view::npos;
      return bad(fmt::format("shape '{}': unexpected '{}' after '{}:{}'{} ({})", text, rest, kind, digits,
                             blank ? " (trailing whitespace)" : "", range));
    }
    if (ec != std::errc() || n == 0 || n > kFabricMaxCards) {
      return bad(fmt::format("shape '{}': {} is outside 1..{} ({})", text, digits, kFabricMaxCards, range));
    }
    s.kind = kind == "mesh" ? PartitionShape::Kind::kMesh
                            : (kind == "ring" ? PartitionShape::Kind::kRing : PartitionShape::Kind::kCustom);
    s.dims = {n};
    return s;
  }
  if (kind == "torus2d" || kind == "torus3d") {
    auto d = parse_fabric_dims(arg);
    if (!d) return bad(fmt::format("shape '{}': {}", text, d.error().message()));
    const std::size_t want = kind == "torus2d" ? 2 : 3;
    if (d->size() != want) return bad(fmt::format("shape '{}': {} takes {} dims", text, kind, want));
    std::uint64_t n = 1;
    for (unsigned v : *d) {
      if (v % 2 != 0) {
        return bad(fmt::format(
            "shape '{}': torus dims must be even (an odd ring cannot alternate two port indices: it would need a "
            "third port per dimension)",
            text));
      }
      n = std::min<std::uint64_t>(n * v, kFabricMaxCards + 1ULL);
    }
    if (n > kFabricMaxCards) return bad(fmt::format("shape '{}': more than {} cards", text, kFabricMaxCards));
    s.kind = want == 2 ? PartitionShape::Kind::kTorus2d : PartitionShape::Kind::kTorus3d;
    s.dims = std::move(*d);
    return s;
  }
  return bad(fmt::format("shape '{}': unknown shape '{}' (accepted: {})", text, kind, kShapeForms));
}

Result<std::vector<PartitionLink>> shape_links(const PartitionShape& shape, unsigned ports) {
  const unsigned n = shape.cards();
  std::vector<PartitionLink> out;
  unsigned need = 0;
  switch (shape.kind) {
    case PartitionShape::Kind::kMesh:
      out = mesh_links(n);
      need = n < 2 ? 0 : (n % 2 == 0 ? n - 1 : n);
      break;
    case PartitionShape::Kind::kRing:
      if (n == 2) out.push_back(link(0, 1, 0));
      if (n >= 3) {
        for (std::uint32_t i = 0; i + 1 < n; ++i) out.push_back(link(i, i + 1, i % 2));
        out.push_back(link(n - 1, 0, n % 2 == 0 ? 1 : 2));
      }
      need = n < 2 ? 0 : (n == 2 ? 1 : (n % 2 == 0 ? 2 : 3));
      break;
    case PartitionShape::Kind::kTorus2d:
    case PartitionShape::Kind::kTorus3d: {
      const std::size_t nd = shape.dims.size();
      std::vector<std::uint32_t> stride(nd, 1);
      for (std::size_t i = 1; i < nd; ++i) stride[i] = stride[i - 1] * shape.dims[i - 1];
      for (std::size_t i = 0; i < nd; ++i) {
        // Every ring along dimension i: the positions whose coordinate i runs 0..dims[i]-1.
        for (std::uint32_t c = 0; c < n; ++c) {
          if ((c / stride[i]) % shape.dims[i] != 0) continue;
          std::vector<std::uint32_t> ring;
          for (unsigned x = 0; x < shape.dims[i]; ++x) ring.push_back(c + x * stride[i]);
          ring_links(ring, 2 * static_cast<unsigned>(i), out);
        }
        bool used = false;
        for (unsigned d = 0; d < nd; ++d) used = used || shape.dims[d] > 1;
        if (used) need = std::max(need, 2 * static_cast<unsigned>(nd));
      }
      break;
    }
    case PartitionShape::Kind::kCustom:
      return fail(Code::kUnimplemented, "a custom shape has no generated links (it is what the switches hold)");
  }
  if (need > ports) {
    return bad(
        fmt::format("{} needs {} port indices (one OCS each); the pool's cards have {}", shape.text(), need, ports));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string_view card_health_name(CardHealth h) noexcept {
  switch (h) {
    case CardHealth::kHealthy: return "healthy";
    case CardHealth::kSpare: return "spare";
    case CardHealth::kFailed: return "failed";
  }
  return "unknown";
}

}  // namespace npo
