// pmfabric fabtests: fork-based launcher, supervisor and OOB socket mesh.
#include "ft_proc.h"

#include "ft_common.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <grp.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ft {

namespace {
int g_rank = -1;
int g_nranks = 0;
int g_fd[kMaxRanks];         // socket to each peer rank (-1 for self)
int g_pids[kMaxRanks];       // pid of each rank
constexpr double kGraceAfterFailure = 5.0;

void write_all(int fd, const void* buf, size_t len) {
    const char* p = static_cast<const char*>(buf);
    while (len) {
        ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        FT_CHECK(n > 0, "OOB send failed: %s (peer gone?)", std::strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

int fd_for(int peer) {
    FT_CHECK(peer >= 0 && peer < g_nranks && peer != g_rank, "bad OOB peer %d (I am rank %d of %d)",
             peer, g_rank, g_nranks);
    return g_fd[peer];
}

const char* describe_status(int st, char* buf, size_t len) {
    if (WIFEXITED(st))
        std::snprintf(buf, len, "exit code %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        std::snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        std::snprintf(buf, len, "status 0x%x", st);
    return buf;
}

[[noreturn]] void child_main(const Case& c, int r, int parent_pid) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent_pid) _exit(3);
    g_rank = r;
    set_identity("", c.name, r);
    alarm((unsigned)(g_opt.timeout_s + 5));  // last resort; the parent normally acts first
    int rc = 0;
    try {
        place_rank();
        pin_to_cpu_for_rank();
        // exchange PIDs so tests can name their peers
        g_pids[r] = getpid();
        for (int p = 0; p < g_nranks; ++p)
            if (p != r) oob_put<int>(p, getpid());
        for (int p = 0; p < g_nranks; ++p)
            if (p != r) g_pids[p] = oob_get<int>(p);
        c.body();
    } catch (const Failure&) {
        rc = 1;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(rc);
}
}  // namespace

int rank() { return g_rank; }
int nranks() { return g_nranks; }
int peer_pid(int peer) {
    fd_for(peer);
    return g_pids[peer];
}

void pin_to_cpu_for_rank() {
    if (g_opt.cpus.empty()) return;
    int cpu = g_opt.cpus[(size_t)g_rank % g_opt.cpus.size()];
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    FT_CHECK(sched_setaffinity(0, sizeof set, &set) == 0, "cannot pin rank %d to cpu %d: %s",
             g_rank, cpu, std::strerror(errno));
}

void set_prov_var(const char* what, const std::string& value) {
    std::string var = "FI_" + g_opt.prov.substr(0, g_opt.prov.find(';')) + "_" + what;
    for (char& ch : var) ch = (char)std::toupper((unsigned char)ch);
    FT_CHECK(setenv(var.c_str(), value.c_str(), 1) == 0, "setenv %s: %s", var.c_str(), std::strerror(errno));
    log("rank %d: %s=%s", g_rank, var.c_str(), value.c_str());
}

namespace {
// The entry of a per-rank list for the calling rank: the last one for ranks past its end.
const std::string* entry_for_rank(const std::vector<std::string>& list) {
    if (list.empty()) return nullptr;
    return &list[std::min((size_t)g_rank, list.size() - 1)];
}

void enter_netns(const std::string& ns) {
    std::string path = "/var/run/netns/" + ns;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    FT_CHECK(fd >= 0, "rank %d: cannot open network namespace %s: %s", g_rank, path.c_str(),
             std::strerror(errno));
    int rc = setns(fd, CLONE_NEWNET);
    int err = errno;
    close(fd);
    FT_CHECK(rc == 0, "rank %d: setns(%s): %s", g_rank, path.c_str(), std::strerror(err));
    // sysfs shows the network namespace of whoever mounted it: remount /sys in
    // a mount namespace of our own. Slave first, so that nothing propagates
    // back to the launcher's mounts.
    FT_CHECK(unshare(CLONE_NEWNS) == 0, "rank %d: unshare(CLONE_NEWNS): %s", g_rank,
             std::strerror(errno));
    FT_CHECK(mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) == 0,
             "rank %d: making / a slave mount: %s", g_rank, std::strerror(errno));
    struct statvfs sv {};
    unsigned long flags = statvfs("/sys", &sv) == 0 && (sv.f_flag & ST_RDONLY) ? MS_RDONLY : 0;
    if (umount2("/sys", MNT_DETACH) != 0 && errno != EINVAL)
        FT_FAIL("rank %d: unmounting /sys: %s", g_rank, std::strerror(errno));
    FT_CHECK(mount(ns.c_str(), "/sys", "sysfs", flags, nullptr) == 0,
             "rank %d: mounting sysfs for namespace %s: %s", g_rank, ns.c_str(),
             std::strerror(errno));
}
// Become user (its uid and primary group, no supplementary groups): a
// process whose uids all become non-zero loses every capability.
void drop_to_user(const std::string& user) {
    passwd* pw = getpwnam(user.c_str());
    FT_CHECK(pw != nullptr, "rank %d: no user %s", g_rank, user.c_str());
    FT_CHECK(setgroups(0, nullptr) == 0 && setresgid(pw->pw_gid, pw->pw_gid, pw->pw_gid) == 0 &&
                 setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) == 0,
             "rank %d: cannot become %s: %s", g_rank, user.c_str(), std::strerror(errno));
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a change of credentials cleared it
    FT_CHECK(socket(AF_PACKET, SOCK_RAW, 0) < 0 && errno == EPERM,
             "rank %d: still has CAP_NET_RAW as %s", g_rank, user.c_str());
    log("rank %d runs as %s (uid %u), without capabilities", g_rank, user.c_str(), pw->pw_uid);
}
}  // namespace

void place_rank() {
    if (const std::string* ns = entry_for_rank(g_opt.netns)) {
        enter_netns(*ns);
        log("rank %d in network namespace %s", g_rank, ns->c_str());
    }
    if (const std::string* iface = entry_for_rank(g_opt.ifaces)) set_prov_var("IFACE", *iface);
    if (const std::string* host = entry_for_rank(g_opt.hostids)) set_prov_var("HOST_ID", *host);
    // FT_PROV_VAR=NAME:v0,v1,..: FI_<PROV>_NAME=v_i in rank i (peers set up
    // differently, e.g. one sending GSO packets and one not).
    if (const char* pv = std::getenv("FT_PROV_VAR")) {
        std::string spec(pv);
        size_t colon = spec.find(':');
        FT_CHECK(colon != std::string::npos && colon > 0, "FT_PROV_VAR=%s: want NAME:v0,v1,..", pv);
        std::vector<std::string> vals;
        for (size_t b = colon + 1;;) {
            size_t c = spec.find(',', b);
            vals.push_back(spec.substr(b, c == std::string::npos ? std::string::npos : c - b));
            if (c == std::string::npos) break;
            b = c + 1;
        }
        if (const std::string* v = entry_for_rank(vals)) set_prov_var(spec.substr(0, colon).c_str(), *v);
    }
    if (!g_opt.user.empty()) drop_to_user(g_opt.user);
}

bool run_case(const Case& c) {
    FT_CHECK(c.nranks >= 1 && c.nranks <= kMaxRanks, "case %s: bad rank count %d", c.name.c_str(),
             c.nranks);
    std::fflush(stdout);
    std::fflush(stderr);
    g_nranks = c.nranks;
    int sv[kMaxRanks][kMaxRanks][2];
    for (int i = 0; i < c.nranks; ++i)
        for (int j = i + 1; j < c.nranks; ++j)
            FT_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i][j]) == 0, "socketpair: %s",
                     std::strerror(errno));

    int parent = getpid();
    pid_t pids[kMaxRanks];
    int nforked = 0;
    // The supervisor sleeps until a rank ends (SIGCHLD, blocked here and
    // taken by sigtimedwait) rather than waking every few milliseconds on a
    // CPU a rank may be polling on; the ranks get the mask back.
    sigset_t chld, old_mask;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old_mask);
    for (int r = 0; r < c.nranks; ++r) {
        pid_t pid = fork();
        if (pid == 0) {
            sigprocmask(SIG_SETMASK, &old_mask, nullptr);
            for (int i = 0; i < c.nranks; ++i)
                for (int j = i + 1; j < c.nranks; ++j) {
                    if (i == r) g_fd[j] = sv[i][j][0];
                    else close(sv[i][j][0]);
                    if (j == r) g_fd[i] = sv[i][j][1];
                    else close(sv[i][j][1]);
                }
            g_fd[r] = -1;
            child_main(c, r, parent);
        }
        if (pid < 0) {
            std::fprintf(stderr, "fork failed: %s\n", std::strerror(errno));
            break;
        }
        pids[nforked++] = pid;
    }
    for (int i = 0; i < c.nranks; ++i)
        for (int j = i + 1; j < c.nranks; ++j) {
            close(sv[i][j][0]);
            close(sv[i][j][1]);
        }

    // Supervise: reap as children end; bound the total time.
    bool ok = nforked == c.nranks;
    bool alive[kMaxRanks];
    for (int r = 0; r < nforked; ++r) alive[r] = true;
    int remaining = nforked;
    double deadline = now_s() + g_opt.timeout_s;
    double first_fail = -1;
    char sbuf[96];
    while (remaining > 0) {
        int st = 0;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid > 0) {
            int r = 0;
            while (r < nforked && pids[r] != pid) ++r;
            if (r == nforked) continue;  // not ours
            alive[r] = false;
            --remaining;
            bool allowed_kill = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL &&
                                (c.may_die_mask & (1u << r));
            if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !allowed_kill) {
                std::fprintf(stderr, "[%s] rank %d (pid %d) failed: %s\n", c.name.c_str(), r,
                             (int)pid, describe_status(st, sbuf, sizeof sbuf));
                ok = false;
                if (first_fail < 0) first_fail = now_s();
            }
            continue;
        }
        if (pid < 0 && errno != EINTR) break;
        double t = now_s();
        bool timeout = t > deadline;
        bool grace_over = first_fail >= 0 && t - first_fail > kGraceAfterFailure;
        if (timeout || grace_over) {
            for (int r = 0; r < nforked; ++r) {
                if (!alive[r]) continue;
                std::fprintf(stderr, "[%s] rank %d (pid %d) still running after %s; killing it\n",
                             c.name.c_str(), r, (int)pids[r],
                             timeout ? "the deadline (-T)" : "another rank failed");
                kill(pids[r], SIGKILL);
                waitpid(pids[r], &st, 0);
                alive[r] = false;
                --remaining;
            }
            ok = false;
            break;
        }
        // Until a rank ends, the deadline or the grace's end; at most 100 ms.
        double until = first_fail >= 0 ? std::min(deadline, first_fail + kGraceAfterFailure) : deadline;
        double dt = std::min(std::max(until - t, 0.001), 0.1);
        timespec ts{0, long(dt * 1e9)};
        sigtimedwait(&chld, nullptr, &ts);
    }
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    std::fflush(stderr);
    return ok;
}

