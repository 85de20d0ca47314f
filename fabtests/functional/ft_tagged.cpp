// Tagged messaging: all send flavours, ignore bits, FIFO matching,
// unexpected messages, FI_DIRECTED_RECV and FI_SOURCE with two clients.
#include <algorithm>
#include <cinttypes>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1, kClient2 = 2;
constexpr uint32_t kReady = 0x7A6001u, kSent = 0x7A6002u, kDone = 0x7A6003u;

// fi_tsend/fi_trecv over the size ladder with a distinct tag per size.
void case_sizes() {
    Endpoint ep;
    auto addr = connect_all(ep);
    uint32_t seed = 1000;
    for (size_t size : size_ladder()) {
        ++seed;
        const uint64_t tag = 0xA000000000ull + size;
        if (rank() == kServer) {
            auto r = post_recv(ep, size, true, tag);
            signal_peer(kClient, kReady);
            complete_recv(ep, *r, {.len = size, .seed = seed, .tag = tag});
        } else {
            wait_signal(kServer, kReady);
            auto s = post_send(ep, addr[kServer], size, seed, true, tag);
            complete_send(ep, *s);
        }
    }
    barrier();
}

// fi_tinject, fi_tsenddata, fi_tinjectdata, fi_tsendmsg (with CQ data),
// received with fi_trecvmsg.
void case_ops() {
    Endpoint ep;
    auto addr = connect_all(ep);
    const size_t inj = ep.info->tx_attr->inject_size;
    FT_CHECK(inj >= 8, "inject_size %zu < 8", inj);
    struct Step {
        const char* op;
        size_t len;
    };
    const std::vector<Step> steps = {{"fi_tinject", 8},        {"fi_tinject", inj},
                                     {"fi_tsenddata", 64},     {"fi_tsenddata", 1u << 20},
                                     {"fi_tinjectdata", 0},    {"fi_tinjectdata", inj},
                                     {"fi_tsendmsg", 200},     {"fi_tsendmsg", 65536}};
    uint32_t seed = 1100;
    for (const Step& st : steps) {
        ++seed;
        const std::string op = st.op;
        const uint64_t tag = 0xB00000ull + seed;
        const uint64_t cq_data = 0xDA7A0000ull + seed;
        const bool has_data = op != "fi_tinject";
        std::vector<uint8_t> buf = make_buf(st.len);
        OpCtx ctx;
        if (rank() == kServer) {
            iovec iov{buf.data(), st.len};
            fi_msg_tagged m{};
            m.msg_iov = &iov;
            m.iov_count = 1;
            m.addr = FI_ADDR_UNSPEC;
            m.tag = tag;
            m.context = &ctx.fctx;
            ep.post("fi_trecvmsg", [&] { return fi_trecvmsg(ep.ep, &m, 0); });
            signal_peer(kClient, kReady);
            Comp c = ep.wait_ctx(&ctx, st.op);
            RecvExpect e{.len = st.len, .seed = seed, .tag = tag};
            if (has_data) e.data = cq_data;
            check_recv_comp(c, true, e, buf.data(), st.op);
            check(buf.data(), st.len, seed, st.op);
            signal_peer(kClient, kDone);
        } else {
            fill(buf.data(), st.len, seed);
            wait_signal(kServer, kReady);
            fi_addr_t dst = addr[kServer];
            bool completes = true;
            if (op == "fi_tinject") {
                ep.post(st.op, [&] { return fi_tinject(ep.ep, buf.data(), st.len, dst, tag); });
                completes = false;
            } else if (op == "fi_tsenddata") {
                ep.post(st.op, [&] {
                    return fi_tsenddata(ep.ep, buf.data(), st.len, nullptr, cq_data, dst, tag, &ctx.fctx);
                });
            } else if (op == "fi_tinjectdata") {
                ep.post(st.op, [&] { return fi_tinjectdata(ep.ep, buf.data(), st.len, cq_data, dst, tag); });
                completes = false;
            } else {
                iovec iov{buf.data(), st.len};
                fi_msg_tagged m{};
                m.msg_iov = &iov;
                m.iov_count = 1;
                m.addr = dst;
                m.tag = tag;
                m.context = &ctx.fctx;
                m.data = cq_data;
                ep.post(st.op, [&] { return fi_tsendmsg(ep.ep, &m, FI_REMOTE_CQ_DATA | FI_COMPLETION); });
            }
            if (completes)
                expect_flags(ep.expect_ok(&ctx, st.op), FI_SEND | FI_TAGGED, st.op);
            else
                std::fill(buf.begin(), buf.end(), 0x5A);  // inject: buffer reusable at once
            wait_signal_progress(ep, kServer, kDone);
        }
    }
    if (rank() == kClient) ep.expect_quiet(0.2, "sender CQ after tagged ops (injects complete silently)");
    barrier();
}

