// pmfabric fabtests: one-message post/complete helpers with verification.
#include "ft_xfer.h"

#include <cinttypes>
#include <cstdio>

namespace ft {

XferPtr post_recv(Endpoint& ep, size_t buflen, bool tagged, uint64_t tag, uint64_t ignore,
                  fi_addr_t src) {
    auto x = std::make_unique<Xfer>();
    x->buf = make_buf(buflen);
    x->tagged = tagged;
    x->tag = tag;
    x->len = buflen;
    char w[128];
    std::snprintf(w, sizeof w, "%s of %s (tag 0x%" PRIx64 ")", tagged ? "fi_trecv" : "fi_recv",
                  human_size(buflen).c_str(), tag);
    x->what = w;
    Xfer* p = x.get();
    if (tagged)
        ep.post(w, [&] {
            return fi_trecv(ep.ep, p->buf.data(), buflen, nullptr, src, tag, ignore, &p->ctx.fctx);
        });
    else
        ep.post(w, [&] { return fi_recv(ep.ep, p->buf.data(), buflen, nullptr, src, &p->ctx.fctx); });
    return x;
}

XferPtr post_send(Endpoint& ep, fi_addr_t dest, size_t len, uint32_t seed, bool tagged,
                  uint64_t tag) {
    auto x = std::make_unique<Xfer>();
    x->buf = make_buf(len);
    fill(x->buf.data(), len, seed);
    x->tagged = tagged;
    x->tag = tag;
    x->len = len;
    x->seed = seed;
    char w[128];
    std::snprintf(w, sizeof w, "%s of %s (tag 0x%" PRIx64 ", seed %u)",
                  tagged ? "fi_tsend" : "fi_send", human_size(len).c_str(), tag, seed);
    x->what = w;
    Xfer* p = x.get();
    if (tagged)
        ep.post(w, [&] { return fi_tsend(ep.ep, p->buf.data(), len, nullptr, dest, tag, &p->ctx.fctx); });
    else
        ep.post(w, [&] { return fi_send(ep.ep, p->buf.data(), len, nullptr, dest, &p->ctx.fctx); });
    return x;
}

void check_recv_comp(const Comp& c, bool tagged, const RecvExpect& e, const void* posted_buf,
                     const char* what) {
    FT_CHECK(!c.is_err, "%s: expected success, saw %s", what, describe(c).c_str());
    expect_flags(c, FI_RECV | (tagged ? FI_TAGGED : FI_MSG), what);
    FT_EQ(c.len, e.len, (std::string(what) + ": completion len").c_str());
    // buf is only defined for FI_MULTI_RECV buffers; if a provider fills it
    // anyway it must point at the posted buffer, never elsewhere.
    FT_CHECK(c.buf == nullptr || c.buf == posted_buf,
             "%s: completion buf %p is neither NULL nor the posted buffer %p", what, c.buf,
             posted_buf);
    if (e.tag) FT_EQ(c.tag, *e.tag, (std::string(what) + ": completion tag").c_str());
    if (e.data) {
        expect_flags(c, FI_REMOTE_CQ_DATA, what);
        FT_EQ(c.data, *e.data, (std::string(what) + ": completion data").c_str());
    } else {
        FT_CHECK(!(c.flags & FI_REMOTE_CQ_DATA), "%s: unexpected FI_REMOTE_CQ_DATA in %s", what,
                 describe(c).c_str());
    }
    if (e.src) FT_EQ(c.src, *e.src, (std::string(what) + ": completion source fi_addr").c_str());
}

Comp complete_recv(Endpoint& ep, Xfer& x, const RecvExpect& e, double timeout_s) {
    Comp c = ep.wait_ctx(&x.ctx, x.what.c_str(), timeout_s);
    check_recv_comp(c, x.tagged, e, x.buf.data(), x.what.c_str());
    check(x.buf.data(), e.len, e.seed, x.what.c_str());
    return c;
}

Comp complete_send(Endpoint& ep, Xfer& x, double timeout_s) {
    Comp c = ep.expect_ok(&x.ctx, x.what.c_str(), timeout_s);
    expect_flags(c, FI_SEND | (x.tagged ? FI_TAGGED : FI_MSG), x.what.c_str());
    return c;
}

std::string send_expect_failure(Endpoint& ep, fi_addr_t dest, size_t len, double bound_s) {
    // Kept alive on purpose: if the send is still pending when we fail, the
    // process exits without touching it again.
    static std::vector<std::unique_ptr<Xfer>> keep;
    auto x = std::make_unique<Xfer>();
    x->buf = make_buf(len);
    fill(x->buf.data(), len, 0xBAD);
    x->tagged = true;
    x->what = "send to a bad address (" + human_size(len) + ")";
    const double t0 = now_s();
    char out[160];
    for (;;) {
        ssize_t rc = fi_tsend(ep.ep, x->buf.data(), len, nullptr, dest, 0xBAD, &x->ctx.fctx);
        if (rc == 0) break;
        if (rc != -FI_EAGAIN) {
            std::snprintf(out, sizeof out, "fi_tsend refused it with %zd (%s) after %.3fs", rc, errstr(rc),
                          now_s() - t0);
            return out;
        }
        ep.progress();
        FT_CHECK(now_s() - t0 < bound_s, "%s: fi_tsend still returns -FI_EAGAIN after %.1fs (a hang)",
                 x->what.c_str(), bound_s);
    }
    Xfer* p = x.get();
    keep.push_back(std::move(x));
    double left = bound_s - (now_s() - t0);
    Comp c = ep.wait_ctx(&p->ctx, (p->what + ": waiting for its error completion").c_str(), left > 0 ? left : 0);
    FT_CHECK(c.is_err, "%s: expected an error completion, saw success %s", p->what.c_str(), describe(c).c_str());
    FT_CHECK(c.err > 0, "%s: error entry err must be a positive errno, saw %d", p->what.c_str(), c.err);
    std::snprintf(out, sizeof out, "error completion err=%d (%s) after %.3fs", c.err, errstr(c.err), now_s() - t0);
    return out;
}

std::string send_to_name_expect_failure(Endpoint& ep, const std::vector<uint8_t>& name, size_t len,
                                        double bound_s) {
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    int rc = fi_av_insert(ep.av, name.data(), 1, &fa, 0, nullptr);
    if (rc != 1 || fa == FI_ADDR_NOTAVAIL) {
        char out[96];
        std::snprintf(out, sizeof out, "fi_av_insert refused it (returned %d)", rc);
        return out;
    }
    return send_expect_failure(ep, fa, len, bound_s);
}

}  // namespace ft
