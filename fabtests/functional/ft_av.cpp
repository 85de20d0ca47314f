// Address vectors: FI_AV_TABLE and FI_AV_MAP insert/lookup/straddr/remove,
// and messages that arrive before the receiver has inserted the sender.
#include <cstring>
#include <string>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1;
constexpr uint32_t kReady = 0xA7001u, kSent = 0xA7002u, kDone = 0xA7003u, kRemoved = 0xA7004u;

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
// server inserts it, a directed receive gets the unexpected messages, and
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


// The next CQ entry, which must be an error entry (the stash must be empty).
// err_data goes to an application buffer of `app_size` bytes, or with
// app_size 0 stays in the provider's buffer (fi_cq(3)); returns its bytes.
std::vector<uint8_t> next_error(Endpoint& ep, fi_cq_err_entry& e, size_t app_size, const char* what) {
    FT_CHECK(ep.stash_size() == 0, "%s: completions already pending", what);
    const double deadline = now_s() + kWait;
    for (;;) {
        fi_cq_tagged_entry t;
        fi_addr_t src;
        ssize_t n = fi_cq_readfrom(ep.cq, &t, 1, &src);
        if (n == -FI_EAVAIL) break;
        FT_CHECK(n == -FI_EAGAIN, "%s: fi_cq_readfrom returned %zd (%s), expected -FI_EAVAIL", what, n,
                 errstr(n));
        FT_CHECK(now_s() < deadline, "%s: no completion within %.0fs", what, kWait);
    }
    std::vector<uint8_t> app(app_size ? app_size : 1, 0xEE);
    e = fi_cq_err_entry{};
    e.err_data = app_size ? app.data() : nullptr;
    e.err_data_size = app_size;
    ssize_t rc = fi_cq_readerr(ep.cq, &e, 0);
    FT_EQ(rc, 1, (std::string(what) + ": fi_cq_readerr").c_str());
    FT_CHECK(e.err_data && e.err_data_size > 0, "%s: error entry without err_data (%p, %zu)", what, e.err_data,
             e.err_data_size);
    if (app_size) {
        FT_CHECK(e.err_data == app.data(), "%s: err_data moved from the application's buffer to %p", what,
                 e.err_data);
        FT_CHECK(e.err_data_size <= app_size, "%s: err_data_size %zu > the buffer's %zu", what, e.err_data_size,
                 app_size);
    }
    const uint8_t* p = static_cast<const uint8_t*>(e.err_data);
    return std::vector<uint8_t>(p, p + e.err_data_size);
}

