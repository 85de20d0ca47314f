// ft_rawpp: the floor for pmeth. Two processes bounce raw Ethernet frames
// through the same wire backend pmeth uses (AF_PACKET, mmap'ed rings, one
// kick per frame), with no protocol at all: no reliability, no matching, no
// checksum. Reports the half round trip (lat_us) per frame size.
//   ft_rawpp [-S size] [-n iters] [-c cpu0,cpu1] [-v] [--short]
// The interface is FI_PMETH_IFACE (per rank with FT_IFACE / FT_NETNS).
#include <cstdlib>
#include <cstring>
#include <string>

#include "ft_bench.h"
#include "ft_proc.h"
#include "wire/wire.hpp"

using namespace ft;

namespace {

constexpr uint16_t kEtherType = 0x88B6;  // not pmeth's: the two never mix

void run(size_t size, long iters) {
    const char* ifc = getenv("FI_PMETH_IFACE");
    FT_CHECK(ifc && *ifc, "set FI_PMETH_IFACE (or FT_IFACE) to the interface to use");
    uint32_t me = 0x7a000000u | (uint32_t)rank(), peer = 0x7a000000u | (uint32_t)(1 - rank());
    int err = 0;
    std::string why;
    pm::eth::WireConfig wc{ifc, kEtherType, me, 1u << 20, 1u << 20};
    auto w = pm::eth::open_packet_wire(wc, &err, &why);
    FT_CHECK(w, "AF_PACKET on %s: %s", ifc, why.c_str());
    std::vector<uint8_t> mac(w->mac(), w->mac() + 6);
    oob_send_bytes(1 - rank(), mac);
    std::vector<uint8_t> pmac = oob_recv_bytes(1 - rank());
    FT_CHECK(pmac.size() == 6, "peer MAC");
    // Frame: Ethernet header, then the destination id at byte 22 (the
    // backend's filter looks there), then the payload.
    size_t flen = std::max<size_t>(26 + size, 60);
    std::vector<uint8_t> f(flen, 0);
    memcpy(f.data(), pmac.data(), 6);
    memcpy(f.data() + 6, mac.data(), 6);
    f[12] = kEtherType >> 8;
    f[13] = kEtherType & 0xff;
    memcpy(f.data() + 22, &peer, 4);
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
    for (long i = 0; i < warm + iters; ++i) {
        if (i == warm) t0 = now_s();
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
        print_result("raw_af_packet", "pingpong", size, iters, lat_us, (double)size / lat_us, 1.0 / lat_us);
    }
}

}  // namespace

int main(int argc, char** argv) {
    parse_options(argc, argv);
    set_identity("", "rawpp", -1);
    const long iters = bench_iters(20000, 200);
    std::vector<size_t> sizes = bench_sizes({8, 64, 1024, 1400});
    Case c{"rawpp", 2, [&] {
               for (size_t s : sizes) run(s, iters);
           }};
    return run_case(c) ? 0 : 1;
}
