// pmfabric fabtests: option parsing, failure reporting, timing, payloads.
#include "ft_common.h"

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <getopt.h>
#include <unistd.h>

#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace ft {

Options g_opt;

namespace {
std::string g_prog = "ft";
std::string g_case;
int g_rank = -1;

void usage(const char* argv0) {
    std::fprintf(stderr,
                 "usage: %s [-p prov] [-t case] [-l] [-v] [-d] [-T secs]\n"
                 "          [-S size] [-n iters] [-W window] [-m mode] [-c cpu0,cpu1] [--short]\n"
                 "  -p prov    libfabric provider name (default shm)\n"
                 "  -t case    run one case (default: all cases in sequence)\n"
                 "  -l         list cases\n"
                 "  -v         tests: verbose; benchmarks: verify every payload\n"
                 "  -T secs    supervisor deadline for the whole run (default 50)\n"
                 "  env FT_THREADING=safe requests FI_THREAD_SAFE\n"
                 "  env FT_NETNS=ns0,ns1,.. runs rank i in network namespace ns_i\n"
                 "  env FT_USER=<name> runs every rank as that user, without capabilities\n"
                 "  env FT_IFACE=if0,if1,.. sets FI_<PROV>_IFACE=if_i in rank i\n"
                 "  env FT_HOSTID=h0,h1,.. sets FI_<PROV>_HOST_ID=h_i in rank i (one machine\n"
                 "      standing in for several hosts)\n"
                 "  env FT_PROV_VAR=NAME:v0,v1,.. sets FI_<PROV>_NAME=v_i in rank i\n"
                 "      (ranks past the end of a list use its last entry)\n",
                 argv0);
}

std::vector<int> parse_cpus(const char* s) {
    std::vector<int> out;
    const char* p = s;
    while (*p) {
        char* end = nullptr;
        long v = std::strtol(p, &end, 10);
        if (end == p || v < 0) {
            std::fprintf(stderr, "bad cpu list '%s'\n", s);
            std::exit(2);
        }
        out.push_back((int)v);
        p = (*end == ',') ? end + 1 : end;
        if (*end && *end != ',') {
            std::fprintf(stderr, "bad cpu list '%s'\n", s);
            std::exit(2);
        }
    }
    return out;
}


size_t parse_size(const char* s) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(s, &end, 0);
    if (end == s) {
        std::fprintf(stderr, "bad size '%s'\n", s);
        std::exit(2);
    }
    switch (*end) {
        case 'k': case 'K': v <<= 10; break;
        case 'm': case 'M': v <<= 20; break;
        case 'g': case 'G': v <<= 30; break;
        case '\0': break;
        default:
            std::fprintf(stderr, "bad size '%s'\n", s);
            std::exit(2);
    }
    return (size_t)v;
}

void vprint(FILE* f, const char* fmt, va_list ap) {
    char buf[2048];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    std::fprintf(f, "%s %s\n", tag_prefix().c_str(), buf);
    std::fflush(f);
}
}  // namespace

// Comma-separated environment list; unset or empty: no entries.
std::vector<std::string> env_list(const char* name) {
    std::vector<std::string> out;
    const char* v = std::getenv(name);
    if (!v || !*v) return out;
    for (const char* p = v;; ++p) {
        const char* end = std::strchr(p, ',');
        out.emplace_back(p, end ? (size_t)(end - p) : std::strlen(p));
        if (out.back().empty() || out.back().find('/') != std::string::npos) {
            std::fprintf(stderr, "bad %s '%s' (comma-separated names)\n", name, v);
            std::exit(2);
        }
        if (!end) break;
        p = end;
    }
    return out;
}

void parse_options(int argc, char** argv) {
    const char* slash = std::strrchr(argv[0], '/');
    g_prog = slash ? slash + 1 : argv[0];
    static const option longopts[] = {{"short", no_argument, nullptr, 1},
                                      {"help", no_argument, nullptr, 'h'},
                                      {nullptr, 0, nullptr, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "p:t:lvdT:S:n:W:m:c:h", longopts, nullptr)) != -1) {
        switch (c) {
            case 'p': g_opt.prov = optarg; break;
            case 't': g_opt.test = optarg; break;
            case 'l': g_opt.list = true; break;
            case 'v': g_opt.verbose = true; break;
            case 'd': g_opt.debug = true; break;
            case 'T': g_opt.timeout_s = std::atof(optarg); break;
            case 'S': g_opt.size = parse_size(optarg); break;
            case 'n': g_opt.iters = std::atol(optarg); break;
            case 'W': g_opt.window = std::atoi(optarg); break;
            case 'm': g_opt.mode = optarg; break;
            case 'c': g_opt.cpus = parse_cpus(optarg); break;
            case 1: g_opt.short_mode = true; break;
            default:
                usage(argv[0]);
                std::exit(c == 'h' ? 0 : 2);
        }
    }
    if (optind != argc) {
        usage(argv[0]);
        std::exit(2);
    }
    if (g_opt.timeout_s <= 0) g_opt.timeout_s = 50.0;
    g_opt.thread_safe = env_is("FT_THREADING", "safe");
    g_opt.netns = env_list("FT_NETNS");
    g_opt.ifaces = env_list("FT_IFACE");
    g_opt.hostids = env_list("FT_HOSTID");
    if (const char* u = std::getenv("FT_USER")) g_opt.user = u;
}

