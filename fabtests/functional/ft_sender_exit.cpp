// A sender that exits right after its sends completed: every message whose
// send completed must still be delivered, byte for byte and with the right
// FI_SOURCE address, although the receiver polls for it only after the
// sender is gone (fi_close, exit() without fi_close, or _exit). Messages
// whose sends never completed (a rendezvous the sender walked away from, a
// segmented message cut by SIGKILL) must end with an error, not a hang.
//
// The receiver (rank 0) runs without the progress helper thread, so nothing
// is taken from its queue while the sender lives. The sender raises its
// rendezvous threshold so that messages of rendezvous size travel eagerly
// through bounce chunks and complete at hand-off.
//
// Shared memory only: over Ethernet a completed send may still need the
// sender for retransmissions (see fabtests/CMakeLists.txt).
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cinttypes>
#include <cstdlib>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kReceiver = 0, kSender = 1;
constexpr double kBound = 15.0;  // seconds for any completion or exit to show up
constexpr uint32_t kPosted = 0x5E0002u;
constexpr uint64_t kTagBase = 0x5E00;

// Inline (compact and full cells), one chunk, several chunks; the largest
// ones are above the default rendezvous threshold (16 KiB). Together they
// take 18 bounce chunks of 32 KiB, below the 32 a pmshm endpoint has, so
// every send completes without the receiver doing anything.
const std::vector<size_t> kSizes = {0,     1,     24,    100,   176,   177,   216,   217,
                                    1000,  4096,  16384, 16385, 32768, 32769, 65543, 200000};

// FI_<PROV>_<what> = value in this process (before fi_getinfo).
void set_prov_env(const char* what, const char* value) {
    std::string var = "FI_" + g_opt.prov.substr(0, g_opt.prov.find(';')) + "_" + what;
    for (char& ch : var) ch = (char)std::toupper((unsigned char)ch);
    FT_CHECK(setenv(var.c_str(), value, 1) == 0, "setenv %s failed", var.c_str());
}

EpConfig source_config() {
    EpConfig cfg;
    cfg.caps |= FI_SOURCE;
    return cfg;
}

enum class Exit { kClose, kExit, kAbandon };

// Rank 1 sends every size, waits for every completion and leaves as `how`
// says; rank 0 polls only once rank 1 has exited, inserting it in its AV
// before (early_av) or only after it is gone.
void run_exit_after_send(Exit how, bool early_av) {
    if (rank() == kReceiver) {
        set_prov_env("PROGRESS_THREAD", "0");
        Endpoint ep(source_config());
        auto names = exchange_names(ep);
        fi_addr_t sender = early_av ? ep.insert(names[kSender]) : FI_ADDR_NOTAVAIL;
        wait_peer_gone(kSender, kBound);  // no progress meanwhile
        info("sender has exited; receiving %zu messages", kSizes.size());
        if (!early_av) {
            for (int i = 0; i < 20; ++i) ep.progress();  // taken in while the sender is unknown
            sender = ep.insert(names[kSender]);
        }
        for (size_t i = 0; i < kSizes.size(); ++i) {
            auto r = post_recv(ep, kSizes[i] + 64, true, kTagBase + i);
            complete_recv(ep, *r, {.len = kSizes[i], .seed = 700u + (uint32_t)i, .tag = kTagBase + i,
                                   .src = sender},
                          kBound);
        }
        ep.expect_quiet(0.05, "after the last message");
        return;
    }
    set_prov_env("RNDV_THRESHOLD", "262144");
    Endpoint ep(source_config());
    auto names = exchange_names(ep);
    fi_addr_t receiver = ep.insert(names[kReceiver]);
    std::vector<XferPtr> tx;
    for (size_t i = 0; i < kSizes.size(); ++i)
        tx.push_back(post_send(ep, receiver, kSizes[i], 700u + (uint32_t)i, true, kTagBase + i));
    for (auto& s : tx) complete_send(ep, *s, kBound);
    log("all %zu sends completed; leaving", tx.size());
    switch (how) {
    case Exit::kClose:
        ep.close();
        return;  // the launcher's _exit(0)
    case Exit::kExit:
        std::fflush(stdout);
        std::exit(0);  // atexit handlers run, fi_close never does
    case Exit::kAbandon:
        std::fflush(stdout);
        _exit(0);  // nothing runs
    }
}

