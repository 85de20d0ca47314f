#include "core/info_template.hpp"

#include <cstring>

#include "abi/api_version.hpp"
#include "core/tag_matcher.hpp"

namespace pm {

namespace {
// The ordering the core really gives (docs/architecture.md, "Ordering"):
// one FIFO per peer on the initiator, in-order delivery by every device, and
// a target that executes RMA writes and non-fetching atomics on arrival, in
// arrival order, and every read (RMA read, fetching atomic) at or after its
// arrival. So sends match in order (SAS), reads see earlier writes (RAW),
// writes land in order (WAW), fetching atomics run in order (ATOMIC_RAR) and
// RMA reads are issued in order (RMA_RAR). Not WAR: a read's data is taken
// when its response is sent, and a fetching atomic can wait for a free tx
// op, so a later write can overtake them; hence no plain RAR either (a
// fetching atomic may run before an earlier RMA read has taken its data).
uint64_t msg_order(bool one_sided) {
  uint64_t o = FI_ORDER_SAS;
  if (!one_sided) return o;
  o |= FI_ORDER_RAW | FI_ORDER_WAW;
#ifdef FI_ORDER_RMA_RAR
  o |= FI_ORDER_RMA_RAR | FI_ORDER_RMA_RAW | FI_ORDER_RMA_WAW;
#endif
#ifdef FI_ORDER_ATOMIC_RAR
  o |= FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAW;
#endif
  return o;
}
}  // namespace

fi_info* make_template(const TemplateDesc& d) {
  fi_info* i = fi_allocinfo();
  if (!i) return nullptr;
  uint64_t prim = FI_MSG | (d.tagged ? FI_TAGGED : 0);
  uint64_t tx = prim | FI_SEND;
  uint64_t rx = prim | FI_RECV | FI_SOURCE | FI_SOURCE_ERR | FI_DIRECTED_RECV |
                (d.multi_recv ? FI_MULTI_RECV : 0);
  if (d.one_sided) {
    tx |= FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE;
    rx |= FI_RMA | FI_ATOMIC | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_RMA_EVENT;
  }
  i->caps = tx | rx | d.comm_caps;
  i->mode = 0;
  i->addr_format = FI_FORMAT_UNSPEC;
  i->tx_attr->caps = tx;
  i->tx_attr->msg_order = msg_order(d.one_sided);
  i->tx_attr->comp_order = kOrderNone;
  i->tx_attr->inject_size = d.inject_size;
  i->tx_attr->size = d.tx_size;
  i->tx_attr->iov_limit = kMaxIov;
  i->tx_attr->rma_iov_limit = d.one_sided ? 1 : 0;
  i->rx_attr->caps = rx;
  i->rx_attr->msg_order = msg_order(d.one_sided);
  i->rx_attr->comp_order = kOrderNone;
  i->rx_attr->size = d.rx_size;
  i->rx_attr->iov_limit = kMaxIov;
  i->ep_attr->type = d.ep_type;
  i->ep_attr->protocol = FI_PROTO_UNSPEC;
  i->ep_attr->protocol_version = 1;
  i->ep_attr->max_msg_size = d.max_msg_size;
  i->ep_attr->mem_tag_format = d.tagged ? 0xAAAAAAAAAAAAAAAAull : 0;  // all 64 bits usable
  // RAW and WAW hold for messages of any size (msg_order above); WAR not.
  i->ep_attr->max_order_raw_size = d.one_sided ? d.max_msg_size : 0;
  i->ep_attr->max_order_waw_size = d.one_sided ? d.max_msg_size : 0;
  i->ep_attr->max_order_war_size = 0;
  i->ep_attr->tx_ctx_cnt = 1;
  i->ep_attr->rx_ctx_cnt = 1;
  fi_domain_attr* a = i->domain_attr;
  a->name = strdup(d.domain_name);
  a->threading = FI_THREAD_SAFE;
  a->control_progress = FI_PROGRESS_MANUAL;
  a->data_progress = FI_PROGRESS_MANUAL;
  a->resource_mgmt = FI_RM_ENABLED;
  a->av_type = FI_AV_UNSPEC;
  a->mr_mode = 0;
  a->mr_key_size = sizeof(uint64_t);
  a->cq_data_size = sizeof(uint64_t);
  a->cq_cnt = 1024;
  a->ep_cnt = 1024;
  a->tx_ctx_cnt = 1024;
  a->rx_ctx_cnt = 1024;
  a->max_ep_tx_ctx = 1;
  a->max_ep_rx_ctx = 1;
  a->mr_cnt = 65536;
  a->cntr_cnt = 1024;
  a->mr_iov_limit = kMaxIov;
  a->caps = d.comm_caps;
  i->fabric_attr->name = strdup(d.fabric_name);
  i->fabric_attr->prov_version = d.prov_version;
  i->nic = d.nic;
  if (!a->name || !i->fabric_attr->name) {
    fi_freeinfo(i);
    return nullptr;
  }
  return i;
}

} // namespace pm
