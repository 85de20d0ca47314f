// pmfabric fabtests: one-sided helpers (registration, remote regions,
// landing waits, refusal checks).
#include "ft_rma.h"

#include <sched.h>

#include <cstring>

namespace ft {

std::string mr_mode_str(int mode) {
    if (mode == 0) return "0 (offsets, application keys)";
    std::string s;
    const struct {
        int bit;
        const char* name;
    } bits[] = {{FI_MR_LOCAL, "FI_MR_LOCAL"},       {FI_MR_RAW, "FI_MR_RAW"},
                {FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"}, {FI_MR_ALLOCATED, "FI_MR_ALLOCATED"},
                {FI_MR_PROV_KEY, "FI_MR_PROV_KEY"},   {FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"},
                {FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"}, {FI_MR_ENDPOINT, "FI_MR_ENDPOINT"},
                {FI_MR_HMEM, "FI_MR_HMEM"}};
    for (const auto& b : bits)
        if (mode & b.bit) {
            if (!s.empty()) s += "|";
            s += b.name;
            mode &= ~b.bit;
        }
    if (mode) s += (s.empty() ? "" : "|") + std::to_string(mode);
    return s;
}

EpConfig one_sided_config(int mr_mode, uint64_t extra_caps) {
    EpConfig cfg;
    cfg.caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | extra_caps;
    cfg.mr_mode = mr_mode;
    return cfg;
}

Region::Region(Endpoint& ep, void* buf, size_t len, uint64_t access, uint64_t requested_key) {
    const int mode = ep.info->domain_attr->mr_mode;
    int rc = fi_mr_reg(ep.domain, buf, len, access, 0, requested_key, 0, &mr_, nullptr);
    FT_CHECK(rc == 0, "fi_mr_reg(%zu bytes, access %s, requested_key 0x%llx, mr_mode %s): %d (%s)", len,
             flags_str(access).c_str(), (unsigned long long)requested_key, mr_mode_str(mode).c_str(), rc,
             errstr(rc));
    remote_.key = fi_mr_key(mr_);
    FT_CHECK(remote_.key != FI_KEY_NOTAVAIL, "fi_mr_key returned FI_KEY_NOTAVAIL");
    if (!(mode & FI_MR_PROV_KEY))
        FT_EQ(remote_.key, requested_key, "fi_mr_key without FI_MR_PROV_KEY (the requested key)");
    remote_.base = (mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0;
    remote_.len = len;
}

Region::~Region() {
    if (!mr_) return;
    int rc = fi_close(&mr_->fid);
    if (rc) info("warning: fi_close(mr) returned %d (%s)", rc, errstr(rc));
}

void Region::close() {
    if (!mr_) return;
    int rc = fi_close(&mr_->fid);
    mr_ = nullptr;
    FT_CHECK(rc == 0, "fi_close(mr): %d (%s)", rc, errstr(rc));
}

void send_remote(int peer, const RemoteMr& r) { oob_put(peer, r); }

RemoteMr recv_remote(Endpoint& ep, int peer) { return oob_get_progress<RemoteMr>(ep, peer); }

void wait_landed(const ProgressFn& progress, const void* buf, size_t len, uint32_t seed, const char* what,
                 size_t offset, double timeout_s) {
    const double deadline = now_s() + timeout_s;
    while (first_mismatch(buf, len, seed, offset) != SIZE_MAX) {
        if (now_s() > deadline) {
            info("%s: data did not land within %.1fs", what, timeout_s);
            check(buf, len, seed, what, offset);  // reports the first mismatch
        }
        progress();
        sched_yield();
    }
}

void wait_landed(Endpoint& ep, const void* buf, size_t len, uint32_t seed, const char* what, size_t offset,
                 double timeout_s) {
    wait_landed([&ep] { ep.progress(); }, buf, len, seed, what, offset, timeout_s);
}

void wait_bytes(Endpoint& ep, const void* buf, const void* expected, size_t len, const char* what,
                double timeout_s) {
    const double deadline = now_s() + timeout_s;
    auto* b = static_cast<const volatile uint8_t*>(buf);
    auto* e = static_cast<const uint8_t*>(expected);
    for (;;) {
        size_t i = 0;
        while (i < len && b[i] == e[i]) ++i;
        if (i == len) return;
        if (now_s() > deadline)
            FT_FAIL("%s: byte %zu of %zu is 0x%02x, expected 0x%02x (still, after %.1fs)", what, i, len,
                    (unsigned)b[i], (unsigned)e[i], timeout_s);
        ep.progress();
        sched_yield();
    }
}

Comp expect_refused(Endpoint& ep, void* ctx, const char* what, double bound_s) {
    const double t0 = now_s();
    Comp c = ep.wait_ctx(ctx, what, bound_s);
    FT_CHECK(c.is_err, "%s: expected an error completion, saw success %s", what, describe(c).c_str());
    FT_CHECK(c.err > 0, "%s: error entry err must be a positive errno, saw %d", what, c.err);
    FT_CHECK(!c.cq_strerror.empty(), "%s: fi_cq_strerror(prov_errno %d) returned an empty string", what,
             c.prov_errno);
    info("%s: refused after %.3fs: err=%d (%s), fi_cq_strerror: \"%s\"", what, now_s() - t0, c.err,
         errstr(c.err), c.cq_strerror.c_str());
    return c;
}

const char* datatype_name(fi_datatype dt) {
    switch (dt) {
        case FI_INT8: return "INT8";
        case FI_UINT8: return "UINT8";
        case FI_INT16: return "INT16";
        case FI_UINT16: return "UINT16";
        case FI_INT32: return "INT32";
        case FI_UINT32: return "UINT32";
        case FI_INT64: return "INT64";
        case FI_UINT64: return "UINT64";
        case FI_FLOAT: return "FLOAT";
        case FI_DOUBLE: return "DOUBLE";
        default: return "datatype?";
    }
}

const char* op_name(fi_op op) {
    switch (op) {
        case FI_MIN: return "MIN";
        case FI_MAX: return "MAX";
        case FI_SUM: return "SUM";
        case FI_PROD: return "PROD";
        case FI_LOR: return "LOR";
        case FI_LAND: return "LAND";
        case FI_BOR: return "BOR";
        case FI_BAND: return "BAND";
        case FI_LXOR: return "LXOR";
        case FI_BXOR: return "BXOR";
        case FI_ATOMIC_READ: return "ATOMIC_READ";
        case FI_ATOMIC_WRITE: return "ATOMIC_WRITE";
        case FI_CSWAP: return "CSWAP";
        case FI_CSWAP_NE: return "CSWAP_NE";
        case FI_CSWAP_LE: return "CSWAP_LE";
        case FI_CSWAP_LT: return "CSWAP_LT";
        case FI_CSWAP_GE: return "CSWAP_GE";
        case FI_CSWAP_GT: return "CSWAP_GT";
        case FI_MSWAP: return "MSWAP";
        default: return "op?";
    }
}

}  // namespace ft
