// FI_MULTI_RECV: one posted buffer takes several messages. Every completion
// points inside the buffer, payloads are intact, and the buffer's last
// completion carries FI_MULTI_RECV (after which nothing more lands in it).
#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <string>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1;
constexpr uint32_t kReady = 0x30001u, kSent = 0x30002u;
constexpr size_t kBufLen = 16384, kMinFree = 1024, kMsgLen = 1000;
constexpr int kMsgs = 24;  // more than one buffer can hold

struct MultiBuf {
    std::vector<uint8_t> mem = std::vector<uint8_t>(kBufLen);
    OpCtx ctx;
    bool released = false;
    int count = 0;
};

// Posts `mem` as one multi-recv buffer with context `ctx`.
void post_multi(Endpoint& ep, std::vector<uint8_t>& mem, OpCtx& ctx) {
    iovec iov{mem.data(), mem.size()};
    fi_msg m{};
    m.msg_iov = &iov;
    m.iov_count = 1;
    m.addr = FI_ADDR_UNSPEC;
    m.context = &ctx.fctx;
    ep.post("fi_recvmsg(FI_MULTI_RECV)", [&] { return fi_recvmsg(ep.ep, &m, FI_MULTI_RECV); });
}

void post_multi(Endpoint& ep, MultiBuf& b) { post_multi(ep, b.mem, b.ctx); }

// FI_PEEK (which completes at once) until a message waits unexpected, every
// pause_ms; it must be `len` bytes long and show up within kWait.
void peek_until_unexpected(Endpoint& ep, size_t len, int pause_ms, const std::string& what) {
    const double deadline = now_s() + kWait;
    for (;;) {
        OpCtx pctx;
        fi_msg pm{};
        pm.addr = FI_ADDR_UNSPEC;
        pm.context = &pctx.fctx;
        ep.post("fi_recvmsg(FI_PEEK)", [&] { return fi_recvmsg(ep.ep, &pm, FI_PEEK); });
        Comp c = ep.wait_ctx(&pctx, ("FI_PEEK for " + what).c_str());
        if (!c.is_err) {
            FT_EQ(c.len, len, "FI_PEEK length");
            return;
        }
        FT_CHECK(c.err == FI_ENOMSG, "FI_PEEK: %s", describe(c).c_str());
        FT_CHECK(now_s() < deadline, "%s never showed up to FI_PEEK", what.c_str());
        if (pause_ms) sleep_ms(pause_ms);
    }
}

