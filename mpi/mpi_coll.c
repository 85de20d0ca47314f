/* MPI collectives with checked results: barrier (nobody leaves before the
 * last one entered), bcast (several roots and sizes), allreduce (sum, max,
 * min, in place, integers and doubles), alltoall, alltoallv (uneven counts,
 * some zero), allgather. */
#include <time.h>

#include "mpi_check.h"

static int rank, size;

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts); /* one clock for every process of the host */
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void barrier_test(void) {
  pm_phase("barrier");
  for (int round = 0; round < 5; round++) {
    int late = round % size; /* a different rank arrives late each round */
    if (rank == late) usleep(30000);
    double enter = mono();
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    double leave = mono();
    double *all = pm_xmalloc(2 * sizeof(double) * (size_t)size), mine[2] = {enter, leave};
    MPI_OK(MPI_Allgather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, MPI_COMM_WORLD));
    double last_enter = 0, first_leave = 1e300;
    for (int p = 0; p < size; p++) {
      if (all[2 * p] > last_enter) last_enter = all[2 * p];
      if (all[2 * p + 1] < first_leave) first_leave = all[2 * p + 1];
    }
    CHECK(first_leave >= last_enter, "a rank left the barrier %.6f s before the last one entered",
          last_enter - first_leave);
    free(all);
  }
}

static void bcast_test(void) {
  pm_phase("bcast");
  const size_t lens[] = {0, 1, 7, 1024, 65537, 1u << 20, (4u << 20) - 3};
  unsigned char *buf = pm_xmalloc(4u << 20);
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
    for (int root = 0; root < size; root++) {
      uint64_t seed = 0xB0000 + i * 64 + (uint64_t)root;
      if (rank == root) pm_fill(buf, lens[i], seed);
      else memset(buf, 0, lens[i]);
      MPI_OK(MPI_Bcast(buf, (int)lens[i], MPI_BYTE, root, MPI_COMM_WORLD));
      CHECK_PAYLOAD(buf, lens[i], seed, "bcast");
    }
  free(buf);
}