// FI_SOURCE and a sender the server has not inserted (fi_cq(3)). The server
// learns the client from its first message, which arrives unexpected:
//  - FI_SOURCE alone: the receive completes successfully with src_addr
//    FI_ADDR_NOTAVAIL; the client's name is the payload;
//  - with FI_SOURCE_ERR: the receive completes as an FI_EADDRNOTAVAIL error
//    entry carrying the data fields and, as err_data, the client's name,
//    first in the provider's buffer, then (after fi_av_remove, with a large
//    message) in the application's.
// The server inserts what it learnt and replies; later messages report the
// inserted fi_addr. Every payload is checked, and both ranks must exit 0.
void run_source_unknown(bool source_err) {
    EpConfig cfg;
    cfg.caps |= FI_SOURCE | (source_err ? FI_SOURCE_ERR : 0);
    Endpoint ep(cfg);
    if (rank() == kClient) {
        std::vector<uint8_t> me = ep.name();
        oob_send_bytes(kServer, me);  // for the server's checks only
        fi_addr_t srv = ep.insert(oob_recv_bytes(kServer));
        if (source_err) {
            auto m1 = post_send(ep, srv, 3000, 71, true, 0x71);
            complete_send(ep, *m1);
        } else {
            OpCtx ctx;
            ep.post("fi_send of our name", [&] {
                return fi_send(ep.ep, me.data(), me.size(), nullptr, srv, &ctx.fctx);
            });
            ep.expect_ok(&ctx, "fi_send of our name");
        }
        signal_peer(kServer, kSent);
        auto r1 = post_recv(ep, 4096, false);
        complete_recv(ep, *r1, {.len = 1000, .seed = 81, .src = srv});
        if (source_err) {
            wait_signal_progress(ep, kServer, kRemoved);
            auto m2 = post_send(ep, srv, 100000, 72, true, 0x72);  // rendezvous
            complete_send(ep, *m2);
            auto r2 = post_recv(ep, 4096, false);
            complete_recv(ep, *r2, {.len = 1000, .seed = 82, .src = srv});
        }
        auto m3 = post_send(ep, srv, 500, 73, true, 0x73);
        complete_send(ep, *m3);
        barrier([&] { ep.progress(); });
        return;
    }
    const std::vector<uint8_t> client = oob_recv_bytes(kClient);
    oob_send_bytes(kClient, ep.name());
    wait_signal_progress(ep, kClient, kSent);
    sleep_ms(50);
    ep.progress();  // the first message is unexpected
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    if (!source_err) {
        auto r = post_recv(ep, 256, false);
        Comp c = ep.wait_ctx(&r->ctx, "first message from a sender not in the AV");
        FT_CHECK(!c.is_err, "receive from an unknown sender failed: %s", describe(c).c_str());
        FT_EQ(c.src, FI_ADDR_NOTAVAIL, "fi_cq_readfrom src_addr of a sender not in the AV");
        FT_EQ(c.len, client.size(), "length of the first message");
        FT_CHECK(std::memcmp(r->buf.data(), client.data(), client.size()) == 0,
                 "the first message is not the client's name");
        fa = ep.insert(std::vector<uint8_t>(r->buf.begin(), r->buf.begin() + (long)c.len));
    } else {
        auto r = post_recv(ep, 4096, true, 0x71);
        fi_cq_err_entry e;
        auto name = next_error(ep, e, 0, "first message, FI_SOURCE_ERR, provider's err_data");
        FT_EQ(e.err, FI_EADDRNOTAVAIL, "err of a receive from a sender not in the AV");
        FT_CHECK(e.op_context == &r->ctx.fctx, "op_context %p, expected %p", e.op_context, (void*)&r->ctx.fctx);
        FT_CHECK((e.flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED), "flags %s",
                 flags_str(e.flags).c_str());
        FT_EQ(e.len, 3000, "len of the FI_EADDRNOTAVAIL entry");
        FT_EQ(e.tag, 0x71, "tag of the FI_EADDRNOTAVAIL entry");
        check(r->buf.data(), 3000, 71, "payload of a message completed with FI_EADDRNOTAVAIL");
        FT_CHECK(name == client, "err_data (%zu bytes) is not the client's name (%zu bytes)", name.size(),
                 client.size());
        fa = ep.insert(name);
    }
    auto s1 = post_send(ep, fa, 1000, 81, false);
    complete_send(ep, *s1);
    if (source_err) {
        FT_CALL(fi_av_remove(ep.av, &fa, 1, 0));
        signal_peer(kClient, kRemoved);
        auto r = post_recv(ep, 100000, true, 0x72);
        fi_cq_err_entry e;
        auto name = next_error(ep, e, 256, "second message, FI_SOURCE_ERR, application's err_data");
        FT_EQ(e.err, FI_EADDRNOTAVAIL, "err of a receive from a removed sender");
        FT_CHECK(e.op_context == &r->ctx.fctx, "op_context %p, expected %p", e.op_context, (void*)&r->ctx.fctx);
        FT_EQ(e.len, 100000, "len of the FI_EADDRNOTAVAIL entry");
        check(r->buf.data(), 100000, 72, "payload of a rendezvous message completed with FI_EADDRNOTAVAIL");
        FT_CHECK(name == client, "err_data in the application's buffer is not the client's name");
        fa = ep.insert(name);
        auto s2 = post_send(ep, fa, 1000, 82, false);
        complete_send(ep, *s2);
    }
    auto r3 = post_recv(ep, 4096, true, 0x73);
    complete_recv(ep, *r3, {.len = 500, .seed = 73, .tag = 0x73, .src = fa});
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
                        {"source_unknown", 2, [] { run_source_unknown(false); }},
                        {"source_err", 2, [] { run_source_unknown(true); }},
                    });
}
