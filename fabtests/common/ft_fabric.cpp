// pmfabric fabtests: endpoint setup, CQ stash, bounded waits, name exchange.
#include "ft_fabric.h"
#include "ft_proc.h"

#include <sched.h>

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstdio>
#include <cstring>

namespace ft {

fi_info* make_hints(const EpConfig& cfg) {
    fi_info* hints = fi_allocinfo();
    FT_CHECK(hints, "fi_allocinfo returned NULL");
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = cfg.caps;
    hints->mode = cfg.mode;
    hints->domain_attr->mr_mode = cfg.mr_mode;
    hints->domain_attr->control_progress = cfg.progress;
    hints->domain_attr->data_progress = cfg.progress;
    if (cfg.thread_safe || g_opt.thread_safe) hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->fabric_attr->prov_name = strdup(g_opt.prov.c_str());
    hints->addr_format = cfg.addr_format;
    if (const char* f = getenv("FT_ADDR_FORMAT"); f && !strcmp(f, "str")) hints->addr_format = FI_ADDR_STR;
    // FT_AUTH_KEY=k0,k1,..: rank i asks for auth_key k_i in its hints (the
    // job's key, given where an application gives it).
    std::vector<std::string> keys = env_list("FT_AUTH_KEY");
    if (!keys.empty()) {
        const std::string& k = keys[std::min<size_t>((size_t)rank(), keys.size() - 1)];
        hints->domain_attr->auth_key = (uint8_t*)malloc(k.size());
        FT_CHECK(hints->domain_attr->auth_key, "malloc");
        memcpy(hints->domain_attr->auth_key, k.data(), k.size());
        hints->domain_attr->auth_key_size = k.size();
    }
    return hints;
}

Endpoint::Endpoint(const EpConfig& c) : cfg(c) {
    try {
        fi_info* hints = make_hints(cfg);
        int rc = fi_getinfo(kApiVersion, cfg.node.empty() ? nullptr : cfg.node.c_str(),
                            cfg.service.empty() ? nullptr : cfg.service.c_str(), cfg.getinfo_flags, hints, &info);
        fi_freeinfo(hints);
        FT_CHECK(rc == 0 && info, "fi_getinfo(prov=%s, RDM, caps=%s, node=%s, service=%s) failed: %d (%s)",
                 g_opt.prov.c_str(), flags_str(cfg.caps).c_str(), cfg.node.c_str(), cfg.service.c_str(), rc,
                 errstr(rc));
        // The list may also hold utility providers layered on this one
        // ("<prov>;ofi_rxd"): take the provider itself.
        fi_info* own = nullptr;
        for (fi_info* i = info; i && !own; i = i->next)
            if (i->fabric_attr->prov_name && g_opt.prov == i->fabric_attr->prov_name) own = i;
        FT_CHECK(own != nullptr, "fi_getinfo(prov=%s) listed only layered providers", g_opt.prov.c_str());
        own = fi_dupinfo(own);
        fi_freeinfo(info);
        info = own;
        info->caps &= ~cfg.clear_caps;
        FT_CALL(fi_fabric(info->fabric_attr, &fabric, nullptr));
        FT_CALL(fi_domain(fabric, info, &domain, nullptr));
        fi_av_attr av_attr{};
        av_attr.type = cfg.av_type;
        FT_CALL(fi_av_open(domain, &av_attr, &av, nullptr));
        fi_cq_attr cq_attr{};
        cq_attr.format = cfg.cq_format;
        cq_attr.wait_obj = cfg.cq_wait;
        cq_attr.size = cfg.cq_size;
        FT_CALL(fi_cq_open(domain, &cq_attr, &cq, nullptr));
        FT_CALL(fi_endpoint(domain, info, &ep, nullptr));
        FT_CALL(fi_ep_bind(ep, &av->fid, 0));
        FT_CALL(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV | cfg.cq_bind_flags));
        if (cfg.before_enable) cfg.before_enable(*this);
        FT_CALL(fi_enable(ep));
    } catch (const Failure&) {
        close();
        throw;
    }
}

Endpoint::~Endpoint() { close(); }

