/* Helpers shared by the MPI test programs: checked calls, a watchdog, and a
 * deterministic byte pattern for payload verification. Header-only. */
#ifndef PM_MPI_CHECK_H
#define PM_MPI_CHECK_H

#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank = -1;
static const char *g_phase = "init";

/* Fail the whole job: message on stderr, then MPI_Abort (mpirun ends every rank). */
#define FAIL_WHAT(what, ...)                                                                  \
  do {                                                                                       \
    fprintf(stderr, "[rank %d] FAIL %s:%d (%s) %s: ", g_rank, __FILE__, __LINE__, g_phase, (what)); \
    fprintf(stderr, __VA_ARGS__);                                                            \
    fputc('\n', stderr);                                                                     \
    fflush(stderr);                                                                          \
    MPI_Abort(MPI_COMM_WORLD, 1);                                                            \
    _exit(1);                                                                                \
  } while (0)
#define FAIL(...) FAIL_WHAT("", __VA_ARGS__)

#define CHECK(cond, ...)                                    \
  do {                                                      \
    if (!(cond)) FAIL_WHAT("CHECK(" #cond ")", __VA_ARGS__); \
  } while (0)

/* Every MPI call's return code is checked (the programs set MPI_ERRORS_RETURN). */
#define MPI_OK(call)                                                           \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ != MPI_SUCCESS) {                                                  \
      char s_[MPI_MAX_ERROR_STRING];                                           \
      int l_ = 0;                                                              \
      MPI_Error_string(rc_, s_, &l_);                                          \
      FAIL("%s returned %d (%s)", #call, rc_, s_);                              \
    }                                                                          \
  } while (0)

static void pm_watchdog_fire(int sig) {
  (void)sig;
  static const char msg[] = "watchdog: test did not finish in time, aborting\n";
  if (write(2, msg, sizeof msg - 1) < 0) { /* nothing to do */ }
  _exit(124);
}

/* Bounds the whole program: SIGALRM after MPI_TEST_TIMEOUT seconds (default
 * `secs`) ends this rank with status 124, which makes mpirun end the others. */
static void pm_watchdog(unsigned secs) {
  const char *e = getenv("MPI_TEST_TIMEOUT");
  if (e && *e) secs = (unsigned)atoi(e);
  signal(SIGALRM, pm_watchdog_fire);
  alarm(secs);
}

static void pm_phase(const char *name) {
  g_phase = name;
  if (g_rank == 0 && getenv("MPI_TEST_VERBOSE")) {
    printf("phase %s\n", name);
    fflush(stdout);
  }
}

/* Byte `off` of the pattern identified by `seed`. */
static inline unsigned char pm_pat(uint64_t seed, size_t off) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + (uint64_t)off * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 32;
  return (unsigned char)x;
}

static void pm_fill(void *buf, size_t len, uint64_t seed) {
  unsigned char *p = (unsigned char *)buf;
  for (size_t i = 0; i < len; i++) p[i] = pm_pat(seed, i);
}

/* Returns the first offset that differs from the pattern, or -1. */
static long pm_verify(const void *buf, size_t len, uint64_t seed) {
  const unsigned char *p = (const unsigned char *)buf;
  for (size_t i = 0; i < len; i++)
    if (p[i] != pm_pat(seed, i)) return (long)i;
  return -1;
}

#define CHECK_PAYLOAD(buf, len, seed, what)                                                        \
  do {                                                                                             \
    long bad_ = pm_verify((buf), (len), (seed));                                                   \
    if (bad_ >= 0)                                                                                 \
      FAIL("%s: payload of %zu bytes differs at offset %ld (got 0x%02x, want 0x%02x)", (what),      \
           (size_t)(len), bad_, ((const unsigned char *)(buf))[bad_], pm_pat((seed), (size_t)bad_)); \
  } while (0)

/* MPI_Init_thread with the watchdog armed and errors returned, not fatal. */
static int pm_init(int *argc, char ***argv, int required, unsigned timeout) {
  pm_watchdog(timeout);
  int provided = -1;
  int rc = MPI_Init_thread(argc, argv, required, &provided);
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "MPI_Init_thread failed: %d\n", rc);
    _exit(1);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  return provided;
}

static inline void *pm_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) FAIL("out of memory (%zu bytes)", n);
  return p;
}

#endif
