/* MPI point-to-point: every size 0..4 MiB (powers of two and odd sizes),
 * blocking and nonblocking, payloads verified byte for byte; MPI_ANY_SOURCE /
 * MPI_ANY_TAG with status checks; MPI_Probe / MPI_Iprobe / MPI_Mprobe +
 * MPI_Mrecv; MPI_Cancel of a posted receive; truncation reported as
 * MPI_ERR_TRUNCATE. Runs on 2 or more ranks. */
#include "mpi_check.h"

static int rank, size;

#define MAX_SIZE (4u << 20)

static size_t sizes[128];
static int nsizes;

static void make_sizes(void) {
  nsizes = 0;
  sizes[nsizes++] = 0;
  for (size_t p = 1; p <= MAX_SIZE; p <<= 1) {
    sizes[nsizes++] = p;
    if (p >= 4) sizes[nsizes++] = p - 1;
    if (p >= 2 && p < MAX_SIZE) sizes[nsizes++] = p + 1;
  }
  /* a few odd sizes that are not next to a power of two */
  const size_t odd[] = {3, 13, 1403, 1404, 1405, 8999, 9001, 65439, 65441, 100003, 999983, 3333333};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) sizes[nsizes++] = odd[i];
}

static uint64_t seed(int src, int dst, int i, int mode) {
  return ((uint64_t)src << 48) ^ ((uint64_t)dst << 32) ^ ((uint64_t)i << 8) ^ (uint64_t)mode;
}

static void check_status(const MPI_Status *st, int src, int tag, size_t len, const char *what) {
  int count = -1;
  MPI_OK(MPI_Get_count(st, MPI_BYTE, &count));
  CHECK(st->MPI_SOURCE == src, "%s: MPI_SOURCE %d, want %d", what, st->MPI_SOURCE, src);
  CHECK(st->MPI_TAG == tag, "%s: MPI_TAG %d, want %d", what, st->MPI_TAG, tag);
  CHECK(count == (int)len, "%s: count %d, want %zu", what, count, len);
}

/* Blocking: every ordered pair in one global order (deadlock-free), the lower
 * rank sends first. Then nonblocking: everyone to everyone at once. */