void case_basic() {
    EpConfig cfg;
    cfg.caps = FI_MSG | FI_MULTI_RECV;
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    if (rank() == kServer) {
        size_t min_free = kMinFree;
        FT_CALL(fi_setopt(&ep.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min_free, sizeof min_free));
        size_t got_opt = 0, optlen = sizeof got_opt;
        int rc = fi_getopt(&ep.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got_opt, &optlen);
        FT_CHECK(rc == 0 && got_opt == kMinFree, "fi_getopt(FI_OPT_MIN_MULTI_RECV): rc %d value %zu, expected %zu",
                 rc, got_opt, kMinFree);
        MultiBuf bufs[3];
        post_multi(ep, bufs[0]);
        post_multi(ep, bufs[1]);
        signal_peer(kClient, kReady);
        std::vector<bool> seen(kMsgs, false);
        int received = 0;
        while (received < kMsgs) {
            Comp c = ep.wait_any("multi-recv completion");
            FT_CHECK(!c.is_err, "multi-recv: error completion %s", describe(c).c_str());
            int k = 0;
            while (k < 3 && c.ctx != &bufs[k].ctx.fctx) ++k;
            FT_CHECK(k < 3, "completion with unknown context: %s", describe(c).c_str());
            MultiBuf& b = bufs[k];
            FT_CHECK(!b.released, "completion for buffer %d after its FI_MULTI_RECV release: %s", k,
                     describe(c).c_str());
            if (c.flags & FI_MULTI_RECV) {
                b.released = true;
                if (k == 0) post_multi(ep, bufs[2]);  // keep two buffers posted
            }
            if (c.len == 0 && (c.flags & FI_MULTI_RECV)) continue;  // bare release entry
            expect_flags(c, FI_RECV | FI_MSG, "multi-recv completion");
            FT_EQ(c.len, kMsgLen, "multi-recv completion len");
            auto* p = static_cast<uint8_t*>(c.buf);
            FT_CHECK(p >= b.mem.data() && p + c.len <= b.mem.data() + b.mem.size(),
                     "completion buf %p (+%zu) lies outside the multi-recv buffer [%p, +%zu)", c.buf, c.len,
                     (void*)b.mem.data(), b.mem.size());
            // the message index is in the first 4 bytes, the rest is stream (1000 + index)
            uint32_t idx;
            std::memcpy(&idx, p, sizeof idx);
            FT_CHECK(idx < (uint32_t)kMsgs && !seen[idx], "bad or duplicate message index %u", idx);
            seen[idx] = true;
            check(p + 4, c.len - 4, 1000 + idx, "multi-recv payload");
            ++b.count;
            ++received;
        }
        FT_CHECK(bufs[0].released, "first buffer (%zu bytes, min free %zu) took %d messages of %zu but was "
                 "never released with FI_MULTI_RECV", kBufLen, kMinFree, bufs[0].count, kMsgLen);
        FT_CHECK(bufs[0].count <= (int)(kBufLen / kMsgLen), "buffer 0 took %d messages: more than fit",
                 bufs[0].count);
        FT_CHECK(bufs[0].count >= (int)((kBufLen - kMinFree) / kMsgLen),
                 "buffer 0 was released after only %d messages", bufs[0].count);
        // cancel what is left so the buffers can be freed
        for (int k = 1; k < 3; ++k) {
            if (bufs[k].released || (k == 2 && !bufs[0].released)) continue;
            int crc = fi_cancel(&ep.ep->fid, &bufs[k].ctx.fctx);
            FT_CHECK(crc == 0 || crc == -FI_ENOENT, "fi_cancel: %d (%s)", crc, errstr(crc));
            if (crc == 0) {
                Comp c = ep.wait_ctx(&bufs[k].ctx, "cancel of the remaining multi-recv buffer");
                FT_CHECK(!c.is_err || c.err == FI_ECANCELED, "cancel: %s", describe(c).c_str());
            }
        }
    } else {
        wait_signal(kServer, kReady);
        std::vector<std::vector<uint8_t>> bufs;
        std::vector<OpCtx> ctx(kMsgs);
        for (int i = 0; i < kMsgs; ++i) {
            bufs.push_back(make_buf(kMsgLen));
            uint32_t idx = (uint32_t)i;
            std::memcpy(bufs.back().data(), &idx, sizeof idx);
            fill(bufs.back().data() + 4, kMsgLen - 4, 1000 + idx);
            ep.post("fi_send", [&] {
                return fi_send(ep.ep, bufs.back().data(), kMsgLen, nullptr, addr[kServer], &ctx[(size_t)i].fctx);
            });
        }
        for (auto& c : ctx) ep.expect_ok(&c, "fi_send into a multi-recv buffer");
    }
    barrier([&] { ep.progress(); });
}

// fi_cancel of a multi-recv buffer while a message placed in it may still be
// arriving: a 4 MiB (rendezvous) message waits unexpected (found by
// FI_PEEK), a multi-recv buffer takes it, and is cancelled right away.
// FI_MULTI_RECV means the provider has released the buffer (fi_cq(3)), so
// exactly one entry of the buffer carries it, the last: the cancel's
// FI_ECANCELED entry when the message was complete at cancel time (single
// copy), else the message's, once its data is all in (streamed).
void case_cancel_inflight() {
    EpConfig cfg;
    cfg.caps = FI_MSG | FI_MULTI_RECV;
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    constexpr size_t kLen = 4u << 20;
    constexpr uint32_t kSeed = 31;
    if (rank() == kClient) {
        auto s = post_send(ep, addr[kServer], kLen, kSeed, false);
        signal_peer(kServer, kSent);
        complete_send(ep, *s, 30.0);
        barrier([&] { ep.progress(); });
        return;
    }
    wait_signal_progress(ep, kClient, kSent);
    peek_until_unexpected(ep, kLen, 1, "the 4 MiB message");
    std::vector<uint8_t> mem(2 * kLen);
    OpCtx ctx;
    post_multi(ep, mem, ctx);
    FT_CALL(fi_cancel(&ep.ep->fid, &ctx.fctx));
    std::vector<Comp> got;
    while (got.empty() || !(got.back().flags & FI_MULTI_RECV)) {
        FT_CHECK(got.size() < 2, "a third entry for the buffer, or none with FI_MULTI_RECV after two");
        got.push_back(ep.wait_ctx(&ctx, "entries of the cancelled multi-recv buffer", 30.0));
    }
    ep.expect_quiet(0.2, "nothing after the entry carrying FI_MULTI_RECV");
    FT_EQ(got.size(), 2, "entries for the buffer (the message and the cancel)");
    const Comp* msg = nullptr;
    const Comp* cancel = nullptr;
    for (const Comp& c : got) (c.is_err ? cancel : msg) = &c;
    FT_CHECK(msg && cancel, "expected one message and one cancel entry: %s, %s", describe(got[0]).c_str(),
             describe(got[1]).c_str());
    FT_EQ(cancel->err, FI_ECANCELED, "the cancel entry's err");
    FT_CHECK(!(got[0].flags & FI_MULTI_RECV), "FI_MULTI_RECV on the first entry (%s), but another followed",
             describe(got[0]).c_str());
    expect_flags(*msg, FI_RECV | FI_MSG, "message placed in the multi-recv buffer");
    FT_EQ(msg->len, kLen, "length of the placed message");
    FT_CHECK(msg->buf == mem.data(), "the message landed at %p, not at the buffer's start %p", msg->buf,
             (void*)mem.data());
    check(mem.data(), kLen, kSeed, "payload placed in the cancelled multi-recv buffer");
    info("the %s entry released the buffer", got.back().is_err ? "cancel" : "message");
    barrier([&] { ep.progress(); });
}