int run_main(int argc, char** argv, const std::vector<Case>& cases) {
    parse_options(argc, argv);
    if (g_opt.list) {
        for (const auto& c : cases) std::printf("%s\n", c.name.c_str());
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    int failed = 0, ran = 0;
    for (const auto& c : cases) {
        if (!g_opt.test.empty() && g_opt.test != c.name) continue;
        ++ran;
        set_identity("", c.name, -1);
        bool ok = false;
        try {
            ok = run_case(c);
        } catch (const Failure&) {
            ok = false;
        }
        std::printf("%s %s (prov %s)\n", ok ? "PASS" : "FAIL", c.name.c_str(), g_opt.prov.c_str());
        std::fflush(stdout);
        if (!ok) ++failed;
    }
    if (ran == 0) {
        std::fprintf(stderr, "no case named '%s' (use -l)\n", g_opt.test.c_str());
        return 2;
    }
    return failed ? 1 : 0;
}

// -------------------------------------------------------------------- OOB
void oob_send(int peer, const void* buf, size_t len) { write_all(fd_for(peer), buf, len); }

void oob_recv(int peer, void* buf, size_t len, double timeout_s, const ProgressFn& progress) {
    int fd = fd_for(peer);
    char* p = static_cast<char*>(buf);
    double deadline = now_s() + timeout_s;
    while (len) {
        pollfd pfd{fd, POLLIN, 0};
        int wait_ms = progress ? 0 : 100;
        int n = poll(&pfd, 1, wait_ms);
        if (n < 0 && errno != EINTR) FT_FAIL("OOB poll: %s", std::strerror(errno));
        if (n > 0) {
            ssize_t got = ::recv(fd, p, len, 0);
            if (got < 0 && errno == EINTR) continue;
            FT_CHECK(got > 0, "OOB: rank %d closed its channel (it exited or failed) while rank %d "
                              "waited for %zu more bytes",
                     peer, g_rank, len);
            p += got;
            len -= (size_t)got;
            continue;
        }
        if (progress) progress();
        FT_CHECK(now_s() < deadline, "OOB: timed out after %.1fs waiting for rank %d", timeout_s,
                 peer);
    }
}

void wait_peer_gone(int peer, double timeout_s, const ProgressFn& progress) {
    int fd = fd_for(peer);
    double deadline = now_s() + timeout_s;
    for (;;) {
        pollfd pfd{fd, POLLIN, 0};
        int n = poll(&pfd, 1, progress ? 0 : 50);
        if (n > 0) {
            char c;
            ssize_t got = ::recv(fd, &c, 1, 0);
            if (got == 0 || (got < 0 && errno == ECONNRESET)) return;
            FT_CHECK(got > 0 || errno == EINTR, "OOB recv: %s", std::strerror(errno));
            // stray bytes from the peer are ignored: it is on its way out
        }
        if (progress) progress();
        FT_CHECK(now_s() < deadline, "rank %d did not exit within %.1fs", peer, timeout_s);
    }
}

void oob_send_bytes(int peer, const std::vector<uint8_t>& v) {
    uint32_t n = (uint32_t)v.size();
    oob_send(peer, &n, sizeof n);
    if (n) oob_send(peer, v.data(), n);
}

std::vector<uint8_t> oob_recv_bytes(int peer, double timeout_s) {
    uint32_t n = 0;
    oob_recv(peer, &n, sizeof n, timeout_s);
    FT_CHECK(n < (1u << 20), "OOB: implausible length %u from rank %d", n, peer);
    std::vector<uint8_t> v(n);
    if (n) oob_recv(peer, v.data(), n, timeout_s);
    return v;
}

void signal_peer(int peer, uint32_t code) { oob_put<uint32_t>(peer, code); }

void wait_signal(int peer, uint32_t code, double timeout_s, const ProgressFn& progress) {
    uint32_t got = oob_get<uint32_t>(peer, timeout_s, progress);
    FT_CHECK(got == code, "OOB: expected signal 0x%x from rank %d, saw 0x%x (out of step)", code,
             peer, got);
}

void barrier(const ProgressFn& progress) {
    constexpr uint32_t kBarrier = 0xBA771E55u;
    for (int p = 0; p < g_nranks; ++p)
        if (p != g_rank) signal_peer(p, kBarrier);
    for (int p = 0; p < g_nranks; ++p)
        if (p != g_rank) wait_signal(p, kBarrier, kOobTimeout, progress);
}

}  // namespace ft
