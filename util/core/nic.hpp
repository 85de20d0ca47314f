// fi_info->nic objects: device, bus and link attributes of a network
// interface, duplicated and freed by libfabric through the fid's ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <rdma/fabric.h>

namespace pm {

struct NicDesc {
  std::string name;          // interface name
  std::string address;       // MAC as text
  std::string driver;
  size_t mtu = 0;
  size_t speed = 0;          // bits per second, 0 when unknown
  fi_link_state state = FI_LINK_UNKNOWN;
  bool pci = false;
  uint16_t pci_domain = 0;
  uint8_t pci_bus = 0, pci_dev = 0, pci_fn = 0;
};

// A new nic fid (nullptr when out of memory); fi_freeinfo closes it.
fid_nic* make_nic(const NicDesc& d);

// Distance of each NIC from the calling thread (hwloc): 0 when the NIC's
// PCI device hangs below the cores the thread may run on, 1 when below
// other cores, 2 when unknown (no PCI address, e.g. virtual interfaces).
// Callers list near NICs first, so that consumers choosing by locality
// (MPI's NIC selection) find them.
std::vector<int> nic_distances(const std::vector<NicDesc>& nics);

} // namespace pm
