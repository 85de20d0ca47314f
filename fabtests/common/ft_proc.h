// pmfabric fabtests: multi-process launcher and out-of-band (OOB) channel.
//
// ft::run() forks one child process per rank. The parent never touches
// libfabric: it only supervises (bounded wait, kills children by PID on
// failure or deadline, reaps every child). Ranks talk out of band over a
// full mesh of AF_UNIX socketpairs created before fork.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ft {

constexpr int kMaxRanks = 4;
constexpr double kOobTimeout = 30.0;  // seconds, default bound on any OOB wait

struct Case {
    std::string name;
    int nranks;                     // number of processes
    std::function<void()> body;     // run in every rank; use ft::rank()
    uint32_t may_die_mask = 0;      // ranks allowed to end by SIGKILL
};

// Parse options, then run the case selected with -t (or all, sequentially).
// Returns the process exit code (0 = pass).
int run_main(int argc, char** argv, const std::vector<Case>& cases);

// Run one case: fork, supervise, reap. Returns true on success.
bool run_case(const Case& c);

int rank();
int nranks();

// OOB primitives. Every wait is bounded; a closed peer or a timeout fails
// the test. `progress` (optional) is called while waiting.
using ProgressFn = std::function<void()>;
void oob_send(int peer, const void* buf, size_t len);
void oob_recv(int peer, void* buf, size_t len, double timeout_s = kOobTimeout,
              const ProgressFn& progress = nullptr);
void oob_send_bytes(int peer, const std::vector<uint8_t>& v);
std::vector<uint8_t> oob_recv_bytes(int peer, double timeout_s = kOobTimeout);

template <class T>
void oob_put(int peer, const T& v) {
    oob_send(peer, &v, sizeof v);
}
template <class T>
T oob_get(int peer, double timeout_s = kOobTimeout, const ProgressFn& progress = nullptr) {
    T v{};
    oob_recv(peer, &v, sizeof v, timeout_s, progress);
    return v;
}

// Named signal: send a 32-bit code; wait_signal fails unless the same code arrives.
void signal_peer(int peer, uint32_t code);
void wait_signal(int peer, uint32_t code, double timeout_s = kOobTimeout,
                 const ProgressFn& progress = nullptr);

// All ranks meet. Each rank sends to every other and waits for every other.
void barrier(const ProgressFn& progress = nullptr);

// Wait until `peer` has exited (its OOB channel reports end-of-file).
void wait_peer_gone(int peer, double timeout_s, const ProgressFn& progress = nullptr);

// PID of another rank (exchanged at start-up).
int peer_pid(int peer);

// FI_<PROV>_<what> = value in the calling rank; for a layered name the core
// provider's ("tcp;ofi_rxm" -> FI_TCP_IFACE). Knobs are read when used, so
// set it before what it should change.
void set_prov_var(const char* what, const std::string& value);

// Pin the calling process to g_opt.cpus[rank] if a list was given.
void pin_to_cpu_for_rank();

// Place the calling rank as FT_NETNS / FT_IFACE / FT_HOSTID ask (g_opt.netns, g_opt.ifaces, g_opt.hostids;
// ranks past the end of a list use its last entry):
//  - enter the network namespace /var/run/netns/<netns[rank]>, in a private
//    mount namespace with /sys mounted afresh so that /sys/class/net shows
//    that namespace's interfaces (as `ip netns exec` does);
//  - set FI_<PROV>_IFACE=<ifaces[rank]> (e.g. FI_PMETH_IFACE; for a layered
//    name such as tcp;ofi_rxm the core provider's: FI_TCP_IFACE);
//  - set FI_<PROV>_HOST_ID=<hostids[rank]> (one machine as several hosts).
// The launcher calls it in each rank before the case body, so before any
// fi_getinfo. OOB sockets were made before fork and work across namespaces.
// No variable set: nothing changes.
void place_rank();

}  // namespace ft
