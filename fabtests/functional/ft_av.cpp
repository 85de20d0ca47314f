// Address vectors: FI_AV_TABLE and FI_AV_MAP insert/lookup/straddr/remove,
// and messages that arrive before the receiver has inserted the sender.
#include <cstring>
#include <string>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1;
constexpr uint32_t kReady = 0xA7001u, kSent = 0xA7002u, kDone = 0xA7003u;

void run_av(fi_av_type type, bool send_after_remove) {
    EpConfig cfg;
    cfg.av_type = type;
    Endpoint ep(cfg);
    auto names = exchange_names(ep);
    if (rank() == kClient) {
        fi_addr_t srv = ep.insert(names[kServer]);
        auto r = post_recv(ep, 4096, true, 0x1);
        signal_peer(kServer, kReady);
        complete_recv(ep, *r, {.len = 4096, .seed = 1, .tag = 0x1});
        auto s = post_send(ep, srv, 300, 2, true, 0x2);
        complete_send(ep, *s);
        // after the server removes us, nothing it tries to send may arrive
        auto stray = post_recv(ep, 4096, true, 0xBAD);
        wait_signal_progress(ep, kServer, kDone);
        ep.expect_quiet(0.3, "a send to a removed address must not be delivered");
        FT_CALL(fi_cancel(&ep.ep->fid, &stray->ctx.fctx));
        ep.expect_err(&stray->ctx, FI_ECANCELED, "cancelled stray receive");
        (void)send_after_remove;
        barrier([&] { ep.progress(); });
        return;
    }
    const auto& peer = names[kClient];
    fi_addr_t fa = ep.insert(peer);
    fi_addr_t self = ep.insert(names[kServer]);
    if (type == FI_AV_TABLE) {
        FT_EQ(fa, 0, "FI_AV_TABLE: first fi_addr");
        FT_EQ(self, 1, "FI_AV_TABLE: second fi_addr");
    } else {
        FT_CHECK(fa != self, "FI_AV_MAP: two names got the same fi_addr %llu", (unsigned long long)fa);
    }
    // lookup returns the inserted name and its length
    std::vector<uint8_t> got(peer.size() + 64, 0);
    size_t len = got.size();
    FT_CALL(fi_av_lookup(ep.av, fa, got.data(), &len));
    FT_EQ(len, peer.size(), "fi_av_lookup addrlen");
    FT_CHECK(std::memcmp(got.data(), peer.data(), peer.size()) == 0, "fi_av_lookup returned a different name");
    size_t small = 1;
    uint8_t one = 0;
    int rc = fi_av_lookup(ep.av, fa, &one, &small);
    FT_CHECK(rc == 0 || rc == -FI_ETOOSMALL, "fi_av_lookup with a 1-byte buffer: %d (%s)", rc, errstr(rc));
    FT_EQ(small, peer.size(), "fi_av_lookup with a 1-byte buffer: needed addrlen");
    // straddr gives a non-empty printable string
    char str[256];
    size_t slen = sizeof str;
    std::memset(str, 0, sizeof str);
    const char* s = fi_av_straddr(ep.av, peer.data(), str, &slen);
    FT_CHECK(s == str, "fi_av_straddr returned %p, expected the buffer %p", (const void*)s, (void*)str);
    FT_CHECK(std::strlen(str) > 0, "fi_av_straddr returned an empty string");
    FT_CHECK(slen >= std::strlen(str), "fi_av_straddr: addrlen %zu < strlen %zu", slen, std::strlen(str));
    log("peer straddr: %s", str);
    // the address works
    wait_signal(kClient, kReady);
    auto sx = post_send(ep, fa, 4096, 1, true, 0x1);
    auto rx = post_recv(ep, 300, true, 0x2);
    complete_send(ep, *sx);
    complete_recv(ep, *rx, {.len = 300, .seed = 2, .tag = 0x2});
    // remove; then sending to it must fail (in bounded time) or be refused
    fi_addr_t gone = fa;
    FT_CALL(fi_av_remove(ep.av, &gone, 1, 0));
    if (send_after_remove) info("send to a removed address: %s", send_expect_failure(ep, fa, 64, 10.0).c_str());
    signal_peer(kClient, kDone);
    barrier([&] { ep.progress(); });
}

// The client sends before the server has the client in its AV; once the
// server inserts it, a directed receive gets the held messages, and
// FI_SOURCE reports the newly inserted fi_addr.
void case_late_insert() {
    EpConfig cfg;
    cfg.caps |= FI_DIRECTED_RECV | FI_SOURCE;
    Endpoint ep(cfg);
    auto names = exchange_names(ep);
    if (rank() == kClient) {
        fi_addr_t srv = ep.insert(names[kServer]);
        auto t = post_send(ep, srv, 5000, 7, true, 0x77);
        auto m = post_send(ep, srv, 100, 8, false);
        signal_peer(kServer, kSent);
        complete_send(ep, *t);
        complete_send(ep, *m);
    } else {
        wait_signal_progress(ep, kClient, kSent);
        sleep_ms(100);
        ep.expect_quiet(0.1, "nothing posted yet");
        fi_addr_t fa = ep.insert(names[kClient]);
        auto t = post_recv(ep, 8192, true, 0x77, 0, fa);
        auto m = post_recv(ep, 8192, false, 0, 0, fa);
        complete_recv(ep, *t, {.len = 5000, .seed = 7, .tag = 0x77, .src = fa});
        complete_recv(ep, *m, {.len = 100, .seed = 8, .src = fa});
    }
    barrier([&] { ep.progress(); });
}