// Ignore bits: recv A (tag 0x5, exact) and recv B (0x1200, ignore 0xff) are
// posted; a send with tag 0x1234 must land in B and report tag 0x1234; a send
// with tag 0x5 lands in A; a send with 0x1334 matches neither.
void case_ignore() {
    Endpoint ep;
    auto addr = connect_all(ep);
    if (rank() == kServer) {
        auto a = post_recv(ep, 64, true, 0x5, 0);
        auto b = post_recv(ep, 64, true, 0x1200, 0xff);
        signal_peer(kClient, kReady);
        complete_recv(ep, *b, {.len = 64, .seed = 1, .tag = 0x1234});
        complete_recv(ep, *a, {.len = 64, .seed = 2, .tag = 0x5});
        ep.expect_quiet(0.3, "tag 0x1334 must match no posted receive");
        auto c = post_recv(ep, 64, true, 0x1334, 0);  // now unexpected: exact match
        complete_recv(ep, *c, {.len = 64, .seed = 3, .tag = 0x1334});
    } else {
        wait_signal(kServer, kReady);
        auto s1 = post_send(ep, addr[kServer], 64, 1, true, 0x1234);
        auto s2 = post_send(ep, addr[kServer], 64, 2, true, 0x5);
        auto s3 = post_send(ep, addr[kServer], 64, 3, true, 0x1334);
        complete_send(ep, *s1);
        complete_send(ep, *s2);
        complete_send(ep, *s3);
    }
    barrier();
}

// Ignore bits on the unexpected path: messages arrive first, then receives
// with ignore bits are posted and must match them (and report the real tag).
void case_ignore_unexpected() {
    Endpoint ep;
    auto addr = connect_all(ep);
    if (rank() == kServer) {
        wait_signal_progress(ep, kClient, kSent);
        ep.expect_quiet(0.1, "no receive posted yet");
        auto a = post_recv(ep, 64, true, 0x1300, 0x3f);
        auto b = post_recv(ep, 64, true, 0x77000, 0xfff);
        complete_recv(ep, *a, {.len = 64, .seed = 5, .tag = 0x1334});
        complete_recv(ep, *b, {.len = 64, .seed = 6, .tag = 0x77abc});
    } else {
        auto s1 = post_send(ep, addr[kServer], 64, 6, true, 0x77abc);
        auto s2 = post_send(ep, addr[kServer], 64, 5, true, 0x1334);
        signal_peer(kServer, kSent);
        complete_send(ep, *s1);
        complete_send(ep, *s2);
    }
    barrier([&] { ep.progress(); });
}

// Several sends with the same tag match receives in posting order, whether
// the receives are posted first (expected) or last (unexpected).
void run_fifo(bool unexpected) {
    Endpoint ep;
    auto addr = connect_all(ep);
    constexpr int kN = 8;
    const uint64_t tag = 0xF1F0;
    const std::vector<size_t> sizes = {8, 100, 4096, 64, 70000, 1, 1u << 20, 0};
    if (rank() == kServer) {
        std::vector<XferPtr> rx;
        if (unexpected) {
            wait_signal_progress(ep, kClient, kSent);
            sleep_ms(50);
        }
        for (int i = 0; i < kN; ++i) rx.push_back(post_recv(ep, 1u << 20, true, tag));
        if (!unexpected) signal_peer(kClient, kReady);
        for (int i = 0; i < kN; ++i)
            complete_recv(ep, *rx[(size_t)i], {.len = sizes[(size_t)i], .seed = 2000u + (uint32_t)i, .tag = tag});
    } else {
        if (!unexpected) wait_signal(kServer, kReady);
        std::vector<XferPtr> tx;
        for (int i = 0; i < kN; ++i)
            tx.push_back(post_send(ep, addr[kServer], sizes[(size_t)i], 2000u + (uint32_t)i, true, tag));
        if (unexpected) signal_peer(kServer, kSent);
        for (auto& s : tx) complete_send(ep, *s);
    }
    barrier();
}

