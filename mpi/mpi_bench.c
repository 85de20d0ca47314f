/* MPI benchmark: ping-pong latency and bandwidth over sizes (ranks 0 and 1),
 * streaming bandwidth (a window of nonblocking sends), and an all-to-all
 * exchange at NAS IS-like sizes (64 KiB .. 256 KiB per pair, every rank)
 * reporting the time per exchange. Payloads of the first and last iteration
 * are verified.
 *
 * usage: mpi_bench [--quick] [--label NAME] [--max-size BYTES]
 * Output: one CSV line per figure, label,test,size,metric,value
 *   pingpong  lat_us (half round trip), bw_MBps (size / half round trip)
 *   stream    bw_MBps (one way, window of 16 messages)
 *   alltoall  us_per_exchange (slowest rank's mean), MBps_per_rank (bytes
 *             sent by one rank per second) */
#include "mpi_check.h"

static int rank, size, quick;
static const char *label = "mpi";

static void emit(const char *test, size_t sz, const char *metric, double v) {
  if (rank == 0) printf("%s,%s,%zu,%s,%.3f\n", label, test, sz, metric, v);
}

static int iters_for(size_t sz, int lo, int hi) {
  double budget = quick ? 16e6 : 200e6; /* bytes moved per size */
  double n = budget / (double)(sz ? sz : 1);
  if (n > hi) n = hi;
  if (n < lo) n = lo;
  if (quick) n = n / 4 < lo ? lo : n / 4;
  return (int)n;
}

static void pingpong(size_t maxsz) {
  unsigned char *s = pm_xmalloc(maxsz), *r = pm_xmalloc(maxsz);
  const size_t list[] = {1, 8, 64, 512, 4096, 16384, 65536, 262144, 1u << 20, 4u << 20};
  for (size_t k = 0; k < sizeof list / sizeof list[0] && list[k] <= maxsz; k++) {
    size_t sz = list[k];
    int iters = iters_for(sz, 10, 5000), warm = iters / 10 + 1;
    pm_phase("pingpong");
    if (rank < 2) pm_fill(s, sz, 77 + sz);
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = 0;
    for (int i = -warm; i < iters; i++) {
      if (i == 0) t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_OK(MPI_Send(s, (int)sz, MPI_BYTE, 1, 1, MPI_COMM_WORLD));
        MPI_OK(MPI_Recv(r, (int)sz, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      } else if (rank == 1) {
        MPI_OK(MPI_Recv(r, (int)sz, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        if (i == -warm || i == iters - 1) CHECK_PAYLOAD(r, sz, 77 + sz, "pingpong");
        MPI_OK(MPI_Send(r, (int)sz, MPI_BYTE, 0, 1, MPI_COMM_WORLD));
      }
    }
    double dt = MPI_Wtime() - t0;
    if (rank == 0) CHECK_PAYLOAD(r, sz, 77 + sz, "pingpong echo");
    double lat = dt / iters / 2 * 1e6;
    emit("pingpong", sz, "lat_us", lat);
    emit("pingpong", sz, "bw_MBps", (double)sz / lat);
  }
  free(s);
  free(r);
}

static void stream(size_t maxsz) {
  enum { W = 16 };
  unsigned char *s = pm_xmalloc(maxsz), *r = pm_xmalloc(maxsz * W);
  MPI_Request req[W];
  for (size_t sz = 4096; sz <= maxsz; sz *= 16) {
    int iters = iters_for(sz * W, 5, 2000);
    pm_phase("stream");
    if (rank == 0) pm_fill(s, sz, 99 + sz);
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = 0;
    char ack = 0;
    for (int i = -2; i < iters; i++) {
      if (i == 0) t0 = MPI_Wtime();
      if (rank == 0) {
        for (int w = 0; w < W; w++) MPI_OK(MPI_Isend(s, (int)sz, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[w]));
        MPI_OK(MPI_Waitall(W, req, MPI_STATUSES_IGNORE));
        MPI_OK(MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      } else if (rank == 1) {
        for (int w = 0; w < W; w++)
          MPI_OK(MPI_Irecv(r + (size_t)w * sz, (int)sz, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[w]));
        MPI_OK(MPI_Waitall(W, req, MPI_STATUSES_IGNORE));
        if (i == -2 || i == iters - 1)
          for (int w = 0; w < W; w++) CHECK_PAYLOAD(r + (size_t)w * sz, sz, 99 + sz, "stream");
        MPI_OK(MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD));
      }
    }
    double dt = MPI_Wtime() - t0;
    emit("stream", sz, "bw_MBps", (double)sz * W * iters / dt / 1e6);
  }
  free(s);
  free(r);
}

static void alltoall(void) {
  const size_t blks[] = {65536, 131072, 262144};
  for (size_t b = 0; b < 3; b++) {
    size_t blk = blks[b];
    unsigned char *s = pm_xmalloc(blk * (size_t)size), *r = pm_xmalloc(blk * (size_t)size);
    for (int p = 0; p < size; p++) pm_fill(s + blk * (size_t)p, blk, ((uint64_t)rank << 20) + (uint64_t)p + blk);
    int iters = quick ? 10 : 60;
    pm_phase("alltoall");
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = 0;
    for (int i = -2; i < iters; i++) {
      if (i == 0) t0 = MPI_Wtime();
      if (i == -2 || i == iters - 1) memset(r, 0, blk * (size_t)size);
      MPI_OK(MPI_Alltoall(s, (int)blk, MPI_BYTE, r, (int)blk, MPI_BYTE, MPI_COMM_WORLD));
      if (i == -2 || i == iters - 1)
        for (int p = 0; p < size; p++)
          CHECK_PAYLOAD(r + blk * (size_t)p, blk, ((uint64_t)p << 20) + (uint64_t)rank + blk, "alltoall");
    }
    double mine = (MPI_Wtime() - t0) / iters, worst = 0;
    MPI_OK(MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    emit("alltoall", blk, "us_per_exchange", worst * 1e6);
    emit("alltoall", blk, "MBps_per_rank", (double)blk * (size - 1) / worst / 1e6);
    free(s);
    free(r);
  }
}

int main(int argc, char **argv) {
  size_t maxsz = 4u << 20;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--label") && i + 1 < argc) label = argv[++i];
    else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) maxsz = (size_t)strtoull(argv[++i], NULL, 0);
    else {
      fprintf(stderr, "usage: mpi_bench [--quick] [--label NAME] [--max-size BYTES]\n");
      return 2;
    }
  }
  if (quick && maxsz > (1u << 20)) maxsz = 1u << 20;
  pm_init(&argc, &argv, MPI_THREAD_SINGLE, quick ? 100 : 300);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size >= 2, "needs at least 2 ranks");
  pingpong(maxsz);
  stream(maxsz);
  alltoall();
  MPI_Finalize();
  return 0;
}
