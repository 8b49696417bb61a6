// SPDX-License-Identifier: Apache-2.0
// npo-hal: umbrella header of the public API.
#pragma once

#include "npo/hal/bring_up.hpp"
#include "npo/hal/clock.hpp"
#include "npo/hal/device.hpp"
#include "npo/hal/dma.hpp"
#include "npo/hal/error.hpp"
#include "npo/hal/fabric_spec.hpp"
#include "npo/hal/link_monitor.hpp"
#include "npo/hal/log.hpp"
#include "npo/hal/memory.hpp"
#include "npo/hal/port.hpp"
#include "npo/hal/power.hpp"
#include "npo/hal/system.hpp"
#include "npo/hal/topology.hpp"
#include "npo/hal/topology_check.hpp"
#include "npo/hal/transceiver.hpp"
#include "npo/hal/units.hpp"
#include "npo/hal/version.hpp"
#include "npo/hal/window.hpp"
#include "npo/hal/xcvr_decode.hpp"