// Every ladder size sent before the receiver posts anything.
void case_unexpected() {
    Endpoint ep;
    auto addr = connect_all(ep);
    const auto& sizes = size_ladder();
    if (rank() == kServer) {
        wait_signal_progress(ep, kClient, kSent);
        sleep_ms(100);
        std::vector<XferPtr> rx;
        // post in reverse order: matching is by tag, not arrival order
        for (size_t i = sizes.size(); i-- > 0;) rx.push_back(post_recv(ep, sizes[i], true, 0xE000 + i));
        for (size_t i = sizes.size(); i-- > 0;)
            complete_recv(ep, *rx[sizes.size() - 1 - i],
                          {.len = sizes[i], .seed = 3000u + (uint32_t)i, .tag = 0xE000 + i});
    } else {
        std::vector<XferPtr> tx;
        for (size_t i = 0; i < sizes.size(); ++i)
            tx.push_back(post_send(ep, addr[kServer], sizes[i], 3000u + (uint32_t)i, true, 0xE000 + i));
        signal_peer(kServer, kSent);
        for (auto& s : tx) complete_send(ep, *s);
    }
    barrier();
}

// Three processes. A receive directed at client 2 must not match client 1's
// message even though tags are equal; FI_SOURCE (fi_cq_readfrom) must report
// the right fi_addr_t for each client.
void case_directed() {
    EpConfig cfg;
    cfg.caps |= FI_DIRECTED_RECV | FI_SOURCE;
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    const uint64_t tag = 0xD1D1;
    if (rank() == kServer) {
        for (bool tagged : {true, false}) {
            auto r2 = post_recv(ep, 4096, tagged, tag, 0, addr[kClient2]);
            signal_peer(kClient, kReady);
            wait_signal_progress(ep, kClient, kSent);
            ep.expect_quiet(0.3, "receive directed at client 2 while only client 1 sent");
            signal_peer(kClient2, kReady);
            complete_recv(ep, *r2, {.len = 2000, .seed = 22, .tag = tagged ? std::optional<uint64_t>(tag) : std::nullopt,
                                    .src = addr[kClient2]});
            auto r1 = post_recv(ep, 4096, tagged, tag, 0, addr[kClient]);
            complete_recv(ep, *r1, {.len = 1000, .seed = 11, .tag = tagged ? std::optional<uint64_t>(tag) : std::nullopt,
                                    .src = addr[kClient]});
            barrier([&] { ep.progress(); });
        }
    } else {
        const bool c1 = rank() == kClient;
        for (bool tagged : {true, false}) {
            wait_signal(kServer, kReady);
            auto s = post_send(ep, addr[kServer], c1 ? 1000 : 2000, c1 ? 11 : 22, tagged, tag);
            if (c1) signal_peer(kServer, kSent);
            complete_send(ep, *s);
            barrier([&] { ep.progress(); });
        }
    }
    barrier();
}