void set_identity(const std::string& prog, const std::string& test_case, int rank) {
    if (!prog.empty()) g_prog = prog;
    g_case = test_case;
    g_rank = rank;
}

std::string tag_prefix() {
    char buf[256];
    if (g_rank >= 0)
        std::snprintf(buf, sizeof buf, "[%s:%s rank%d pid%d]", g_prog.c_str(), g_case.c_str(),
                      g_rank, (int)getpid());
    else
        std::snprintf(buf, sizeof buf, "[%s:%s]", g_prog.c_str(), g_case.c_str());
    return buf;
}

void fail_at(const char* file, int line, const char* fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const char* base = std::strrchr(file, '/');
    std::fprintf(stderr, "%s FAIL %s:%d: %s\n", tag_prefix().c_str(), base ? base + 1 : file, line,
                 buf);
    std::fflush(stderr);
    throw Failure{};
}

const char* errstr(long rc) {
    if (rc == 0) return "ok";
    return fi_strerror((int)(rc < 0 ? -rc : rc));
}

void log(const char* fmt, ...) {
    if (!g_opt.verbose) return;
    va_list ap;
    va_start(ap, fmt);
    vprint(stdout, fmt, ap);
    va_end(ap);
}

void info(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprint(stdout, fmt, ap);
    va_end(ap);
}

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sleep_ms(int ms) {
    timespec ts{ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

// ------------------------------------------------------------------ payload
namespace {
inline uint64_t mix(uint32_t seed, uint64_t word) {
    uint64_t x = word * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 32 | (seed * 0x85EBCA6Bu));
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return x;
}
}  // namespace

uint8_t pattern_byte(uint32_t seed, size_t index) {
    return (uint8_t)(mix(seed, index / 8) >> (8 * (index % 8)));
}

void fill(void* buf, size_t len, uint32_t seed, size_t offset) {
    auto* p = static_cast<uint8_t*>(buf);
    size_t i = 0;
    while (i < len && ((offset + i) % 8) != 0) {
        p[i] = pattern_byte(seed, offset + i);
        ++i;
    }
    for (; i + 8 <= len; i += 8) {
        uint64_t w = mix(seed, (offset + i) / 8);
        std::memcpy(p + i, &w, 8);
    }
    for (; i < len; ++i) p[i] = pattern_byte(seed, offset + i);
}

size_t first_mismatch(const void* buf, size_t len, uint32_t seed, size_t offset) {
    const auto* p = static_cast<const uint8_t*>(buf);
    size_t i = 0;
    while (i < len && ((offset + i) % 8) != 0) {
        if (p[i] != pattern_byte(seed, offset + i)) return i;
        ++i;
    }
    for (; i + 8 <= len; i += 8) {
        uint64_t w = mix(seed, (offset + i) / 8);
        if (std::memcmp(p + i, &w, 8) != 0) break;
    }
    for (; i < len; ++i)
        if (p[i] != pattern_byte(seed, offset + i)) return i;
    return SIZE_MAX;
}

void check(const void* buf, size_t len, uint32_t seed, const char* what, size_t offset) {
    size_t bad = first_mismatch(buf, len, seed, offset);
    if (bad == SIZE_MAX) return;
    const auto* p = static_cast<const uint8_t*>(buf);
    FT_FAIL("%s: payload mismatch at byte %zu of %zu (stream seed %u, offset %zu): expected 0x%02x, "
            "saw 0x%02x",
            what, bad, len, seed, offset, pattern_byte(seed, offset + bad), p[bad]);
}

const std::vector<size_t>& size_ladder() {
    static const std::vector<size_t> sizes = {0,     1,       8,           64,         200,
                                              4096,  65536,   1u << 20,    8u << 20};
    return sizes;
}

std::string human_size(size_t n) {
    char buf[32];
    if (n >= (1u << 20) && n % (1u << 20) == 0)
        std::snprintf(buf, sizeof buf, "%zuMiB", n >> 20);
    else if (n >= 1024 && n % 1024 == 0)
        std::snprintf(buf, sizeof buf, "%zuKiB", n >> 10);
    else
        std::snprintf(buf, sizeof buf, "%zuB", n);
    return buf;
}

bool env_is(const char* name, const char* value) {
    const char* v = std::getenv(name);
    return v && std::strcmp(v, value) == 0;
}

}  // namespace ft
