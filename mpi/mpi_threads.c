/* MPI_THREAD_MULTIPLE: several threads per rank message at the same time.
 * Thread t of every rank exchanges with thread t of every other rank (tag t)
 * on MPI_COMM_WORLD, mixing eager and rendezvous sizes, blocking and
 * nonblocking; then every thread uses its own duplicated communicator with
 * MPI_ANY_SOURCE. Every payload and status is checked.
 * usage: mpi_threads [threads] [--allow-less]  (default 4 threads)
 * --allow-less: if the library gives less than MPI_THREAD_MULTIPLE, say so
 * and run with one thread instead of failing. */
#include <pthread.h>

#include "mpi_check.h"

static int rank, size, nthreads = 4;
static MPI_Comm comms[16];

static uint64_t seed(int src, int dst, int t, int it) {
  return ((uint64_t)src << 40) ^ ((uint64_t)dst << 28) ^ ((uint64_t)t << 20) ^ (uint64_t)it;
}

static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  const size_t lens[] = {0, 8, 1000, 4096, 20000, 150000, 1u << 20};
  const int nlens = sizeof lens / sizeof lens[0];
  unsigned char **sb = pm_xmalloc(sizeof(void *) * (size_t)size), **rb = pm_xmalloc(sizeof(void *) * (size_t)size);
  for (int p = 0; p < size; p++) {
    sb[p] = pm_xmalloc(1u << 20);
    rb[p] = pm_xmalloc(1u << 20);
  }
  MPI_Request *req = pm_xmalloc(sizeof(MPI_Request) * 2 * (size_t)size);
  MPI_Status *sts = pm_xmalloc(sizeof(MPI_Status) * 2 * (size_t)size);
  for (int it = 0; it < 3 * nlens; it++) {
    size_t len = lens[(it + t) % nlens]; /* threads use different sizes at one time */
    int n = 0;
    for (int p = 0; p < size; p++)
      if (p != rank) MPI_OK(MPI_Irecv(rb[p], (int)len, MPI_BYTE, p, t, MPI_COMM_WORLD, &req[n++]));
    for (int p = 0; p < size; p++)
      if (p != rank) {
        pm_fill(sb[p], len, seed(rank, p, t, it));
        if (it % 3 == 0) MPI_OK(MPI_Send(sb[p], (int)len, MPI_BYTE, p, t, MPI_COMM_WORLD));
        else MPI_OK(MPI_Isend(sb[p], (int)len, MPI_BYTE, p, t, MPI_COMM_WORLD, &req[n++]));
      }
    MPI_OK(MPI_Waitall(n, req, sts));
    for (int j = 0, p = 0; p < size; p++) {
      if (p == rank) continue;
      int count = -1;
      MPI_Get_count(&sts[j], MPI_BYTE, &count);
      CHECK(sts[j].MPI_SOURCE == p && sts[j].MPI_TAG == t && count == (int)len,
            "thread %d: status source %d tag %d count %d, want %d %d %zu", t, sts[j].MPI_SOURCE, sts[j].MPI_TAG,
            count, p, t, len);
      j++;
      CHECK_PAYLOAD(rb[p], len, seed(p, rank, t, it), "thread exchange");
    }
  }
  /* own communicator, ANY_SOURCE: every other rank sends 20 messages */
  MPI_Comm c = comms[t];
  for (int it = 0; it < 20; it++) {
    size_t len = (size_t)(it * 997 + t) % 30000;
    MPI_Request sr[64];
    int ns = 0;
    for (int p = 0; p < size; p++)
      if (p != rank) {
        pm_fill(sb[p], len, seed(rank, p, t, 1000 + it));
        MPI_OK(MPI_Isend(sb[p], (int)len, MPI_BYTE, p, it, c, &sr[ns++]));
      }
    int got[64] = {0};
    for (int k = 0; k < size - 1; k++) {
      MPI_Status st;
      unsigned char *r = rb[0];
      MPI_OK(MPI_Recv(r, 1u << 20, MPI_BYTE, MPI_ANY_SOURCE, it, c, &st));
      int count = -1;
      MPI_Get_count(&st, MPI_BYTE, &count);
      CHECK(st.MPI_SOURCE != rank && st.MPI_SOURCE < size && !got[st.MPI_SOURCE] && count == (int)len,
            "thread %d ANY_SOURCE: source %d count %d", t, st.MPI_SOURCE, count);
      got[st.MPI_SOURCE] = 1;
      CHECK_PAYLOAD(r, len, seed(st.MPI_SOURCE, rank, t, 1000 + it), "thread ANY_SOURCE");
    }
    MPI_OK(MPI_Waitall(ns, sr, MPI_STATUSES_IGNORE));
  }
  for (int p = 0; p < size; p++) {
    free(sb[p]);
    free(rb[p]);
  }
  free(sb);
  free(rb);
  free(req);
  free(sts);
  return NULL;
}

int main(int argc, char **argv) {
  int allow_less = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--allow-less")) allow_less = 1;
    else nthreads = atoi(argv[i]);
  }
  if (nthreads < 1 || nthreads > 16) nthreads = 4;
  int provided = pm_init(&argc, &argv, MPI_THREAD_MULTIPLE, 100);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size >= 2 && size <= 64, "needs 2..64 ranks");
  int is_main = 0;
  MPI_OK(MPI_Is_thread_main(&is_main));
  CHECK(is_main, "MPI_Is_thread_main false in the main thread");
  int q = -1;
  MPI_OK(MPI_Query_thread(&q));
  CHECK(q == provided, "MPI_Query_thread %d, MPI_Init_thread provided %d", q, provided);
  if (provided != MPI_THREAD_MULTIPLE) {
    if (!allow_less) FAIL("MPI_Init_thread provided %d, not MPI_THREAD_MULTIPLE (%d)", provided, MPI_THREAD_MULTIPLE);
    if (rank == 0) printf("mpi_threads: provided %d < MPI_THREAD_MULTIPLE; running one thread\n", provided);
    nthreads = 1;
  }
  for (int t = 0; t < nthreads; t++) MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]));
  double t0 = MPI_Wtime();
  pm_phase("threads");
  pthread_t th[16];
  for (int t = 0; t < nthreads; t++) CHECK(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0, "pthread_create");
  for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
  for (int t = 0; t < nthreads; t++) MPI_OK(MPI_Comm_free(&comms[t]));
  if (rank == 0)
    printf("mpi_threads: OK (%d ranks x %d threads, provided MPI_THREAD_MULTIPLE=%d, %.1f s)\n", size, nthreads,
           provided == MPI_THREAD_MULTIPLE, MPI_Wtime() - t0);
  MPI_Finalize();
  return 0;
}