// FI_SOURCE: both clients send 3 messages each (some unexpected), the server
// receives from FI_ADDR_UNSPEC and identifies the sender by fi_cq_readfrom.
void case_source() {
    EpConfig cfg;
    cfg.caps |= FI_SOURCE;
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    constexpr int kPer = 3;
    if (rank() == kServer) {
        std::vector<XferPtr> rx;
        for (int i = 0; i < kPer; ++i) rx.push_back(post_recv(ep, 65536, true, 0x500, 0xff));
        signal_peer(kClient, kReady);
        signal_peer(kClient2, kReady);
        std::vector<int> seen(3, 0);
        for (int i = 0; i < 2 * kPer; ++i) {
            if (i == kPer) {  // the rest arrive unexpected, then match new receives
                sleep_ms(50);
                for (int j = 0; j < kPer; ++j) rx.push_back(post_recv(ep, 65536, true, 0x500, 0xff));
            }
            Comp c = ep.wait_ctx(&rx[(size_t)i]->ctx, "fi_trecv from any source");
            FT_CHECK(!c.is_err, "receive failed: %s", describe(c).c_str());
            int from = (int)((c.tag & 0xf0) >> 4);  // tag 0x5<rank><idx> (hex digits)
            FT_CHECK(from == kClient || from == kClient2, "unexpected tag 0x%" PRIx64, c.tag);
            FT_EQ(c.src, addr[(size_t)from], "fi_cq_readfrom source fi_addr of the sender");
            uint32_t seed = 4000u + (uint32_t)(from * 10) + (uint32_t)(c.tag & 0xf);
            check_recv_comp(c, true, {.len = 100u * (size_t)from + (c.tag & 0xf), .seed = seed},
                            rx[(size_t)i]->buf.data(), "FI_SOURCE receive");
            check(rx[(size_t)i]->buf.data(), c.len, seed, "FI_SOURCE payload");
            ++seen[(size_t)from];
        }
        FT_EQ(seen[kClient], kPer, "messages from client 1");
        FT_EQ(seen[kClient2], kPer, "messages from client 2");
    } else {
        wait_signal(kServer, kReady);
        std::vector<XferPtr> tx;
        for (int i = 0; i < kPer; ++i) {
            uint64_t tag = 0x500 | (uint64_t)(rank() << 4) | (uint64_t)i;
            tx.push_back(post_send(ep, addr[kServer], 100u * (size_t)rank() + (size_t)i,
                                   4000u + (uint32_t)(rank() * 10 + i), true, tag));
        }
        for (auto& s : tx) complete_send(ep, *s);
    }
    barrier();
}

// A send's buffer is the application's again once the send has completed
// (fi_msg(3)): the client overwrites each at once, while the provider may
// still be resending frames (the loss suites), and the server must get the
// original bytes. Sizes on both sides of the rendezvous thresholds (16 KiB;
// over Ethernet 256 KiB, where eager messages above 16 KiB stay in the
// user's buffer until acknowledged), received into receives posted before
// the sends and, in the second round, posted only after them (unexpected).
void case_reuse() {
    Endpoint ep;
    auto addr = connect_all(ep);
    const std::vector<size_t> sizes = {16385, 65536, 262144, 262145, (size_t(1) << 20) + 1};
    for (int round = 0; round < 2; ++round) {
        const uint64_t tag0 = 0x7E00 + 16 * (uint64_t)round;
        const uint32_t seed0 = 7000u + 16u * (uint32_t)round;
        if (rank() == kServer) {
            std::vector<XferPtr> rx;
            auto post_all = [&] {
                for (size_t i = 0; i < sizes.size(); ++i) rx.push_back(post_recv(ep, sizes[i], true, tag0 + i));
            };
            if (round == 0) post_all();
            signal_peer(kClient, kReady);
            if (round == 1) {
                wait_signal_progress(ep, kClient, kSent);
                post_all();
            }
            for (size_t i = 0; i < sizes.size(); ++i)
                complete_recv(ep, *rx[i], {.len = sizes[i], .seed = seed0 + (uint32_t)i, .tag = tag0 + i});
        } else {
            wait_signal(kServer, kReady);
            std::vector<XferPtr> tx;
            for (size_t i = 0; i < sizes.size(); ++i)
                tx.push_back(post_send(ep, addr[kServer], sizes[i], seed0 + (uint32_t)i, true, tag0 + i));
            if (round == 1) signal_peer(kServer, kSent);
            for (auto& s : tx) {
                complete_send(ep, *s);
                std::fill(s->buf.begin(), s->buf.end(), uint8_t(0xA5));
            }
        }
        barrier([&] { ep.progress(); });
    }
}

