// The XDP program of the AF_XDP wire (xdp_wire.cpp), compiled at build time
// with clang -target bpf and embedded in the provider. It steers the frames
// of one pmeth endpoint (its EtherType and its endpoint id, see eth_wire.hpp)
// to that endpoint's AF_XDP socket and passes everything else to the kernel
// untouched: IP traffic and the frames of other pmeth endpoints on the same
// interface (which receive through AF_PACKET) are not affected.
//
// Two entry points, one rule: pmeth_steer, and pmeth_steer_mb for interfaces
// whose frames may span several buffers (the wire loads only the one it
// needs). The endpoint writes pm_cfg after loading; until then, and whenever the
// socket of the receiving queue is gone from pm_xsks (the kernel removes a
// closed socket from the map), every frame passes.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct pm_steer_cfg {
  __u32 ethertype;  // network byte order in the low 16 bits, as the frame has it
  __u32 ep_id;      // the destination endpoint id (host order; little-endian on the wire)
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct pm_steer_cfg);
} pm_cfg SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u32);
} pm_xsks SEC(".maps");

// Ethernet header (14) then the pmeth header; dst endpoint id at 8 of it.
#define PM_ETH_HDR 14
#define PM_DST_EP (PM_ETH_HDR + 8)

static __always_inline int steer(struct xdp_md* ctx) {
  const __u8* data = (const __u8*)(long)ctx->data;
  const __u8* end = (const __u8*)(long)ctx->data_end;
  if (data + PM_DST_EP + 4 > end) return XDP_PASS;
  __u32 zero = 0;
  struct pm_steer_cfg* c = bpf_map_lookup_elem(&pm_cfg, &zero);
  if (!c || c->ep_id == 0) return XDP_PASS;
  __u16 type = (__u16)(data[12] | (data[13] << 8));  // as stored: network order
  if (type != (__u16)c->ethertype) return XDP_PASS;
  __u32 dst = (__u32)data[PM_DST_EP] | ((__u32)data[PM_DST_EP + 1] << 8) | ((__u32)data[PM_DST_EP + 2] << 16) |
              ((__u32)data[PM_DST_EP + 3] << 24);
  if (dst != c->ep_id) return XDP_PASS;
  // No socket on this queue: the kernel (and AF_PACKET) gets the frame.
  return bpf_redirect_map(&pm_xsks, ctx->rx_queue_index, XDP_PASS);
}

SEC("xdp")
int pmeth_steer(struct xdp_md* ctx) { return steer(ctx); }

// The same for frames larger than a page (jumbo MTUs, multi-buffer AF_XDP):
// it reads only the headers, which are in the first buffer of a frame.
SEC("xdp.frags")
int pmeth_steer_mb(struct xdp_md* ctx) { return steer(ctx); }

char _license[] SEC("license") = "Dual BSD/GPL";
