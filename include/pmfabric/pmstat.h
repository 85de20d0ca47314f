/* Live statistics of pmfabric endpoints (pmeth, pmshm): the layout of the
 * read-only page each endpoint publishes, for pmstat(1) and other tools.
 *
 * Each enabled endpoint (knob FI_<PROV>_LIVE_STATS, on by default) creates
 * /dev/shm/pmstat-<uid>-<pid>-<n>, mode 0600 (its user and root can read
 * it), updates it from its progress calls at most every 100 ms, and removes
 * it at close. Its process holds a shared flock(2) on the file from before
 * the name appears until the process ends: a page nobody holds that lock on
 * was left by a process that died (pmstat_page_orphaned). The pid alone
 * cannot tell: a process in another PID namespace does not see it.
 *
 * A reader must treat the file as untrusted: check magic, version and size
 * against the file's length, bound every count by the array it indexes,
 * and terminate every string itself. Consistent copies: read seq, copy,
 * read seq again; retry while it was odd or changed.
 *
 * The counters are the fields of the endpoint's statistics line
 * (fi_pmeth(7), fi_pmshm(7), FI_<PROV>_STATS): "<section>.<name>", e.g.
 * "eth.rail0.tx_frames", "eth.drops.bad_csum", "shm.tx_pkts",
 * "endpoint.unexp_bytes". Peers: the first PMSTAT_MAX_PEERS of the
 * device's peers, each with its own fields (tx_frames, retrans, srtt_us...).
 */
#ifndef PMFABRIC_PMSTAT_H
#define PMFABRIC_PMSTAT_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PMSTAT_MAGIC 0x54534d50u /* "PMST" */
#define PMSTAT_VERSION 1u
#define PMSTAT_DIR "/dev/shm"
#define PMSTAT_PREFIX "pmstat-"
#define PMSTAT_NAME_LEN 48
#define PMSTAT_MAX_COUNTERS 128
#define PMSTAT_MAX_PEERS 64
#define PMSTAT_MAX_PEER_FIELDS 16
#define PMSTAT_TEXT_LEN 160

struct pmstat_counter {
	char name[PMSTAT_NAME_LEN];	/* NUL-terminated (check) */
	uint64_t value;
};

struct pmstat_peer {
	char address[PMSTAT_TEXT_LEN];	/* the peer's name as the provider prints it */
	uint32_t nfields;		/* used entries of fields (<= PMSTAT_MAX_PEER_FIELDS) */
	uint32_t reserved;
	struct pmstat_counter fields[PMSTAT_MAX_PEER_FIELDS];
};

struct pmstat_page {
	uint32_t magic;		/* PMSTAT_MAGIC */
	uint32_t version;	/* PMSTAT_VERSION */
	uint32_t size;		/* sizeof(struct pmstat_page) of the writer */
	uint32_t reserved0;
	uint64_t seq;		/* odd while the endpoint writes */
	int32_t pid;		/* the process that owns the endpoint */
	uint32_t uid;
	uint64_t start_ns;	/* CLOCK_REALTIME at the endpoint's enable */
	uint64_t update_ns;	/* CLOCK_REALTIME at the last update */
	uint64_t updates;	/* how many updates so far */
	char provider[16];	/* "pmeth", "pmshm" */
	char address[PMSTAT_TEXT_LEN];	/* the endpoint's own name */
	char wire[32];		/* pmeth: the wire backend of rail 0, e.g. "af_packet" */
	uint32_t ncounters;	/* used entries of counters */
	uint32_t npeers;	/* used entries of peers */
	uint32_t peers_total;	/* peers the device has (more than npeers: not all shown) */
	uint32_t reserved1;
	struct pmstat_counter counters[PMSTAT_MAX_COUNTERS];
	struct pmstat_peer peers[PMSTAT_MAX_PEERS];
};

/* Whether the page open on fd was left by a process that died: 1 when
 * nobody holds its lock (an exclusive flock can be taken; it is released
 * again at once), 0 when its process still holds it, -1 on another error.
 * fd must come from the caller's own open() of the page: flock locks
 * belong to an open file description, so on the owner's own descriptor
 * (or a dup or fork of it) this would convert and then drop the owner's
 * lock. */
static inline int pmstat_page_orphaned(int fd)
{
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
		flock(fd, LOCK_UN);
		return 1;
	}
	return errno == EWOULDBLOCK ? 0 : -1;
}

#if defined(__cplusplus) || (defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 200809L)
/* (POSIX.1-2008: openat, fstatat, unlinkat, O_NOFOLLOW, O_CLOEXEC.)
 * Removes the page `name` in the directory dirfd if it is orphaned: a
 * regular file with one link (no symlink followed), owned by uid (unless
 * uid is -1), last modified before not_after (unless it is 0), nobody
 * holding its lock. The lock is held across the removal, and the name is
 * removed only while it still leads to the file that was locked (another
 * process may have removed it meanwhile and a new page taken the name).
 * Returns 1 when removed, 0 when kept, -1 on an error (errno). */
static inline int pmstat_remove_orphaned(int dirfd, const char *name, long uid, time_t not_after)
{
	struct stat st, now;
	int fd, rc = 0, e = 0;

	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	if (fstat(fd, &st) != 0) {
		rc = -1;
		e = errno;
	} else if (S_ISREG(st.st_mode) && st.st_nlink == 1 && (uid < 0 || st.st_uid == (uid_t)uid) &&
		   (not_after == 0 || st.st_mtime < not_after)) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			if (fstatat(dirfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == st.st_ino &&
			    now.st_dev == st.st_dev) {
				if (unlinkat(dirfd, name, 0) == 0) {
					rc = 1;
				} else if (errno != ENOENT) { /* ENOENT: another removed it */
					rc = -1;
					e = errno;
				}
			}
		} else if (errno != EWOULDBLOCK) {
			rc = -1;
			e = errno;
		}
	}
	close(fd); /* and with it the lock */
	if (rc < 0)
		errno = e;
	return rc;
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* PMFABRIC_PMSTAT_H */
