// The in-process loopback wire: a named segment inside this process that
// delivers frames to the endpoint they address, with programmable faults.
// With WireConfig::gso it says it takes GSO packets and its mtu() is
// kGsoOuter less than the link's, as the AF_PACKET wire's GSO mode (for
// tests of what peers learn of it); frames still travel one by one.
// A frame goes to the wire of its destination MAC and endpoint id opened
// last: a test can open a second wire of an id to take its frames.
#pragma once

#include <string>

namespace pm::eth {

struct LoopFaults {
  double drop = 0;       // probability a frame is lost
  double dup = 0;        // probability it is delivered twice
  double reorder = 0;    // probability it is held back behind the next frame
  double corrupt = 0;    // probability one byte after the Ethernet header flips
  unsigned delay_us = 0; // every frame arrives this late
  unsigned seed = 1;
  bool down = false;     // link down: frames vanish, link_up() is false
  unsigned rx_cap = 0;   // frames a receiver holds unpolled; more are dropped
                         // and counted in rx_dropped() (0: unbounded)
};

// Faults of a segment (frames sent after the call); thread-safe.
void loop_set_faults(const std::string& segment, const LoopFaults& f);

} // namespace pm::eth
