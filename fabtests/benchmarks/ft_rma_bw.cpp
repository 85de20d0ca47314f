// ft_rma_bw: one-sided bandwidth, fi_write (-m write, default) or fi_read
// (-m read), with a window of W outstanding operations into W distinct
// slots of a region the server (rank 0) registered (FI_MR_VIRT_ADDR mode).
//   ft_rma_bw -p <prov> [-m write|read] [-S size] [-W window] [-n windows] [-c cpu0,cpu1] [-v] [--short]
//
// The client (rank 1) posts W operations, waits for their W completions and
// repeats; the server only progresses its endpoint (manual progress) until
// the client's tagged "done" message arrives. Write completions are only
// transmit-complete, so the server checks the written slots after the run
// (waiting for them to land); with -v the client writes a new pattern every
// window and the server checks each window (a tagged message per window, so
// -v numbers are not bandwidth figures). Reads are checked by the client:
// the last window, with -v every window (buffers cleared before each).
#include <algorithm>
#include <cstring>

#include "ft_bench.h"
#include "ft_rma.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1;
constexpr uint64_t kCtlTag = 0xC7100;

bool g_write = true;

uint32_t slot_seed(long win, int j) { return (uint32_t)(win * 7919 + j + 1); }

// One control byte as a tagged message: it keeps the server in a tight
// fi_cq_read loop (its progress) instead of polling the OOB socket.
void ctl_send(Endpoint& ep, BenchCq& cq, fi_addr_t peer) {
    static uint8_t byte = 1;
    OpCtx ctx;
    cq.post("control fi_tsend", [&] { return fi_tsend(ep.ep, &byte, 1, nullptr, peer, kCtlTag, &ctx.fctx); });
    cq.wait(&ctx, "control send");
}

// Server: spins on its CQ (BenchCq) for the whole run, bounded by -T.
void server(Endpoint& ep, BenchCq& cq, const std::vector<fi_addr_t>& addr, size_t size, int window, long total) {
    const bool verify = verify_mode();
    const size_t bytes = size * (size_t)window;
    std::vector<uint8_t> buf(bytes ? bytes : 1);
    for (int j = 0; j < window; ++j) fill(buf.data() + (size_t)j * size, size, g_write ? 0x5EED : slot_seed(0, j));
    Region r(ep, buf.data(), buf.size(), FI_REMOTE_WRITE | FI_REMOTE_READ, 0xB3);
    send_remote(kClient, r.remote());
    uint8_t rbyte = 0;
    OpCtx rctx;
    auto progress = [&] { cq.poll(); };
    auto recv_ctl = [&](const char* what) {
        cq.post("control fi_trecv", [&] {
            return fi_trecv(ep.ep, &rbyte, 1, nullptr, FI_ADDR_UNSPEC, kCtlTag, 0, &rctx.fctx);
        });
        cq.wait(&rctx, what, g_opt.timeout_s);
    };
    barrier(progress);
    if (verify && g_write)
        for (long w = 0; w < total; ++w) {
            recv_ctl("window done");
            for (int j = 0; j < window; ++j)
                wait_landed(progress, buf.data() + (size_t)j * size, size, slot_seed(w, j), "written slot");
            ctl_send(ep, cq, addr[kClient]);
        }
    recv_ctl("client done");
    if (g_write && !verify)  // the client wrote the same slot contents every window
        for (int j = 0; j < window; ++j)
            wait_landed(progress, buf.data() + (size_t)j * size, size, slot_seed(0, j), "written slot");
    ctl_send(ep, cq, addr[kClient]);
    barrier(progress);
}

void client(Endpoint& ep, BenchCq& cq, const std::vector<fi_addr_t>& addr, size_t size, int window, long warm,
            long total) {
    const bool verify = verify_mode();
    const size_t bytes = size * (size_t)window;
    std::vector<uint8_t> buf(bytes ? bytes : 1);
    RemoteMr rm = recv_remote(ep, kServer);
    std::vector<OpCtx> ctx((size_t)window);
    uint8_t rbyte = 0;
    OpCtx rctx;
    auto post_ctl_recv = [&] {
        cq.post("control fi_trecv", [&] {
            return fi_trecv(ep.ep, &rbyte, 1, nullptr, FI_ADDR_UNSPEC, kCtlTag, 0, &rctx.fctx);
        });
    };
    if (g_write)
        for (int j = 0; j < window; ++j) fill(buf.data() + (size_t)j * size, size, slot_seed(0, j));
    barrier([&] { cq.poll(); });
    double t0 = now_s();
    for (long w = 0; w < total; ++w) {
        if (w == warm) t0 = now_s();
        if (verify && g_write)
            for (int j = 0; j < window; ++j) fill(buf.data() + (size_t)j * size, size, slot_seed(w, j));
        if (verify && !g_write) std::memset(buf.data(), 0, bytes);
        for (int j = 0; j < window; ++j) {
            uint8_t* b = buf.data() + (size_t)j * size;
            const uint64_t ra = rm.at((size_t)j * size);
            fi_context* c = &ctx[(size_t)j].fctx;
            if (g_write)
                cq.post("fi_write", [&] { return fi_write(ep.ep, b, size, nullptr, addr[kServer], ra, rm.key, c); });
            else
                cq.post("fi_read", [&] { return fi_read(ep.ep, b, size, nullptr, addr[kServer], ra, rm.key, c); });
        }
        cq.wait_all(ctx, (size_t)window, g_write ? "fi_write completion" : "fi_read completion");
        if (!g_write && (verify || w == total - 1))
            for (int j = 0; j < window; ++j) check(buf.data() + (size_t)j * size, size, slot_seed(0, j), "read slot");
        if (verify && g_write) {  // the server checks this window
            post_ctl_recv();
            ctl_send(ep, cq, addr[kServer]);
            cq.wait(&rctx, "server's window check");
        }
    }
    const double secs = now_s() - t0;
    post_ctl_recv();
    ctl_send(ep, cq, addr[kServer]);  // done
    cq.wait(&rctx, "server's final check");
    const long iters = total - warm;
    const double ops = (double)iters * window;
    print_result(g_opt.prov, g_write ? "rma_write" : "rma_read", size, iters * window, secs / ops * 1e6,
                 (double)size * ops / secs / 1e6, ops / secs / 1e6);
    barrier([&] { cq.poll(); });
}

}  // namespace

int main(int argc, char** argv) {
    parse_options(argc, argv);
    const std::string mode = g_opt.mode.empty() ? "write" : g_opt.mode;
    if (mode != "write" && mode != "read") {
        std::fprintf(stderr, "ft_rma_bw: -m must be write or read\n");
        return 2;
    }
    g_write = mode == "write";
    set_identity("", "rma_" + mode, -1);
    const auto sizes = bench_sizes({4096, 65536, 1u << 20});
    const int W = g_opt.window > 0 ? g_opt.window : 64;
    const long n = bench_iters(200, 3);
    Case c{"rma_" + mode, 2, [&] {
               Endpoint ep(one_sided_config(kMrVirt));
               auto addr = connect_all(ep);
               BenchCq cq(ep);
               const long warm = std::max(1L, n / 10);
               for (size_t s : sizes) {
                   if (rank() == kServer) server(ep, cq, addr, s, W, warm + n);
                   else client(ep, cq, addr, s, W, warm, warm + n);
               }
           }};
    return run_case(c) ? 0 : 1;
}
