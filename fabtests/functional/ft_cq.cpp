// Completion queues: the four entry formats (read raw, in batches, so the
// entry stride is checked too), fi_cq_sread wake-up and timeout, FI_WAIT_FD
// with fi_trywait + poll().
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <type_traits>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1;
constexpr uint32_t kReady = 0xC0001u, kGo = 0xC0002u;
constexpr int kBatch = 3;

// One round trip so that any connection set-up is done before timing or
// raw-reading the CQ.
void warm_up(Endpoint& ep, const std::vector<fi_addr_t>& addr) {
    int peer = 1 - rank();
    for (int dir = 0; dir < 2; ++dir) {
        if (rank() == dir) {
            // fields depend on the CQ format: check context and payload only
            auto r = post_recv(ep, 8, true, 0x1);
            signal_peer(peer, kReady);
            FT_CHECK(!ep.wait_ctx(&r->ctx, "warm-up receive").is_err, "warm-up receive failed");
            check(r->buf.data(), 8, 9, "warm-up payload");
        } else {
            wait_signal(peer, kReady);
            auto s = post_send(ep, addr[(size_t)peer], 8, 9, true, 0x1);
            ep.expect_ok(&s->ctx, "warm-up send");
        }
    }
}

// Read exactly n entries of type E straight from the CQ (bounded).
template <class E>
std::vector<E> read_raw(fid_cq* cq, int n, const char* what) {
    std::vector<E> out;
    E buf[kBatch + 1];
    double deadline = now_s() + kWait;
    while ((int)out.size() < n) {
        std::memset(buf, 0xA5, sizeof buf);  // garbage: unwritten fields show
        ssize_t got = fi_cq_read(cq, buf, (size_t)(n - (int)out.size()));
        if (got > 0) {
            out.insert(out.end(), buf, buf + got);
            continue;
        }
        if (got == -FI_EAVAIL) {
            fi_cq_err_entry e{};
            fi_cq_readerr(cq, &e, 0);
            FT_FAIL("%s: error completion err=%d (%s)", what, e.err, errstr(e.err));
        }
        FT_CHECK(got == -FI_EAGAIN, "%s: fi_cq_read returned %zd (%s)", what, got, errstr(got));
        FT_CHECK(now_s() < deadline, "%s: only %zu of %d completions within %.0fs", what,
                 out.size(), n, kWait);
    }
    return out;
}

