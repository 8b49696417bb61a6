// SPDX-License-Identifier: Apache-2.0
#include <sys/random.h>

#include <chrono>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "card/deadline.hpp"
#include "card/device_impl.hpp"
#include "npo/fw/dma.hpp"
#include "npo/fw/pci.hpp"
#include "npo/fw/regs.hpp"
#include "npo/hal/backend/pci.hpp"
#include "npo/hal/dma.hpp"
#include "npo/hal/log.hpp"

namespace npo {

namespace regs = fw::regs;
namespace mb = fw::mbox;
using fw::load_le;

namespace {

/// The BAR0 of a card that was gone when it was opened: reads all-ones, drops writes, as the
/// registers of a removed card do. Stateless, so one instance serves every such card.
class RemovedMmio final : public backend::Mmio {
 public:
  std::uint32_t read32(std::uint64_t) noexcept override { return 0xffffffffu; }
  std::uint64_t read64(std::uint64_t) noexcept override { return ~0ULL; }
  void write32(std::uint64_t, std::uint32_t) noexcept override {}
  void write64(std::uint64_t, std::uint64_t) noexcept override {}
  std::uint64_t size() const noexcept override { return 0; }
};
RemovedMmio g_removed_bar0;

std::string version_string(std::uint32_t v) { return fmt::format("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff); }

Result<FirmwareVersions> parse_versions(const std::vector<std::byte>& p) {
  if (p.size() != mb::versions::kSize) {
    return fail(Code::kInternal,
                fmt::format("GET_VERSIONS reply has {} bytes, expected {}", p.size(), mb::versions::kSize));
  }
  FirmwareVersions v;
  v.firmware_raw = load_le<std::uint32_t>(p.data(), mb::versions::kFirmware);
  v.firmware = version_string(v.firmware_raw);
  v.interface = load_le<std::uint32_t>(p.data(), mb::versions::kInterface);
  v.protocol = load_le<std::uint32_t>(p.data(), mb::versions::kProtocol);
  v.build_id = load_le<std::uint32_t>(p.data(), mb::versions::kBuildId);
  return v;
}

std::string fixed_string(const std::vector<std::byte>& p, std::size_t off, std::size_t len) {
  std::string s;
  for (std::size_t i = 0; i < len && off + i < p.size(); ++i) {
    const char c = static_cast<char>(p[off + i]);
    if (c == '\0') break;
    s.push_back(std::isprint(static_cast<unsigned char>(c)) ? c : '?');
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

/// Resets the card through GLOBAL.RESET and waits, on the platform clock, up to 2 s for
/// READY = 1, RESETTING = 0 and MBOX_READY = 1 (registers.md §3.6).
Result<void> reset_for_probe(backend::Mmio& m, backend::Clock& clock, std::uint32_t index) {
  m.write32(regs::global::kReset, regs::global::kResetKey);
  const card::Deadline deadline(clock, 2'000'000'000, card::WaitFor::kCardTime);
  for (unsigned i = 0;; ++i) {
    const std::uint32_t st = m.read32(regs::global::kStatus);
    if (st == 0xffffffffu) return fail(Code::kUnavailable, "card removed during reset", {.card = index});
    if (regs::global::kStatusReady.get(st) && !regs::global::kStatusResetting.get(st) &&
        regs::global::kStatusMboxReady.get(st)) {
      return {};
    }
    if (deadline.expired()) {
      return fail(Code::kDeadlineExceeded, "card not READY 2 s after reset",
                  {.card = index, .reg = regs::global::kStatus, .value = st});
    }
    deadline.pause(i, 100'000);
  }
}

/// One probe mailbox command (IDENTIFY, GET_VERSIONS: idempotent). A request the firmware
/// never answered leaves its mailbox busy: the firmware is hung and the card is reset
/// (mailbox.md §2.5, registers.md §3.6). Nothing of the card is in use during the probe and
/// the command is idempotent, so after that reset it is asked once more: one lost request
/// costs one mailbox timeout, not the card (nor System::open with it).
Result<std::vector<std::byte>> probe_call(card::MailboxClient& mbox, backend::Mmio& m, backend::Clock& clock,
                                          std::uint32_t index, mb::Command cmd) {
  auto r = mbox.call(cmd, {});
  if (r || r.error().code() != Code::kDeadlineExceeded) return r;
  npo::log::get(npo::log::Subsystem::kCore)
      .warn("card {}: {}; resetting the card and asking once more", index, r.error().message());
  if (auto rs = reset_for_probe(m, clock, index); !rs) {
    return std::unexpected(std::move(Error(rs.error())).prefixed(r.error().message()));
  }
  return mbox.call(cmd, {});
}

}  // namespace

Result<std::unique_ptr<Device::Impl>> Device::Impl::probe(std::unique_ptr<backend::Device> dev, std::uint32_t index,
                                                          backend::Clock& clock, std::uint64_t mailbox_timeout_ns) {
  auto impl = std::make_unique<Impl>();
  impl->clock = &clock;
  const ErrorContext ctx{.card = index};
  const auto& fi = dev->info();
  DeviceInfo& info = impl->info;
  info.index = index;
  info.bdf = fi.address.to_string();
  info.numa_node = fi.numa_node;
  info.iommu_group = fi.iommu_group;
  info.driver = fi.driver;
  info.read_only = fi.read_only;

  auto vid = backend::config_read16(*dev, fw::pci::cfg::kVendorId);
  auto did = backend::config_read16(*dev, fw::pci::cfg::kDeviceId);
  if (!vid || !did) return std::unexpected(Error(!vid ? vid.error() : did.error()).with(ctx));
  if (*vid == 0xffff && *did == 0xffff && fi.vendor_id == fw::pci::kVendorId && fi.device_id == fw::pci::kDeviceId) {
    // Listed as an NPO card, config space all-ones: it was removed before we opened it (a
    // shared npo-emud keeps serving a removed card's socket). Keep it, marked removed, so its
    // index stays and the tools show it REMOVED as they do a card removed while they run.
    info.vendor_id = fi.vendor_id;
    info.device_id = fi.device_id;
    info.removed = true;
    impl->bar0 = &g_removed_bar0;
    impl->mailbox = std::make_unique<card::MailboxClient>(g_removed_bar0, clock, index, mailbox_timeout_ns);
    impl->dev = std::move(dev);
    npo::log::get(npo::log::Subsystem::kCore)
        .warn("card {} {} was removed: its config space reads ffff:ffff; it is listed as removed", index, info.bdf);
    return impl;
  }
  if (*vid != fw::pci::kVendorId || *did != fw::pci::kDeviceId) {
    return fail(Code::kFailedPrecondition,
                fmt::format("{} is {:04x}:{:04x}, not an NPO card ({:04x}:{:04x})", info.bdf, *vid, *did,
                            fw::pci::kVendorId, fw::pci::kDeviceId),
                ctx);
  }
  info.vendor_id = *vid;
  info.device_id = *did;
  for (unsigned b = 0; b < 6; ++b) {
    auto ri = dev->region_info(b);
    if (ri && ri->size != 0) info.bars.push_back(BarInfo{b, ri->size, ri->prefetchable, ri->is_64bit, ri->mappable});
  }
  auto caps = backend::walk_capabilities(*dev);
  if (!caps) return std::unexpected(Error(caps.error()).with(ctx));
  if (auto link = backend::read_pcie_link(*dev, *caps)) {
    info.pcie = PcieLink{backend::pcie_speed_gts(link->max_speed_code), link->max_width,
                         backend::pcie_speed_gts(link->speed_code), link->width};
  }
  // Memory space and bus mastering on (we own the function now; an observer leaves them).
  auto cmd = backend::config_read16(*dev, fw::pci::cfg::kCommand);
  if (!cmd) return std::unexpected(Error(cmd.error()).with(ctx));
  if (fi.read_only) {
    // nothing to enable: the owner drives the function
  } else if (auto r = backend::config_write16(
                 *dev, fw::pci::cfg::kCommand,
                 static_cast<std::uint16_t>(*cmd | fw::pci::cfg::kCommandMemory | fw::pci::cfg::kCommandBusMaster));
             !r) {
    return std::unexpected(Error(r.error()).with(ctx));
  }
  auto bar0 = dev->mmio(fw::pci::kBarRegs);
  if (!bar0) return std::unexpected(Error(bar0.error()).with(ctx));
  backend::Mmio& m = **bar0;
  const std::uint32_t magic = m.read32(regs::global::kMagic);
  if (magic != regs::kMagic) {
    return fail(Code::kFailedPrecondition,
                fmt::format("{}: BAR0 MAGIC reads 0x{:08x}, expected 0x{:08x} ('NPO1')", info.bdf, magic, regs::kMagic),
                {.card = index, .reg = regs::global::kMagic, .value = magic});
  }
  const std::uint32_t ver = m.read32(regs::global::kVersion);
  if ((ver >> 16) != (regs::kInterfaceVersion >> 16)) {
    return fail(Code::kFailedPrecondition,
                fmt::format("{}: register interface {} is not supported (driver speaks {}.x)", info.bdf,
                            version_string(ver), regs::kInterfaceVersion >> 16),
                {.card = index, .reg = regs::global::kVersion, .value = ver});
  }
  const std::uint32_t cap0 = m.read32(regs::global::kCap0);
  info.num_engines = regs::global::kCap0NumEngines.get(cap0);
  info.queues_per_engine = regs::global::kCap0QueuesPerEngine.get(cap0);
  info.num_ports = regs::global::kCap0NumPorts.get(cap0);
  info.lanes_per_port = regs::global::kCap0LanesPerPort.get(cap0);
  info.hbm_bytes = m.read64(regs::global::kHbmSize);
  info.max_transfer_bytes = m.read32(regs::global::kMaxXfer);
  info.fabric_id = m.read32(regs::global::kFabricId);
  info.serial = m.read64(regs::global::kSerial);

  impl->bar0 = &m;
  impl->mailbox = std::make_unique<card::MailboxClient>(m, clock, index, mailbox_timeout_ns);
  auto id = probe_call(*impl->mailbox, m, clock, index, mb::Command::kIdentify);
  if (!id) return std::unexpected(std::move(Error(id.error())).prefixed(fmt::format("{}: IDENTIFY", info.bdf)));
  if (id->size() != mb::identify::kSize) {
    return fail(Code::kInternal,
                fmt::format("{}: IDENTIFY reply has {} bytes, expected {}", info.bdf, id->size(), mb::identify::kSize),
                ctx);
  }
  info.model = fixed_string(*id, mb::identify::kModel, 32);
  const auto fw_fabric = load_le<std::uint32_t>(id->data(), mb::identify::kFabricId);
  const auto fw_hbm = load_le<std::uint64_t>(id->data(), mb::identify::kHbmBytes);
  if (fw_fabric != info.fabric_id || fw_hbm != info.hbm_bytes) {
    return fail(Code::kInternal,
                fmt::format("{}: firmware IDENTIFY (fabric {}, HBM {}) disagrees with BAR0 (fabric {}, HBM {})",
                            info.bdf, fw_fabric, fw_hbm, info.fabric_id, info.hbm_bytes),
                ctx);
  }
  auto vers = probe_call(*impl->mailbox, m, clock, index, mb::Command::kGetVersions);
  if (!vers) return std::unexpected(std::move(Error(vers.error())).prefixed(fmt::format("{}: GET_VERSIONS", info.bdf)));
  auto pv = parse_versions(*vers);
  if (!pv) return std::unexpected(Error(pv.error()).with(ctx));
  info.firmware = *pv;
  for (const auto& r : dev->iova_ranges()) impl->mem.iova.add_range(r.first, r.last);
  if (info.hbm_bytes > 0) impl->mem.hbm.add_range(0, info.hbm_bytes - 1);
  impl->mem.hbm_total = info.hbm_bytes;
  impl->queue_open.assign(std::size_t{info.num_engines} * info.queues_per_engine, false);
  const std::uint32_t cap1 = m.read32(regs::global::kCap1);
  impl->window_used.assign(std::size_t{1} << regs::global::kCap1WindowEntriesLog2.get(cap1), false);
  // Each entry's generations start at a random value (registers.md §6.4: the host chooses
  // them), not at 1: a process that opens the card after another one then does not issue the
  // generations of that process's windows again, so a peer still holding one of its handles,
  // or keeping state keyed by one (the libfabric provider's per-peer sequence), sees a new
  // window rather than the old one back.
  impl->window_gen.resize(impl->window_used.size());
  {
    const std::size_t bytes = impl->window_gen.size() * sizeof(std::uint16_t);
    if (::getrandom(impl->window_gen.data(), bytes, 0) != static_cast<ssize_t>(bytes)) {
      std::mt19937 g(static_cast<std::uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
      for (auto& v : impl->window_gen) v = static_cast<std::uint16_t>(g());
    }
    for (auto& v : impl->window_gen) v = v == 0 ? 1 : v;  // 0 is never issued
  }
  for (const auto& b : info.bars) {
    if (b.index == fw::pci::kBarHbm) impl->aperture_bytes = b.size;
  }
  impl->dev = std::move(dev);
  npo::log::get(npo::log::Subsystem::kCore)
      .info("card {} {} fabric {} HBM {} MiB firmware {}", index, info.bdf, info.fabric_id, info.hbm_bytes >> 20,
            info.firmware.firmware);
  return impl;
}

Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Device::~Device() = default;

const DeviceInfo& Device::info() const noexcept { return impl_->info; }
unsigned Device::port_count() const noexcept { return impl_->info.num_ports; }

card::CardAccess card::access(Device& device) noexcept {
  auto& d = impl_of(device);
  return CardAccess{d.bar0, d.info, d.mailbox.get(), d.dev.get(), d.clock};
}

Result<FirmwareVersions> Device::firmware_versions() {
  auto r = impl_->mailbox->call(mb::Command::kGetVersions, {});
  if (!r) return std::unexpected(r.error());
  return parse_versions(*r);
}

Result<std::uint32_t> Device::partition() {
  const std::uint32_t v = impl_->bar0->read32(regs::global::kPartition);
  // A removed card reads all-ones (registers.md §3.5); confirm with MAGIC.
  if (v == 0xffffffffu && impl_->bar0->read32(regs::global::kMagic) != regs::kMagic) {
    return fail(Code::kUnavailable, "card removed", {.card = impl_->info.index});
  }
  return v;
}

Result<Heartbeat> Device::heartbeat() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  const std::uint64_t cookie = rng();
  std::array<std::byte, mb::heartbeat::kReqSize> req{};
  fw::store_le(req.data(), mb::heartbeat::kCookie, cookie);
  const std::uint64_t t0 = impl_->clock->now_ns();
  auto r = impl_->mailbox->call(mb::Command::kHeartbeat, req);
  const std::uint64_t t1 = impl_->clock->now_ns();
  if (!r) return std::unexpected(r.error());
  if (r->size() != mb::heartbeat::kRspSize || load_le<std::uint64_t>(r->data(), mb::heartbeat::kCookie) != cookie) {
    return fail(Code::kInternal, "HEARTBEAT reply does not echo the cookie", {.card = impl_->info.index});
  }
  Heartbeat hb;
  hb.uptime_ns = load_le<std::uint64_t>(r->data(), mb::heartbeat::kUptimeNs);
  hb.count = load_le<std::uint32_t>(r->data(), mb::heartbeat::kCount);
  hb.round_trip_ns = t1 - t0;
  return hb;
}

Result<std::vector<FirmwareLogEntry>> Device::error_log(std::size_t max_entries) {
  namespace e = mb::errlog;
  std::vector<FirmwareLogEntry> out;
  while (out.size() < max_entries) {
    std::array<std::byte, e::kReqSize> req{};
    fw::store_le<std::uint16_t>(req.data(), e::kStart, static_cast<std::uint16_t>(out.size()));
    fw::store_le<std::uint16_t>(
        req.data(), e::kMax,
        static_cast<std::uint16_t>(std::min<std::size_t>(max_entries - out.size(), e::kMaxPerReply)));
    auto r = impl_->mailbox->call(mb::Command::kErrorLogRead, req);
    if (!r) return std::unexpected(r.error());
    if (r->size() < e::kEntries)
      return fail(Code::kInternal, "ERROR_LOG_READ reply too short", {.card = impl_->info.index});
    const unsigned count = load_le<std::uint16_t>(r->data(), e::kCount);
    if (r->size() != e::kEntries + count * e::kEntrySize) {
      return fail(Code::kInternal, "ERROR_LOG_READ reply length disagrees with its count", {.card = impl_->info.index});
    }
    for (unsigned i = 0; i < count; ++i) {
      const std::size_t b = e::kEntries + i * e::kEntrySize;
      out.push_back(FirmwareLogEntry{
          load_le<std::uint64_t>(r->data(), b + e::kEntryTimestamp),
          load_le<std::uint16_t>(r->data(), b + e::kEntryCode), load_le<std::uint8_t>(r->data(), b + e::kEntrySeverity),
          load_le<std::uint8_t>(r->data(), b + e::kEntrySource), load_le<std::uint32_t>(r->data(), b + e::kEntryArg0),
          load_le<std::uint64_t>(r->data(), b + e::kEntryArg1), load_le<std::uint64_t>(r->data(), b + e::kEntryArg2)});
    }
    if (count == 0 || out.size() >= load_le<std::uint16_t>(r->data(), e::kTotal)) break;
  }
  return out;
}

Result<void> Device::reset() {
  if (impl_->info.read_only) return read_only_refusal(impl_->info, "a card reset");
  if (auto r = impl_->dev->reset(); !r) return std::unexpected(Error(r.error()).with({.card = impl_->info.index}));
  // The card comes back on its own time line: the wait sleeps on the platform clock.
  const card::Deadline deadline(*impl_->clock, 2'000'000'000, card::WaitFor::kCardTime);
  for (unsigned i = 0;; ++i) {
    const std::uint32_t st = impl_->bar0->read32(regs::global::kStatus);
    if (st == 0xffffffffu) return fail(Code::kUnavailable, "card removed during reset", {.card = impl_->info.index});
    if (regs::global::kStatusReady.get(st) && !regs::global::kStatusResetting.get(st)) return {};
    if (deadline.expired()) {
      return fail(Code::kDeadlineExceeded, "card not READY 2 s after reset",
                  {.card = impl_->info.index, .reg = regs::global::kStatus, .value = st});
    }
    deadline.pause(i, 100'000);
  }
}

namespace {
/// kUnavailable unless BAR0 still reads MAGIC (registers.md §3.5): a removed card reads all
/// ones, which saturated counters can too. When the path to the card broke instead (an
/// emu-remote client whose npo-emud died also reads all-ones), the backend's error says so: a
/// dead daemon is not a removed card.
Result<void> check_present(backend::Mmio& m, backend::Device& function, std::uint32_t card) {
  if (m.read32(regs::global::kMagic) != regs::kMagic) {
    if (auto conn = function.check_connection(); !conn) return std::unexpected(conn.error());
    return fail(Code::kUnavailable, "card removed: MAGIC does not read 'NPO1'", {.card = card});
  }
  return {};
}
}  // namespace

Result<std::vector<QueueCounters>> Device::queue_counters() const {
  namespace qr = regs::queue;
  backend::Mmio& m = *impl_->bar0;
  const unsigned per_engine = impl_->info.queues_per_engine;
  std::vector<QueueCounters> out(std::size_t{impl_->info.num_engines} * per_engine);
  // Only the queues that wrote a completion since reset can have nonzero counters
  // (registers.md §9): an idle card costs one read here, not three per queue.
  const std::uint32_t active = m.read32(regs::global::kQueuesActive);
  for (unsigned q = 0; q < out.size(); ++q) {
    QueueCounters& c = out[q];
    c.engine = q / per_engine;
    c.queue = q % per_engine;
    if (q >= 32 || ((active >> q) & 1u) == 0) continue;
    c.ops_ok = m.read64(regs::queue_reg(q, qr::kOpsOk));
    c.ops_error = m.read64(regs::queue_reg(q, qr::kOpsError));
    c.bytes = m.read64(regs::queue_reg(q, qr::kBytes));
  }
  if (auto p = check_present(m, *impl_->dev, impl_->info.index); !p) return std::unexpected(p.error());
  return out;
}

Result<CardCounters> Device::card_counters() const {
  backend::Mmio& m = *impl_->bar0;
  CardCounters c;
  c.windows_valid = m.read32(regs::global::kWindowsValid);
  c.mailbox_errors = m.read32(regs::global::kMboxErrors);
  if (auto p = check_present(m, *impl_->dev, impl_->info.index); !p) return std::unexpected(p.error());
  return c;
}

DmaCapabilities Device::dma_capabilities() const noexcept {
  const std::uint32_t cap1 = impl_->bar0->read32(regs::global::kCap1);
  const std::uint32_t ops = regs::global::kCap1OpMask.get(cap1);
  auto has = [ops](fw::dma::Opcode op) { return (ops >> static_cast<unsigned>(op)) & 1u; };
  DmaCapabilities c;
  c.copy = has(fw::dma::Opcode::kCopy);
  c.fill = has(fw::dma::Opcode::kFill);
  c.gather = has(fw::dma::Opcode::kGather);
  c.fence = has(fw::dma::Opcode::kFence);
  c.remote_write = has(fw::dma::Opcode::kRemoteWrite);
  c.remote_read = has(fw::dma::Opcode::kRemoteRead);
  c.max_transfer_bytes = impl_->info.max_transfer_bytes;
  c.alignment = 1;
  c.min_depth = 1u << regs::kMinQueueDepthLog2;
  c.max_depth = 1u << regs::global::kCap1MaxDepthLog2.get(cap1);
  c.engines = impl_->info.num_engines;
  c.queues_per_engine = impl_->info.queues_per_engine;
  c.max_sg_entries = fw::dma::sg::kMaxEntries;
  return c;
}

}  // namespace npo
