// SPDX-License-Identifier: Apache-2.0
// npo-hal public API: the whole topology model in one include -- the plan
// (topology_plan.hpp), the graph module (topology_graph.hpp), the generators
// (topology_gen.hpp) and the file reader/writer (topology_file.hpp). Kept for code written
// against the former single header; new code includes the part it uses.
#pragma once

#include "npo/hal/topology_file.hpp"
#include "npo/hal/topology_gen.hpp"
#include "npo/hal/topology_graph.hpp"
#include "npo/hal/topology_plan.hpp"