// Rank 1 posts a rendezvous send (default threshold) and closes while it
// is still pending; rank 0 then matches it and must see an error.
void case_unfinished_rndv() {
    constexpr size_t kLen = 1u << 20;
    if (rank() == kReceiver) {
        set_prov_env("PROGRESS_THREAD", "0");
        Endpoint ep(source_config());
        auto names = exchange_names(ep);
        fi_addr_t sender = ep.insert(names[kSender]);
        wait_peer_gone(kSender, kBound);
        auto r = post_recv(ep, kLen, true, kTagBase);
        Comp c = ep.wait_ctx(&r->ctx, "receive of a rendezvous message whose sender left", kBound);
        info("receive: %s", describe(c).c_str());
        FT_CHECK(c.is_err && c.err > 0, "expected an error completion, saw %s", describe(c).c_str());
        // The endpoint still works: a message to itself goes through.
        auto self = ep.insert(names[kReceiver]);
        auto r2 = post_recv(ep, 5000, true, kTagBase + 1);
        auto s2 = post_send(ep, self, 5000, 42, true, kTagBase + 1);
        complete_send(ep, *s2, kBound);
        complete_recv(ep, *r2, {.len = 5000, .seed = 42, .tag = kTagBase + 1}, kBound);
        (void)sender;
        return;
    }
    Endpoint ep(source_config());
    auto names = exchange_names(ep);
    fi_addr_t receiver = ep.insert(names[kReceiver]);
    auto s = post_send(ep, receiver, kLen, 9, true, kTagBase);
    for (int i = 0; i < 50; ++i) ep.progress();
    ep.close();  // the send is still pending
}

// Rank 1 starts a segmented message too large for its bounce chunks and is
// killed while the rest waits for the receiver; rank 0 must get an error
// for it (FI_ECONNRESET once the peer timeout finds the sender dead).
void case_killed_midway() {
    constexpr size_t kLen = 3u << 20;
    if (rank() == kReceiver) {
        set_prov_env("PROGRESS_THREAD", "0");
        Endpoint ep(source_config());
        auto names = exchange_names(ep);
        fi_addr_t sender = ep.insert(names[kSender]);
        wait_signal(kSender, kPosted, kBound);
        wait_peer_gone(kSender, kBound);
        auto r = post_recv(ep, kLen, true, kTagBase, 0, sender);
        Comp c = ep.wait_ctx(&r->ctx, "receive of a message whose sender was killed midway", kBound);
        info("receive: %s", describe(c).c_str());
        FT_CHECK(c.is_err && c.err == FI_ECONNRESET, "expected an FI_ECONNRESET error completion, saw %s",
                 describe(c).c_str());
        return;
    }
    set_prov_env("RNDV_THRESHOLD", "8388608");
    Endpoint ep(source_config());
    auto names = exchange_names(ep);
    fi_addr_t receiver = ep.insert(names[kReceiver]);
    auto s = post_send(ep, receiver, kLen, 11, true, kTagBase);
    double t0 = now_s();
    while (now_s() - t0 < 0.2) ep.progress();  // as many segments as fit
    FT_CHECK(!ep.take_ctx(&s->ctx), "the 3 MiB send completed although the receiver took nothing");
    signal_peer(kReceiver, kPosted);
    kill(getpid(), SIGKILL);
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"close", 2, [] { run_exit_after_send(Exit::kClose, false); }},
                        {"exit", 2, [] { run_exit_after_send(Exit::kExit, true); }},
                        {"abandon", 2, [] { run_exit_after_send(Exit::kAbandon, false); }},
                        {"unfinished_rndv", 2, case_unfinished_rndv},
                        {"killed_midway", 2, case_killed_midway, 1u << kSender},
                    });
}
