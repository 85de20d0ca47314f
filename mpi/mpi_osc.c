/* MPI one-sided communication: put, get, accumulate under fence, and
 * passive-target lock/unlock (exclusive, shared, lock_all with
 * fetch_and_op and compare_and_swap), every result checked. */
#include "mpi_check.h"

#define WIN_BYTES (1u << 20) /* per rank */
#define NCOUNT 64            /* int64 counters after the byte area */

static int rank, size;

static uint64_t seed_of(int origin, int target, int round) {
  return ((uint64_t)origin << 40) ^ ((uint64_t)target << 20) ^ (uint64_t)round ^ 0x5eedull;
}

static void fence_put_get(MPI_Win win, unsigned char *base) {
  const size_t sizes[] = {1, 7, 64, 1000, 4096, 65537, WIN_BYTES / 2};
  int right = (rank + 1) % size, left = (rank + size - 1) % size;
  for (int r = 0; r < (int)(sizeof sizes / sizeof sizes[0]); r++) {
    size_t len = sizes[r];
    /* put my pattern into the right neighbour's first half */
    pm_phase("fence put");
    unsigned char *src = pm_xmalloc(len);
    pm_fill(src, len, seed_of(rank, right, r));
    memset(base, 0xEE, WIN_BYTES);
    MPI_OK(MPI_Win_fence(0, win));
    MPI_OK(MPI_Put(src, (int)len, MPI_BYTE, right, 0, (int)len, MPI_BYTE, win));
    MPI_OK(MPI_Win_fence(0, win));
    CHECK_PAYLOAD(base, len, seed_of(left, rank, r), "fence put");
    if (len < WIN_BYTES) CHECK(base[len] == 0xEE, "put wrote past its end (len %zu)", len);

    /* get the left neighbour's second half, which it filled locally */
    pm_phase("fence get");
    pm_fill(base + WIN_BYTES / 2, len, seed_of(rank, rank, 100 + r));
    unsigned char *dst = pm_xmalloc(len + 1);
    memset(dst, 0xCC, len + 1);
    MPI_OK(MPI_Win_fence(0, win));
    MPI_OK(MPI_Get(dst, (int)len, MPI_BYTE, left, WIN_BYTES / 2, (int)len, MPI_BYTE, win));
    MPI_OK(MPI_Win_fence(0, win));
    CHECK_PAYLOAD(dst, len, seed_of(left, left, 100 + r), "fence get");
    CHECK(dst[len] == 0xCC, "get wrote past its end (len %zu)", len);
    free(src);
    free(dst);
  }
}

static void fence_accumulate(MPI_Win win, int64_t *cnt) {
  pm_phase("fence accumulate");
  for (int i = 0; i < NCOUNT; i++) cnt[i] = 1000 * rank;
  int64_t contrib[NCOUNT];
  for (int i = 0; i < NCOUNT; i++) contrib[i] = (int64_t)(rank + 1) * (i + 1);
  MPI_OK(MPI_Win_fence(0, win));
  /* every rank adds into every other rank's counters */
  for (int t = 0; t < size; t++)
    MPI_OK(MPI_Accumulate(contrib, NCOUNT, MPI_INT64_T, t, WIN_BYTES, NCOUNT, MPI_INT64_T,
                          MPI_SUM, win));
  MPI_OK(MPI_Win_fence(0, win));
  int64_t sum_ranks = (int64_t)size * (size + 1) / 2;
  for (int i = 0; i < NCOUNT; i++)
    CHECK(cnt[i] == 1000 * rank + sum_ranks * (i + 1), "accumulate[%d] = %lld, want %lld", i, (long long)cnt[i],
          (long long)(1000 * rank + sum_ranks * (i + 1)));

  /* MPI_MAX and MPI_REPLACE too */
  MPI_OK(MPI_Win_fence(0, win));
  int64_t v = 7 * rank + 3;
  MPI_OK(MPI_Accumulate(&v, 1, MPI_INT64_T, 0, WIN_BYTES, 1, MPI_INT64_T, MPI_MAX, win));
  MPI_OK(MPI_Win_fence(0, win));
  if (rank == 0) {
    int64_t want = 7 * (size - 1) + 3;
    int64_t before = sum_ranks; /* cnt[0] of rank 0 after the SUM round */
    if (before > want) want = before;
    CHECK(cnt[0] == want, "MPI_MAX accumulate = %lld, want %lld", (long long)cnt[0], (long long)want);
  }
}

