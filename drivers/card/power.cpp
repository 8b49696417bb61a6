// SPDX-License-Identifier: Apache-2.0
// Device::power, module_power, set_power_limit, reset_power_limit: the mailbox POWER_READ and
// POWER_LIMIT commands (docs/spec/mailbox.md §3.9, §3.10).
#include <array>
#include <cerrno>

#include <fmt/format.h>

#include "card/device_impl.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/hal/device.hpp"

namespace npo {

namespace mb = fw::mbox;
using fw::load_le;

namespace {
struct PowerReply {
  PowerReading card;
  std::vector<ModulePower> ports;
};

Result<PowerReply> read_power(DeviceImpl& d) {
  namespace pw = mb::power;
  auto r = d.mailbox->call(mb::Command::kPowerRead, {});
  if (!r) return std::unexpected(r.error());
  const ErrorContext ctx{.card = d.info.index};
  if (r->size() < pw::kPorts) return fail(Code::kInternal, "POWER_READ reply too short", ctx);
  const std::byte* p = r->data();
  const unsigned np = load_le<std::uint8_t>(p, pw::kNumPorts);
  if (r->size() != pw::size(np) || np != d.info.num_ports) {
    return fail(Code::kInternal,
                fmt::format("POWER_READ reply of {} bytes for {} ports (card has {})", r->size(), np, d.info.num_ports),
                ctx);
  }
  PowerReply out;
  PowerReading& c = out.card;
  c.timestamp_ns = load_le<std::uint64_t>(p, pw::kTimestampNs);
  c.power_mw = load_le<std::uint32_t>(p, pw::kPowerMw);
  c.power_avg_mw = load_le<std::uint32_t>(p, pw::kPowerAvgMw);
  c.energy_mj = load_le<std::uint64_t>(p, pw::kEnergyMj);
  c.limit_mw = load_le<std::uint32_t>(p, pw::kLimitMw);
  c.default_limit_mw = load_le<std::uint32_t>(p, pw::kDefaultLimitMw);
  c.min_limit_mw = load_le<std::uint32_t>(p, pw::kMinLimitMw);
  c.max_limit_mw = load_le<std::uint32_t>(p, pw::kMaxLimitMw);
  c.throttle_reasons = load_le<std::uint32_t>(p, pw::kThrottle);
  c.throttled_ns = load_le<std::uint64_t>(p, pw::kThrottledNs);
  c.temp_c = load_le<std::int16_t>(p, pw::kTempQ8) / 256.0;
  c.engines_active = load_le<std::uint8_t>(p, pw::kEnginesActive);
  c.idle_mw = load_le<std::uint32_t>(p, pw::kIdleMw);
  c.dma_mw = load_le<std::uint32_t>(p, pw::kDmaMw);
  c.serdes_mw = load_le<std::uint32_t>(p, pw::kSerdesMw);
  c.modules_mw = load_le<std::uint32_t>(p, pw::kModulesMw);
  out.ports.reserve(np);
  for (unsigned i = 0; i < np; ++i) {
    const std::size_t b = pw::kPorts + i * pw::kPortRecord;
    ModulePower m;
    m.port = i;
    const auto flags = load_le<std::uint8_t>(p, b + pw::kPortFlags);
    m.present = (flags & pw::kPortPresent) != 0;
    if (m.present) {
      m.low_power = (flags & pw::kPortLowPower) != 0;
      m.power_class = load_le<std::uint8_t>(p, b + pw::kPortPowerClass);
      m.max_power_w = load_le<std::uint16_t>(p, b + pw::kPortMaxPowerQ) * 0.25;
      m.draw_mw = load_le<std::uint32_t>(p, b + pw::kPortDrawMw);
      m.temp_c = load_le<std::int16_t>(p, b + pw::kPortTempQ8) / 256.0;
      m.trained_lanes = load_le<std::uint8_t>(p, b + pw::kPortTrainedLanes);
    }
    out.ports.push_back(m);
  }
  return out;
}

struct LimitReply {
  std::uint32_t limit = 0, def = 0, min = 0, max = 0;
};

Result<LimitReply> power_limit(DeviceImpl& d, mb::power_limit::Action action, std::uint32_t mw) {
  namespace pl = mb::power_limit;
  std::array<std::byte, pl::kReqSize> req{};
  fw::store_le<std::uint8_t>(req.data(), pl::kAction, static_cast<std::uint8_t>(action));
  fw::store_le<std::uint32_t>(req.data(), pl::kLimitMw, mw);
  auto r = d.mailbox->call(mb::Command::kPowerLimit, req);
  if (!r) return std::unexpected(r.error());
  if (r->size() != pl::kRspSize) {
    return fail(Code::kInternal, "POWER_LIMIT reply of the wrong size", {.card = d.info.index});
  }
  return LimitReply{load_le<std::uint32_t>(r->data(), pl::kRspLimitMw),
                    load_le<std::uint32_t>(r->data(), pl::kRspDefaultMw),
                    load_le<std::uint32_t>(r->data(), pl::kRspMinMw), load_le<std::uint32_t>(r->data(), pl::kRspMaxMw)};
}
}  // namespace

Result<PowerReading> Device::power() {
  auto r = read_power(*impl_);
  if (!r) return std::unexpected(r.error());
  return r->card;
}

Result<std::vector<ModulePower>> Device::module_power() {
  auto r = read_power(*impl_);
  if (!r) return std::unexpected(r.error());
  return std::move(r->ports);
}

Result<void> Device::set_power_limit(std::uint32_t mw) {
  if (impl_->info.read_only) return read_only_refusal(impl_->info, "setting the power limit");
  namespace pl = mb::power_limit;
  // The range first, so a refusal names it (the firmware answers BAD_ARGUMENT alone).
  auto range = power_limit(*impl_, pl::Action::kGet, 0);
  if (!range) return std::unexpected(range.error());
  if (mw < range->min || mw > range->max) {
    return std::unexpected(Error(Code::kInvalidArgument,
                                 fmt::format("power limit {:.3f} W is out of range: card {} accepts {:.3f} .. {:.3f} W",
                                             mw / 1000.0, impl_->info.index, range->min / 1000.0, range->max / 1000.0),
                                 EINVAL, {.card = impl_->info.index, .value = mw}));
  }
  auto r = power_limit(*impl_, pl::Action::kSet, mw);
  if (!r) return std::unexpected(r.error());
  return {};
}

Result<void> Device::reset_power_limit() {
  if (impl_->info.read_only) return read_only_refusal(impl_->info, "resetting the power limit");
  auto r = power_limit(*impl_, mb::power_limit::Action::kReset, 0);
  if (!r) return std::unexpected(r.error());
  return {};
}

}  // namespace npo