static void allreduce_test(void) {
  pm_phase("allreduce");
  const int counts[] = {1, 3, 1000, 262144};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    int n = counts[c];
    int64_t *in = pm_xmalloc(sizeof(int64_t) * (size_t)n), *out = pm_xmalloc(sizeof(int64_t) * (size_t)n);
    double *din = pm_xmalloc(sizeof(double) * (size_t)n), *dout = pm_xmalloc(sizeof(double) * (size_t)n);
    for (int i = 0; i < n; i++) {
      in[i] = (int64_t)(rank + 1) * (i + 1) - 5 * rank;
      din[i] = 0.5 * (rank + 1) + i; /* exact in binary: sums are exact */
    }
    MPI_OK(MPI_Allreduce(in, out, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
    int64_t sr = (int64_t)size * (size + 1) / 2, s5 = 5 * (int64_t)size * (size - 1) / 2;
    for (int i = 0; i < n; i++)
      CHECK(out[i] == sr * (i + 1) - s5, "allreduce SUM[%d] = %lld, want %lld", i, (long long)out[i],
            (long long)(sr * (i + 1) - s5));
    MPI_OK(MPI_Allreduce(in, out, n, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) {
      int64_t want = INT64_MIN;
      for (int r = 0; r < size; r++) {
        int64_t v = (int64_t)(r + 1) * (i + 1) - 5 * r;
        if (v > want) want = v;
      }
      CHECK(out[i] == want, "allreduce MAX[%d] = %lld, want %lld", i, (long long)out[i], (long long)want);
    }
    MPI_OK(MPI_Allreduce(in, out, n, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) {
      int64_t want = INT64_MAX;
      for (int r = 0; r < size; r++) {
        int64_t v = (int64_t)(r + 1) * (i + 1) - 5 * r;
        if (v < want) want = v;
      }
      CHECK(out[i] == want, "allreduce MIN[%d] = %lld, want %lld", i, (long long)out[i], (long long)want);
    }
    MPI_OK(MPI_Allreduce(din, dout, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) {
      double want = 0.5 * (double)sr + (double)size * i;
      CHECK(dout[i] == want, "allreduce double SUM[%d] = %.17g, want %.17g", i, dout[i], want);
    }
    /* in place */
    memcpy(out, in, sizeof(int64_t) * (size_t)n);
    MPI_OK(MPI_Allreduce(MPI_IN_PLACE, out, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++) CHECK(out[i] == sr * (i + 1) - s5, "allreduce in place SUM[%d]", i);
    free(in);
    free(out);
    free(din);
    free(dout);
  }
}

static uint64_t blk_seed(int src, int dst, int round) { return ((uint64_t)src << 32) ^ ((uint64_t)dst << 16) ^ (uint64_t)round; }

static void alltoall_test(void) {
  pm_phase("alltoall");
  const size_t blks[] = {1, 100, 4096, 65536, 262144};
  for (size_t b = 0; b < sizeof blks / sizeof blks[0]; b++) {
    size_t blk = blks[b];
    unsigned char *s = pm_xmalloc(blk * (size_t)size), *r = pm_xmalloc(blk * (size_t)size);
    for (int p = 0; p < size; p++) pm_fill(s + blk * (size_t)p, blk, blk_seed(rank, p, (int)b));
    memset(r, 0, blk * (size_t)size);
    MPI_OK(MPI_Alltoall(s, (int)blk, MPI_BYTE, r, (int)blk, MPI_BYTE, MPI_COMM_WORLD));
    for (int p = 0; p < size; p++) CHECK_PAYLOAD(r + blk * (size_t)p, blk, blk_seed(p, rank, (int)b), "alltoall");
    free(s);
    free(r);
  }

  pm_phase("alltoallv");
  for (int round = 0; round < 3; round++) {
    /* count(src -> dst) in bytes; some are zero */
#define CNT(src, dst) ((((src) * 7 + (dst) * 3 + round) % 5) * (round == 2 ? 70001 : 1501))
    int *sc = pm_xmalloc(sizeof(int) * (size_t)size), *sd = pm_xmalloc(sizeof(int) * (size_t)size);
    int *rc = pm_xmalloc(sizeof(int) * (size_t)size), *rd = pm_xmalloc(sizeof(int) * (size_t)size);
    int stot = 0, rtot = 0;
    for (int p = 0; p < size; p++) {
      sc[p] = CNT(rank, p);
      sd[p] = stot;
      stot += sc[p] + 3; /* gaps between the blocks */
      rc[p] = CNT(p, rank);
      rd[p] = rtot;
      rtot += rc[p] + 5;
    }
    unsigned char *s = pm_xmalloc((size_t)stot), *r = pm_xmalloc((size_t)rtot);
    for (int p = 0; p < size; p++) pm_fill(s + sd[p], (size_t)sc[p], blk_seed(rank, p, 100 + round));
    memset(r, 0xEE, (size_t)rtot);
    MPI_OK(MPI_Alltoallv(s, sc, sd, MPI_BYTE, r, rc, rd, MPI_BYTE, MPI_COMM_WORLD));
    for (int p = 0; p < size; p++) {
      CHECK_PAYLOAD(r + rd[p], (size_t)rc[p], blk_seed(p, rank, 100 + round), "alltoallv");
      for (int g = 0; g < 5; g++) CHECK(r[rd[p] + rc[p] + g] == 0xEE, "alltoallv wrote into a gap");
    }
#undef CNT
    free(s);
    free(r);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
  }

  pm_phase("allgather");
  int64_t mine[3] = {rank, rank * 1000003LL, -rank}, *all = pm_xmalloc(sizeof mine * (size_t)size);
  MPI_OK(MPI_Allgather(mine, 3, MPI_INT64_T, all, 3, MPI_INT64_T, MPI_COMM_WORLD));
  for (int p = 0; p < size; p++)
    CHECK(all[3 * p] == p && all[3 * p + 1] == p * 1000003LL && all[3 * p + 2] == -p, "allgather block %d", p);
  free(all);
}

int main(int argc, char **argv) {
  pm_init(&argc, &argv, MPI_THREAD_SINGLE, 100);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size >= 2, "needs at least 2 ranks");
  double t0 = MPI_Wtime();
  barrier_test();
  bcast_test();
  allreduce_test();
  alltoall_test();
  /* and on a split communicator (odd and even ranks) */
  pm_phase("split communicator");
  MPI_Comm half;
  MPI_OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half));
  int hr, hs;
  MPI_Comm_rank(half, &hr);
  MPI_Comm_size(half, &hs);
  int64_t v = rank, sum = -1;
  MPI_OK(MPI_Allreduce(&v, &sum, 1, MPI_INT64_T, MPI_SUM, half));
  int64_t want = 0;
  for (int r = rank % 2; r < size; r += 2) want += r;
  CHECK(sum == want, "allreduce on the split communicator %lld, want %lld", (long long)sum, (long long)want);
  MPI_OK(MPI_Comm_free(&half));
  if (rank == 0) printf("mpi_coll: OK (%d ranks, %.1f s)\n", size, MPI_Wtime() - t0);
  MPI_Finalize();
  return 0;
}
