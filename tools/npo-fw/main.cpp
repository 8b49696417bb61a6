// SPDX-License-Identifier: Apache-2.0
// npo-fw: firmware tool (docs/firmware.md). A thin dispatcher: every subcommand lives in its own
// file (fw.hpp lists them) and adds itself to the command line here. Uses only the public
// npo-hal API.
#include <vector>

#include <CLI/CLI.hpp>

#include "common/cli.hpp"
#include "fw.hpp"

int main(int argc, char** argv) {
  namespace fw = npo::tools::fw;
  CLI::App app{
      "npo-fw: signed firmware images; the card's A/B firmware update and a transceiver module's through CMIS CDB "
      "(docs/firmware.md).\n"
      "Exit status: 0 done, 1 refused or failed (the card runs what it ran before), 2 bad command line,\n"
      "3 the new image did not come up and the card rolled back to the old one."};
  app.require_subcommand(1);
  npo::tools::add_version_flag(app, fw::kTool);
  std::vector<fw::Command> commands;
  fw::add_card_commands(app, commands);
  fw::add_module_commands(app, commands);
  if (auto rc = npo::tools::parse_command_line(app, argc, argv, fw::kTool)) return *rc;
  for (const auto& c : commands)
    if (c.app->parsed()) return c.run();
  return fw::kExitError;
}