void Endpoint::close() {
    auto closefid = [](fid_t f, const char* what) {
        if (!f) return;
        int rc = fi_close(f);
        if (rc) ft::info("warning: fi_close(%s) returned %d (%s)", what, rc, errstr(rc));
    };
    if (ep) closefid(&ep->fid, "ep");
    while (!adopted_.empty()) {
        closefid(adopted_.back(), "adopted fid");
        adopted_.pop_back();
    }
    if (av) closefid(&av->fid, "av");
    if (cq) closefid(&cq->fid, "cq");
    if (domain) closefid(&domain->fid, "domain");
    if (fabric) closefid(&fabric->fid, "fabric");
    if (info) fi_freeinfo(info);
    ep = nullptr;
    av = nullptr;
    cq = nullptr;
    domain = nullptr;
    fabric = nullptr;
    info = nullptr;
}

void Endpoint::adopt(fid_t f) {
    if (f) adopted_.push_back(f);
}

std::vector<uint8_t> Endpoint::name() const {
    std::vector<uint8_t> buf(256);
    size_t len = buf.size();
    int rc = fi_getname(&ep->fid, buf.data(), &len);
    if (rc == -FI_ETOOSMALL) {
        buf.resize(len);
        rc = fi_getname(&ep->fid, buf.data(), &len);
    }
    FT_CHECK(rc == 0, "fi_getname: expected 0, got %d (%s)", rc, errstr(rc));
    FT_CHECK(len > 0 && len <= buf.size(), "fi_getname returned length %zu", len);
    buf.resize(len);
    return buf;
}

fi_addr_t Endpoint::insert(const std::vector<uint8_t>& addr) {
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    int rc = fi_av_insert(av, addr.data(), 1, &fa, 0, nullptr);
    FT_CHECK(rc == 1, "fi_av_insert of a peer name: expected 1 inserted, got %d (%s)", rc,
             errstr(rc < 0 ? rc : 0));
    FT_CHECK(fa != FI_ADDR_NOTAVAIL, "fi_av_insert returned FI_ADDR_NOTAVAIL");
    return fa;
}

// ------------------------------------------------------------ completions
size_t Endpoint::read_locked() {
    constexpr size_t kBatch = 16;
    fi_cq_tagged_entry raw[kBatch];
    fi_addr_t src[kBatch];
    ssize_t n = (cfg.caps & FI_SOURCE) ? fi_cq_readfrom(cq, raw, kBatch, src)
                                       : fi_cq_read(cq, raw, kBatch);
    if (n == -FI_EAGAIN) return 0;
    if (n == -FI_EAVAIL) {
        fi_cq_err_entry e{};
        ssize_t rc = fi_cq_readerr(cq, &e, 0);
        if (rc == -FI_EAGAIN) return 0;  // raced with another reader
        FT_CHECK(rc == 1, "fi_cq_readerr after -FI_EAVAIL: expected 1, got %zd (%s)", rc,
                 errstr(rc));
        Comp c;
        c.is_err = true;
        c.ctx = e.op_context;
        c.flags = e.flags;
        c.len = e.len;
        c.buf = e.buf;
        c.data = e.data;
        c.tag = e.tag;
        c.olen = e.olen;
        c.err = e.err;
        c.prov_errno = e.prov_errno;
        char sbuf[256] = "";
        const char* s = fi_cq_strerror(cq, e.prov_errno, e.err_data, sbuf, sizeof sbuf);
        c.cq_strerror = s ? s : "";
        stash_.push_back(c);
        return 1;
    }
    FT_CHECK(n > 0, "fi_cq_read: expected >0, -FI_EAGAIN or -FI_EAVAIL, got %zd (%s)", n,
             errstr(n));
    const uint8_t* base = reinterpret_cast<const uint8_t*>(raw);
    for (ssize_t i = 0; i < n; ++i) {
        Comp c;
        switch (cfg.cq_format) {
            case FI_CQ_FORMAT_CONTEXT: {
                auto* e = reinterpret_cast<const fi_cq_entry*>(base) + i;
                c.ctx = e->op_context;
                break;
            }
            case FI_CQ_FORMAT_MSG: {
                auto* e = reinterpret_cast<const fi_cq_msg_entry*>(base) + i;
                c.ctx = e->op_context;
                c.flags = e->flags;
                c.len = e->len;
                break;
            }
            case FI_CQ_FORMAT_DATA: {
                auto* e = reinterpret_cast<const fi_cq_data_entry*>(base) + i;
                c.ctx = e->op_context;
                c.flags = e->flags;
                c.len = e->len;
                c.buf = e->buf;
                c.data = e->data;
                break;
            }
            default: {
                const fi_cq_tagged_entry* e = raw + i;
                c.ctx = e->op_context;
                c.flags = e->flags;
                c.len = e->len;
                c.buf = e->buf;
                c.data = e->data;
                c.tag = e->tag;
                break;
            }
        }
        if (cfg.caps & FI_SOURCE) c.src = src[i];
        stash_.push_back(c);
    }
    return (size_t)n;
}