static void sizes_test(void) {
  unsigned char *sbuf = pm_xmalloc(MAX_SIZE + 16), *rbuf = pm_xmalloc(MAX_SIZE + 16);
  for (int i = 0; i < nsizes; i++) {
    size_t len = sizes[i];
    pm_phase("blocking sizes");
    for (int a = 0; a < size; a++)
      for (int b = a + 1; b < size; b++) {
        if (rank != a && rank != b) continue;
        int peer = rank == a ? b : a;
        for (int turn = 0; turn < 2; turn++) {
          int sending = (rank == a) == (turn == 0);
          int tag = 1000 + i;
          if (sending) {
            pm_fill(sbuf, len, seed(rank, peer, i, 1));
            MPI_OK(MPI_Send(sbuf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
          } else {
            MPI_Status st;
            memset(rbuf, 0xA5, len + 16);
            MPI_OK(MPI_Recv(rbuf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
            check_status(&st, peer, tag, len, "MPI_Recv");
            CHECK_PAYLOAD(rbuf, len, seed(peer, rank, i, 1), "MPI_Recv");
            for (int g = 0; g < 16; g++) CHECK(rbuf[len + g] == 0xA5, "MPI_Recv of %zu wrote past the end", len);
          }
        }
      }
  }
  /* nonblocking, all pairs at once; receives posted before or after the sends */
  MPI_Request *req = pm_xmalloc(sizeof(MPI_Request) * 2 * (size_t)size);
  MPI_Status *sts = pm_xmalloc(sizeof(MPI_Status) * 2 * (size_t)size);
  unsigned char **sb = pm_xmalloc(sizeof(void *) * (size_t)size), **rb = pm_xmalloc(sizeof(void *) * (size_t)size);
  for (int p = 0; p < size; p++) {
    sb[p] = pm_xmalloc(MAX_SIZE);
    rb[p] = pm_xmalloc(MAX_SIZE);
  }
  for (int i = 0; i < nsizes; i++) {
    size_t len = sizes[i];
    pm_phase("nonblocking sizes");
    int n = 0, late = i & 1; /* odd rounds: receives after the sends (unexpected messages) */
    if (!late)
      for (int p = 0; p < size; p++)
        if (p != rank) MPI_OK(MPI_Irecv(rb[p], (int)len, MPI_BYTE, p, 2000 + i, MPI_COMM_WORLD, &req[n++]));
    for (int p = 0; p < size; p++)
      if (p != rank) {
        pm_fill(sb[p], len, seed(rank, p, i, 2));
        MPI_OK(MPI_Isend(sb[p], (int)len, MPI_BYTE, p, 2000 + i, MPI_COMM_WORLD, &req[n++]));
      }
    if (late) {
      MPI_OK(MPI_Barrier(MPI_COMM_WORLD)); /* eager sends are in flight now */
      for (int p = 0; p < size; p++)
        if (p != rank) MPI_OK(MPI_Irecv(rb[p], (int)len, MPI_BYTE, p, 2000 + i, MPI_COMM_WORLD, &req[n++]));
    }
    MPI_OK(MPI_Waitall(n, req, sts));
    for (int p = 0; p < size; p++)
      if (p != rank) CHECK_PAYLOAD(rb[p], len, seed(p, rank, i, 2), "MPI_Irecv");
    /* status of the receives */
    int k = 0;
    for (int j = 0; j < n; j++) {
      int count = -1;
      MPI_Get_count(&sts[j], MPI_BYTE, &count);
      if (sts[j].MPI_TAG == 2000 + i && count == (int)len && sts[j].MPI_SOURCE != rank) k++;
    }
    CHECK(k >= size - 1, "nonblocking size %zu: %d good receive statuses, want %d", len, k, size - 1);
  }
  for (int p = 0; p < size; p++) {
    free(sb[p]);
    free(rb[p]);
  }
  free(sb);
  free(rb);
  free(req);
  free(sts);
  free(sbuf);
  free(rbuf);
}

/* Rank 0 takes one message from every other rank with MPI_ANY_SOURCE and
 * MPI_ANY_TAG; the status names the sender, the tag and the length. Then
 * tag selection out of arrival order. */
static void wildcard_test(void) {
  pm_phase("any_source any_tag");
  unsigned char buf[70000];
  if (rank == 0) {
    int seen[64] = {0};
    for (int k = 1; k < size; k++) {
      MPI_Status st;
      MPI_OK(MPI_Recv(buf, sizeof buf, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
      int src = st.MPI_SOURCE;
      CHECK(src > 0 && src < size && !seen[src], "ANY_SOURCE gave source %d", src);
      seen[src] = 1;
      check_status(&st, src, 300 + src, (size_t)(500 * src + 7), "ANY_SOURCE/ANY_TAG");
      CHECK_PAYLOAD(buf, (size_t)(500 * src + 7), seed(src, 0, 300, 3), "ANY_SOURCE/ANY_TAG");
    }
  } else {
    size_t len = (size_t)(500 * rank + 7);
    pm_fill(buf, len, seed(rank, 0, 300, 3));
    MPI_OK(MPI_Send(buf, (int)len, MPI_BYTE, 0, 300 + rank, MPI_COMM_WORLD));
  }
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));

  pm_phase("tag selection");
  /* rank 1 sends tags 11, 12, 13 (small and a large one); rank 0 receives 13, 11, then ANY_TAG = 12 */
  if (rank == 1) {
    MPI_Request r[3];
    static unsigned char s[3][40000];
    const int lens[3] = {10, 20000, 40000};
    for (int t = 0; t < 3; t++) {
      pm_fill(s[t], (size_t)lens[t], seed(1, 0, 11 + t, 4));
      MPI_OK(MPI_Isend(s[t], lens[t], MPI_BYTE, 0, 11 + t, MPI_COMM_WORLD, &r[t]));
    }
    MPI_OK(MPI_Waitall(3, r, MPI_STATUSES_IGNORE));
  } else if (rank == 0) {
    const int order[3] = {13, 11, MPI_ANY_TAG};
    const int want[3] = {13, 11, 12};
    const int lens[3] = {40000, 10, 20000};
    for (int k = 0; k < 3; k++) {
      MPI_Status st;
      MPI_OK(MPI_Recv(buf, sizeof buf, MPI_BYTE, 1, order[k], MPI_COMM_WORLD, &st));
      check_status(&st, 1, want[k], (size_t)lens[k], "tag selection");
      CHECK_PAYLOAD(buf, (size_t)lens[k], seed(1, 0, want[k], 4), "tag selection");
    }
  }
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
}

static void probe_test(void) {
  pm_phase("probe");
  const size_t lens[3] = {123, 1u << 20, 0};
  if (rank == 1) {
    unsigned char *s = pm_xmalloc(1u << 20);
    for (int k = 0; k < 3; k++) {
      pm_fill(s, lens[k], seed(1, 0, 40 + k, 5));
      MPI_OK(MPI_Send(s, (int)lens[k], MPI_BYTE, 0, 40 + k, MPI_COMM_WORLD));
    }
    free(s);
  } else if (rank == 0) {
    /* nothing is there under this tag */
    int flag = 1;
    MPI_Status st;
    MPI_OK(MPI_Iprobe(1, 999, MPI_COMM_WORLD, &flag, &st));
    CHECK(!flag, "MPI_Iprobe found a message that was never sent");
    for (int k = 0; k < 3; k++) {
      if (k == 1) { /* MPI_Iprobe until it is there (bounded by the watchdog) */
        flag = 0;
        double t0 = MPI_Wtime();
        while (!flag) {
          MPI_OK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
          CHECK(MPI_Wtime() - t0 < 30, "MPI_Iprobe found nothing in 30 s");
        }
      } else {
        MPI_OK(MPI_Probe(MPI_ANY_SOURCE, 40 + k, MPI_COMM_WORLD, &st));
      }
      check_status(&st, 1, 40 + k, lens[k], "probe");
      unsigned char *r = pm_xmalloc(lens[k]);
      MPI_Status st2;
      MPI_OK(MPI_Recv(r, (int)lens[k], MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st2));
      check_status(&st2, 1, 40 + k, lens[k], "recv after probe");
      CHECK_PAYLOAD(r, lens[k], seed(1, 0, 40 + k, 5), "recv after probe");
      free(r);
    }
  }
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));

  pm_phase("mprobe mrecv");
  /* two messages with one tag from every rank; matched probes take them in order */
  if (rank != 0) {
    unsigned char *s = pm_xmalloc(300000);
    for (int k = 0; k < 2; k++) {
      size_t len = k ? 300000 : 77;
      pm_fill(s, len, seed((int)rank, 0, 50 + k, 6));
      MPI_OK(MPI_Send(s, (int)len, MPI_BYTE, 0, 50, MPI_COMM_WORLD));
    }
    free(s);
  } else {
    int next[64] = {0};
    for (int m = 0; m < 2 * (size - 1); m++) {
      MPI_Message msg;
      MPI_Status st;
      if (m & 1) {
        int flag = 0;
        double t0 = MPI_Wtime();
        while (!flag) {
          MPI_OK(MPI_Improbe(MPI_ANY_SOURCE, 50, MPI_COMM_WORLD, &flag, &msg, &st));
          CHECK(MPI_Wtime() - t0 < 30, "MPI_Improbe found nothing in 30 s");
        }
      } else {
        MPI_OK(MPI_Mprobe(MPI_ANY_SOURCE, 50, MPI_COMM_WORLD, &msg, &st));
      }
      int src = st.MPI_SOURCE;
      CHECK(src > 0 && src < size && next[src] < 2, "mprobe source %d", src);
      size_t len = next[src] ? 300000 : 77;
      check_status(&st, src, 50, len, "mprobe");
      /* another probe does not see the matched message again */
      unsigned char *r = pm_xmalloc(len);
      MPI_Status st2;
      MPI_OK(MPI_Mrecv(r, (int)len, MPI_BYTE, &msg, &st2));
      CHECK(msg == MPI_MESSAGE_NULL, "MPI_Mrecv did not reset the message handle");
      check_status(&st2, src, 50, len, "mrecv");
      CHECK_PAYLOAD(r, len, seed(src, 0, 50 + next[src], 6), "mrecv (order within one source)");
      next[src]++;
      free(r);
    }
  }
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
}

static void cancel_test(void) {
  pm_phase("cancel");
  if (rank == 0) {
    unsigned char buf[64];
    MPI_Request r;
    MPI_Status st;
    MPI_OK(MPI_Irecv(buf, sizeof buf, MPI_BYTE, 1, 4242, MPI_COMM_WORLD, &r));
    MPI_OK(MPI_Cancel(&r));
    MPI_OK(MPI_Wait(&r, &st));
    int cancelled = 0;
    MPI_OK(MPI_Test_cancelled(&st, &cancelled));
    CHECK(cancelled, "MPI_Test_cancelled is false for a receive that could not match");
    CHECK(r == MPI_REQUEST_NULL, "request not freed");
    /* the cancelled receive must not swallow a later message with that tag */
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_OK(MPI_Recv(buf, sizeof buf, MPI_BYTE, 1, 4242, MPI_COMM_WORLD, &st));
    check_status(&st, 1, 4242, 33, "after cancel");
    CHECK_PAYLOAD(buf, 33, seed(1, 0, 4242, 7), "after cancel");
    /* cancelling a receive that already completed: MPI_Test_cancelled false */
    MPI_OK(MPI_Irecv(buf, sizeof buf, MPI_BYTE, 1, 4243, MPI_COMM_WORLD, &r));
    MPI_OK(MPI_Wait(&r, &st));
    MPI_OK(MPI_Test_cancelled(&st, &cancelled));
    CHECK(!cancelled, "completed receive reported as cancelled");
  } else {
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 1) {
      unsigned char buf[64];
      pm_fill(buf, 33, seed(1, 0, 4242, 7));
      MPI_OK(MPI_Send(buf, 33, MPI_BYTE, 0, 4242, MPI_COMM_WORLD));
      MPI_OK(MPI_Send(buf, 5, MPI_BYTE, 0, 4243, MPI_COMM_WORLD));
    }
  }
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
}

static void truncate_test(void) {
  /* a small (eager) and a large (rendezvous) message into a smaller buffer:
   * blocking receive and nonblocking receive, both MPI_ERR_TRUNCATE */
  const size_t sent[2] = {100, 1u << 20}, room[2] = {10, 1000};
  for (int k = 0; k < 2; k++) {
    pm_phase(k ? "truncate large" : "truncate small");
    if (rank == 1) {
      unsigned char *s = pm_xmalloc(sent[k]);
      pm_fill(s, sent[k], seed(1, 0, 60 + k, 8));
      MPI_OK(MPI_Send(s, (int)sent[k], MPI_BYTE, 0, 60, MPI_COMM_WORLD));
      MPI_OK(MPI_Send(s, (int)sent[k], MPI_BYTE, 0, 61, MPI_COMM_WORLD));
      MPI_OK(MPI_Send(s, (int)sent[k], MPI_BYTE, 0, 63, MPI_COMM_WORLD));
      free(s);
    } else if (rank == 0) {
      unsigned char *r = pm_xmalloc(room[k] + 64);
      memset(r, 0x5A, room[k] + 64);
      MPI_Status st;
      int rc = MPI_Recv(r, (int)room[k], MPI_BYTE, 1, 60, MPI_COMM_WORLD, &st);
      int cls = -1;
      MPI_Error_class(rc, &cls);
      CHECK(cls == MPI_ERR_TRUNCATE, "MPI_Recv of %zu bytes into %zu returned class %d, want MPI_ERR_TRUNCATE",
            sent[k], room[k], cls);
      for (int g = 0; g < 64; g++) CHECK(r[room[k] + g] == 0x5A, "truncated receive wrote past the buffer");
      MPI_Request q;
      memset(r, 0x5A, room[k] + 64);
      MPI_OK(MPI_Irecv(r, (int)room[k], MPI_BYTE, 1, 61, MPI_COMM_WORLD, &q));
      rc = MPI_Wait(&q, &st);
      MPI_Error_class(rc, &cls);
      CHECK(cls == MPI_ERR_TRUNCATE, "MPI_Wait on a truncated MPI_Irecv returned class %d", cls);
      for (int g = 0; g < 64; g++) CHECK(r[room[k] + g] == 0x5A, "truncated Irecv wrote past the buffer");
      /* MPI_Waitall reports it in the status (MPI_ERR_IN_STATUS) */
      MPI_OK(MPI_Irecv(r, (int)room[k], MPI_BYTE, 1, 63, MPI_COMM_WORLD, &q));
      st.MPI_ERROR = MPI_SUCCESS;
      rc = MPI_Waitall(1, &q, &st);
      MPI_Error_class(rc, &cls);
      int scls = -1;
      MPI_Error_class(st.MPI_ERROR, &scls);
      CHECK((cls == MPI_ERR_IN_STATUS && scls == MPI_ERR_TRUNCATE) || cls == MPI_ERR_TRUNCATE,
            "MPI_Waitall on a truncated receive: class %d, status class %d", cls, scls);
      free(r);
    }
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
  }
  /* the channel still works afterwards */
  pm_phase("after truncate");
  unsigned char b[256];
  if (rank == 1) {
    pm_fill(b, 256, seed(1, 0, 62, 8));
    MPI_OK(MPI_Send(b, 256, MPI_BYTE, 0, 62, MPI_COMM_WORLD));
  } else if (rank == 0) {
    MPI_Status st;
    MPI_OK(MPI_Recv(b, 256, MPI_BYTE, 1, 62, MPI_COMM_WORLD, &st));
    check_status(&st, 1, 62, 256, "after truncate");
    CHECK_PAYLOAD(b, 256, seed(1, 0, 62, 8), "after truncate");
  }
  MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
}

int main(int argc, char **argv) {
  pm_init(&argc, &argv, MPI_THREAD_SINGLE, 100);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(size >= 2 && size <= 64, "needs 2..64 ranks");
  make_sizes();
  double t0 = MPI_Wtime();
  sizes_test();
  wildcard_test();
  probe_test();
  cancel_test();
  truncate_test();
  if (rank == 0) printf("mpi_p2p: OK (%d ranks, %d sizes 0..%u, %.1f s)\n", size, nsizes, MAX_SIZE, MPI_Wtime() - t0);
  MPI_Finalize();
  return 0;
}