/* cas: 0 = skip the compare_and_swap phase, 1 = every rank takes part,
 * 2 = every rank but the lock's owner (rank 0) takes part */
static void passive(MPI_Win win, unsigned char *base, int64_t *cnt, int cas) {
  pm_phase("passive exclusive put");
  /* each rank writes its own slice of rank 0's byte area under an exclusive lock */
  size_t slice = WIN_BYTES / (size_t)size;
  if (slice > 65536) slice = 65536;
  memset(base, 0, WIN_BYTES);
  for (int i = 0; i < NCOUNT; i++) cnt[i] = 0;
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
  unsigned char *src = pm_xmalloc(slice);
  pm_fill(src, slice, seed_of(rank, 0, 555));
  MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
  MPI_OK(MPI_Put(src, (int)slice, MPI_BYTE, 0, (MPI_Aint)(slice * (size_t)rank), (int)slice, MPI_BYTE, win));
  MPI_OK(MPI_Win_unlock(0, win));
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 0) {
    MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win)); /* local access epoch for the window */
    for (int r = 0; r < size; r++) CHECK_PAYLOAD(base + slice * (size_t)r, slice, seed_of(r, 0, 555), "passive put");
    MPI_OK(MPI_Win_unlock(0, win));
  }

  pm_phase("passive shared get");
  unsigned char *dst = pm_xmalloc(slice);
  int peer = (rank + 1) % size;
  MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
  MPI_OK(MPI_Get(dst, (int)slice, MPI_BYTE, 0, (MPI_Aint)(slice * (size_t)peer), (int)slice, MPI_BYTE, win));
  MPI_OK(MPI_Win_unlock(0, win));
  CHECK_PAYLOAD(dst, slice, seed_of(peer, 0, 555), "passive get");

  pm_phase("lock_all fetch_and_op");
  const int rounds = 200;
  MPI_OK(MPI_Win_lock_all(0, win));
  int64_t one = 1, old = -1, prev = -1;
  for (int i = 0; i < rounds; i++) {
    MPI_OK(MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, WIN_BYTES, MPI_SUM, win));
    MPI_OK(MPI_Win_flush(0, win));
    CHECK(old >= 0 && old < (int64_t)rounds * size, "fetch_and_op returned %lld", (long long)old);
    CHECK(old > prev, "fetch_and_op not increasing: %lld after %lld", (long long)old, (long long)prev);
    prev = old;
  }
  MPI_OK(MPI_Win_unlock_all(win));
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 0) {
    MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    int64_t total = -1;
    MPI_OK(MPI_Get(&total, 1, MPI_INT64_T, 0, WIN_BYTES, 1, MPI_INT64_T, win));
    MPI_OK(MPI_Win_unlock(0, win));
    CHECK(total == (int64_t)rounds * size, "fetch_and_op total %lld, want %lld", (long long)total,
          (long long)rounds * size);
  }

  if (!cas) {
    free(src);
    free(dst);
    return;
  }
  pm_phase("compare_and_swap");
  /* a spin lock on rank 0's counter[1] built from compare_and_swap; each
   * holder increments counter[2] non-atomically (get, put) inside it */
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
  const int64_t disp1 = WIN_BYTES + 8, disp2 = disp1 + 8; /* bytes: disp_unit is 1 */
  const int crit = 20;
  const int takers = cas == 2 ? size - 1 : size;
  MPI_OK(MPI_Win_lock_all(0, win));
  for (int i = 0; i < crit && !(cas == 2 && rank == 0); i++) {
    int64_t unlocked = 0, me = rank + 1, seen = -1;
    for (long spins = 0;; spins++) {
      MPI_OK(MPI_Compare_and_swap(&me, &unlocked, &seen, MPI_INT64_T, 0, disp1, win));
      MPI_OK(MPI_Win_flush(0, win));
      if (seen == 0) break;
      CHECK(seen >= 1 && seen <= size, "compare_and_swap saw %lld", (long long)seen);
      CHECK(spins < 10000000, "spin lock never acquired");
    }
    int64_t v = -1;
    MPI_OK(MPI_Get(&v, 1, MPI_INT64_T, 0, disp2, 1, MPI_INT64_T, win));
    MPI_OK(MPI_Win_flush(0, win));
    v++;
    MPI_OK(MPI_Put(&v, 1, MPI_INT64_T, 0, disp2, 1, MPI_INT64_T, win));
    MPI_OK(MPI_Win_flush(0, win));
    MPI_OK(MPI_Compare_and_swap(&unlocked, &me, &seen, MPI_INT64_T, 0, disp1, win));
    MPI_OK(MPI_Win_flush(0, win));
    CHECK(seen == me, "lock released by %lld, held by %lld", (long long)seen, (long long)me);
  }
  MPI_OK(MPI_Win_unlock_all(win));
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 0) {
    MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    int64_t total = -1;
    MPI_OK(MPI_Get(&total, 1, MPI_INT64_T, 0, disp2, 1, MPI_INT64_T, win));
    MPI_OK(MPI_Win_unlock(0, win));
    CHECK(total == (int64_t)crit * takers, "counter under CAS lock %lld, want %lld", (long long)total,
          (long long)crit * takers);
  }
  free(src);
  free(dst);
}

