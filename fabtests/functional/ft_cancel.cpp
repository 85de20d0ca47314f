// fi_cancel: each cancelled receive completes exactly once with FI_ECANCELED;
// cancelling a completed operation produces nothing; cancelled receives never
// take later messages.
#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1;
constexpr uint32_t kReady = 0xCA001u, kDone = 0xCA002u;

int cancel(Endpoint& ep, Xfer& x) { return fi_cancel(&ep.ep->fid, &x.ctx.fctx); }

void case_recv() {
    Endpoint ep;
    auto addr = connect_all(ep);
    if (rank() == kServer) {
        std::vector<XferPtr> rx;
        rx.push_back(post_recv(ep, 64, false));
        rx.push_back(post_recv(ep, 1u << 20, false));
        rx.push_back(post_recv(ep, 64, true, 0xAB));
        rx.push_back(post_recv(ep, 4096, true, 0xCD00, 0xff));
        for (auto& r : rx) FT_CALL(cancel(ep, *r));
        for (auto& r : rx) ep.expect_err(&r->ctx, FI_ECANCELED, ("cancelled " + r->what).c_str());
        ep.expect_quiet(0.3, "after one FI_ECANCELED per cancelled receive (duplicates?)");
        // cancelling again: the operations are gone
        for (auto& r : rx) {
            int rc = cancel(ep, *r);
            FT_CHECK(rc == 0 || rc == -FI_ENOENT, "second fi_cancel: expected 0 or -FI_ENOENT, got %d (%s)", rc,
                     errstr(rc));
        }
        ep.expect_quiet(0.2, "after cancelling already-cancelled receives");
        // messages matching the cancelled receives go to new receives only
        auto m = post_recv(ep, 64, false);
        auto t = post_recv(ep, 64, true, 0xAB);
        signal_peer(kClient, kReady);
        complete_recv(ep, *m, {.len = 64, .seed = 1});
        complete_recv(ep, *t, {.len = 64, .seed = 2, .tag = 0xAB});
        ep.expect_quiet(0.2, "cancelled receives must not complete again");
    } else {
        wait_signal(kServer, kReady);
        auto m = post_send(ep, addr[kServer], 64, 1, false);
        auto t = post_send(ep, addr[kServer], 64, 2, true, 0xAB);
        complete_send(ep, *m);
        complete_send(ep, *t);
    }
    barrier([&] { ep.progress(); });
}

void case_completed() {
    Endpoint ep;
    auto addr = connect_all(ep);
    if (rank() == kServer) {
        auto r = post_recv(ep, 4096, true, 0x11);
        signal_peer(kClient, kReady);
        complete_recv(ep, *r, {.len = 4096, .seed = 3, .tag = 0x11});
        int rc = cancel(ep, *r);
        FT_CHECK(rc == 0 || rc == -FI_ENOENT, "fi_cancel of a completed receive: expected 0 or -FI_ENOENT, got %d (%s)",
                 rc, errstr(rc));
        ep.expect_quiet(0.3, "after cancelling a completed receive");
        signal_peer(kClient, kDone);
    } else {
        wait_signal(kServer, kReady);
        auto s = post_send(ep, addr[kServer], 4096, 3, true, 0x11);
        complete_send(ep, *s);
        int rc = cancel(ep, *s);
        FT_CHECK(rc == 0 || rc == -FI_ENOENT, "fi_cancel of a completed send: expected 0 or -FI_ENOENT, got %d (%s)",
                 rc, errstr(rc));
        ep.expect_quiet(0.3, "after cancelling a completed send");
        wait_signal_progress(ep, kServer, kDone);
    }
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv, {{"recv", 2, case_recv}, {"completed", 2, case_completed}});
}
