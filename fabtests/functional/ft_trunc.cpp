// Truncation: a message larger than the receive buffer completes with an
// error entry (err FI_ETRUNC, olen = excess), the buffer holds the first
// bytes, nothing past it is written, and the endpoint keeps working.
#include <cstring>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1;
constexpr uint32_t kReady = 0x7C001u;
constexpr size_t kGuard = 256;
constexpr uint8_t kGuardByte = 0xC3;

void run_trunc(bool tagged, size_t msg_len, size_t buf_len) {
    Endpoint ep;
    auto addr = connect_all(ep);
    const uint64_t tag = 0x7777;
    const uint32_t seed = 42, seed2 = 43;
    if (rank() == kServer) {
        std::vector<uint8_t> buf(buf_len + kGuard, kGuardByte);
        OpCtx ctx;
        const char* what = tagged ? "truncated fi_trecv" : "truncated fi_recv";
        if (tagged)
            ep.post(what, [&] {
                return fi_trecv(ep.ep, buf.data(), buf_len, nullptr, FI_ADDR_UNSPEC, tag, 0, &ctx.fctx);
            });
        else
            ep.post(what, [&] { return fi_recv(ep.ep, buf.data(), buf_len, nullptr, FI_ADDR_UNSPEC, &ctx.fctx); });
        signal_peer(kClient, kReady);
        Comp c = ep.expect_err(&ctx, FI_ETRUNC, what);
        FT_EQ(c.olen, msg_len - buf_len, "error entry olen (bytes that did not fit)");
        FT_EQ(c.len, buf_len, "error entry len (bytes placed in the buffer)");
        FT_CHECK(c.flags & FI_RECV, "error entry flags %s lack FI_RECV", flags_str(c.flags).c_str());
        if (tagged) FT_EQ(c.tag, tag, "error entry tag");
        check(buf.data(), buf_len, seed, "first buf_len bytes of the truncated message");
        for (size_t i = 0; i < kGuard; ++i)
            FT_CHECK(buf[buf_len + i] == kGuardByte,
                     "byte %zu past the %zu-byte receive buffer was overwritten (0x%02x)", i, buf_len,
                     buf[buf_len + i]);
        // the endpoint still works: a full-size message with the same tag
        auto r = post_recv(ep, msg_len, tagged, tag);
        signal_peer(kClient, kReady);
        complete_recv(ep, *r, {.len = msg_len, .seed = seed2, .tag = tagged ? std::optional<uint64_t>(tag) : std::nullopt});
        ep.expect_quiet(0.1, "after the follow-up message");
    } else {
        wait_signal(kServer, kReady);
        auto s = post_send(ep, addr[kServer], msg_len, seed, tagged, tag);
        // The sender's view of a truncated delivery is not specified: accept
        // success or FI_ETRUNC, nothing else.
        Comp c = ep.wait_ctx(&s->ctx, "send of the truncated message");
        FT_CHECK(!c.is_err || c.err == FI_ETRUNC,
                 "send of a message truncated at the target: expected success or FI_ETRUNC, saw %s",
                 describe(c).c_str());
        wait_signal_progress(ep, kServer, kReady);
        auto s2 = post_send(ep, addr[kServer], msg_len, seed2, tagged, tag);
        complete_send(ep, *s2);
    }
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"msg_small", 2, [] { run_trunc(false, 64, 16); }},
                        {"msg_large", 2, [] { run_trunc(false, 1u << 20, 4096); }},
                        {"tagged_small", 2, [] { run_trunc(true, 200, 1); }},
                        {"tagged_large", 2, [] { run_trunc(true, 1u << 20, 4096); }},
                    });
}
