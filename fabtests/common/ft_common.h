// pmfabric fabtests: shared basics (options, failure reporting, timing,
// payload patterns). Every test and benchmark program links ft_common.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ft {

// ---------------------------------------------------------------- options
struct Options {
    std::string prov = "shm";    // -p
    std::string test;            // -t <case>
    bool verbose = false;        // -v (tests: chatty; benchmarks: verify payloads)
    bool debug = false;          // -d (benchmarks: log progress)
    bool list = false;           // -l (print case names)
    bool short_mode = false;     // --short (benchmarks: few iterations)
    size_t size = 0;             // -S (0 = program default)
    long iters = 0;              // -n (0 = program default)
    int window = 0;              // -W (0 = program default)
    std::string mode;            // -m (program specific, e.g. tagged|msg)
    std::vector<int> cpus;       // -c cpu0,cpu1,...
    double timeout_s = 50.0;     // -T whole-run bound enforced by the supervisor
    bool thread_safe = false;    // env FT_THREADING=safe
    std::vector<std::string> netns;   // env FT_NETNS=ns0,ns1,..: network namespace per rank
    std::vector<std::string> ifaces;  // env FT_IFACE=if0,if1,..: FI_<PROV>_IFACE per rank
    std::vector<std::string> hostids; // env FT_HOSTID=h0,h1,..: FI_<PROV>_HOST_ID per rank
    std::string user;                 // env FT_USER=<name>: ranks drop to this user (no capabilities)
};
extern Options g_opt;

// Parse the common command line. Exits with usage on error.
void parse_options(int argc, char** argv);
// A comma-separated environment list (unset or empty: none).
std::vector<std::string> env_list(const char* name);

// --------------------------------------------------------------- failures
// A failed check throws Failure; the launcher turns it into exit code 1.
struct Failure {};

[[noreturn]] void fail_at(const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define FT_FAIL(...) ::ft::fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define FT_CHECK(cond, ...)                                \
    do {                                                   \
        if (!(cond)) ::ft::fail_at(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
// Check that a libfabric call returned exactly 0.
#define FT_CALL(expr)                                                        \
    do {                                                                     \
        long ft_rc_ = (long)(expr);                                          \
        if (ft_rc_ != 0)                                                     \
            ::ft::fail_at(__FILE__, __LINE__, "%s: expected 0, got %ld (%s)", \
                          #expr, ft_rc_, ::ft::errstr(ft_rc_));              \
    } while (0)
#define FT_EQ(seen, expected, what)                                              \
    do {                                                                         \
        unsigned long long ft_s_ = (unsigned long long)(seen);                   \
        unsigned long long ft_e_ = (unsigned long long)(expected);               \
        if (ft_s_ != ft_e_)                                                      \
            ::ft::fail_at(__FILE__, __LINE__, "%s: expected %llu (0x%llx), saw %llu (0x%llx)", \
                          (what), ft_e_, ft_e_, ft_s_, ft_s_);                   \
    } while (0)

const char* errstr(long rc);          // fi_strerror of |rc|, "ok" for 0
void log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));   // only with -v
void info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));  // always
std::string tag_prefix();             // "[prog:case rank N pid P]"
void set_identity(const std::string& prog, const std::string& test_case, int rank);

// ------------------------------------------------------------------ time
double now_s();                        // CLOCK_MONOTONIC seconds
void sleep_ms(int ms);

// --------------------------------------------------------------- payload
// Deterministic pattern: byte i of stream `seed` depends on (seed, i).
uint8_t pattern_byte(uint32_t seed, size_t index);
void fill(void* buf, size_t len, uint32_t seed, size_t offset = 0);
// Returns the first mismatching index or SIZE_MAX if all bytes match.
size_t first_mismatch(const void* buf, size_t len, uint32_t seed, size_t offset = 0);
// Fails (with expected/seen byte) unless buf holds stream `seed` from offset.
void check(const void* buf, size_t len, uint32_t seed, const char* what, size_t offset = 0);

// The standard size ladder of the functional tests.
const std::vector<size_t>& size_ladder();
std::string human_size(size_t n);

// Environment helpers.
bool env_is(const char* name, const char* value);

}  // namespace ft
