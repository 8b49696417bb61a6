// SPDX-License-Identifier: Apache-2.0
// A DPDK program outside npo-hal's tree linking the installed dma_npo driver statically
// (find_package(npo-hal) -> npo::dpdk): registers the driver, starts the EAL without huge
// pages with one dma_npo device on the URI given, and prints what the dmadev library sees.
#include <rte_dmadev.h>
#include <rte_eal.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <npo/dpdk/dmadev.h>

int main(int argc, char** argv) {
  const std::string uri = argc > 1 ? argv[1] : "emu:2";
  if (npo_dpdk_register() != 0) {
    std::fprintf(stderr, "dpdk_consumer: npo_dpdk_register failed\n");
    return 1;
  }
  const std::string prefix = "npo-install-" + std::to_string(::getpid());
  const std::string vdev = "dma_npo0,backend=" + uri + ",card=0";
  std::vector<std::string> args = {
      "dpdk_consumer", "--no-huge",     "-m",   "64",     "--no-pci", "-l",          "0",
      "--no-shconf",   "--file-prefix", prefix, "--vdev", vdev,       "--log-level", "lib.eal:error"};
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  if (rte_eal_init(static_cast<int>(av.size()), av.data()) < 0) {
    std::fprintf(stderr, "dpdk_consumer: rte_eal_init failed\n");
    return 2;
  }
  const int id = rte_dma_get_dev_id_by_name("dma_npo0");
  rte_dma_info info{};
  if (id < 0 || rte_dma_info_get(static_cast<int16_t>(id), &info) != 0) {
    std::fprintf(stderr, "dpdk_consumer: no dmadev dma_npo0\n");
    rte_eal_cleanup();
    return 3;
  }
  std::printf("dmadev dma_npo0: max_vchans %u\n", info.max_vchans);
  rte_eal_cleanup();
  return 0;
}