std::vector<uint8_t> looked_up(Endpoint& ep, fi_addr_t fa, const char* what) {
    std::vector<uint8_t> got(256, 0);
    size_t len = got.size();
    int rc = fi_av_lookup(ep.av, fa, got.data(), &len);
    FT_CHECK(rc == 0, "%s: fi_av_lookup(%llu): %d (%s)", what, (unsigned long long)fa, rc, errstr(rc));
    got.resize(len);
    return got;
}

// FI_AV_TABLE slots (fi_av(3)): each entry of an insert takes the lowest
// unused index, in order; a duplicate name gets its own index and an invalid
// one FI_ADDR_NOTAVAIL (FI_EINVAL with FI_SYNC_ERR) without shifting the
// entries after it; the count returned is the number inserted; after
// fi_av_remove the freed indices are reused lowest first. The fi_addr of a
// duplicate works for sending, and FI_SOURCE reports the name's lowest
// fi_addr.
void case_table_slots() {
    EpConfig cfg;
    cfg.caps |= FI_SOURCE;
    Endpoint ep(cfg);
    auto names = exchange_names(ep);
    if (rank() == kClient) {
        fi_addr_t srv = ep.insert(names[kServer]);
        auto r = post_recv(ep, 4096, true, 0x51);
        signal_peer(kServer, kReady);
        complete_recv(ep, *r, {.len = 3000, .seed = 51, .tag = 0x51, .src = srv});
        auto s = post_send(ep, srv, 700, 52, true, 0x52);
        complete_send(ep, *s);
        barrier([&] { ep.progress(); });
        return;
    }
    const std::vector<uint8_t>& a = names[kClient];
    const std::vector<uint8_t>& self = names[kServer];
    const size_t n = a.size();
    FT_CHECK(self.size() == n, "names of different lengths %zu and %zu", n, self.size());
    const std::vector<uint8_t> bad(n, 0);  // no provider's valid name
    auto batch = [&](std::initializer_list<const std::vector<uint8_t>*> list) {
        std::vector<uint8_t> b;
        for (const auto* x : list) b.insert(b.end(), x->begin(), x->end());
        return b;
    };
    std::vector<uint8_t> b1 = batch({&a, &self, &a, &bad, &self});
    fi_addr_t fa[5];
    int errs[5] = {-1, -1, -1, -1, -1};
    int rc = fi_av_insert(ep.av, b1.data(), 5, fa, FI_SYNC_ERR, errs);
    FT_EQ(rc, 4, "fi_av_insert of 5 names, one invalid: count inserted");
    const fi_addr_t want1[5] = {0, 1, 2, FI_ADDR_NOTAVAIL, 4};
    const int want_err[5] = {0, 0, 0, FI_EINVAL, 0};
    for (int i = 0; i < 5; ++i) {
        std::string w = "entry " + std::to_string(i) + " of [peer, self, peer, invalid, self]: fi_addr";
        FT_EQ(fa[i], want1[i], w.c_str());
        w = "entry " + std::to_string(i) + ": FI_SYNC_ERR status";
        FT_EQ(errs[i], want_err[i], w.c_str());
    }
    FT_CHECK(looked_up(ep, 2, "duplicate") == a, "fi_addr 2 (the duplicate) does not hold the peer's name");
    FT_CHECK(looked_up(ep, 4, "duplicate") == self, "fi_addr 4 does not hold our own name");
    std::vector<uint8_t> tmp(256);
    size_t len = tmp.size();
    FT_EQ(fi_av_lookup(ep.av, 3, tmp.data(), &len), -FI_EINVAL, "fi_av_lookup of the invalid entry's index");

    fi_addr_t gone[2] = {1, 2};
    FT_CALL(fi_av_remove(ep.av, gone, 2, 0));
    fi_addr_t one = FI_ADDR_NOTAVAIL;
    FT_EQ(fi_av_insert(ep.av, self.data(), 1, &one, 0, nullptr), 1, "insert after fi_av_remove");
    FT_EQ(one, 1, "insert after removing 1 and 2 takes the lowest unused index");
    std::vector<uint8_t> b2 = batch({&a, &self});
    FT_EQ(fi_av_insert(ep.av, b2.data(), 2, nullptr, 0, nullptr), 2, "insert of 2 with fi_addr NULL");
    FT_CHECK(looked_up(ep, 2, "refill") == a, "index 2 (lowest unused) does not hold the first name");
    FT_CHECK(looked_up(ep, 3, "refill") == self, "index 3 (the invalid entry's) does not hold the second name");
    FT_EQ(fi_av_insert(ep.av, a.data(), 1, &one, 0, nullptr), 1, "insert of the peer a third time");
    FT_EQ(one, 5, "next index once 0..4 are used");
    FT_EQ(fi_av_insert(ep.av, bad.data(), 1, &one, 0, nullptr), 0, "insert of an invalid name alone");
    FT_EQ(one, FI_ADDR_NOTAVAIL, "fi_addr of an invalid name");
    FT_EQ(fi_av_insert(ep.av, self.data(), 1, &one, 0, nullptr), 1, "insert after the invalid one");
    FT_EQ(one, 6, "the invalid name's index is left unused for the next insert");

    // fi_addr 5 is the peer too: sending works through it, and FI_SOURCE
    // names the peer by its lowest fi_addr, 0.
    wait_signal(kClient, kReady);
    auto s = post_send(ep, 5, 3000, 51, true, 0x51);
    complete_send(ep, *s);
    auto r = post_recv(ep, 4096, true, 0x52);
    complete_recv(ep, *r, {.len = 700, .seed = 52, .tag = 0x52, .src = 0});
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"table", 2, [] { run_av(FI_AV_TABLE, false); }},
                        {"map", 2, [] { run_av(FI_AV_MAP, false); }},
                        {"removed_send", 2, [] { run_av(FI_AV_TABLE, true); }},
                        {"late_insert", 2, case_late_insert},
                        {"table_slots", 2, case_table_slots},
                    });
}