static void usage(void) {
  if (rank == 0)
    fprintf(stderr, "usage: mpi_osc [create|allocate]... [--no-cas|--cas-no-self]\n"
                    "  runs every phase on a window of each flavor named (default: create allocate):\n"
                    "  create = MPI_Win_create over malloc'ed memory, allocate = MPI_Win_allocate\n"
                    "  --no-cas: skip the compare_and_swap phase; --cas-no-self: the owner of the\n"
                    "  lock (rank 0) does not compare_and_swap on its own window\n");
}

int main(int argc, char **argv) {
  pm_init(&argc, &argv, MPI_THREAD_SINGLE, 100);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size >= 2, "needs at least 2 ranks");

  const char *flavors[4];
  int nflavors = 0, cas = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--no-cas")) cas = 0;
    else if (!strcmp(argv[i], "--cas-no-self")) cas = 2;
    else if ((!strcmp(argv[i], "create") || !strcmp(argv[i], "allocate")) && nflavors < 4) flavors[nflavors++] = argv[i];
    else { usage(); FAIL("bad argument %s", argv[i]); }
  }
  if (!nflavors) { flavors[0] = "create"; flavors[1] = "allocate"; nflavors = 2; }

  MPI_Aint bytes = WIN_BYTES + NCOUNT * sizeof(int64_t);
  for (int f = 0; f < nflavors; f++) {
    unsigned char *base = NULL, *mem = NULL;
    MPI_Win win;
    pm_phase(flavors[f]);
    if (!strcmp(flavors[f], "create")) {
      mem = pm_xmalloc((size_t)bytes);
      base = mem;
      MPI_OK(MPI_Win_create(base, bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    } else {
      MPI_OK(MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win));
    }
    MPI_OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int64_t *cnt = (int64_t *)(base + WIN_BYTES);
    fence_put_get(win, base);
    fence_accumulate(win, cnt);
    MPI_OK(MPI_Win_fence(0, win));
    passive(win, base, cnt, cas);
    MPI_OK(MPI_Win_free(&win));
    free(mem);
    if (rank == 0) printf("mpi_osc: %s window OK%s\n", flavors[f], cas == 1 ? "" : cas == 2 ? " (no compare_and_swap on the own window)" : " (compare_and_swap skipped)");
  }
  if (rank == 0) printf("mpi_osc: OK (%d ranks)\n", size);
  MPI_Finalize();
  return 0;
}
