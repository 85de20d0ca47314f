// pmfabric fabtests: post/complete helpers for one message with a verified
// payload. Tests orchestrate; these helpers do the posting and checking.
#pragma once

#include <memory>

#include "ft_fabric.h"

namespace ft {

struct Xfer {
    std::vector<uint8_t> buf;
    OpCtx ctx;
    bool tagged = false;
    uint64_t tag = 0;
    size_t len = 0;     // send: message length; recv: buffer length
    uint32_t seed = 0;  // send: payload stream
    std::string what;   // description used in failure messages
};
using XferPtr = std::unique_ptr<Xfer>;

// Post a receive of `buflen` bytes (fi_recv / fi_trecv). src selects a
// directed receive (FI_ADDR_UNSPEC = any source).
XferPtr post_recv(Endpoint& ep, size_t buflen, bool tagged, uint64_t tag = 0,
                  uint64_t ignore = 0, fi_addr_t src = FI_ADDR_UNSPEC);

// Post a send of `len` bytes of stream `seed` (fi_send / fi_tsend).
XferPtr post_send(Endpoint& ep, fi_addr_t dest, size_t len, uint32_t seed, bool tagged,
                  uint64_t tag = 0);

struct RecvExpect {
    size_t len = 0;            // expected message length
    uint32_t seed = 0;         // expected payload stream
    std::optional<uint64_t> tag;   // expected tag (tagged only)
    std::optional<uint64_t> data;  // expected remote CQ data
    std::optional<fi_addr_t> src;  // expected source (FI_SOURCE)
};

// Wait for the receive to complete successfully and verify everything:
// flags FI_RECV|FI_MSG or FI_RECV|FI_TAGGED, len, tag, data, source and
// payload (byte for byte). Returns the completion.
Comp complete_recv(Endpoint& ep, Xfer& x, const RecvExpect& e, double timeout_s = kWait);

// Wait for the send completion: success with FI_SEND|FI_MSG or FI_SEND|FI_TAGGED.
Comp complete_send(Endpoint& ep, Xfer& x, double timeout_s = kWait);

// Check a success receive completion's flags and fields against expectations
// (used where the receive was posted by hand, e.g. with iovs or fi_recvmsg).
void check_recv_comp(const Comp& c, bool tagged, const RecvExpect& e, const void* posted_buf,
                     const char* what);

// Send `len` bytes to an address that must not work (removed, closed or
// non-existent peer). Passes if fi_tsend returns an error other than
// -FI_EAGAIN, or if the send completes with an error entry, all within
// bound_s seconds; fails on a successful completion or if the bound passes
// (a hang). Returns a description of how it failed.
std::string send_expect_failure(Endpoint& ep, fi_addr_t dest, size_t len, double bound_s);
// Same, inserting `name` first; an fi_av_insert refusal also passes.
std::string send_to_name_expect_failure(Endpoint& ep, const std::vector<uint8_t>& name, size_t len,
                                        double bound_s);

// Scratch buffer large enough for `len` (never zero-sized).
inline std::vector<uint8_t> make_buf(size_t len) { return std::vector<uint8_t>(len ? len : 1); }

}  // namespace ft
