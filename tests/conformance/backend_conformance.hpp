// SPDX-License-Identifier: Apache-2.0
// The backend conformance suite (DESIGN.md "Testing lanes": one suite, run on every backend
// that is present). The TEST_Ps in backend_conformance.cpp use only the backend interface
// (npo/hal/backend/*.hpp) and the card contract (npo/fw/*.hpp), so the same suite runs
// unchanged on the emulator and on a real card bound to vfio-pci.
//
// A backend joins the suite by instantiating it with one or more ConformanceTargets:
//
//   INSTANTIATE_TEST_SUITE_P(Vfio, BackendConformance,
//                            ::testing::Values(ConformanceTarget{"vfio_3b00", [] { ... }}),
//                            npo::conformance::target_name);
//
// Every test gets a fresh Backend from the target's factory and opens one function. Tests
// are destructive (they reset the function, resize BAR2 and restore it, rewrite BARs for
// sizing and restore them): run them only on a card that is not in use.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "npo/hal/backend/backend.hpp"

namespace npo {
/// GoogleTest printer: failures show "out_of_range" instead of a byte dump.
inline void PrintTo(Code c, std::ostream* os) { *os << code_name(c); }
}  // namespace npo

namespace npo::conformance {

/// One backend (and function on it) the suite runs against.
struct ConformanceTarget {
  /// Test-name suffix: letters, digits and '_' only (GoogleTest parameter names).
  std::string name;
  /// Builds a fresh backend; called once per test. Returning null fails the test.
  std::function<std::unique_ptr<npo::backend::Backend>()> make_backend;
  /// Function to open; empty = the first enumerated function with the card's vendor and
  /// device IDs (npo::fw::pci::kVendorId / kDeviceId).
  std::optional<npo::backend::PciAddress> address;
};

/// GoogleTest printer (a std::function member must not be byte-dumped).
void PrintTo(const ConformanceTarget& target, std::ostream* os);
/// Name generator for INSTANTIATE_TEST_SUITE_P.
std::string target_name(const ::testing::TestParamInfo<ConformanceTarget>& info);

/// A page-aligned, zeroed buffer of host memory for DMA (freed on destruction).
class HostPages {
 public:
  explicit HostPages(std::size_t bytes);
  ~HostPages();
  HostPages(const HostPages&) = delete;
  HostPages& operator=(const HostPages&) = delete;
  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// The parameterised fixture: opens the target's function before each test, with Memory
/// Space and Bus Master enabled in the command register (as a driver would).
class BackendConformance : public ::testing::TestWithParam<ConformanceTarget> {
 protected:
  void SetUp() override;
  void TearDown() override;

  [[nodiscard]] npo::backend::Device& dev() { return *device_; }
  [[nodiscard]] npo::backend::Mmio& bar0() { return *bar0_; }
  [[nodiscard]] npo::backend::Backend& backend() { return *backend_; }

  /// An eventfd(0, EFD_NONBLOCK) owned by the fixture. It is closed only after the device and
  /// the backend are gone, so no late interrupt can hit a closed (or reused) descriptor.
  int make_eventfd();
  /// Host memory owned by the fixture; freed after the device is closed.
  HostPages& host_pages(std::size_t bytes);
  /// An IOVA range of at least `bytes` inside iova_ranges(), 2 MiB aligned where possible.
  [[nodiscard]] std::optional<std::uint64_t> pick_iova(std::uint64_t bytes) const;

  // Config-space shorthands; a failed access fails the test and returns 0.
  std::uint8_t cfg8(std::uint32_t off);
  std::uint16_t cfg16(std::uint32_t off);
  std::uint32_t cfg32(std::uint32_t off);
  void cfg_write16(std::uint32_t off, std::uint16_t v);
  void cfg_write32(std::uint32_t off, std::uint32_t v);

  /// Sizes BAR `bar` (a 64-bit memory BAR) the PCI way: writes all-ones to both dwords, reads
  /// the mask back, restores the original dwords. Returns the two dwords read.
  std::pair<std::uint32_t, std::uint32_t> size_bar(unsigned bar);

  /// Sends HEARTBEAT(cookie) through the BAR0 mailbox registers by hand (header, CRC32C,
  /// REQ_LEN, CTRL.SEND) and waits for STATUS.DONE (bounded). Returns the reply's payload
  /// after checking its header; fails the test on any protocol violation.
  std::optional<std::vector<std::byte>> raw_heartbeat(std::uint64_t cookie, std::uint32_t seq);

  /// Waits (bounded) until eventfd `fd` is readable and returns its counter (0 on timeout).
  static std::uint64_t wait_eventfd(int fd, int timeout_ms);

 private:
  std::vector<int> fds_;                           // closed last
  std::vector<std::unique_ptr<HostPages>> pages_;  // freed after the device closes
  std::unique_ptr<npo::backend::Backend> backend_;
  std::unique_ptr<npo::backend::Device> device_;
  npo::backend::Mmio* bar0_ = nullptr;
};

}  // namespace npo::conformance
