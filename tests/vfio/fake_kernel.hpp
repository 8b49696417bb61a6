// SPDX-License-Identifier: Apache-2.0
// A scripted fake of the kernel side of VFIO, behind the backend's syscall seam (vfio::Sys).
//
// FakeKernel answers open/ioctl/mmap/pread/pwrite on the VFIO nodes under a fake /dev root
// (container, groups, device fds, /dev/iommu, device cdevs) the way Linux does, in small:
// type1v2 container/group/device ioctls with the IOVA-range capability chain, the iommufd
// IOAS ioctls with the EMSGSIZE protocol, region info with sparse-mmap capabilities, MSI-X
// SET_IRQS with vfio-pci's enable/grow rules, reset. Any call can be made to fail with a
// chosen errno (fail_ioctl, fail_open, fail_op), as the kernel does without interrupt
// remapping (EPERM), with a busy group (EBUSY), a removed device (ENODEV), bad arguments
// (EINVAL) or an exhausted mapping limit (ENOSPC). Everything else (the sysfs tree) goes to
// the real file system, so tests build a fake sysfs in a temporary directory (FakeTree).
//
// The device behind a device fd is a DeviceModel: MemoryDevice (plain buffers, for unit
// tests) or EmulatorDevice (the emulator's card, for the conformance suite).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "npo/hal/backend/backend.hpp"
#include "vfio/sys.hpp"

namespace npo::vfio::test {

/// vfio-pci's layout of regions in the device fd: region N starts at N << 40.
inline constexpr unsigned kRegionShift = 40;
[[nodiscard]] constexpr std::uint64_t region_base(unsigned index) { return std::uint64_t{index} << kRegionShift; }

/// The device behind a fake device fd. Methods return 0 or an errno.
class DeviceModel {
 public:
  struct RegionSpec {
    std::uint64_t size = 0;
    std::uint32_t flags = 0;  ///< VFIO_REGION_INFO_FLAG_READ/WRITE/MMAP
    /// With a value: the region reports a VFIO_REGION_INFO_CAP_SPARSE_MMAP with these
    /// {offset, size} areas.
    std::optional<std::vector<std::pair<std::uint64_t, std::uint64_t>>> sparse;
  };
  virtual ~DeviceModel() = default;
  /// Region 0..8 (BARs, ROM, config, VGA).
  virtual RegionSpec region(unsigned index) = 0;
  virtual int read(unsigned index, std::uint64_t offset, void* buf, std::size_t n) = 0;
  virtual int write(unsigned index, std::uint64_t offset, const void* buf, std::size_t n) = 0;
  /// Memory backing [offset, offset+len) of an mmappable region, null when there is none.
  virtual std::byte* map(unsigned index, std::uint64_t offset, std::size_t len) = 0;
  virtual unsigned msix_count() = 0;
  /// Connects MSI-X vector `vector` to eventfd `fd` (-1 disconnects).
  virtual int set_msix(unsigned vector, int fd) = 0;
  /// MSI vectors (VFIO_DEVICE_GET_IRQ_INFO(MSI) count); 0 = no MSI capability.
  virtual unsigned msi_count() { return 0; }
  /// Connects MSI to eventfd `fd` (-1 disconnects).
  virtual int set_msi(int /*fd*/) { return EINVAL; }
  virtual bool can_reset() = 0;
  virtual int reset() = 0;
  virtual int dma_map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length, bool read, bool write) = 0;
  virtual int dma_unmap(std::uint64_t iova, std::uint64_t length) = 0;
};

/// A device made of plain memory: a 4 KiB config space with a type-0 header (IDs, class,
/// BAR registers, no capabilities), BAR0 (64-bit, 64 KiB, mmappable), BAR2 (64-bit
/// prefetchable, 1 MiB, mmappable), BAR4 (64-bit, 16 KiB, MSI-X table in its first 8 KiB
/// excluded from mmap by a sparse capability). Everything is configurable before the device
/// is opened. Records what the kernel did to it.
class MemoryDevice final : public DeviceModel {
 public:
  MemoryDevice(std::uint16_t vendor, std::uint16_t device);
  ~MemoryDevice() override;

  // Configuration (before opening).
  std::map<unsigned, RegionSpec> regions;  ///< by region index; config (7) is 4096 bytes R/W
  unsigned msix = 64;
  unsigned msi = 1;  ///< MSI vectors (0: no MSI capability)
  bool resettable = true;

  // Observation.
  std::vector<int> vectors;  ///< current eventfd per MSI-X vector
  int msi_fd = -1;           ///< current MSI eventfd
  unsigned resets = 0;
  std::vector<std::string> dma_log;  ///< "map iova+len rw" / "unmap iova+len"
  std::byte* config() noexcept { return config_.data(); }
  /// The backing store of BAR `bar` (valid for BAR 0, 2, 4).
  std::byte* bar(unsigned bar) noexcept;

