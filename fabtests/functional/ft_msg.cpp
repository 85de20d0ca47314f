// Untagged messaging: fi_send/sendv/sendmsg/inject/senddata/injectdata and
// fi_recv/recvv/recvmsg across the size ladder, verified byte for byte.
#include <cinttypes>
#include <cstring>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1;
constexpr uint32_t kReady = 0x5EAD1u;

// One message client->server then server->client for every ladder size.
void case_sizes() {
    Endpoint ep;
    auto addr = connect_all(ep);
    uint32_t seed = 100;
    for (size_t size : size_ladder()) {
        for (int dir = 0; dir < 2; ++dir, ++seed) {
            int receiver = dir == 0 ? kServer : kClient;
            int sender = 1 - receiver;
            if (rank() == receiver) {
                auto r = post_recv(ep, size, false);
                signal_peer(sender, kReady);
                complete_recv(ep, *r, {.len = size, .seed = seed});
            } else {
                wait_signal(receiver, kReady);
                auto s = post_send(ep, addr[(size_t)receiver], size, seed, false);
                complete_send(ep, *s);
            }
        }
        log("size %s ok", human_size(size).c_str());
    }
    barrier();
}

// Split `total` into 3 pieces; variant selects where the split points fall.
std::vector<size_t> split3(size_t total, int variant) {
    size_t a, b;
    switch (variant % 3) {
        case 0: a = total / 3; b = total / 3; break;
        case 1: a = 1; b = total / 2; break;
        default: a = total / 2 + total / 5; b = total / 10; break;
    }
    if (total >= 3) {  // every piece non-empty
        if (a == 0) a = 1;
        if (b == 0) b = 1;
        if (a + b >= total) a = total - b - 1;
    } else {
        a = b = 0;
    }
    return {a, b, total - a - b};
}

// 3 iovs on both sides, different split points on each side.
void case_iov() {
    Endpoint ep;
    auto addr = connect_all(ep);
    const size_t limit = ep.info->tx_attr->iov_limit < ep.info->rx_attr->iov_limit
                             ? ep.info->tx_attr->iov_limit
                             : ep.info->rx_attr->iov_limit;
    FT_CHECK(limit >= 3, "iov_limit %zu < 3: provider cannot take 3-entry iovs", limit);
    const std::vector<size_t> totals = {3, 200, 4096 + 13, 65536, 1u << 20, (8u << 20) + 7};
    uint32_t seed = 300;
    int variant = 0;
    for (size_t total : totals) {
        ++seed;
        ++variant;
        std::vector<uint8_t> data = make_buf(total);
        OpCtx ctx;
        if (rank() == kServer) {
            auto parts = split3(total, variant + 1);
            iovec iov[3];
            size_t off = 0;
            for (int i = 0; i < 3; ++i) {
                iov[i] = {data.data() + off, parts[(size_t)i]};
                off += parts[(size_t)i];
            }
            ep.post("fi_recvv", [&] { return fi_recvv(ep.ep, iov, nullptr, 3, FI_ADDR_UNSPEC, &ctx.fctx); });
            signal_peer(kClient, kReady);
            Comp c = ep.wait_ctx(&ctx, "fi_recvv completion");
            check_recv_comp(c, false, {.len = total, .seed = seed}, data.data(), "fi_recvv");
            for (int i = 0; i < 3; ++i)
                check(iov[i].iov_base, iov[i].iov_len, seed, "fi_recvv iov piece",
                      (size_t)((uint8_t*)iov[i].iov_base - data.data()));
        } else {
            fill(data.data(), total, seed);
            auto parts = split3(total, variant);
            // send from three separate buffers to exercise gathering
            std::vector<std::vector<uint8_t>> pieces;
            iovec iov[3];
            size_t off = 0;
            for (int i = 0; i < 3; ++i) {
                pieces.emplace_back(data.begin() + (long)off, data.begin() + (long)(off + parts[(size_t)i]));
                iov[i] = {pieces.back().data(), parts[(size_t)i]};
                off += parts[(size_t)i];
            }
            wait_signal(kServer, kReady);
            ep.post("fi_sendv", [&] { return fi_sendv(ep.ep, iov, nullptr, 3, addr[kServer], &ctx.fctx); });
            Comp c = ep.expect_ok(&ctx, "fi_sendv completion");
            expect_flags(c, FI_SEND | FI_MSG, "fi_sendv completion");
        }
        log("iov total %zu ok", total);
    }
    barrier();
}

