// SPDX-License-Identifier: Apache-2.0
// getting_started: a complete npo-hal program, walked through in docs/getting-started.md.
// Opens the emulated 8-card mesh, brings the optical fabric up with one call, exports a
// window of card 1's device memory, imports it on card 0 and writes into it by remote DMA
// from host memory, then checks the bytes through the window's CPU mapping.
//
// Build against the installed package (tests/install builds it both ways):
//   CMake:      find_package(npo-hal REQUIRED) + target_link_libraries(app PRIVATE npo::hal)
//   pkg-config: g++ getting_started.cpp -o getting_started $(pkg-config --cflags --libs npo-hal)
// Run: ./getting_started [URI]   (default emu:mesh8; any URI with two cards that are linked)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include <npo/hal/hal.hpp>

namespace {

// Prints `what` and the error, returns the exit status 1.
int fail(const char* what, const npo::Error& e) {
  std::fprintf(stderr, "getting_started: %s: %s\n", what, e.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string uri = argc > 1 ? argv[1] : std::string(npo::kDefaultUri);

  // 1. Open every card the backend has. The links are still down after this.
  auto opened = npo::System::open(uri);
  if (!opened) return fail("System::open", opened.error());
  npo::System& sys = **opened;
  std::printf("opened %s: %zu cards\n", uri.c_str(), sys.device_count());
  if (sys.device_count() < 2) {
    std::fprintf(stderr, "getting_started: %s has fewer than 2 cards\n", uri.c_str());
    return 1;
  }

  // 2. Bring the fabric up: train every port, discover the topology, program routes.
  auto fabric = npo::bring_up_fabric(sys);
  if (!fabric) return fail("bring_up_fabric", fabric.error());
  std::printf("fabric: %u of %u ports up, %zu links, diameter %d hops\n", fabric->links.up,
              fabric->links.ports_with_module, fabric->topology.links.size(), fabric->routes.diameter());
  if (!fabric->complete()) {
    // Not complete: a port with a module did not train, or some cards cannot reach others
    // (emu:N has no cables at all).
    std::printf("fabric: not complete (%u ports failed, %llu ordered card pairs unreachable)\n", fabric->links.failed,
                static_cast<unsigned long long>(fabric->unreachable_pairs));
  }

  npo::Device& card0 = sys.device(0);  // the writer
  npo::Device& card1 = sys.device(1);  // owns the memory written into
  constexpr std::uint32_t kBytes = 64 * 1024;

  // 3. Host memory card 0 can read by DMA (pinned and IOMMU-mapped for it), with a pattern.
  auto host = npo::allocate_host_memory(card0, kBytes);
  if (!host) return fail("allocate_host_memory", host.error());
  for (std::size_t i = 0; i < kBytes; ++i) (*host)->bytes()[i] = static_cast<std::byte>(i * 7 + 3);

  // 4. Card 1: allocate device memory (HBM) and export it as a window that may be written.
  auto hbm = npo::allocate_hbm(card1, kBytes);
  if (!hbm) return fail("allocate_hbm", hbm.error());
  auto window = npo::export_window(card1, hbm->offset, hbm->size, {.read = true, .write = true});
  if (!window) return fail("export_window", window.error());
  // The handle is 40 bytes: send them to whoever should write (another rank, process, host).
  const auto wire = (*window)->handle().serialize();

  // 5. The writer's side: import the handle (checks it and that its owner card is present).
  auto remote = npo::import_window(sys, wire);
  if (!remote) return fail("import_window", remote.error());

  // 6. Remote write: a DMA queue of card 0 copies the host buffer into card 1's window; the
  //    card routes it over the fabric. submit() rings the doorbell once for the batch.
  auto queue = card0.open_queue({.engine = 0, .depth = 64});
  if (!queue) return fail("open_queue", queue.error());
  auto op = (*queue)->enqueue_remote_write(npo::DmaAddress::host((*host)->iova()), *remote, 0, kBytes);
  if (!op) return fail("enqueue_remote_write", op.error());
  if (auto r = (*queue)->submit(); !r) return fail("submit", r.error());

  // 7. Wait for the completion, then reap it: every op has its own status.
  if (auto r = (*queue)->wait(std::chrono::seconds(5)); !r) return fail("wait", r.error());
  npo::OpCompletion done[1];
  if ((*queue)->poll(done) != 1 || done[0].handle != *op) {
    std::fprintf(stderr, "getting_started: no completion for the remote write\n");
    return 1;
  }
  if (done[0].status != npo::OpStatus::kOk) {
    std::fprintf(stderr, "getting_started: remote write completed with %s\n",
                 std::string(npo::op_status_name(done[0].status)).c_str());
    return 1;
  }

  // 8. Check the bytes on card 1 through a CPU mapping of the window (BAR aperture).
  auto view = npo::map_window(card1, **window);
  if (!view) return fail("map_window", view.error());
  if (std::memcmp((*view)->bytes().data(), (*host)->bytes().data(), kBytes) != 0) {
    std::fprintf(stderr, "getting_started: window bytes differ from what was written\n");
    return 1;
  }
  std::printf("remote write of %u bytes from card 0 into card 1: data checked\n", kBytes);
  return 0;
}
