// FI_PEEK / FI_CLAIM / FI_DISCARD on unexpected tagged messages.
//
// Interpretation (fi_tagged(3)): a peek that finds a match completes
// successfully with the message's len, tag and CQ data and leaves the
// message queued; no match gives an error entry with err FI_ENOMSG.
// PEEK|CLAIM reserves the message for a later fi_trecvmsg(FI_CLAIM) with the
// same context; other receives can no longer match it. PEEK|DISCARD and
// CLAIM|DISCARD complete successfully and drop the message.
#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1;
constexpr uint32_t kSent = 0x9EE001u;
constexpr uint64_t kTag = 0xBEEF00;
constexpr uint64_t kData1 = 0xD1, kData2 = 0xD2;
constexpr size_t kLen1 = 1000, kLen2 = 3000;

// One peek request; returns its completion (success or FI_ENOMSG error).
Comp peek_once(Endpoint& ep, OpCtx& ctx, uint64_t tag, uint64_t flags) {
    fi_msg_tagged m{};
    m.addr = FI_ADDR_UNSPEC;
    m.tag = tag;
    m.context = &ctx.fctx;
    ep.post("fi_trecvmsg(FI_PEEK)", [&] { return fi_trecvmsg(ep.ep, &m, FI_PEEK | flags); });
    Comp c = ep.wait_ctx(&ctx, "peek");
    FT_CHECK(!c.is_err || c.err == FI_ENOMSG, "peek: expected success or FI_ENOMSG, saw %s",
             describe(c).c_str());
    return c;
}

// Peek until the message shows up (it was sent before; arrival is async).
Comp peek_until_found(Endpoint& ep, OpCtx& ctx, uint64_t tag, uint64_t flags) {
    double deadline = now_s() + kWait;
    for (;;) {
        Comp c = peek_once(ep, ctx, tag, flags);
        if (!c.is_err) return c;
        FT_CHECK(now_s() < deadline, "peek never found the message sent with tag 0x%llx",
                 (unsigned long long)tag);
        sleep_ms(1);
    }
}

void check_peek_found(const Comp& c, size_t len, uint64_t data) {
    expect_flags(c, FI_RECV | FI_TAGGED, "successful peek");
    FT_EQ(c.len, len, "peek completion len (message length)");
    FT_EQ(c.tag, kTag, "peek completion tag");
    expect_flags(c, FI_REMOTE_CQ_DATA, "peek of a message sent with CQ data");
    FT_EQ(c.data, data, "peek completion data");
}

void expect_enomsg(Endpoint& ep, uint64_t tag, const char* what) {
    OpCtx ctx;
    Comp c = peek_once(ep, ctx, tag, 0);
    FT_CHECK(c.is_err && c.err == FI_ENOMSG, "%s: expected FI_ENOMSG error entry, saw %s", what,
             describe(c).c_str());
}

// Receive with a normal fi_trecv and verify (tag kTag).
void recv_plain(Endpoint& ep, size_t len, uint32_t seed, uint64_t data) {
    auto r = post_recv(ep, 8192, true, kTag);
    complete_recv(ep, *r, {.len = len, .seed = seed, .tag = kTag, .data = data});
}

// Client: two messages with the same tag (seeds 1 and 2), then kSent.
void client_send_two(Endpoint& ep, const std::vector<fi_addr_t>& addr) {
    std::vector<uint8_t> b1 = make_buf(kLen1), b2 = make_buf(kLen2);
    fill(b1.data(), kLen1, 1);
    fill(b2.data(), kLen2, 2);
    OpCtx c1, c2;
    ep.post("fi_tsenddata", [&] {
        return fi_tsenddata(ep.ep, b1.data(), kLen1, nullptr, kData1, addr[kServer], kTag, &c1.fctx);
    });
    ep.post("fi_tsenddata", [&] {
        return fi_tsenddata(ep.ep, b2.data(), kLen2, nullptr, kData2, addr[kServer], kTag, &c2.fctx);
    });
    signal_peer(kServer, kSent);
    ep.expect_ok(&c1, "first send");
    ep.expect_ok(&c2, "second send");
    barrier([&] { ep.progress(); });
}

enum class Mode { kFound, kClaim, kDiscard, kClaimDiscard };

