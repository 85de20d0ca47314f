// Builds a provider's fi_info template: the attributes the core implements
// are set here once; a provider passes what differs (names, sizes, caps).
#pragma once

#include <cstddef>
#include <cstdint>

#include <rdma/fabric.h>

namespace pm {

struct TemplateDesc {
  const char* fabric_name;
  const char* domain_name;
  uint32_t prov_version;
  fi_ep_type ep_type = FI_EP_RDM;
  uint64_t comm_caps = FI_LOCAL_COMM;  // FI_LOCAL_COMM and/or FI_REMOTE_COMM
  bool tagged = true;
  bool multi_recv = true;
  bool one_sided = true;   // FI_RMA, FI_ATOMIC, FI_RMA_EVENT (RDM only)
  size_t inject_size = 4096;
  size_t tx_size = 256;
  size_t rx_size = 1024;
  size_t max_msg_size = SIZE_MAX;
  fid_nic* nic = nullptr;  // ownership passes to the fi_info
};

// nullptr when out of memory.
fi_info* make_template(const TemplateDesc& d);

} // namespace pm
