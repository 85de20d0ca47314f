// ft_rawpp: the floor for pmeth. Two processes bounce raw Ethernet frames
// through the same wire backend pmeth uses (AF_PACKET, mmap'ed rings, one
// kick per frame), with no protocol at all: no reliability, no matching, no
// checksum. Reports the half round trip (lat_us) per frame size (and its
// spread with FT_PP_SPREAD=1, ft_bench.h).
// With -m stream, the bandwidth floor instead: rank 1 sends messages of
// `size` bytes cut into frames as full as the MTU allows, a window of 64
// frames at a time (fewer where the ring is small) with a kick every 16,
// and rank 0 answers each window with one frame (as ft_bw's ack per
// window); bw_MBps counts payload bytes.
//   ft_rawpp [-m pingpong|stream] [-S size] [-n iters] [-c cpu0,cpu1] [-v] [--short]
// The interface is FI_PMETH_IFACE (per rank with FT_IFACE / FT_NETNS).
// FT_RAW_GSO=1 opens the wire as pmeth's GSO mode does (every protocol
// received, virtio-net headers, 8 KiB receive slots), to tell that mode's
// kernel cost from pmeth's own.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <cstring>
#include <string>

#include <unistd.h>

#include "ft_bench.h"
#include "ft_proc.h"
#include "wire/wire.hpp"

using namespace ft;