// fi_sendmsg/fi_recvmsg, 1 and 3 iovs, with and without FI_REMOTE_CQ_DATA.
void case_sendmsg() {
    Endpoint ep;
    auto addr = connect_all(ep);
    const std::vector<size_t> sizes = {0, 64, 4096, 1u << 20};
    uint32_t seed = 500;
    for (size_t size : sizes) {
        for (int with_data = 0; with_data < 2; ++with_data) {
            for (size_t niov : {(size_t)1, (size_t)3}) {
                if (size == 0 && niov == 3) continue;
                ++seed;
                const uint64_t cq_data = 0xD00D0000ull + seed;
                std::vector<uint8_t> data = make_buf(size);
                auto parts = niov == 1 ? std::vector<size_t>{size} : split3(size, (int)seed);
                iovec iov[3];
                size_t off = 0;
                for (size_t i = 0; i < niov; ++i) {
                    iov[i] = {data.data() + off, parts[i]};
                    off += parts[i];
                }
                OpCtx ctx;
                fi_msg msg{};
                msg.msg_iov = iov;
                msg.iov_count = niov;
                msg.context = &ctx.fctx;
                if (rank() == kServer) {
                    msg.addr = FI_ADDR_UNSPEC;
                    ep.post("fi_recvmsg", [&] { return fi_recvmsg(ep.ep, &msg, 0); });
                    signal_peer(kClient, kReady);
                    Comp c = ep.wait_ctx(&ctx, "fi_recvmsg completion");
                    RecvExpect e{.len = size, .seed = seed};
                    if (with_data) e.data = cq_data;
                    check_recv_comp(c, false, e, data.data(), "fi_recvmsg");
                    check(data.data(), size, seed, "fi_recvmsg payload");
                } else {
                    fill(data.data(), size, seed);
                    msg.addr = addr[kServer];
                    msg.data = cq_data;
                    wait_signal(kServer, kReady);
                    uint64_t flags = FI_COMPLETION | (with_data ? FI_REMOTE_CQ_DATA : 0);
                    ep.post("fi_sendmsg", [&] { return fi_sendmsg(ep.ep, &msg, flags); });
                    Comp c = ep.expect_ok(&ctx, "fi_sendmsg completion");
                    expect_flags(c, FI_SEND | FI_MSG, "fi_sendmsg completion");
                }
            }
        }
    }
    barrier();
}

// fi_senddata / fi_inject / fi_injectdata. Injected sends produce no
// completion, and their buffer is reusable as soon as the call returns.
enum class Op { kSendData, kInject, kInjectData };

void run_op_case(Op op) {
    Endpoint ep;
    auto addr = connect_all(ep);
    const bool inject = op != Op::kSendData;
    const size_t inject_size = ep.info->tx_attr->inject_size;
    std::vector<size_t> sizes;
    for (size_t s : size_ladder())
        if (!inject || s <= inject_size) sizes.push_back(s);
    if (inject && inject_size > 0) sizes.push_back(inject_size);
    FT_CHECK(!inject || sizes.size() >= 4, "inject_size %zu too small to test", inject_size);
    uint32_t seed = 700 + (uint32_t)op * 50;
    for (size_t size : sizes) {
        ++seed;
        const uint64_t cq_data = 0xC0DA0000ull | seed;
        if (rank() == kServer) {
            auto r = post_recv(ep, size, false);
            signal_peer(kClient, kReady);
            RecvExpect e{.len = size, .seed = seed};
            if (op != Op::kInject) e.data = cq_data;
            complete_recv(ep, *r, e);
            signal_peer(kClient, kReady);
        } else {
            std::vector<uint8_t> buf = make_buf(size);
            fill(buf.data(), size, seed);
            wait_signal(kServer, kReady);
            OpCtx ctx;
            switch (op) {
                case Op::kSendData:
                    ep.post("fi_senddata", [&] {
                        return fi_senddata(ep.ep, buf.data(), size, nullptr, cq_data, addr[kServer], &ctx.fctx);
                    });
                    expect_flags(ep.expect_ok(&ctx, "fi_senddata completion"), FI_SEND | FI_MSG,
                                 "fi_senddata completion");
                    break;
                case Op::kInject:
                    ep.post("fi_inject", [&] { return fi_inject(ep.ep, buf.data(), size, addr[kServer]); });
                    break;
                case Op::kInjectData:
                    ep.post("fi_injectdata", [&] {
                        return fi_injectdata(ep.ep, buf.data(), size, cq_data, addr[kServer]);
                    });
                    break;
            }
            if (inject) std::fill(buf.begin(), buf.end(), 0xEE);  // buffer is ours again
            wait_signal_progress(ep, kServer, kReady);
        }
    }
    if (rank() == kClient && inject) ep.expect_quiet(0.2, "sender CQ after injects");
    barrier();
}