size_t Endpoint::progress() {
    std::lock_guard<std::mutex> g(mu_);
    return read_locked();
}

size_t Endpoint::stash_size() {
    std::lock_guard<std::mutex> g(mu_);
    return stash_.size();
}

std::optional<Comp> Endpoint::take_ctx(void* ctx) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = stash_.begin(); it != stash_.end(); ++it) {
        if (it->ctx == ctx) {
            Comp c = *it;
            stash_.erase(it);
            return c;
        }
    }
    return std::nullopt;
}

Comp Endpoint::wait_any(const char* what, double timeout_s) {
    double deadline = now_s() + timeout_s;
    for (;;) {
        {
            std::lock_guard<std::mutex> g(mu_);
            if (stash_.empty()) read_locked();
            if (!stash_.empty()) {
                Comp c = stash_.front();
                stash_.pop_front();
                return c;
            }
        }
        if (now_s() > deadline)
            FT_FAIL("%s: no completion within %.1fs (expected one)", what, timeout_s);
        sched_yield();
    }
}

Comp Endpoint::wait_ctx(void* ctx, const char* what, double timeout_s) {
    double deadline = now_s() + timeout_s;
    for (;;) {
        if (auto c = take_ctx(ctx)) return *c;
        if (progress() == 0) {
            if (now_s() > deadline)
                FT_FAIL("%s: no completion for context %p within %.1fs (%zu other completions "
                        "pending)",
                        what, ctx, timeout_s, stash_size());
            sched_yield();
        }
    }
}

Comp Endpoint::expect_ok(void* ctx, const char* what, double timeout_s) {
    Comp c = wait_ctx(ctx, what, timeout_s);
    FT_CHECK(!c.is_err, "%s: expected a successful completion, saw error: %s", what,
             describe(c).c_str());
    return c;
}

Comp Endpoint::expect_err(void* ctx, int err, const char* what, double timeout_s) {
    Comp c = wait_ctx(ctx, what, timeout_s);
    FT_CHECK(c.is_err, "%s: expected an error completion with err %d (%s), saw success: %s", what,
             err, errstr(err), describe(c).c_str());
    FT_CHECK(c.err == err, "%s: expected err %d (%s), saw err %d (%s)", what, err, errstr(err),
             c.err, errstr(c.err));
    return c;
}

void Endpoint::expect_quiet(double secs, const char* what) {
    double deadline = now_s() + secs;
    do {
        std::lock_guard<std::mutex> g(mu_);
        read_locked();
        if (!stash_.empty())
            FT_FAIL("%s: expected no completion, saw %s", what, describe(stash_.front()).c_str());
    } while (now_s() < deadline && (sched_yield(), true));
}

void Endpoint::wait_n_fast(size_t n, const char* what, double timeout_s) {
    {
        std::lock_guard<std::mutex> g(mu_);
        while (n && !stash_.empty()) {
            Comp c = stash_.front();
            stash_.pop_front();
            FT_CHECK(!c.is_err, "%s: error completion %s", what, describe(c).c_str());
            --n;
        }
    }
    double deadline = -1;
    unsigned spins = 0;
    fi_cq_tagged_entry raw[16];
    while (n) {
        ssize_t got = fi_cq_read(cq, raw, n < 16 ? n : 16);
        if (got > 0) {
            n -= (size_t)got;
            continue;
        }
        if (got == -FI_EAVAIL) {
            progress();
            Comp c = wait_any(what);
            FT_FAIL("%s: error completion %s", what, describe(c).c_str());
        }
        FT_CHECK(got == -FI_EAGAIN, "%s: fi_cq_read returned %zd (%s)", what, got, errstr(got));
        if (++spins % 4096 == 0) {
            double t = now_s();
            if (deadline < 0) deadline = t + timeout_s;
            else if (t > deadline)
                FT_FAIL("%s: %zu completions still missing after %.1fs", what, n, timeout_s);
        }
    }
}

