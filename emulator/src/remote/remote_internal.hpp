// SPDX-License-Identifier: Apache-2.0
// What the files of the emu-remote backend share: the card a connection reaches, host memory
// by fd, engine sharing, and the factories of the backend's MMIO and device objects.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "npo/hal/backend/backend.hpp"
#include "remote/client_engine.hpp"
#include "remote/conn.hpp"

namespace npo::emu::remote {

constexpr std::uint64_t kPage = 4096;

struct CardInfo {
  backend::FunctionInfo fi;
  unsigned msix_vectors = 0;
  backend::IovaRange iova{};
  std::uint32_t card = 0;
};

/// The connection as local engines use it (spec §5.12).
class ConnLink final : public EngineLink {
 public:
  explicit ConnLink(Conn& c) : c_(c) {}
  Result<Hbm> hbm_fd(std::uint32_t card) override;
  Result<EngineFd> engine_fd() override;
  Result<WindowFd> window_fd(std::uint32_t card, unsigned window, std::uint16_t generation, std::uint64_t key) override;
  void post_event(std::uint32_t kind, std::uint32_t queue, std::uint64_t value, std::uint64_t flags) override;

 private:
  Conn& c_;
};

/// Asks npo-emud to let this owner run its card's engines (ENGINE_SHARE, spec §5.12) and builds
/// them. Errors: the daemon's refusal (one older than protocol 1.5 answers invalid_argument),
/// or a state or HBM this process cannot map; the connection stays usable either way (its
/// doorbells then go to the daemon).
Result<std::unique_ptr<ClientEngine>> share_engines(Conn& c, EngineLink& link);

/// What HBM_RANGE_FD answers (spec §5.13): the memfd holding [off, off+size) of the
/// connection's card now (the caller closes it) and the range's first byte in it.
struct RangeFd {
  int fd = -1;
  std::uint64_t fd_offset = 0;
  bool window = false;  ///< an open window's memfd
};
/// HBM_RANGE_FD round trip. Errors: the daemon's (kOutOfRange past the HBM; kInvalidArgument
/// for a daemon older than protocol 1.6, which does not know the command).
Result<RangeFd> hbm_range_fd(Conn& c, std::uint64_t off, std::uint64_t size);

struct HostFd {
  int fd = -1;
  std::uint64_t offset = 0;
  std::uintptr_t reback = 0;  ///< key in rebacks(), 0 if the memory is not a re-backed region
};

/// The fd and file offset of [addr, addr+len): a registered memfd whose mapping is really the
/// one at addr (checked against /proc/self/maps by inode), else anonymous private memory
/// re-backed in place by a memfd (contents copied; the documented slower path), else an error.
Result<HostFd> host_fd(const void* addr, std::size_t len);

/// Counts a DMA mapping in (+1) or out (-1) of re-backed region `key`.
void reback_use(std::uintptr_t key, int delta);

/// Which cards a backend has open; shared with its devices so a device closing after its
/// backend is safe.
struct OpenSet {
  std::mutex mu;
  std::set<backend::PciAddress> open;
};

/// Who keeps an owner's CPU views of its card's HBM (the aperture, the local engines' view)
/// where npo-emud keeps the bytes (spec §5.13): a window that opens or closes moves its range
/// between the card's memfd and one of its own.
class HbmViews {
 public:
  virtual ~HbmViews() = default;
  /// Window `w`'s CTRL is written: `write` sends it to the card synchronously (the daemon has
  /// moved the range when it returns); the views follow before any engine of this process runs.
  virtual void window_ctrl(unsigned w, const std::function<void()>& write) noexcept = 0;
};

/// BAR `bar` (`size` bytes) of the card behind `c`, as RemoteMmio (remote_mmio.cpp) serves it.
/// `observer`: the card is attached read-only (spec §2); `engine`: this process runs the card's
/// DMA engines (spec §5.12), else null; `views`: whom window CTRL writes go through (null: none).
std::unique_ptr<backend::Mmio> make_remote_mmio(Conn& c, unsigned bar, std::uint64_t size, bool observer,
                                                std::uint32_t card, ClientEngine* engine, HbmViews* views);

/// The opened card `ci` behind connection `c`, as RemoteDevice (remote_device.cpp) serves it;
/// it leaves `open` when closed. `local_engines`: try ENGINE_SHARE and run its engines here.
std::unique_ptr<backend::Device> make_remote_device(std::unique_ptr<Conn> c, CardInfo ci, std::shared_ptr<OpenSet> open,
                                                    bool local_engines);

}  // namespace npo::emu::remote
