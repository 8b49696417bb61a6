// SPDX-License-Identifier: Apache-2.0
// npo-link train [--card N [--port P]]: retrains one link (both ends) or every port and prints
// the supervisor's per-stage times, attempts and result codes.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/output.hpp"
#include "link.hpp"
#include "npo/hal/link_training.hpp"

namespace npo::tools::link {

using nlohmann::json;

namespace {

/// The train request each attempt belongs to, from 1: the card numbers its attempts 1..N
/// within one CTRL.TRAIN request (TRAIN_RESULT.ATTEMPT), and the host issues a fresh request
/// (host_retries) after the card gives up, so the numbers restart: 1,2,3, 1,2,3, ...
std::vector<unsigned> request_numbers(const PortTraining& r) {
  std::vector<unsigned> out;
  unsigned request = 1, last = 0;
  for (const auto& a : r.attempts) {
    if (!out.empty() && a.attempt <= last) ++request;
    last = a.attempt;
    out.push_back(request);
  }
  return out;
}

/// Whether a listed result is a failure for the exit status: anything but OK, except a port
/// without a module that nobody asked for by --card/--port (listed by --all, as DISABLED).
bool failed(const PortTraining& r, bool asked) {
  if (r.code == TrainCode::kOk) return false;
  return asked || r.code != TrainCode::kNoModule;
}

json training_json(System& sys, const PortTraining& r) {
  json stages = json::object();
  for (std::size_t s = 0; s + 1 < kTrainStageCount; ++s) {
    stages[std::string(train_stage_name(static_cast<TrainStage>(s)))] = static_cast<double>(r.stage_ns[s]) / 1e6;
  }
  json attempts = json::array();
  const auto requests = request_numbers(r);
  for (std::size_t i = 0; i < r.attempts.size(); ++i) {
    const auto& a = r.attempts[i];
    attempts.push_back({{"attempt", a.attempt},
                        {"request", requests[i]},
                        {"result", std::string(train_code_name(a.code))},
                        {"failed_lanes", a.failed_lanes},
                        {"from_card", a.from_card},
                        {"at_ms", static_cast<double>(a.at_ns) / 1e6}});
  }
  json nb = nullptr;
  if (r.neighbor_fabric_id) {
    nb = {{"card", or_null(card_of(sys, r.neighbor_fabric_id))}, {"port", or_null(r.neighbor_port)}};
  }
  return {{"card", r.card},
          {"port", r.port},
          {"result", std::string(train_code_name(r.code))},
          {"stage", std::string(train_stage_name(r.stage))},
          {"total_ms", static_cast<double>(r.total_ns) / 1e6},
          {"stage_ms", stages},
          {"attempts", attempts},
          {"host_retries", r.host_retries},
          {"lanes_up", r.lanes_up},
          {"lanes_total", r.lanes_total},
          {"failed_lanes", r.failed_lanes},
          {"dropped_lanes", r.dropped_lanes},
          {"module_ready_timeout_ms", static_cast<double>(r.module_ready_timeout_ns) / 1e6},
          {"datapath_init_timeout_ms", static_cast<double>(r.datapath_init_timeout_ns) / 1e6},
          {"neighbor", nb},
          {"cmis_module_state", r.cmis_module_state ? json(*r.cmis_module_state) : json(nullptr)},
          {"cmis_datapath_activated", r.cmis_datapath_activated ? json(*r.cmis_datapath_activated) : json(nullptr)},
          {"detail", r.detail}};
}

}  // namespace

int train_once(System& sys, const Common& c, std::optional<unsigned> card, std::optional<unsigned> port) {
  std::vector<PortRef> ports;
  if (card || port) {
    const unsigned ci = card.value_or(0), pi = port.value_or(0);
    if (ci >= sys.device_count()) {
      std::fprintf(stderr, "npo-link train: card %u not present (%zu cards)\n", ci, sys.device_count());
      return kExitUsage;
    }
    ports.push_back({ci, pi});
    // Both ends of the link: the far end learned in the last training, if any.
    if (auto ps = read_port(sys.device(ci), pi); ps && ps->neighbor_fabric_id) {
      if (auto nc = card_of(sys, ps->neighbor_fabric_id)) {
        if (sys.device(*nc).info().read_only) {
          // emu-remote with owner=: the far end is watched, not owned (its job may hold it).
          std::fprintf(stderr,
                       "npo-link train: far end card %u port %u is attached read-only: retraining from card %u's "
                       "end only\n",
                       *nc, ps->neighbor_port.value_or(0), ci);
        } else {
          ports.push_back({*nc, ps->neighbor_port.value_or(0)});
        }
      }
    }
  }
  auto res = train_ports(sys, ports, {}, 20'000'000'000ULL, true);
  if (!res) return report(res.error(), "train");
  // A port asked for by --card/--port is always listed, also when it has no module.
  const bool asked = card || port;
  const bool all = c.all || asked;
  // Exit status: kExitFailed when a listed port did not train (tools/README.md).
  std::size_t listed = 0, bad = 0;
  for (const auto& r : *res) {
    if (!all && r.code == TrainCode::kNoModule && r.stage == TrainStage::kDetect) continue;
    ++listed;
    if (failed(r, asked)) ++bad;
  }
  const int status = bad != 0 ? kExitFailed : kExitHealthy;
  if (c.json) {
    json out = json::array();
    for (const auto& r : *res) {
      if (!all && r.code == TrainCode::kNoModule && r.stage == TrainStage::kDetect) continue;
      out.push_back(training_json(sys, r));
    }
    print_json({{"backend", sys.uri()}, {"ports", out}, {"failed", bad}});
    return status;
  }
  bool explained = false;
  for (const auto& r : *res) {
    if (!all && r.code == TrainCode::kNoModule && r.stage == TrainStage::kDetect) continue;
    std::string stages;
    for (std::size_t s = 0; s + 1 < kTrainStageCount; ++s) {
      stages += fmt::format("{}{}={:.1f}ms", stages.empty() ? "" : " ", train_stage_name(static_cast<TrainStage>(s)),
                            static_cast<double>(r.stage_ns[s]) / 1e6);
    }
    fmt::print("card {} port {}: {} in {:.1f} ms ({})\n  {}\n", r.card, r.port, train_code_name(r.code),
               static_cast<double>(r.total_ns) / 1e6, r.detail, stages);
    const auto requests = request_numbers(r);
    if (!explained && !requests.empty() && requests.back() > 1) {
      // Said once: why the attempt numbers restart.
      fmt::print(
          "  (attempt N.M: the card's attempt M of train request N; the card makes up to {} attempts per "
          "request, then the host requests training again, up to {} more times)\n",
          TrainingPolicy{}.card_attempts, TrainingPolicy{}.host_retries);
      explained = true;
    }
    for (std::size_t i = 0; i < r.attempts.size(); ++i) {
      const auto& a = r.attempts[i];
      fmt::print("  attempt {}.{} at {:.1f} ms: {}{}{}\n", requests[i], a.attempt, static_cast<double>(a.at_ns) / 1e6,
                 train_code_name(a.code), a.failed_lanes ? fmt::format(" lanes 0x{:02x}", a.failed_lanes) : "",
                 a.from_card ? "" : " (host deadline)");
    }
  }
  if (bad != 0) {
    fmt::print("{} of {} port{} did not train\n", bad, listed, listed == 1 ? "" : "s");
  }
  return status;
}

}  // namespace npo::tools::link