void run_peek(Mode mode) {
    Endpoint ep;
    auto addr = connect_all(ep);
    if (rank() == kClient) return client_send_two(ep, addr);

    wait_signal_progress(ep, kClient, kSent);
    OpCtx pctx;
    switch (mode) {
        case Mode::kFound: {
            check_peek_found(peek_until_found(ep, pctx, kTag, 0), kLen1, kData1);
            // a peek does not consume: peeking again finds the same message
            OpCtx p2;
            check_peek_found(peek_once(ep, p2, kTag, 0), kLen1, kData1);
            expect_enomsg(ep, kTag + 1, "peek for a tag nobody sent");
            recv_plain(ep, kLen1, 1, kData1);
            recv_plain(ep, kLen2, 2, kData2);
            break;
        }
        case Mode::kClaim: {
            check_peek_found(peek_until_found(ep, pctx, kTag, FI_CLAIM), kLen1, kData1);
            // message 1 is claimed: a plain receive must get message 2
            recv_plain(ep, kLen2, 2, kData2);
            std::vector<uint8_t> buf = make_buf(8192);
            iovec iov{buf.data(), buf.size()};
            fi_msg_tagged m{};
            m.msg_iov = &iov;
            m.iov_count = 1;
            m.addr = FI_ADDR_UNSPEC;
            m.tag = kTag;
            m.context = &pctx.fctx;  // same context as the PEEK|CLAIM
            ep.post("fi_trecvmsg(FI_CLAIM)", [&] { return fi_trecvmsg(ep.ep, &m, FI_CLAIM); });
            Comp c = ep.wait_ctx(&pctx, "claimed receive");
            check_recv_comp(c, true, {.len = kLen1, .seed = 1, .tag = kTag, .data = kData1}, buf.data(),
                            "claimed receive");
            check(buf.data(), kLen1, 1, "claimed payload");
            break;
        }
        case Mode::kDiscard: {
            Comp c = peek_until_found(ep, pctx, kTag, FI_DISCARD);
            expect_flags(c, FI_RECV | FI_TAGGED, "PEEK|DISCARD completion");
            recv_plain(ep, kLen2, 2, kData2);  // message 1 is gone
            break;
        }
        case Mode::kClaimDiscard: {
            check_peek_found(peek_until_found(ep, pctx, kTag, FI_CLAIM), kLen1, kData1);
            fi_msg_tagged m{};
            m.addr = FI_ADDR_UNSPEC;
            m.tag = kTag;
            m.context = &pctx.fctx;
            ep.post("fi_trecvmsg(FI_CLAIM|FI_DISCARD)",
                    [&] { return fi_trecvmsg(ep.ep, &m, FI_CLAIM | FI_DISCARD); });
            Comp c = ep.wait_ctx(&pctx, "CLAIM|DISCARD");
            FT_CHECK(!c.is_err, "CLAIM|DISCARD: expected success, saw %s", describe(c).c_str());
            recv_plain(ep, kLen2, 2, kData2);  // message 1 is gone
            break;
        }
    }
    expect_enomsg(ep, kTag, "peek after every message was consumed");
    ep.expect_quiet(0.1, "CQ at the end");
    barrier([&] { ep.progress(); });
}

// FI_PEEK with nothing sent at all gives FI_ENOMSG; the endpoint still works.
void case_nomatch() {
    Endpoint ep;
    auto addr = connect_all(ep);
    if (rank() == kServer) {
        expect_enomsg(ep, kTag, "peek on an idle endpoint");
        signal_peer(kClient, kSent);
        recv_plain(ep, 64, 5, 0x55);
    } else {
        wait_signal(kServer, kSent);
        std::vector<uint8_t> b = make_buf(64);
        fill(b.data(), 64, 5);
        OpCtx c;
        ep.post("fi_tsenddata", [&] {
            return fi_tsenddata(ep.ep, b.data(), 64, nullptr, 0x55, addr[kServer], kTag, &c.fctx);
        });
        ep.expect_ok(&c, "send after the failed peek");
    }
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"found", 2, [] { run_peek(Mode::kFound); }},
                        {"nomatch", 2, case_nomatch},
                        {"claim", 2, [] { run_peek(Mode::kClaim); }},
                        {"discard", 2, [] { run_peek(Mode::kDiscard); }},
                        {"claim_discard", 2, [] { run_peek(Mode::kClaimDiscard); }},
                    });
}