template <class E>
void run_format(fi_cq_format fmt) {
    EpConfig cfg;
    cfg.cq_format = fmt;
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    warm_up(ep, addr);
    FT_EQ(ep.stash_size(), 0, "stash after warm-up");
    const size_t lens[kBatch] = {100, 0, 5000};
    if (rank() == kServer) {
        std::vector<std::vector<uint8_t>> bufs;
        OpCtx ctx[kBatch];
        for (int i = 0; i < kBatch; ++i) {
            bufs.push_back(make_buf(8192));
            ep.post("fi_trecv", [&] {
                return fi_trecv(ep.ep, bufs.back().data(), 8192, nullptr, FI_ADDR_UNSPEC,
                                0x700 + (uint64_t)i, 0, &ctx[i].fctx);
            });
        }
        signal_peer(kClient, kReady);
        auto entries = read_raw<E>(ep.cq, kBatch, "receive completions");
        for (int i = 0; i < kBatch; ++i) {
            const E& e = entries[(size_t)i];
            // completion order is not guaranteed: find the receive by context
            int k = 0;
            while (k < kBatch && e.op_context != &ctx[k].fctx) ++k;
            FT_CHECK(k < kBatch, "entry %d: op_context %p is none of the posted receives", i,
                     e.op_context);
            if constexpr (!std::is_same_v<E, fi_cq_entry>) {
                FT_CHECK((e.flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED),
                         "entry %d flags %s lack FI_RECV|FI_TAGGED", i, flags_str(e.flags).c_str());
                FT_EQ(e.len, lens[k], "recv entry len");
            }
            if constexpr (std::is_same_v<E, fi_cq_data_entry> || std::is_same_v<E, fi_cq_tagged_entry>) {
                FT_CHECK(e.flags & FI_REMOTE_CQ_DATA, "entry %d lacks FI_REMOTE_CQ_DATA", i);
                FT_EQ(e.data, 0xDA7A00ull + (uint64_t)k, "recv entry data");
                FT_CHECK(e.buf == nullptr || e.buf == bufs[(size_t)k].data(),
                         "entry %d buf %p is neither NULL nor the posted buffer", i, e.buf);
            }
            if constexpr (std::is_same_v<E, fi_cq_tagged_entry>)
                FT_EQ(e.tag, 0x700ull + (uint64_t)k, "recv entry tag");
            check(bufs[(size_t)k].data(), lens[k], 70u + (uint32_t)k, "payload");
        }
    } else {
        std::vector<std::vector<uint8_t>> bufs;
        OpCtx ctx[kBatch];
        wait_signal(kServer, kReady);
        for (int i = 0; i < kBatch; ++i) {
            bufs.push_back(make_buf(lens[i]));
            fill(bufs.back().data(), lens[i], 70u + (uint32_t)i);
            ep.post("fi_tsenddata", [&] {
                return fi_tsenddata(ep.ep, bufs.back().data(), lens[i], nullptr, 0xDA7A00ull + (uint64_t)i,
                                    addr[kServer], 0x700 + (uint64_t)i, &ctx[i].fctx);
            });
        }
        auto entries = read_raw<E>(ep.cq, kBatch, "send completions");
        bool seen[kBatch] = {};
        for (const E& e : entries) {
            int k = 0;
            while (k < kBatch && e.op_context != &ctx[k].fctx) ++k;
            FT_CHECK(k < kBatch && !seen[k], "send entry op_context %p unknown or repeated", e.op_context);
            seen[k] = true;
            if constexpr (!std::is_same_v<E, fi_cq_entry>)
                FT_CHECK((e.flags & (FI_SEND | FI_TAGGED)) == (FI_SEND | FI_TAGGED),
                         "send entry flags %s lack FI_SEND|FI_TAGGED", flags_str(e.flags).c_str());
        }
    }
    ep.expect_quiet(0.1, "CQ after the batch");
    barrier();
}

// Last-resort bound for a blocking libfabric call that ignores its timeout.
const char* g_stuck_msg = "";
void on_stuck(int) {
    ssize_t ignored = write(2, g_stuck_msg, strlen(g_stuck_msg));
    (void)ignored;
    _exit(1);
}

// fi_cq_sread on an idle CQ returns -FI_EAGAIN once its timeout expires.
void case_sread_timeout() {
    EpConfig cfg;
    cfg.cq_wait = FI_WAIT_UNSPEC;
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    warm_up(ep, addr);
    if (rank() == kServer) {
        for (int timeout_ms : {0, 300}) {
            fi_cq_tagged_entry e{};
            g_stuck_msg = timeout_ms == 0
                              ? "FAIL: fi_cq_sread(timeout 0) on an idle CQ did not return within 5s\n"
                              : "FAIL: fi_cq_sread(timeout 300ms) on an idle CQ did not return within 5s\n";
            signal(SIGALRM, on_stuck);
            alarm(5);
            double t0 = now_s();
            ssize_t rc = fi_cq_sread(ep.cq, &e, 1, nullptr, timeout_ms);
            double dt = now_s() - t0;
            alarm(0);
            FT_CHECK(rc == -FI_EAGAIN, "fi_cq_sread(%d ms) on an idle CQ: expected -FI_EAGAIN, got %zd (%s)",
                     timeout_ms, rc, errstr(rc));
            FT_CHECK(dt >= timeout_ms * 0.8e-3 && dt < timeout_ms * 1e-3 + 1.0,
                     "fi_cq_sread(%d ms) returned after %.3fs", timeout_ms, dt);
        }
    }
    barrier();
}