namespace {

constexpr uint16_t kEtherType = 0x88B6;  // not pmeth's: the two never mix

// This rank's wire on FI_PMETH_IFACE, and a frame with room for `payload`
// bytes (kFull: as many as the MTU allows) addressed to the other rank:
// Ethernet header, then the destination id at byte 22 (the backend's filter
// looks there), then zeros; at least 60 bytes.
struct RawWire {
    std::unique_ptr<pm::eth::Wire> w;
    std::vector<uint8_t> frame;
};
constexpr size_t kFull = SIZE_MAX;
RawWire open_raw(size_t ring_bytes, size_t payload) {
    const char* ifc = getenv("FI_PMETH_IFACE");
    FT_CHECK(ifc && *ifc, "set FI_PMETH_IFACE (or FT_IFACE) to the interface to use");
    // Ids of this run's ranks only (the pid), exchanged with the MACs: two
    // runs on one interface (ctest -j) never take each other's frames.
    uint32_t me = 0x7a000000u ^ (uint32_t)getpid();
    int err = 0;
    std::string why;
    pm::eth::WireConfig wc{ifc, kEtherType, me, ring_bytes, ring_bytes};
    const char* gso = getenv("FT_RAW_GSO");
    wc.gso = gso && std::strcmp(gso, "1") == 0;
    RawWire r;
    r.w = pm::eth::open_packet_wire(wc, &err, &why);
    FT_CHECK(r.w, "AF_PACKET on %s: %s", ifc, why.c_str());
    std::vector<uint8_t> mac(r.w->mac(), r.w->mac() + 6);
    mac.resize(10);
    memcpy(mac.data() + 6, &me, 4);
    oob_send_bytes(1 - rank(), mac);
    std::vector<uint8_t> pmac = oob_recv_bytes(1 - rank());
    FT_CHECK(pmac.size() == 10, "peer MAC and id");
    uint32_t peer;
    memcpy(&peer, pmac.data() + 6, 4);
    pmac.resize(6);
    mac.resize(6);
    // 26 header bytes, 12 of them outside the MTU's count
    size_t flen = payload == kFull ? r.w->mtu() + 14 : 26 + payload;
    r.frame.assign(std::max<size_t>(flen, 60), 0);
    std::copy(pmac.begin(), pmac.end(), r.frame.begin());
    std::copy(mac.begin(), mac.end(), r.frame.begin() + 6);
    r.frame[12] = kEtherType >> 8;
    r.frame[13] = kEtherType & 0xff;
    memcpy(r.frame.data() + 22, &peer, 4);
    return r;
}

void run(size_t size, long iters) {
    RawWire raw = open_raw(1u << 20, size);
    auto& w = raw.w;
    std::vector<uint8_t>& f = raw.frame;
    const size_t flen = f.size();
    if (verify_mode()) fill(f.data() + 26, flen - 26, 77);
    pm::eth::Frame fr{f.data(), flen};
    auto recv_one = [&](long i) {
        double deadline = -1;
        for (unsigned spins = 0;; ++spins) {
            pm::eth::Frame in[4];
            int n = w->rx_burst(in, 1);
            if (n) {
                FT_CHECK(in[0].len >= flen, "frame %ld: %zu bytes, expected %zu", i, in[0].len, flen);
                if (verify_mode()) check(in[0].data + 26, flen - 26, 77, "raw frame payload");
                w->rx_release();
                return;
            }
            if (spins % 4096 == 0) {
                double t = now_s();
                if (deadline < 0) deadline = t + 5;
                FT_CHECK(t < deadline, "frame %ld never arrived (raw frames are not retransmitted)", i);
            }
        }
    };
    auto send_one = [&] {
        FT_CHECK(w->tx_burst(&fr, 1) == 1, "transmit ring full");
        w->tx_flush();
    };
    const long warm = iters / 10 + 1;
    barrier();
    double t0 = 0;
    RoundTrips rt(iters);
    for (long i = 0; i < warm + iters; ++i) {
        if (i == warm) t0 = now_s();
        if (i >= warm && rank() == 1) rt.mark();
        if (rank() == 1) {
            send_one();
            recv_one(i);
        } else {
            recv_one(i);
            send_one();
        }
    }
    if (rank() == 1) {
        double lat_us = (now_s() - t0) / (2.0 * (double)iters) * 1e6;
        rt.mark();
        rt.report("raw pingpong");
        print_result("raw_af_packet", "pingpong", size, iters, lat_us, (double)size / lat_us, 1.0 / lat_us);
    }
}

// The stream: a frame's payload starts with its window number and its index
// in the window (u32 each); the window's last frame (index kWindow - 1) asks
// for the answer, a frame carrying that window's number.
constexpr uint32_t kWindow = 64, kKick = 16;

void stream(size_t size, long iters) {
    RawWire raw = open_raw(4u << 20, kFull);
    auto& w = raw.w;
    std::vector<uint8_t>& f = raw.frame;
    const size_t maxp = f.size() - 26;
    const size_t frames_per_msg = std::max<size_t>((size + maxp - 1) / maxp, 1);
    const uint64_t total = frames_per_msg * (uint64_t)iters;
    // (fewer where the receive ring holds fewer than two windows: lo's 64 KiB frames)
    const uint32_t window = (uint32_t)std::clamp<size_t>(w->rx_capacity() / 2, 1, kWindow);
    if (verify_mode()) fill(f.data() + 34, f.size() - 34, 77);
    auto wait_frames = [&](auto&& on_frame, const char* what) {
        double deadline = now_s() + 5;
        for (unsigned spins = 0;; ++spins) {
            pm::eth::Frame in[64];
            int n = w->rx_burst(in, 64);
            bool done = false;
            for (int i = 0; i < n; i++) done |= on_frame(in[i]);
            if (n) w->rx_release();
            if (done) return;
            if (spins % 4096 == 0) FT_CHECK(now_s() < deadline, "%s never arrived (raw frames are not retransmitted)", what);
        }
    };
    barrier();
    double t0 = now_s();
    uint64_t arrived = 0;
    if (rank() == 1) {
        uint64_t sent = 0;
        for (uint32_t win = 0; sent < total; win++) {
            uint32_t n = (uint32_t)std::min<uint64_t>(window, total - sent);
            for (uint32_t i = 0; i < n; i++) {
                uint64_t left = (sent + i) % frames_per_msg == frames_per_msg - 1 && size % maxp ? size % maxp : maxp;
                size_t flen = std::max<size_t>(26 + std::max<uint64_t>(std::min<uint64_t>(left, size), 8), 60);
                uint32_t idx = i == n - 1 ? kWindow - 1 : i;
                memcpy(f.data() + 26, &win, 4);
                memcpy(f.data() + 30, &idx, 4);
                pm::eth::Frame fr{f.data(), flen};
                for (double give_up = now_s() + 5; w->tx_burst(&fr, 1) != 1;) {
                    w->tx_flush();
                    FT_CHECK(now_s() < give_up, "no transmit slot came back within 5 s");
                }
                if (i % kKick == kKick - 1 || i == n - 1) w->tx_flush();
            }
            sent += n;
            wait_frames([&](const pm::eth::Frame& in) {
                uint32_t got_win = 0;
                if (in.len >= 34) memcpy(&got_win, in.data + 26, 4);
                return got_win == win;
            }, "the window's answer");
        }
        double el = now_s() - t0;
        print_result("raw_af_packet", "stream", size, iters, el / (double)iters * 1e6,
                     (double)size * (double)iters / el / 1e6, (double)iters / el / 1e6);
    } else {
        uint32_t win = 0;
        while (arrived < total) {
            wait_frames([&](const pm::eth::Frame& in) {
                FT_CHECK(in.len >= 34, "a %zu-byte frame", in.len);
                uint32_t fw, idx;
                memcpy(&fw, in.data + 26, 4);
                memcpy(&idx, in.data + 30, 4);
                if (verify_mode() && in.len > 60) check(in.data + 34, in.len - 34, 77, "raw frame payload");
                arrived++;
                win = fw;
                return idx == kWindow - 1;
            }, "the window's last frame");
            memcpy(f.data() + 26, &win, 4);
            pm::eth::Frame fr{f.data(), 60};
            FT_CHECK(w->tx_burst(&fr, 1) == 1, "transmit ring full");
            w->tx_flush();
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    parse_options(argc, argv);
    set_identity("", "rawpp", -1);
    const bool streaming = g_opt.mode == "stream";
    FT_CHECK(g_opt.mode.empty() || streaming || g_opt.mode == "pingpong", "-m %s: pingpong or stream", g_opt.mode.c_str());
    const long iters = bench_iters(streaming ? 2000 : 20000, 200);
    std::vector<size_t> sizes = bench_sizes(streaming ? std::vector<size_t>{65536} : std::vector<size_t>{8, 64, 1024, 1400});
    Case c{"rawpp", 2, [&] {
               for (size_t s : sizes) streaming ? stream(s, iters) : run(s, iters);
           }};
    return run_case(c) ? 0 : 1;
}
