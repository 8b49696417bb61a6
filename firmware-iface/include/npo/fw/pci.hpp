// SPDX-License-Identifier: Apache-2.0
// npo-hal firmware interface: PCI identity, BARs and configuration-space layout of the
// NPO reference card. Spec: docs/spec/pci.md. Standard register offsets follow the
// PCI Express Base Specification 6.0 (§7.5.3 PCIe capability, §7.7.2 MSI-X,
// §7.7.8 ACS, §10.5.1 ATS, §7.8.6 Resizable BAR).
#pragma once

#include <cstdint>

#include "npo/fw/bits.hpp"

namespace npo::fw::pci {

// ---- Identity (spec pci.md §1) -------------------------------------------------------
#ifndef NPO_PCI_VENDOR_ID
/// Placeholder vendor ID of the reference card; override at build time with
/// -DNPO_PCI_VENDOR_ID=0x.... (CMake option of the same name). Not a PCI-SIG assignment.
#define NPO_PCI_VENDOR_ID 0x1ee7
#endif
#ifndef NPO_PCI_DEVICE_ID
/// Placeholder device ID of the reference card (see NPO_PCI_VENDOR_ID).
#define NPO_PCI_DEVICE_ID 0x0a01
#endif
inline constexpr std::uint16_t kVendorId = NPO_PCI_VENDOR_ID;
inline constexpr std::uint16_t kDeviceId = NPO_PCI_DEVICE_ID;
inline constexpr std::uint8_t kRevisionId = 0x01;
/// Class code: 0x12 processing accelerator, subclass 0x00, prog-if 0x00.
inline constexpr std::uint32_t kClassCode = 0x120000;

// ---- BARs (spec pci.md §2) -------------------------------------------------------------
/// BAR0: control registers, 64-bit non-prefetchable memory, 1 MiB (regs.hpp).
inline constexpr unsigned kBarRegs = 0;
inline constexpr std::uint64_t kBar0Size = 1u << 20;
/// BAR2: HBM aperture, 64-bit prefetchable memory, resizable; default size = HBM size
/// rounded up to a power of two, minimum 1 MiB.
inline constexpr unsigned kBarHbm = 2;
inline constexpr std::uint64_t kBar2MinSize = 1u << 20;
/// BAR4: MSI-X table (offset 0) and PBA (offset kMsixPbaOffset), 64-bit non-prefetchable, 16 KiB.
inline constexpr unsigned kBarMsix = 4;
inline constexpr std::uint64_t kBar4Size = 16u << 10;
inline constexpr std::uint32_t kMsixTableOffset = 0x0000;
inline constexpr std::uint32_t kMsixPbaOffset = 0x2000;
/// Number of MSI-X vectors: vector 0 = global (errors, mailbox), vector 1 + q = DMA queue q.
inline constexpr unsigned kMsixVectors = 64;
inline constexpr unsigned kMsixVectorGlobal = 0;
inline constexpr unsigned kMsixVectorQueueBase = 1;
/// One MSI-X table entry is 16 bytes (PCIe 6.0 §7.7.2.6).
inline constexpr unsigned kMsixEntrySize = 16;

// ---- Standard configuration header (PCI Local Bus 3.0 §6.1) ---------------------------
namespace cfg {
inline constexpr std::uint32_t kVendorId = 0x00;      // 16 bit
inline constexpr std::uint32_t kDeviceId = 0x02;      // 16 bit
inline constexpr std::uint32_t kCommand = 0x04;       // 16 bit
inline constexpr std::uint32_t kStatus = 0x06;        // 16 bit
inline constexpr std::uint32_t kRevisionId = 0x08;    // 8 bit
inline constexpr std::uint32_t kClassCode = 0x09;     // 24 bit
inline constexpr std::uint32_t kHeaderType = 0x0e;    // 8 bit
inline constexpr std::uint32_t kBar0 = 0x10;          // 6 x 32 bit
inline constexpr std::uint32_t kSubsysVendor = 0x2c;  // 16 bit
inline constexpr std::uint32_t kSubsysId = 0x2e;      // 16 bit
inline constexpr std::uint32_t kCapPtr = 0x34;        // 8 bit
inline constexpr std::uint32_t kIntLine = 0x3c;       // 8 bit
inline constexpr std::uint32_t kIntPin = 0x3d;        // 8 bit

inline constexpr std::uint16_t kCommandMemory = 1u << 1;        // Memory Space Enable
inline constexpr std::uint16_t kCommandBusMaster = 1u << 2;     // Bus Master Enable
inline constexpr std::uint16_t kCommandIntxDisable = 1u << 10;  // INTx Disable
inline constexpr std::uint16_t kStatusCapList = 1u << 4;        // Capabilities List

inline constexpr std::uint32_t kBarMemType64 = 0x4;     // BAR bits [2:1] = 10b
inline constexpr std::uint32_t kBarPrefetchable = 0x8;  // BAR bit 3

/// Capability IDs (PCI Code and ID Assignment 1.11 §2, §3).
inline constexpr std::uint8_t kCapIdPcie = 0x10;
inline constexpr std::uint8_t kCapIdMsix = 0x11;
inline constexpr std::uint16_t kExtCapIdAcs = 0x000d;
inline constexpr std::uint16_t kExtCapIdAts = 0x000f;
inline constexpr std::uint16_t kExtCapIdRebar = 0x0015;
inline constexpr std::uint32_t kExtCapStart = 0x100;
inline constexpr std::uint32_t kConfigSize = 4096;

/// Where the reference card places its capabilities (spec pci.md §3). A driver must
/// not rely on these: it walks the lists. The emulator uses them to build the space.
inline constexpr std::uint32_t kCardPcieCap = 0x40;
inline constexpr std::uint32_t kCardMsixCap = 0x80;
inline constexpr std::uint32_t kCardAcsCap = 0x100;
inline constexpr std::uint32_t kCardAtsCap = 0x110;
inline constexpr std::uint32_t kCardRebarCap = 0x120;

/// PCI Express capability register offsets, relative to the capability (PCIe 6.0 §7.5.3).
namespace pcie {
inline constexpr std::uint32_t kCapReg = 0x02;   // 16 bit: version [3:0], device/port type [7:4]
inline constexpr std::uint32_t kDevCap = 0x04;   // 32 bit
inline constexpr std::uint32_t kDevCtl = 0x08;   // 16 bit
inline constexpr std::uint32_t kDevSta = 0x0a;   // 16 bit
inline constexpr std::uint32_t kLnkCap = 0x0c;   // 32 bit
inline constexpr std::uint32_t kLnkCtl = 0x10;   // 16 bit
inline constexpr std::uint32_t kLnkSta = 0x12;   // 16 bit
inline constexpr std::uint32_t kDevCap2 = 0x24;  // 32 bit
inline constexpr std::uint32_t kSize = 0x3c;
inline constexpr Field32 kDevCapMaxPayload{0, 3};  // 128 << n bytes
inline constexpr Field32 kDevCapFlr{28, 1};        // Function Level Reset Capability
inline constexpr std::uint16_t kDevCtlInitiateFlr = 1u << 15;
inline constexpr Field32 kLnkCapSpeed{0, 4};  // 1=2.5 2=5 3=8 4=16 5=32 6=64 GT/s
inline constexpr Field32 kLnkCapWidth{4, 6};  // lanes
inline constexpr Field32 kLnkStaSpeed{0, 4};
inline constexpr Field32 kLnkStaWidth{4, 6};
}  // namespace pcie

/// MSI-X capability register offsets, relative to the capability (PCIe 6.0 §7.7.2).
namespace msix {
inline constexpr std::uint32_t kMsgCtl = 0x02;  // 16 bit
inline constexpr std::uint32_t kTable = 0x04;   // 32 bit: BIR [2:0], offset [31:3]
inline constexpr std::uint32_t kPba = 0x08;     // 32 bit: BIR [2:0], offset [31:3]
inline constexpr std::uint32_t kSize = 0x0c;
inline constexpr std::uint16_t kMsgCtlTableSizeMask = 0x07ff;  // N-1
inline constexpr std::uint16_t kMsgCtlFunctionMask = 1u << 14;
inline constexpr std::uint16_t kMsgCtlEnable = 1u << 15;
}  // namespace msix

/// ACS extended capability (PCIe 6.0 §7.7.8): capability register at +4 (16 bit), control at +6.
namespace acs {
inline constexpr std::uint32_t kCap = 0x04;
inline constexpr std::uint32_t kCtl = 0x06;
inline constexpr std::uint32_t kSize = 0x08;
/// The card advertises P2P Request Redirect (bit 2), P2P Completion Redirect (bit 3) and
/// Direct Translated P2P (bit 6). Source Validation, Translation Blocking and Upstream
/// Forwarding are hardwired to 0 on an endpoint (PCIe 6.0 §7.7.8.2).
inline constexpr std::uint16_t kCardCaps = 0x004c;
}  // namespace acs

/// ATS extended capability (PCIe 6.0 §10.5.1): capability at +4 (16 bit), control at +6.
namespace ats {
inline constexpr std::uint32_t kCap = 0x04;
inline constexpr std::uint32_t kCtl = 0x06;
inline constexpr std::uint32_t kSize = 0x08;
inline constexpr std::uint16_t kCtlEnable = 1u << 15;
}  // namespace ats

/// Resizable BAR extended capability (PCIe 6.0 §7.8.6): per BAR a capability dword
/// (supported sizes bitmap, bit n+4 = 2^(n+20) bytes) and a control dword.
namespace rebar {
inline constexpr std::uint32_t kCap0 = 0x04;
inline constexpr std::uint32_t kCtl0 = 0x08;
inline constexpr std::uint32_t kSize = 0x0c;  // one resizable BAR (BAR2)
inline constexpr Field32 kCtlBarIndex{0, 3};
inline constexpr Field32 kCtlNumBars{5, 3};
inline constexpr Field32 kCtlBarSize{8, 6};  // encoded: size = 2^(n+20) bytes
}  // namespace rebar

/// Extended capability header fields (PCIe 6.0 §7.6.3).
inline constexpr Field32 kExtCapId{0, 16};
inline constexpr Field32 kExtCapVersion{16, 4};
inline constexpr Field32 kExtCapNext{20, 12};

static_assert(kCardPcieCap + pcie::kSize <= kCardMsixCap);
static_assert(kCardMsixCap + msix::kSize <= 0x100);
static_assert(kCardAcsCap + acs::kSize <= kCardAtsCap);
static_assert(kCardAtsCap + ats::kSize <= kCardRebarCap);
static_assert(kCardRebarCap + rebar::kSize <= kConfigSize);
}  // namespace cfg

static_assert(kMsixVectors * kMsixEntrySize <= kMsixPbaOffset);
static_assert(kMsixPbaOffset + kMsixVectors / 8 <= kBar4Size);

}  // namespace npo::fw::pci