  RegionSpec region(unsigned index) override;
  int read(unsigned index, std::uint64_t offset, void* buf, std::size_t n) override;
  int write(unsigned index, std::uint64_t offset, const void* buf, std::size_t n) override;
  std::byte* map(unsigned index, std::uint64_t offset, std::size_t len) override;
  unsigned msix_count() override { return msix; }
  int set_msix(unsigned vector, int fd) override;
  unsigned msi_count() override { return msi; }
  int set_msi(int fd) override {
    msi_fd = fd;
    return 0;
  }
  bool can_reset() override { return resettable; }
  int reset() override;
  int dma_map(std::uint64_t vaddr, std::uint64_t iova, std::uint64_t length, bool read, bool write) override;
  int dma_unmap(std::uint64_t iova, std::uint64_t length) override;

 private:
  std::vector<std::byte> config_;
  std::map<unsigned, std::byte*> bars_;  // aligned_alloc'd, by BAR
};

/// One recorded call to the fake.
struct Call {
  std::string op;             ///< "open", "ioctl", "mmap", "pread", "pwrite", "close"
  unsigned long request = 0;  ///< ioctl request
  std::string path;           ///< open: path; ioctl: the fd's kind ("container", "group 12", ...)
};

/// The fake kernel. Thread-safety: every call takes one mutex (device models are called under it).
class FakeKernel final : public Sys {
 public:
  /// Nodes under `dev_root` ("<tmp>/dev") are the kernel's; every other path is the real file
  /// system's (the fake sysfs tree). A node opens only when a file of that name exists under
  /// dev_root (FakeTree creates them), like a device node.
  explicit FakeKernel(std::string dev_root);
  ~FakeKernel() override;

  // ---- the machine --------------------------------------------------------------------------
  /// IOMMU group `number` holding the functions `bdfs`; `viable` is VFIO_GROUP_FLAGS_VIABLE.
  void add_group(int number, std::vector<std::string> bdfs, bool viable = true);
  /// The device model of function `bdf` (not owned); `cdev` its /dev/vfio/devices name.
  void add_device(const std::string& bdf, DeviceModel* model, std::optional<std::string> cdev = {});
  /// IOVA ranges reported by VFIO_IOMMU_GET_INFO and IOMMU_IOAS_IOVA_RANGES (inclusive ends).
  std::vector<backend::IovaRange> iova_ranges{{0, (std::uint64_t{1} << 39) - 1}};
  int api_version = 0;           ///< VFIO_GET_API_VERSION
  bool type1v2 = true;           ///< VFIO_CHECK_EXTENSION(VFIO_TYPE1v2_IOMMU)
  bool report_iova_caps = true;  ///< include the IOVA-range capability in VFIO_IOMMU_GET_INFO

  // ---- scripted failures --------------------------------------------------------------------
  /// After `skip` more ioctls with `request` have passed, the next `times` fail with `err`
  /// (before the fake looks at them).
  void fail_ioctl(unsigned long request, int err, int times = 1, int skip = 0);
  /// The next `times` opens of a path ending in `suffix` fail with `err`.
  void fail_open(const std::string& suffix, int err, int times = 1);
  /// The next `times` calls of `op` ("mmap", "pread", "pwrite") on device fds fail with `err`.
  void fail_op(const std::string& op, int err, int times = 1);

  // ---- observation --------------------------------------------------------------------------
  [[nodiscard]] std::vector<Call> calls() const;
  [[nodiscard]] std::size_t ioctl_count(unsigned long request) const;
  /// The requests of every ioctl, in order.
  [[nodiscard]] std::vector<unsigned long> ioctl_sequence() const;
  /// Fake fds still open.
  [[nodiscard]] std::size_t open_fds() const;
  /// Live DMA mappings (type1 containers and IOASes together).
  [[nodiscard]] std::size_t dma_mappings() const;
  /// MSI-X vectors VFIO has enabled on `bdf` (0 = off).
  [[nodiscard]] unsigned msix_enabled(const std::string& bdf) const;
  /// Whether VFIO has MSI enabled on `bdf`.
  [[nodiscard]] bool msi_enabled(const std::string& bdf) const;

  // ---- Sys ----------------------------------------------------------------------------------
  SysResult<int> open(const std::string& path, int flags) override;
  void close(int fd) noexcept override;
  SysResult<int> ioctl(int fd, unsigned long request, void* arg) override;
  SysResult<int> ioctl_int(int fd, unsigned long request, unsigned long value) override;
  SysResult<void*> mmap(std::size_t length, int prot, int fd, std::uint64_t offset) override;
  void munmap(void* addr, std::size_t length) noexcept override;
  SysResult<std::size_t> pread(int fd, void* buf, std::size_t count, std::uint64_t offset) override;
  SysResult<std::size_t> pwrite(int fd, const void* buf, std::size_t count, std::uint64_t offset) override;
  SysResult<int> eventfd(unsigned initval, int flags) override;
  SysResult<std::string> readlink(const std::string& path) override;
  SysResult<std::string> read_file(const std::string& path, std::size_t max_bytes) override;
  SysResult<std::vector<std::string>> list_dir(const std::string& path) override;
  SysResult<void> access(const std::string& path, int mode) override;