// ---------------------------------------------------------------- helpers
std::string flags_str(uint64_t f) {
    static const struct {
        uint64_t bit;
        const char* name;
    } names[] = {{FI_MSG, "FI_MSG"},           {FI_RMA, "FI_RMA"},
                 {FI_TAGGED, "FI_TAGGED"},     {FI_ATOMIC, "FI_ATOMIC"},
                 {FI_READ, "FI_READ"},         {FI_WRITE, "FI_WRITE"},
                 {FI_RECV, "FI_RECV"},         {FI_SEND, "FI_SEND"},
                 {FI_REMOTE_READ, "FI_REMOTE_READ"}, {FI_REMOTE_WRITE, "FI_REMOTE_WRITE"},
                 {FI_MULTI_RECV, "FI_MULTI_RECV"}, {FI_REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"},
                 {FI_MORE, "FI_MORE"},         {FI_PEEK, "FI_PEEK"},
                 {FI_TRIGGER, "FI_TRIGGER"},   {FI_FENCE, "FI_FENCE"},
                 {FI_COMPLETION, "FI_COMPLETION"}, {FI_INJECT, "FI_INJECT"},
                 {FI_SOURCE, "FI_SOURCE"},     {FI_SOURCE_ERR, "FI_SOURCE_ERR"},
                 {FI_DIRECTED_RECV, "FI_DIRECTED_RECV"},
                 {FI_CLAIM, "FI_CLAIM"},       {FI_DISCARD, "FI_DISCARD"},
                 {FI_RMA_EVENT, "FI_RMA_EVENT"}, {FI_HMEM, "FI_HMEM"},
                 {FI_NAMED_RX_CTX, "FI_NAMED_RX_CTX"}, {FI_SHARED_AV, "FI_SHARED_AV"},
                 {FI_COLLECTIVE, "FI_COLLECTIVE"}, {FI_LOCAL_COMM, "FI_LOCAL_COMM"},
                 {FI_REMOTE_COMM, "FI_REMOTE_COMM"}, {FI_VARIABLE_MSG, "FI_VARIABLE_MSG"}};
    std::string s;
    for (const auto& n : names) {
        if (!(f & n.bit)) continue;
        if (!s.empty()) s += "|";
        s += n.name;
        f &= ~n.bit;
    }
    if (f) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s0x%" PRIx64, s.empty() ? "" : "|", f);
        s += buf;
    }
    return s.empty() ? "0" : s;
}

std::string describe(const Comp& c) {
    char buf[512];
    if (c.is_err)
        std::snprintf(buf, sizeof buf,
                      "{error err=%d (%s) prov_errno=%d ctx=%p flags=%s len=%zu olen=%zu tag=0x%" PRIx64
                      " data=0x%" PRIx64 "}",
                      c.err, errstr(c.err), c.prov_errno, c.ctx, flags_str(c.flags).c_str(), c.len,
                      c.olen, c.tag, c.data);
    else
        std::snprintf(buf, sizeof buf,
                      "{ok ctx=%p flags=%s len=%zu buf=%p data=0x%" PRIx64 " tag=0x%" PRIx64
                      " src=%" PRIu64 "}",
                      c.ctx, flags_str(c.flags).c_str(), c.len, c.buf, c.data, c.tag,
                      (uint64_t)c.src);
    return buf;
}

void expect_flags(const Comp& c, uint64_t want, const char* what) {
    FT_CHECK((c.flags & want) == want, "%s: completion flags %s lack %s", what,
             flags_str(c.flags).c_str(), flags_str(want & ~c.flags).c_str());
}

std::vector<std::vector<uint8_t>> exchange_names(const Endpoint& ep) {
    std::vector<std::vector<uint8_t>> names((size_t)nranks());
    names[(size_t)rank()] = ep.name();
    for (int p = 0; p < nranks(); ++p)
        if (p != rank()) oob_send_bytes(p, names[(size_t)rank()]);
    for (int p = 0; p < nranks(); ++p)
        if (p != rank()) names[(size_t)p] = oob_recv_bytes(p);
    return names;
}

std::vector<fi_addr_t> connect_all(Endpoint& ep) {
    auto names = exchange_names(ep);
    std::vector<fi_addr_t> addrs((size_t)nranks(), FI_ADDR_NOTAVAIL);
    for (int p = 0; p < nranks(); ++p)
        if (p != rank()) addrs[(size_t)p] = ep.insert(names[(size_t)p]);
    return addrs;
}

}  // namespace ft
