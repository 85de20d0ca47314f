// pmfabric fabtests: libfabric resource setup and bounded completion waits.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ft_common.h"
#include "ft_proc.h"

namespace ft {

constexpr uint32_t kApiVersion = FI_VERSION(1, 9);
constexpr double kWait = 10.0;  // default bound on a completion wait, seconds

class Endpoint;

struct EpConfig {
    uint64_t caps = FI_MSG | FI_TAGGED;
    uint64_t mode = FI_CONTEXT;
    fi_cq_format cq_format = FI_CQ_FORMAT_TAGGED;
    fi_wait_obj cq_wait = FI_WAIT_NONE;
    fi_av_type av_type = FI_AV_TABLE;
    bool thread_safe = false;  // also forced by FT_THREADING=safe
    size_t cq_size = 0;        // 0: provider default
    int mr_mode = 0;           // hints->domain_attr->mr_mode (one-sided tests)
    // hints->domain_attr->{control,data}_progress (FI_PROGRESS_UNSPEC: the provider's default)
    fi_progress progress = FI_PROGRESS_UNSPEC;
    uint64_t cq_bind_flags = 0;  // added to FI_TRANSMIT|FI_RECV (e.g. FI_SELECTIVE_COMPLETION)
    uint64_t clear_caps = 0;     // taken out of the returned fi_info's caps before fi_endpoint
    // fi_getinfo's node, service and flags (FI_SOURCE), as an application
    // that addresses its peers by host and service passes them.
    std::string node, service;
    uint64_t getinfo_flags = 0;
    // hints->addr_format; FT_ADDR_FORMAT=str asks every endpoint for FI_ADDR_STR.
    uint32_t addr_format = FI_FORMAT_UNSPEC;
    // Called after the CQ is bound and before fi_enable (e.g. to bind
    // counters); fids it opens can be handed to Endpoint::adopt.
    std::function<void(Endpoint&)> before_enable;
};

// Build getinfo hints for g_opt.prov (caller frees with fi_freeinfo).
fi_info* make_hints(const EpConfig& cfg);

// One completion (success or error) in a format-independent shape.
struct Comp {
    bool is_err = false;
    void* ctx = nullptr;
    uint64_t flags = 0;
    size_t len = 0;
    void* buf = nullptr;
    uint64_t data = 0;
    uint64_t tag = 0;
    size_t olen = 0;
    int err = 0;
    int prov_errno = 0;
    fi_addr_t src = FI_ADDR_NOTAVAIL;
    std::string cq_strerror;  // error entries: fi_cq_strerror(prov_errno, err_data)
};
std::string describe(const Comp& c);
std::string flags_str(uint64_t flags);

// Per-operation context (mode FI_CONTEXT requires the fi_context first).
struct OpCtx {
    fi_context fctx{};
    int id = 0;
};

// A fabric+domain+AV+CQ+RDM endpoint, fully enabled. All completions read
// from the CQ are kept in a stash so waits for one context never lose others.
class Endpoint {
public:
    explicit Endpoint(const EpConfig& cfg = EpConfig{});
    ~Endpoint();
    Endpoint(const Endpoint&) = delete;
    Endpoint& operator=(const Endpoint&) = delete;
    void close();  // idempotent

    // Close `f` with the endpoint: after the EP, before AV/CQ/domain (in
    // reverse order of adoption). For counters and the like.
    void adopt(fid_t f);

    std::vector<uint8_t> name() const;
    fi_addr_t insert(const std::vector<uint8_t>& addr);  // fails unless 1 inserted

    // Read whatever the CQ has into the stash. Returns number of entries read.
    size_t progress();
    // Bounded waits (fail on timeout with `what` in the message).
    Comp wait_any(const char* what, double timeout_s = kWait);
    Comp wait_ctx(void* ctx, const char* what, double timeout_s = kWait);
    Comp expect_ok(void* ctx, const char* what, double timeout_s = kWait);
    Comp expect_err(void* ctx, int err, const char* what, double timeout_s = kWait);
    std::optional<Comp> take_ctx(void* ctx);  // from stash only
    // Keep progressing for `secs`; fail if any completion shows up.
    void expect_quiet(double secs, const char* what);
    // Fast path for benchmarks: consume n successful completions (any context).
    void wait_n_fast(size_t n, const char* what, double timeout_s = kWait);
    size_t stash_size();

    // Retry a posting call while it returns -FI_EAGAIN (progressing between
    // tries); fail on any other non-zero return or after timeout_s.
    template <class F>
    void post(const char* what, F&& f, double timeout_s = kWait) {
        double deadline = -1;
        for (;;) {
            ssize_t rc = f();
            if (rc == 0) return;
            if (rc != -FI_EAGAIN)
                FT_FAIL("%s: expected 0 or -FI_EAGAIN, got %zd (%s)", what, rc, errstr(rc));
            if (deadline < 0) deadline = now_s() + timeout_s;
            progress();
            if (now_s() > deadline)
                FT_FAIL("%s: still -FI_EAGAIN after %.1fs of retrying", what, timeout_s);
        }
    }

    const EpConfig cfg;
    fi_info* info = nullptr;
    fid_fabric* fabric = nullptr;
    fid_domain* domain = nullptr;
    fid_av* av = nullptr;
    fid_cq* cq = nullptr;
    fid_ep* ep = nullptr;

private:
    size_t read_locked();
    std::vector<fid_t> adopted_;
    std::mutex mu_;
    std::deque<Comp> stash_;
};

// Exchange endpoint names with every other rank (no AV insertion).
// Result indexed by rank; own entry is this endpoint's name.
std::vector<std::vector<uint8_t>> exchange_names(const Endpoint& ep);
// Exchange names and insert every other rank, in rank order. Result indexed
// by rank; own entry is FI_ADDR_NOTAVAIL.
std::vector<fi_addr_t> connect_all(Endpoint& ep);

// Wait for an OOB value while keeping the endpoint progressing.
template <class T>
T oob_get_progress(Endpoint& ep, int peer, double timeout_s = kOobTimeout) {
    return oob_get<T>(peer, timeout_s, [&ep] { ep.progress(); });
}
inline void wait_signal_progress(Endpoint& ep, int peer, uint32_t code,
                                 double timeout_s = kOobTimeout) {
    wait_signal(peer, code, timeout_s, [&ep] { ep.progress(); });
}

// Check that `have` contains all bits of `want`.
void expect_flags(const Comp& c, uint64_t want, const char* what);

}  // namespace ft