// fi_cq_sread wakes up when the peer sends 200 ms later.
void case_sread_wake() {
    EpConfig cfg;
    cfg.cq_wait = FI_WAIT_UNSPEC;
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    warm_up(ep, addr);
    if (rank() == kServer) {
        fi_cq_tagged_entry e{};
        auto r = post_recv(ep, 4096, true, 0x5EAD);
        double t0 = now_s();  // before the signal: a preemption after it cannot shorten dt
        signal_peer(kClient, kGo);
        double deadline = t0 + 5.0;
        for (;;) {
            int left_ms = (int)((deadline - now_s()) * 1000);
            FT_CHECK(left_ms > 0, "fi_cq_sread: no completion within 5s of the peer's send");
            ssize_t rc = fi_cq_sread(ep.cq, &e, 1, nullptr, left_ms);
            if (rc == 1) break;
            FT_CHECK(rc == -FI_EAGAIN, "fi_cq_sread: expected 1 or -FI_EAGAIN, got %zd (%s)", rc, errstr(rc));
        }
        double dt = now_s() - t0;
        FT_CHECK(e.op_context == &r->ctx.fctx, "fi_cq_sread returned context %p, expected %p", e.op_context,
                 (void*)&r->ctx.fctx);
        FT_CHECK(dt >= 0.15, "completion arrived after %.3fs, before the peer's 200ms delay", dt);
        FT_EQ(e.len, 4096, "sread entry len");
        check(r->buf.data(), 4096, 77, "sread payload");
        log("sread woke %.1f ms after the go signal (peer sent at ~200 ms)", dt * 1e3);
    } else {
        wait_signal(kServer, kGo);
        sleep_ms(200);
        auto s = post_send(ep, addr[kServer], 4096, 77, true, 0x5EAD);
        complete_send(ep, *s);
    }
    barrier();
}

// FI_WAIT_FD: get the fd, fi_trywait, poll() must wake when the peer sends.
// With beside_sread, between the first fi_trywait and poll() a blocking wait
// on another CQ of the same domain (its fi_cq_sread arms the devices and
// disarms them on the way out) must not leave the first CQ's fd watching
// nothing; the progress thread, which would otherwise rescue the sleeper
// within an interval, is off.
void run_wait_fd(bool beside_sread) {
    if (beside_sread) {
        setenv("FI_PMETH_PROGRESS_THREAD", "0", 1);
        setenv("FI_PMSHM_PROGRESS_THREAD", "0", 1);
    }
    EpConfig cfg;
    cfg.cq_wait = FI_WAIT_FD;
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    warm_up(ep, addr);
    if (rank() == kServer) {
        int fd = -1;
        FT_CALL(fi_control(&ep.cq->fid, FI_GETWAIT, &fd));
        FT_CHECK(fd >= 0, "FI_GETWAIT returned fd %d", fd);
        auto r = post_recv(ep, 256, true, 0xFD);
        fid* fids[1] = {&ep.cq->fid};
        fi_cq_tagged_entry e{};
        // The first fi_trywait before the peer is told to send: the message
        // cannot be in the CQ yet (with the signal first, a stall of 200 ms
        // would let the progress thread complete it, and poll() would never
        // run). beside_sread: then a blocking wait on another CQ.
        fid_cq* other = nullptr;
        if (beside_sread) {
            fi_cq_attr attr{};
            attr.format = FI_CQ_FORMAT_TAGGED;
            attr.wait_obj = FI_WAIT_UNSPEC;
            FT_CALL(fi_cq_open(ep.domain, &attr, &other, nullptr));
        }
        int rc0 = fi_trywait(ep.fabric, fids, 1);
        FT_CHECK(rc0 == 0, "fi_trywait with nothing pending: %d (%s)", rc0, errstr(rc0));
        if (beside_sread) {
            ssize_t n = fi_cq_sread(other, &e, 1, nullptr, 50);
            FT_CHECK(n == -FI_EAGAIN, "fi_cq_sread on the idle CQ: %zd (%s)", n, errstr(n));
            FT_CALL(fi_close(&other->fid));
        }
        bool passed = true;  // fi_trywait already said 0
        signal_peer(kClient, kGo);
        double t0 = now_s(), deadline = t0 + 5.0;
        int wakeups = 0;
        for (;;) {
            int rc = passed ? 0 : fi_trywait(ep.fabric, fids, 1);
            passed = false;
            if (rc == 0) {
                int left_ms = (int)((deadline - now_s()) * 1000);
                FT_CHECK(left_ms > 0, "no completion within 5s");
                pollfd p{fd, POLLIN, 0};
                int n = poll(&p, 1, left_ms);
                FT_CHECK(n == 1, "poll() on the CQ wait fd did not wake within 5s of the peer's send (n=%d)%s", n,
                         beside_sread ? ", after another CQ's fi_cq_sread" : "");
                ++wakeups;
            } else {
                FT_CHECK(rc == -FI_EAGAIN, "fi_trywait: expected 0 or -FI_EAGAIN, got %d (%s)", rc, errstr(rc));
            }
            ssize_t got = fi_cq_read(ep.cq, &e, 1);
            if (got == 1) break;
            FT_CHECK(got == -FI_EAGAIN, "fi_cq_read: %zd (%s)", got, errstr(got));
            FT_CHECK(now_s() < deadline, "no completion within 5s");
        }
        FT_CHECK(wakeups >= 1, "completion found without ever blocking in poll(): fd not exercised");
        FT_CHECK(e.op_context == &r->ctx.fctx, "wrong context %p", e.op_context);
        check(r->buf.data(), 256, 88, "wait_fd payload");
        log("poll() woke %d time(s), completion after %.1f ms", wakeups, (now_s() - t0) * 1e3);
    } else {
        wait_signal(kServer, kGo);
        sleep_ms(200);
        auto s = post_send(ep, addr[kServer], 256, 88, true, 0xFD);
        complete_send(ep, *s);
    }
    barrier();
}