 private:
  struct Mapping {
    std::uint64_t length;
    std::string bdf;  // the device the mapping was forwarded to ("" = every device of the space)
  };
  struct Space {  // a type1 container or an IOAS
    std::map<std::uint64_t, Mapping> maps;
  };
  enum class Kind { kContainer, kGroup, kDevice, kIommufd, kCdev };
  struct Node {
    explicit Node(Kind k) : kind(k) {}
    Kind kind;
    int group = -1;               // kGroup
    std::string bdf;              // kDevice, kCdev
    int container = -1;           // kGroup: the container fd it joined
    bool iommu_set = false;       // kContainer
    int iommufd = -1;             // kCdev: bound iommufd
    std::uint32_t ioas = 0;       // kCdev: attached IOAS
    std::uint32_t next_ioas = 1;  // kIommufd
  };
  struct Group {
    bool viable = true;
    std::vector<std::string> bdfs;
    int open_fd = -1;
  };
  struct Dev {
    DeviceModel* model = nullptr;
    std::optional<std::string> cdev;
    unsigned msix_enabled = 0;
    bool msi_enabled = false;
  };

  std::optional<int> scripted_ioctl(unsigned long request);
  std::optional<int> scripted_op(const std::string& op);
  int new_fd(Node node);
  Node* node(int fd);
  DeviceModel* device_of(const Node& n);
  Space& space_of_container(int fd);
  std::vector<std::string> devices_of_container(int container_fd);
  std::vector<std::string> devices_of_ioas(int iommufd, std::uint32_t ioas);
  int do_ioctl(int fd, Node& n, unsigned long request, void* arg, unsigned long value);
  int device_ioctl(Node& n, unsigned long request, void* arg);
  int map_in(Space& space, const std::vector<std::string>& devs, std::uint64_t vaddr, std::uint64_t iova,
             std::uint64_t length, bool read, bool write);
  int unmap_in(Space& space, const std::vector<std::string>& devs, std::uint64_t iova, std::uint64_t length,
               std::uint64_t& unmapped);
  void drop_space(Space& space, const std::vector<std::string>& devs);
  bool usable_device(const Node& n) const;

  mutable std::mutex mu_;
  std::string dev_root_;
  std::map<int, Node> fds_;
  int next_fd_ = 100000;
  std::map<int, Group> groups_;
  std::map<std::string, Dev> devs_;
  std::map<int, Space> containers_;                        // by container fd
  std::map<std::pair<int, std::uint32_t>, Space> ioases_;  // by (iommufd, ioas id)
  std::set<void*> fake_maps_;
  struct IoctlFail {
    int err = 0;
    int times = 0;
    int skip = 0;
  };
  std::map<unsigned long, IoctlFail> ioctl_fail_;
  std::vector<std::pair<std::string, std::pair<int, int>>> open_fail_;
  std::map<std::string, std::pair<int, int>> op_fail_;
  std::vector<Call> calls_;
};

/// A temporary directory with a fake sysfs ("<dir>/sys") and /dev ("<dir>/dev"), removed on
/// destruction.
class FakeTree {
 public:
  FakeTree();
  ~FakeTree();
  FakeTree(const FakeTree&) = delete;
  FakeTree& operator=(const FakeTree&) = delete;

  [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }
  [[nodiscard]] std::string sys_root() const { return (dir_ / "sys").string(); }
  [[nodiscard]] std::string dev_root() const { return (dir_ / "dev").string(); }

  struct Function {
    std::string bdf;
    std::uint16_t vendor = 0x1ee7;
    std::uint16_t device = 0x0a01;
    std::uint32_t class_code = 0x120000;
    int numa_node = -1;
    int iommu_group = -1;             ///< -1: no iommu_group link
    std::string driver = "vfio-pci";  ///< "": no driver link
    std::optional<std::string> cdev;  ///< creates <fn>/vfio-dev/<cdev> and /dev/vfio/devices/<cdev>
  };
  /// Adds /sys/bus/pci/devices/<bdf> with its attributes and links, the group's
  /// /sys/kernel/iommu_groups/<n>/devices/<bdf> link, and /dev/vfio/<n> (when bound to vfio-pci).
  void add_function(const Function& f);
  /// Creates the VFIO nodes /dev/vfio/vfio (and /dev/iommu when `iommufd`).
  void add_vfio_nodes(bool iommufd = false);
  /// Writes `text` to a file below dir() (creating directories).
  void write(const std::string& relative, const std::string& text);
  /// Creates a symlink below dir().
  void link(const std::string& relative, const std::string& target);

 private:
  std::filesystem::path dir_;
};

}  // namespace npo::vfio::test