// Whether the two ranks are pmeth processes of different hosts (FT_HOSTID):
// their messages go over Ethernet, eagerly up to 256 KiB.
bool over_ethernet() {
    const auto& h = g_opt.hostids;
    return g_opt.prov.rfind("pmeth", 0) == 0 && h.size() >= 2 && h[0] != h[1];
}

// An application may leave many large messages unexpected and wait for a
// later message before it posts receives for them. Over Ethernet pmeth sends
// messages up to 256 KiB eagerly (FI_PMETH_WIRE_RNDV_THRESHOLD), and the
// receiver buffers each unexpected one whole: its cap (unexp_cap_kb, here
// 8 MiB) must not hold back the later message. The client sends 48 messages
// of 256 KiB (12 MiB) and then one of 8 bytes; the server waits for that one
// before it posts the others' receives, and verifies every payload.
// Over Ethernet a second round checks that the sender sends such messages
// eagerly again once the receiver has room: the server answers with a
// message of its own (it follows the receiver's word on the same path),
// and the client's four sends of 256 KiB must then complete before the
// server posts their receives (a rendezvous' would wait for them).
void case_unexpected_many() {
    set_prov_var("UNEXP_CAP_KB", "8192");
    Endpoint ep;
    auto addr = connect_all(ep);
    constexpr size_t kBig = 256 * 1024;
    // Server: waits for the 8-byte message `last_tag`, then posts the
    // receives of `count` large ones and verifies them.
    auto receive_after = [&](size_t count, uint32_t seed0, uint64_t tag0, uint32_t last_seed, uint64_t last_tag) {
        auto last = post_recv(ep, 8, true, last_tag);
        complete_recv(ep, *last, {.len = 8, .seed = last_seed, .tag = last_tag}, 30);
        std::vector<XferPtr> rx;
        for (size_t i = 0; i < count; ++i) rx.push_back(post_recv(ep, kBig, true, tag0 + i));
        for (size_t i = 0; i < count; ++i)
            complete_recv(ep, *rx[i], {.len = kBig, .seed = seed0 + (uint32_t)i, .tag = tag0 + i});
    };
    // Client: `count` large messages, then the 8-byte one; with
    // `large_done_first` the large ones' sends complete before it is sent.
    auto send_then = [&](size_t count, uint32_t seed0, uint64_t tag0, uint32_t last_seed, uint64_t last_tag,
                         bool large_done_first) {
        std::vector<XferPtr> tx;
        for (size_t i = 0; i < count; ++i)
            tx.push_back(post_send(ep, addr[kServer], kBig, seed0 + (uint32_t)i, true, tag0 + i));
        if (large_done_first) {
            for (auto& s : tx) complete_send(ep, *s);
            tx.clear();
        }
        tx.push_back(post_send(ep, addr[kServer], 8, last_seed, true, last_tag));
        for (auto& s : tx) complete_send(ep, *s);
    };
    if (rank() == kServer) receive_after(48, 9000, 0xF000, 9100, 0xF100);
    else send_then(48, 9000, 0xF000, 9100, 0xF100, false);
    if (over_ethernet()) {
        constexpr uint64_t kGoTag = 0xF101;
        if (rank() == kServer) {
            auto go = post_send(ep, addr[kClient], 8, 9101, true, kGoTag);
            complete_send(ep, *go);
            receive_after(4, 9200, 0xF200, 9102, 0xF300);
        } else {
            auto go = post_recv(ep, 8, true, kGoTag);
            complete_recv(ep, *go, {.len = 8, .seed = 9101, .tag = kGoTag});
            send_then(4, 9200, 0xF200, 9102, 0xF300, true);
        }
    }
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"sizes", 2, case_sizes},
                        {"ops", 2, case_ops},
                        {"ignore", 2, case_ignore},
                        {"ignore_unexpected", 2, case_ignore_unexpected},
                        {"fifo", 2, [] { run_fifo(false); }},
                        {"fifo_unexpected", 2, [] { run_fifo(true); }},
                        {"unexpected", 2, case_unexpected},
                        {"directed", 3, case_directed},
                        {"source", 3, case_source},
                        {"reuse", 2, case_reuse},
                        {"unexpected_many", 2, case_unexpected_many},
                    });
}