// fi_sendmsg / fi_tsendmsg with the FI_INJECT operation flag: the buffer is
// the caller's again when the call returns, and the send still completes,
// exactly once, with its context (fi_msg(3), fi_tagged(3): only fi_inject
// and fi_tinject write no completion). With FI_SELECTIVE_COMPLETION on the
// sender, FI_INJECT|FI_COMPLETION completes and FI_INJECT alone does not.
// fi_inject / fi_tinject never complete. Every payload is checked.
enum class InjectVia { kMsgFlag, kMsgFlagSilent, kInjectCall };

void run_inject_flag(bool selective) {
    EpConfig cfg;
    if (selective && rank() == kClient) cfg.cq_bind_flags = FI_SELECTIVE_COMPLETION;
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    const size_t inj = ep.info->tx_attr->inject_size;
    FT_CHECK(inj >= 64, "inject_size %zu too small to test", inj);
    struct Step {
        bool tagged;
        size_t size;
        InjectVia via;
    };
    std::vector<Step> steps;
    for (bool tagged : {false, true}) {
        for (size_t size : {(size_t)0, (size_t)1, (size_t)64, inj}) {
            steps.push_back({tagged, size, InjectVia::kMsgFlag});
            if (selective) steps.push_back({tagged, size, InjectVia::kMsgFlagSilent});
        }
        steps.push_back({tagged, 64, InjectVia::kInjectCall});
    }
    uint32_t seed = 1500;
    for (const Step& st : steps) {
        ++seed;
        const uint64_t tag = 0x1A0000u + seed;
        char what[128];
        std::snprintf(what, sizeof what, "%s of %s%s", st.via == InjectVia::kInjectCall
                          ? (st.tagged ? "fi_tinject" : "fi_inject")
                          : (st.tagged ? "fi_tsendmsg(FI_INJECT" : "fi_sendmsg(FI_INJECT"),
                      human_size(st.size).c_str(),
                      st.via == InjectVia::kInjectCall ? ""
                      : st.via == InjectVia::kMsgFlagSilent ? ") without FI_COMPLETION"
                      : selective ? "|FI_COMPLETION)" : ")");
        if (rank() == kServer) {
            auto r = post_recv(ep, st.size, st.tagged, tag);
            signal_peer(kClient, kReady);
            RecvExpect e{.len = st.size, .seed = seed};
            if (st.tagged) e.tag = tag;
            complete_recv(ep, *r, e);
            signal_peer(kClient, kReady);
            continue;
        }
        std::vector<uint8_t> buf = make_buf(st.size);
        fill(buf.data(), st.size, seed);
        wait_signal(kServer, kReady);
        OpCtx ctx;
        iovec iov{buf.data(), st.size};
        if (st.via == InjectVia::kInjectCall) {
            ep.post(what, [&] {
                return st.tagged ? fi_tinject(ep.ep, buf.data(), st.size, addr[kServer], tag)
                                 : fi_inject(ep.ep, buf.data(), st.size, addr[kServer]);
            });
        } else {
            const uint64_t flags = FI_INJECT | (selective && st.via == InjectVia::kMsgFlag ? FI_COMPLETION : 0);
            fi_msg m{};
            fi_msg_tagged tm{};
            m.msg_iov = tm.msg_iov = &iov;
            m.iov_count = tm.iov_count = 1;
            m.addr = tm.addr = addr[kServer];
            m.context = tm.context = &ctx.fctx;
            tm.tag = tag;
            ep.post(what, [&] { return st.tagged ? fi_tsendmsg(ep.ep, &tm, flags) : fi_sendmsg(ep.ep, &m, flags); });
        }
        std::memset(buf.data(), 0xEE, buf.size());  // the buffer is ours again
        wait_signal_progress(ep, kServer, kReady);
        if (st.via == InjectVia::kMsgFlag) {
            Comp c = ep.expect_ok(&ctx, what);
            expect_flags(c, FI_SEND | (st.tagged ? FI_TAGGED : FI_MSG), what);
        }
        std::string quiet = std::string(what) + ": no further completion";
        ep.expect_quiet(0.05, quiet.c_str());
    }
    barrier();
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"sizes", 2, case_sizes},
                        {"iov", 2, case_iov},
                        {"sendmsg", 2, case_sendmsg},
                        {"senddata", 2, [] { run_op_case(Op::kSendData); }},
                        {"inject", 2, [] { run_op_case(Op::kInject); }},
                        {"injectdata", 2, [] { run_op_case(Op::kInjectData); }},
                        {"sendmsg_inject", 2, [] { run_inject_flag(false); }},
                        {"sendmsg_inject_selective", 2, [] { run_inject_flag(true); }},
                    });
}
