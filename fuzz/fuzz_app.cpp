// What fuzz_app.hpp declares: the sanitizer defaults of every harness and
// the seed conversations every harness starts from.
#include "fuzz_app.hpp"

// Debian's libfabric pulls in libinfinipath (PSM), whose constructor installs
// a SIGSEGV handler that calls exit(): a wild access would end the run as
// "fuzz target exited" without ASan's report. ASan keeps its own handler
// when programs may not install one. SIGBUS stays pmshm's: it survives
// regions truncated under it. Leaks are reported.
extern "C" const char* __asan_default_options() {
  return "allow_user_segv_handler=0:handle_sigbus=0:detect_leaks=1";
}

namespace pm::fuzz {

std::vector<Seed> core_seeds(uint16_t kSeg) {
  std::vector<Seed> out;
  auto add = [&](const char* name, uint8_t variant) -> Writer& {
    out.push_back(Seed{name, Writer()});
    return out.back().w.u8(variant);
  };
  {
    Writer& w = add("eager_unexpected_then_trecv", 0);
    core(w, kPktEager, kPktTagged, 1, 0x77, 100, 0, 100);
    app(w, kAppRecv, 1, 4096, 0x77).value(0);
  }
  {
    Writer& w = add("trecv_then_eager_cqdata", 0);
    app(w, kAppRecv, 1, 4096, 0x77).value(0);
    core(w, kPktEager, kPktTagged | kPktCqData, 2, 0x77, 64, 0, 64);
  }
  {
    Writer& w = add("segmented_unexpected", 0);
    core(w, kPktEager, 0, 3, 0, 3000, 0, kSeg);
    core(w, kPktData, 0, 3, 0, 3000, kSeg, kSeg);
    core(w, kPktData, 0, 3, 0, 3000, 2 * kSeg, 3000 - 2 * kSeg);
    app(w, kAppRecv, 0, 4096, 0);
  }
  {
    // Segments at the edges: one ending exactly at msg_len, one starting
    // there (offset = the reference, msg_len, plus 0: dropped), the rest.
    Writer& w = add("segmented_unexpected_edges", 0);
    core(w, kPktEager, 0, 8, 0, 3000, 0, 1000);
    w.u8(kRecCore).u8(kPktData).u8(0).u16(0).u8(0).ref_plus(0).value(0).u8(0).value(3000).u8(kValRefMinus)
        .u8(200).u16(200).blob({1, 2, 3});
    w.u8(kRecCore).u8(kPktData).u8(0).u16(0).u8(0).ref_plus(0).value(0).u8(0).value(3000).ref_plus(0).u16(300).blob(
        {4, 5, 6});
    core(w, kPktData, 0, 8, 0, 3000, 1000, kSeg);
    core(w, kPktData, 0, 8, 0, 3000, 1000 + kSeg, 1800 - kSeg);
    app(w, kAppRecv, 0, 4096, 0);
  }
  // Boundary values a peer may put in 64-bit fields: 2^64 - 1 as an offset
  // or a length, with nothing to copy (so each is dropped or refused).
  {
    Writer& w = add("data_offset_top_empty", 0);
    core(w, kPktEager, 0, 9, 0, 3000, 0, 1000);
    w.u8(kRecCore).u8(kPktData).u8(0).u16(0).u8(0).ref_plus(0).value(0).u8(0).value(3000).u8(kValTop)
        .u8(0).u16(0).blob({});
  }
  {
    Writer& w = add("posted_data_offset_top_empty", 0);
    app(w, kAppRecv, 0, 4096, 0);
    core(w, kPktEager, 0, 9, 0, 3000, 0, 1000);
    w.u8(kRecCore).u8(kPktData).u8(0).u16(0).u8(0).ref_plus(0).value(0).u8(0).value(3000).u8(kValTop)
        .u8(0).u16(0).blob({});
  }
  {
    Writer& w = add("rma_addr_top", 0);
    std::vector<uint8_t> p(8, 0);
    w.u8(kRecCore).u8(kPktWrite).u8(0).u16(0).u8(0).value(1).ref_plus(0).u8(0).value(0).u8(kValTop).u8(0)
        .u16(8).blob(p);
    w.u8(kRecCore).u8(kPktRead).u8(0).u16(0).u8(0).value(2).ref_plus(0).u8(0).u8(kValTop).u8(0)
        .ref_plus(0).u16(0).blob({});
  }
  {
    Writer& w = add("rma_write_segment_offset_top", 0);
    std::vector<uint8_t> p(8, 0xff);
    rma(w, kPktWrite, 0, 0, 64, 0, 8, p);
  }
  {
    Writer& w = add("segmented_posted", 0);
    app(w, kAppRecv, 0, 4096, 0);
    core(w, kPktEager, 0, 4, 0, 3000, 0, kSeg);
    core(w, kPktData, 0, 4, 0, 3000, kSeg, kSeg);
    core(w, kPktData, 0, 4, 0, 3000, 2 * kSeg, 3000 - 2 * kSeg);
  }
  {
    Writer& w = add("segmented_truncated", 0);
    app(w, kAppRecv, 0, 1000, 0);
    core(w, kPktEager, 0, 5, 0, 2000, 0, kSeg);
    core(w, kPktData, 0, 5, 0, 2000, kSeg, 2000 - kSeg);
  }
  {
    Writer& w = add("rts_posted", 0);
    app(w, kAppRecv, 1, 70000, 9).value(0);
    core(w, kPktRts, kPktTagged, 6, 9, 70000, 0, 0);
    core(w, kPktData, kPktTagged, 6, 9, 70000, 0, kSeg);
    core(w, kPktData, kPktTagged, 6, 9, 70000, kSeg, kSeg);
  }
  {
    Writer& w = add("rts_unexpected_then_trecv", 0);
    core(w, kPktRts, kPktTagged, 7, 9, 20000, 0, 0);
    app(w, kAppRecv, 1, 20000, 9).value(0);
    core(w, kPktData, kPktTagged, 7, 9, 20000, 0, kSeg);
  }
  {
    Writer& w = add("multi_recv", 0);
    app(w, kAppRecv, 4, 8192, 0).u16(1024);
    for (uint64_t i = 0; i < 4; i++) core(w, kPktEager, 0, 10 + i, 0, 700, 0, 700);
    core(w, kPktEager, 0, 20, 0, 2000, 0, kSeg);
    core(w, kPktData, 0, 20, 0, 2000, kSeg, 2000 - kSeg);
  }
  {
    Writer& w = add("peek_claim", 0);
    core(w, kPktEager, kPktTagged, 30, 5, 40, 0, 40);
    app(w, kAppRecv, 1 | 8 | 16, 64, 5).value(0);   // peek + claim
    app(w, kAppRecv, 1 | 16, 64, 5).value(0).u8(0); // claim it
  }
  {
    Writer& w = add("peek_discard_partial", 0);
    core(w, kPktEager, kPktTagged, 31, 5, 3000, 0, kSeg);
    app(w, kAppRecv, 1 | 8 | 32, 64, 5).value(0);
    core(w, kPktData, kPktTagged, 31, 5, 3000, kSeg, kSeg);
    core(w, kPktData, kPktTagged, 31, 5, 3000, 2 * kSeg, 3000 - 2 * kSeg);
  }
  {
    Writer& w = add("cancel_recv", 0);
    app(w, kAppRecv, 1, 100, 3).value(0);
    app(w, kAppCancel, 0, 0, 0);
    core(w, kPktEager, kPktTagged, 32, 3, 10, 0, 10);
  }
  {
    Writer& w = add("rma_write", 0);
    std::vector<uint8_t> p(8 + 64, 0x11);
    memset(p.data(), 0, 8);
    rma(w, kPktWrite, kPktCqData, 0, 64, 16, 72, p);
  }
  {
    Writer& w = add("rma_write_segmented", 0);
    std::vector<uint8_t> p(8 + 100, 0x22);
    memset(p.data(), 0, 8);
    rma(w, kPktWrite, 0, 0, 200, 0, 108, p);
    p[0] = 100;
    rma(w, kPktWrite, 0, 0, 200, 0, 108, p);
  }
  {
    Writer& w = add("rma_read", 0);
    rma(w, kPktRead, 0, 0, 3000, 8, 0, {});
    poll(w, 8);
  }
  {
    Writer& w = add("atomic_fetch_sum", 0);
    std::vector<uint8_t> p(16, 1);
    rma(w, kPktAtomic, kPktFetch, uint16_t(FI_SUM | (FI_UINT64 << 8)), 2, 64, 16, p);
  }
  {
    Writer& w = add("atomic_cswap", 0);
    std::vector<uint8_t> p(16, 0);
    rma(w, kPktAtomic, kPktFetch | kPktCompare, uint16_t(FI_CSWAP | (FI_UINT64 << 8)), 1, 128, 16, p);
  }
  {
    Writer& w = add("rma_offset_mode", 1);
    std::vector<uint8_t> p(8 + 32, 0x33);
    memset(p.data(), 0, 8);
    rma(w, kPktWrite, 0, 0, 32, 100, 40, p);
    rma(w, kPktRead, 0, 0, 32, 100, 0, {});
  }
  {
    Writer& w = add("source_directed", 1);
    app(w, kAppRecv, 1 | 2, 256, 4).value(0);
    core(w, kPktEager, kPktTagged, 40, 4, 200, 0, 200);
  }
  {
    Writer& w = add("send_eager_to_peer", 0);
    app(w, kAppSend, 1, 100, 8);
    poll(w, 4);
  }
  {
    Writer& w = add("send_rndv_cts_ack", 0);
    app(w, kAppSend, 1, 40000, 8);
    poll(w, 2);
    reply(w, kPktCts, 0, 0, 0, 40000, 0, 0);  // CTS for the RTS
    poll(w, 8);
  }
  {
    Writer& w = add("send_rndv_fin", 0);
    app(w, kAppSend, 0, 30000, 0);
    poll(w, 2);
    reply(w, kPktFin, 0, 0, 0, 0, 0, 0);
  }
  {
    Writer& w = add("read_from_peer", 0);
    app(w, kAppRead, 0, 100, 0).value(0x1000).value(5);
    poll(w, 2);
    reply(w, kPktReadResp, 0, 0, 0, 100, 0, 100);
  }
  {
    Writer& w = add("write_to_peer_ack", 0);
    app(w, kAppWrite, 0, 100, 0).value(0x1000).value(5);
    poll(w, 2);
    reply(w, kPktRmaAck, 0, 0, 0, 0, 0, 0);
  }
  {
    Writer& w = add("atomic_to_peer_resp", 0);
    app(w, kAppAtomic, 0, 1, 0).value(0x1000).value(5);
    poll(w, 2);
    reply(w, kPktAtomicResp, 0, 0, 0, 16, 0, 16);
  }
  return out;
}

}  // namespace pm::fuzz
