// SPDX-License-Identifier: Apache-2.0
// The card's A/B firmware update over the mailbox (docs/spec/mailbox.md §5; docs/firmware.md):
// FW_QUERY, the host's checks, BEGIN / WRITE* / FINISH / ACTIVATE, the wait for ready, COMMIT.
#include <algorithm>

#include <fmt/format.h>

#include "card/deadline.hpp"
#include "card/device_impl.hpp"
#include "card/firmware_image.hpp"
#include "npo/fw/mailbox.hpp"
#include "npo/hal/firmware.hpp"
#include "npo/hal/log.hpp"

namespace npo {

namespace mb = fw::mbox;
namespace fwu = fw::mbox::fwu;
namespace img = fw::image;
using fw::load_le;
using fw::store_le;

namespace {

char slot_name(unsigned s) { return s == 0 ? 'A' : 'B'; }

Result<FirmwareStatus> query(DeviceImpl& d) {
  auto r = d.mailbox->call(mb::Command::kFwQuery, {});
  if (!r) return std::unexpected(r.error());
  if (r->size() != fwu::kQuerySize) {
    return fail(Code::kInternal, fmt::format("FW_QUERY reply has {} bytes, expected {}", r->size(), fwu::kQuerySize),
                {.card = d.info.index});
  }
  const std::byte* p = r->data();
  FirmwareStatus s;
  s.active = load_le<std::uint8_t>(p, fwu::kActiveSlot);
  s.committed = load_le<std::uint8_t>(p, fwu::kCommittedSlot);
  const unsigned state = load_le<std::uint8_t>(p, fwu::kState);
  if (s.active >= fwu::kNumSlots || s.committed >= fwu::kNumSlots || state > 3) {
    return fail(Code::kInternal, "FW_QUERY reply names a slot or state outside the spec", {.card = d.info.index});
  }
  s.state = static_cast<FirmwareUpdateState>(state);
  const unsigned flags = load_le<std::uint8_t>(p, fwu::kFlags);
  s.ready = (flags & fwu::kFlagReady) != 0;
  s.rolled_back = (flags & fwu::kFlagRolledBack) != 0;
  s.security_version = load_le<std::uint32_t>(p, fwu::kSecurityVersion);
  s.max_chunk = load_le<std::uint32_t>(p, fwu::kQueryMaxChunk);
  s.max_image = load_le<std::uint32_t>(p, fwu::kMaxImage);
  s.vendor_id = load_le<std::uint16_t>(p, fwu::kVendorId);
  s.device_id = load_le<std::uint16_t>(p, fwu::kDeviceId);
  for (std::size_t i = 0; i < 32 && p[fwu::kBoardModel + i] != std::byte{0}; ++i)
    s.model.push_back(static_cast<char>(p[fwu::kBoardModel + i]));
  std::copy_n(p + fwu::kTrustedKey, s.trusted_key.size(), s.trusted_key.begin());
  for (unsigned i = 0; i < fwu::kNumSlots; ++i) {
    const std::size_t b = fwu::kSlots + i * fwu::kSlotRecord;
    auto& sl = s.slots[i];
    sl.valid = load_le<std::uint8_t>(p, b + fwu::kSlotValid) != 0;
    sl.version = FirmwareVersion::decode(load_le<std::uint32_t>(p, b + fwu::kSlotVersion));
    sl.security_version = load_le<std::uint32_t>(p, b + fwu::kSlotSecurityVersion);
    sl.image_bytes = load_le<std::uint64_t>(p, b + fwu::kSlotBytes);
  }
  return s;
}

/// Best effort: ends the update session after a failure (FW_ABORT), so nothing stays half done.
void abort_quietly(DeviceImpl& d) { (void)d.mailbox->call(mb::Command::kFwAbort, {}); }

}  // namespace

std::string_view firmware_state_name(FirmwareUpdateState s) noexcept {
  switch (s) {
    case FirmwareUpdateState::kIdle: return "idle";
    case FirmwareUpdateState::kReceiving: return "receiving";
    case FirmwareUpdateState::kStaged: return "staged";
    case FirmwareUpdateState::kTrial: return "trial";
  }
  return "unknown";
}

std::string_view firmware_stage_name(FirmwareUpdateStage s) noexcept {
  switch (s) {
    case FirmwareUpdateStage::kChecked: return "checked";
    case FirmwareUpdateStage::kBegun: return "begun";
    case FirmwareUpdateStage::kWriting: return "writing";
    case FirmwareUpdateStage::kVerified: return "verified";
    case FirmwareUpdateStage::kActivated: return "activated";
    case FirmwareUpdateStage::kReady: return "ready";
    case FirmwareUpdateStage::kCommitted: return "committed";
  }
  return "unknown";
}

Result<FirmwareStatus> firmware_status(Device& device) { return query(impl_of(device)); }

Result<FirmwareStatus> commit_firmware(Device& device) {
  auto& d = impl_of(device);
  if (d.info.read_only) return read_only_refusal(d.info, "committing firmware");
  if (auto r = d.mailbox->call(mb::Command::kFwCommit, {}); !r) {
    if (r.error().code() == Code::kUnimplemented) return std::unexpected(r.error());
    return std::unexpected(std::move(Error(r.error())).prefixed("FW_COMMIT (is the card on trial and ready?)"));
  }
  return query(d);
}

Result<FirmwareStatus> rollback_firmware(Device& device) {
  auto& d = impl_of(device);
  if (d.info.read_only) return read_only_refusal(d.info, "rolling firmware back");
  if (auto r = d.mailbox->call(mb::Command::kFwAbort, {}); !r) return std::unexpected(r.error());
  return query(d);
}

Result<FirmwareUpdateReport> update_firmware(Device& device, std::span<const std::byte> image,
                                             const FirmwareUpdateOptions& options, const FirmwareProgress& progress) {
  auto& d = impl_of(device);
  const ErrorContext ctx{.card = d.info.index};
  const auto report = [&](FirmwareUpdateStage st, std::uint64_t done) {
    if (progress) progress(st, done, image.size());
  };
  if (d.info.read_only) return read_only_refusal(d.info, "a firmware update");
  // ---- Every check before anything is written (firmware-image.md §4) ----------------------
  auto view = fw::parse_image(image);
  if (!view) return std::unexpected(std::move(Error(view.error())).with(ctx));
  auto st = query(d);
  if (!st) return std::unexpected(st.error());
  if (auto r = fw::verify_image_signature(*view, st->trusted_key); !r) {
    return std::unexpected(std::move(Error(r.error())).with(ctx));
  }
  const img::Header& h = view->header;
  if (h.vendor_id != st->vendor_id || h.device_id != st->device_id ||
      (!h.model_view().empty() && h.model_view() != st->model)) {
    return std::unexpected(
        fw::image_refusal(img::Error::kWrongDevice, fmt::format("the image is for {:04x}:{:04x} model '{}', card {} is "
                                                                "{:04x}:{:04x} model '{}'",
                                                                h.vendor_id, h.device_id, h.model_view(), d.info.index,
                                                                st->vendor_id, st->device_id, st->model))
            .error()
            .with(ctx));
  }
  const FirmwareVersion running = st->slots[st->active].version;
  const FirmwareVersion to = FirmwareVersion::decode(h.fw_version);
  if (h.fw_version < running.encoded() && !options.allow_downgrade) {
    return std::unexpected(fw::image_refusal(img::Error::kOlderVersion,
                                             fmt::format("image version {} is older than the running {} (a downgrade "
                                                         "needs allow_downgrade / --allow-downgrade)",
                                                         to.to_string(), running.to_string()))
                               .error()
                               .with(ctx));
  }
  if (h.security_version < st->security_version) {
    return std::unexpected(fw::image_refusal(img::Error::kSecurityVersionLow,
                                             fmt::format("image security version {} is below the card's {} "
                                                         "(anti-rollback; no option overrides it)",
                                                         h.security_version, st->security_version))
                               .error()
                               .with(ctx));
  }
  if (image.size() > st->max_image) {
    return std::unexpected(
        fw::image_refusal(img::Error::kOversized,
                          fmt::format("{} bytes; card {} takes at most {}", image.size(), d.info.index, st->max_image))
            .error()
            .with(ctx));
  }
  if (st->state == FirmwareUpdateState::kTrial) {
    return fail(Code::kFailedPrecondition,
                fmt::format("card {} runs slot {} on trial: commit or roll it back before another update", d.info.index,
                            slot_name(st->active)),
                ctx);
  }
  if (!options.force) {
    std::lock_guard lock(d.queues_mu);
    const auto open = std::count(d.queue_open.begin(), d.queue_open.end(), true);
    if (open > 0) {
      return fail(Code::kFailedPrecondition,
                  fmt::format("card {} has {} open DMA queue(s) in this process; activation restarts the firmware "
                              "under them (close them, or force)",
                              d.info.index, open),
                  ctx);
    }
  }
  report(FirmwareUpdateStage::kChecked, 0);
  // ---- BEGIN: erase the inactive slot -----------------------------------------------------
  const unsigned slot = 1 - st->committed;
  {
    std::array<std::byte, fwu::kBeginReqSize> req{};
    store_le<std::uint64_t>(req.data(), fwu::kBeginTotal, image.size());
    store_le<std::uint8_t>(req.data(), fwu::kBeginSlot, static_cast<std::uint8_t>(slot));
    if (auto r = d.mailbox->call(mb::Command::kFwBegin, req); !r) {
      return std::unexpected(std::move(Error(r.error())).prefixed("FW_BEGIN"));
    }
  }
  report(FirmwareUpdateStage::kBegun, 0);
  // ---- WRITE in order ---------------------------------------------------------------------
  const std::size_t chunk = std::clamp<std::size_t>(st->max_chunk, 1, fwu::kMaxChunk);
  std::vector<std::byte> req(fwu::kWriteHdrSize + chunk);
  for (std::size_t off = 0; off < image.size(); off += chunk) {
    const std::size_t n = std::min(chunk, image.size() - off);
    req.resize(fwu::kWriteHdrSize + n);
    store_le<std::uint32_t>(req.data(), fwu::kWriteOffset, static_cast<std::uint32_t>(off));
    store_le<std::uint16_t>(req.data(), fwu::kWriteLength, static_cast<std::uint16_t>(n));
    store_le<std::uint16_t>(req.data(), fwu::kWriteLength + 2, 0);
    std::copy_n(image.data() + off, n, req.data() + fwu::kWriteData);
    if (auto r = d.mailbox->call(mb::Command::kFwWrite, req); !r) {
      abort_quietly(d);
      return std::unexpected(std::move(Error(r.error())).prefixed(fmt::format("FW_WRITE at offset {}", off)));
    }
    report(FirmwareUpdateStage::kWriting, off + n);
  }
  // ---- FINISH: the card verifies ----------------------------------------------------------
  if (auto r = d.mailbox->call(mb::Command::kFwFinish, {}); !r) {
    // The card's own verdict (mailbox.md §5.5): image_corrupt, image_signature,
    // rollback_refused or image_invalid; the slot stays invalid.
    Error e = r.error();
    abort_quietly(d);
    return std::unexpected(std::move(e).prefixed("FW_FINISH: the card refused the image"));
  }
  report(FirmwareUpdateStage::kVerified, image.size());
  // ---- ACTIVATE, then wait for ready ------------------------------------------------------
  if (auto r = d.mailbox->call(mb::Command::kFwActivate, {}); !r) {
    abort_quietly(d);
    return std::unexpected(std::move(Error(r.error())).prefixed("FW_ACTIVATE"));
  }
  report(FirmwareUpdateStage::kActivated, image.size());
  const card::Deadline deadline(*d.clock, options.ready_timeout_ns, card::WaitFor::kCardTime);
  for (unsigned i = 0;; ++i) {
    auto q = query(d);  // the restarting firmware may not answer yet: keep asking
    if (q && q->state == FirmwareUpdateState::kTrial && q->ready && q->active == slot) break;
    if (q && q->state == FirmwareUpdateState::kIdle && q->rolled_back) {
      return fail(Code::kAborted,
                  fmt::format("card {}: firmware {} in slot {} did not come up; the card rolled back to slot {} "
                              "(firmware {}), which runs",
                              d.info.index, to.to_string(), slot_name(slot), slot_name(q->active),
                              q->slots[q->active].version.to_string()),
                  ctx);
    }
    if (deadline.expired()) {
      abort_quietly(d);
      return fail(
          Code::kDeadlineExceeded,
          fmt::format("card {}: firmware {} did not report ready within {} ms of activation; rolled back "
                      "to slot {}",
                      d.info.index, to.to_string(), options.ready_timeout_ns / 1'000'000, slot_name(st->committed)),
          ctx);
    }
    deadline.pause(i, 1'000'000);
  }
  report(FirmwareUpdateStage::kReady, image.size());
  FirmwareUpdateReport out{slot, running, to, st->security_version, false};
  if (!options.commit) return out;
  // ---- COMMIT -----------------------------------------------------------------------------
  auto c = d.mailbox->call(mb::Command::kFwCommit, {});
  if (!c) return std::unexpected(std::move(Error(c.error())).prefixed("FW_COMMIT"));
  if (c->size() != fwu::kCommitRspSize) return fail(Code::kInternal, "FW_COMMIT reply of the wrong size", ctx);
  out.security_version = load_le<std::uint32_t>(c->data(), fwu::kCommitSecurityVersion);
  out.committed = true;
  report(FirmwareUpdateStage::kCommitted, image.size());
  npo::log::get(npo::log::Subsystem::kCore)
      .info("card {}: firmware {} -> {} committed in slot {} (security version {})", d.info.index, running.to_string(),
            to.to_string(), slot_name(slot), out.security_version);
  return out;
}

}  // namespace npo