// A multi-recv buffer posted while an unexpected message is still arriving
// (256 KiB: eager over Ethernet, about 190 frames) takes it first,
// then the small messages sent after it, at increasing offsets in the order
// they were sent; the last entry releases the buffer. The receiver
// posts the buffer as soon as FI_PEEK shows the large message, which then
// is most likely still arriving. Ten rounds.
void case_arriving() {
    EpConfig cfg;
    cfg.caps = FI_MSG | FI_MULTI_RECV;
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    constexpr size_t kBig = 256u << 10, kSmall = 1000, kMin = 1024;
    constexpr int kSmalls = 9, kRounds = 10;
    const size_t buf_len = kBig + kSmalls * kSmall + kMin / 2;  // released after the last message
    if (rank() == kServer) {
        size_t min_free = kMin;
        FT_CALL(fi_setopt(&ep.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min_free, sizeof min_free));
    }
    for (int round = 0; round < kRounds; ++round) {
        const uint32_t seed0 = 600u + 16u * (uint32_t)round;
        if (rank() == kClient) {
            wait_signal(kServer, kReady);
            std::vector<XferPtr> tx;
            tx.push_back(post_send(ep, addr[kServer], kBig, seed0, false));
            for (int k = 1; k <= kSmalls; ++k)
                tx.push_back(post_send(ep, addr[kServer], kSmall, seed0 + (uint32_t)k, false));
            for (auto& s : tx) complete_send(ep, *s, 30.0);
            continue;
        }
        std::vector<uint8_t> mem(buf_len);
        signal_peer(kClient, kReady);
        // At once (no pause): the buffer must come while the message arrives.
        peek_until_unexpected(ep, kBig, 0, "round " + std::to_string(round) + "'s 256 KiB message");
        OpCtx ctx;
        post_multi(ep, mem, ctx);
        // Entries may come in any order (a rendezvous' data comes after
        // the small messages sent behind it); places may not.
        std::vector<Comp> got;
        while (got.empty() || !(got.back().flags & FI_MULTI_RECV)) {
            FT_CHECK(got.size() <= (size_t)kSmalls + 1, "round %d: more entries than messages, none releasing "
                     "the buffer", round);
            got.push_back(ep.wait_ctx(&ctx, "a message in the multi-recv buffer", 30.0));
            FT_CHECK(!got.back().is_err, "round %d: error entry %s", round, describe(got.back()).c_str());
        }
        if (got.back().len == 0) got.pop_back();  // a bare release entry
        FT_EQ(got.size(), (size_t)kSmalls + 1, "messages in the buffer");
        std::sort(got.begin(), got.end(), [](const Comp& a, const Comp& b) { return a.buf < b.buf; });
        size_t off = 0;
        for (int k = 0; k <= kSmalls; ++k) {
            const Comp& c = got[(size_t)k];
            size_t want = k == 0 ? kBig : kSmall;
            FT_CHECK(c.len == want && c.buf == mem.data() + off,
                     "round %d: place %d holds %zu bytes at offset %td, expected message %d (%zu bytes) at %zu: "
                     "a message overtook one sent before it",
                     round, k, c.len, static_cast<uint8_t*>(c.buf) - mem.data(), k, want, off);
            check(c.buf, c.len, seed0 + (uint32_t)k, "message in the multi-recv buffer");
            off += (want + 7) & ~size_t(7);
        }
        ep.expect_quiet(0.02, "after the buffer's release");
    }
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv, {{"basic", 2, case_basic},
                                 {"cancel_inflight", 2, case_cancel_inflight},
                                 {"arriving", 2, case_arriving}});
}
