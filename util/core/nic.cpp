#include "core/nic.hpp"

#include <hwloc.h>

#include <cstdlib>
#include <cstring>

#include <rdma/fi_errno.h>

#include "abi/fid_box.hpp"

namespace pm {
namespace {

// Every piece is its own allocation, as libfabric's own nic objects are:
// libfabric's layering code duplicates nics itself and closes the copies
// through these ops, so close must not assume one block.
int nic_close(fid_t f) noexcept;
int nic_control(fid_t f, int cmd, void* arg) noexcept;

const fi_ops kNicOps = {
    .size = ops_size<fi_ops>(),
    .close = nic_close,
    .bind = PM_ENOSYS(fi_ops, bind),
    .control = nic_control,
    .ops_open = PM_ENOSYS(fi_ops, ops_open),
    .tostr = PM_ENOSYS(fi_ops, tostr),
    .ops_set = PM_ENOSYS(fi_ops, ops_set),
};

char* dup_or_null(const char* s) { return s ? strdup(s) : nullptr; }

void free_nic(fid_nic* n) {
  if (!n) return;
  if (fi_device_attr* d = n->device_attr) {
    free(d->name);
    free(d->device_id);
    free(d->device_version);
    free(d->vendor_id);
    free(d->driver);
    free(d->firmware);
    free(d);
  }
  free(n->bus_attr);
  if (fi_link_attr* l = n->link_attr) {
    free(l->address);
    free(l->network_type);
    free(l);
  }
  free(n);
}

fid_nic* alloc_nic() {
  auto* n = static_cast<fid_nic*>(calloc(1, sizeof(fid_nic)));
  if (!n) return nullptr;
  n->fid.fclass = FI_CLASS_NIC;
  n->fid.ops = const_cast<fi_ops*>(&kNicOps);
  n->device_attr = static_cast<fi_device_attr*>(calloc(1, sizeof(fi_device_attr)));
  n->bus_attr = static_cast<fi_bus_attr*>(calloc(1, sizeof(fi_bus_attr)));
  n->link_attr = static_cast<fi_link_attr*>(calloc(1, sizeof(fi_link_attr)));
  if (!n->device_attr || !n->bus_attr || !n->link_attr) {
    free_nic(n);
    return nullptr;
  }
  return n;
}

int nic_close(fid_t f) noexcept {
  free_nic(reinterpret_cast<fid_nic*>(f));
  return 0;
}

int nic_control(fid_t f, int cmd, void* arg) noexcept {
  if (cmd != FI_DUP) return -FI_ENOSYS;
  const fid_nic* src = reinterpret_cast<const fid_nic*>(f);
  fid_nic* n = alloc_nic();
  if (!n) return -FI_ENOMEM;
  if (const fi_device_attr* d = src->device_attr) {
    n->device_attr->name = dup_or_null(d->name);
    n->device_attr->device_id = dup_or_null(d->device_id);
    n->device_attr->device_version = dup_or_null(d->device_version);
    n->device_attr->vendor_id = dup_or_null(d->vendor_id);
    n->device_attr->driver = dup_or_null(d->driver);
    n->device_attr->firmware = dup_or_null(d->firmware);
  }
  if (src->bus_attr) *n->bus_attr = *src->bus_attr;
  if (const fi_link_attr* l = src->link_attr) {
    n->link_attr->address = dup_or_null(l->address);
    n->link_attr->mtu = l->mtu;
    n->link_attr->speed = l->speed;
    n->link_attr->state = l->state;
    n->link_attr->network_type = dup_or_null(l->network_type);
  }
  *static_cast<fid_nic**>(arg) = n;
  return 0;
}

}  // namespace

fid_nic* make_nic(const NicDesc& d) {
  fid_nic* n = alloc_nic();
  if (!n) return nullptr;
  n->device_attr->name = strdup(d.name.c_str());
  n->device_attr->driver = d.driver.empty() ? nullptr : strdup(d.driver.c_str());
  n->bus_attr->bus_type = d.pci ? FI_BUS_PCI : FI_BUS_UNKNOWN;
  if (d.pci) n->bus_attr->attr.pci = fi_pci_attr{d.pci_domain, d.pci_bus, d.pci_dev, d.pci_fn};
  n->link_attr->address = strdup(d.address.c_str());
  n->link_attr->mtu = d.mtu;
  n->link_attr->speed = d.speed;
  n->link_attr->state = d.state;
  n->link_attr->network_type = strdup("Ethernet");
  return n;
}

// The topology is loaded once per process (tens of milliseconds), and only
// when some NIC has a PCI address to place.
std::vector<int> nic_distances(const std::vector<NicDesc>& nics) {
  std::vector<int> d(nics.size(), 2);
  bool any_pci = false;
  for (const NicDesc& n : nics) any_pci |= n.pci;
  if (!any_pci) return d;
  static hwloc_topology_t topo = [] {
    hwloc_topology_t t = nullptr;
    if (hwloc_topology_init(&t) != 0) return (hwloc_topology_t) nullptr;
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(t) != 0) {
      hwloc_topology_destroy(t);
      return (hwloc_topology_t) nullptr;
    }
    return t;
  }();
  if (!topo) return d;
  hwloc_bitmap_t mine = hwloc_bitmap_alloc();
  if (!mine) return d;
  if (hwloc_get_cpubind(topo, mine, HWLOC_CPUBIND_THREAD) != 0)
    hwloc_bitmap_copy(mine, hwloc_topology_get_allowed_cpuset(topo));
  for (size_t i = 0; i < nics.size(); i++) {
    const NicDesc& n = nics[i];
    if (!n.pci) continue;
    hwloc_obj_t dev = hwloc_get_pcidev_by_busid(topo, n.pci_domain, n.pci_bus, n.pci_dev, n.pci_fn);
    hwloc_obj_t anc = dev ? hwloc_get_non_io_ancestor_obj(topo, dev) : nullptr;
    if (anc && anc->cpuset) d[i] = hwloc_bitmap_intersects(anc->cpuset, mine) ? 0 : 1;
  }
  hwloc_bitmap_free(mine);
  return d;
}

}  // namespace pm