// fi_ep_bind refuses a CQ (and an AV) opened on another domain with
// -FI_EINVAL, as fi_endpoint(3) requires for objects of a different domain;
// the same endpoint then binds its own domain's CQ and AV and enables.
void case_other_domain() {
    Endpoint ep;
    fid_domain* dom2 = nullptr;
    fid_cq *cq2 = nullptr, *cq1 = nullptr;
    fid_av* av2 = nullptr;
    fid_ep* ep2 = nullptr;
    FT_CALL(fi_domain(ep.fabric, ep.info, &dom2, nullptr));
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    FT_CALL(fi_cq_open(dom2, &cq_attr, &cq2, nullptr));
    FT_CALL(fi_cq_open(ep.domain, &cq_attr, &cq1, nullptr));
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    FT_CALL(fi_av_open(dom2, &av_attr, &av2, nullptr));
    FT_CALL(fi_endpoint(ep.domain, ep.info, &ep2, nullptr));
    int rc = fi_ep_bind(ep2, &cq2->fid, FI_TRANSMIT | FI_RECV);
    FT_EQ(rc, -FI_EINVAL, "fi_ep_bind of a CQ from another domain");
    rc = fi_ep_bind(ep2, &cq2->fid, FI_TRANSMIT);
    FT_EQ(rc, -FI_EINVAL, "fi_ep_bind of a CQ from another domain (FI_TRANSMIT only)");
    rc = fi_ep_bind(ep2, &av2->fid, 0);
    FT_EQ(rc, -FI_EINVAL, "fi_ep_bind of an AV from another domain");
    FT_CALL(fi_ep_bind(ep2, &ep.av->fid, 0));
    FT_CALL(fi_ep_bind(ep2, &cq1->fid, FI_TRANSMIT | FI_RECV));
    FT_CALL(fi_enable(ep2));
    FT_CALL(fi_close(&ep2->fid));
    FT_CALL(fi_close(&av2->fid));
    FT_CALL(fi_close(&cq1->fid));
    FT_CALL(fi_close(&cq2->fid));
    FT_CALL(fi_close(&dom2->fid));
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"format_context", 2, [] { run_format<fi_cq_entry>(FI_CQ_FORMAT_CONTEXT); }},
                        {"format_msg", 2, [] { run_format<fi_cq_msg_entry>(FI_CQ_FORMAT_MSG); }},
                        {"format_data", 2, [] { run_format<fi_cq_data_entry>(FI_CQ_FORMAT_DATA); }},
                        {"format_tagged", 2, [] { run_format<fi_cq_tagged_entry>(FI_CQ_FORMAT_TAGGED); }},
                        {"sread_timeout", 2, case_sread_timeout},
                        {"sread_wake", 2, case_sread_wake},
                        {"wait_fd", 2, [] { run_wait_fd(false); }},
                        {"wait_fd_beside_sread", 2, [] { run_wait_fd(true); }},
                        {"other_domain", 1, case_other_domain},
                    });
}
