// pmfabric fabtests: shared pieces of the one-sided tests (RMA, atomics,
// counters): endpoint configuration, memory registration in either
// addressing mode, handing a region to a peer, waiting for remote data to
// land, and checking refusals.
#pragma once

#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#include <string>

#include "ft_fabric.h"

namespace ft {

// The two memory-registration modes the one-sided tests run in:
//  - kMrVirt: the target address is the virtual address of the byte and the
//    provider chooses the key (read back with fi_mr_key);
//  - kMrOffset (mr_mode 0): the application chooses the key (requested_key)
//    and addresses are offsets from the region's start.
// The tests follow what the returned fi_info grants (a provider may grant
// fewer bits than asked for, e.g. FI_MR_VIRT_ADDR without FI_MR_PROV_KEY).
constexpr int kMrVirt = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
constexpr int kMrOffset = 0;
std::string mr_mode_str(int mode);

// RDM endpoint with FI_MSG|FI_TAGGED (for the framework) plus FI_RMA|FI_ATOMIC
// and `extra_caps`, in the given mr_mode.
EpConfig one_sided_config(int mr_mode, uint64_t extra_caps = 0);

// What an initiator needs to reach a registered region: `base` is the
// remote address of the region's first byte (its virtual address with
// FI_MR_VIRT_ADDR, else 0) and `len` its length.
struct RemoteMr {
    uint64_t base = 0;
    uint64_t key = 0;
    uint64_t len = 0;
    uint64_t at(size_t off) const { return base + off; }
};

// A registered region of caller-owned memory (closed by the destructor or
// close(); must not outlive the endpoint's domain).
class Region {
public:
    // requested_key is used when the provider does not choose keys.
    Region(Endpoint& ep, void* buf, size_t len, uint64_t access, uint64_t requested_key);
    ~Region();
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;
    void close();  // idempotent; fails the test if fi_close does
    RemoteMr remote() const { return remote_; }
    void* desc() const { return mr_ ? fi_mr_desc(mr_) : nullptr; }
    fid_mr* mr() const { return mr_; }

private:
    fid_mr* mr_ = nullptr;
    RemoteMr remote_;
};

void send_remote(int peer, const RemoteMr& r);
RemoteMr recv_remote(Endpoint& ep, int peer);

// Poll `buf` (keeping `ep` progressing, as a target must) until it holds
// stream `seed` at `offset`; fails with the first mismatch after timeout_s.
// Default completions of writes and non-fetching atomics say nothing about
// the target's memory (transmit complete), so targets wait for data to land.
void wait_landed(Endpoint& ep, const void* buf, size_t len, uint32_t seed, const char* what,
                 size_t offset = 0, double timeout_s = kWait);
// Same, progressing with `progress` (e.g. a benchmark's own CQ poll).
void wait_landed(const ProgressFn& progress, const void* buf, size_t len, uint32_t seed, const char* what,
                 size_t offset = 0, double timeout_s = kWait);
// Same for arbitrary expected bytes.
void wait_bytes(Endpoint& ep, const void* buf, const void* expected, size_t len, const char* what,
                double timeout_s = kWait);

// Wait for the completion of ctx and require an error entry with a positive
// err and a non-empty fi_cq_strerror, within bound_s. Logs it; returns it.
Comp expect_refused(Endpoint& ep, void* ctx, const char* what, double bound_s = kWait);

// Post with retries on -FI_EAGAIN like Endpoint::post, but an immediate
// refusal (any other negative return) is returned instead of failing.
template <class F>
ssize_t post_or_refuse(Endpoint& ep, const char* what, F&& f, double timeout_s = kWait) {
    double deadline = now_s() + timeout_s;
    for (;;) {
        ssize_t rc = f();
        if (rc != -FI_EAGAIN) return rc;
        ep.progress();
        FT_CHECK(now_s() < deadline, "%s: still -FI_EAGAIN after %.1fs of retrying", what, timeout_s);
    }
}

// Name of an atomic datatype / op (FI_UINT64 -> "UINT64", FI_CSWAP_LE -> "CSWAP_LE").
const char* datatype_name(fi_datatype dt);
const char* op_name(fi_op op);

}  // namespace ft
