// Flow control: with the receiver not progressing, posting sends must
// eventually return -FI_EAGAIN (within a bounded number of attempts); once
// the receiver drains, every accepted message arrives intact, in order of
// its tag, and the sender can send again.
#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1;
constexpr uint32_t kReady = 0xEA001u, kGo = 0xEA002u;
constexpr long kMaxAttempts = 1000000;
constexpr size_t kLen = 64;
constexpr uint64_t kTagBase = 0xE0000000ull;

void case_send() {
    Endpoint ep;
    auto addr = connect_all(ep);
    // one round trip first so connection set-up is not what blocks
    if (rank() == kServer) {
        auto r = post_recv(ep, 8, true, 1);
        signal_peer(kClient, kReady);
        complete_recv(ep, *r, {.len = 8, .seed = 1, .tag = 1});
    } else {
        wait_signal(kServer, kReady);
        auto s = post_send(ep, addr[kServer], 8, 1, true, 1);
        complete_send(ep, *s);
    }

    if (rank() == kClient) {
        std::vector<OpCtx> ctx((size_t)kMaxAttempts);
        std::vector<uint8_t> bufs((size_t)kMaxAttempts * kLen);
        long accepted = 0;
        ssize_t rc = 0;
        for (long i = 0; i < kMaxAttempts; ++i) {
            uint8_t* b = bufs.data() + (size_t)i * kLen;
            fill(b, kLen, (uint32_t)i);
            rc = fi_tsend(ep.ep, b, kLen, nullptr, addr[kServer], kTagBase + (uint64_t)i, &ctx[(size_t)i].fctx);
            if (rc != 0) break;
            ++accepted;
        }
        FT_CHECK(rc == -FI_EAGAIN, "after %ld accepted sends to a non-progressing receiver: expected -FI_EAGAIN, "
                 "got %zd (%s)", accepted, rc, errstr(rc));
        FT_CHECK(accepted > 0, "not a single send was accepted");
        info("%ld sends accepted before -FI_EAGAIN", accepted);
        oob_put<long>(kServer, accepted);
        for (long i = 0; i < accepted; ++i) {
            Comp c = ep.wait_ctx(&ctx[(size_t)i], "accepted send", 30.0);
            FT_CHECK(!c.is_err, "accepted send %ld failed: %s", i, describe(c).c_str());
        }
        // after the drain the endpoint takes new sends
        wait_signal_progress(ep, kServer, kGo);
        auto s = post_send(ep, addr[kServer], kLen, 99, true, 0x99);
        complete_send(ep, *s);
    } else {
        long n = oob_get<long>(kClient, 20.0);  // plain wait: no progress here
        const size_t chunk = ep.info->rx_attr->size ? ep.info->rx_attr->size / 2 : 256;
        for (long base = 0; base < n; base += (long)chunk) {
            long end = base + (long)chunk < n ? base + (long)chunk : n;
            std::vector<XferPtr> rx;
            for (long i = base; i < end; ++i) rx.push_back(post_recv(ep, kLen, true, kTagBase + (uint64_t)i));
            for (long i = base; i < end; ++i)
                complete_recv(ep, *rx[(size_t)(i - base)],
                              {.len = kLen, .seed = (uint32_t)i, .tag = kTagBase + (uint64_t)i}, 30.0);
        }
        auto r = post_recv(ep, kLen, true, 0x99);
        signal_peer(kClient, kGo);
        complete_recv(ep, *r, {.len = kLen, .seed = 99, .tag = 0x99});
        ep.expect_quiet(0.1, "after all accepted messages");
    }
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, {{"send", 2, case_send}}); }
