/*
 * A slow disk for one process: LD_PRELOAD this (built by bench/slow-fsync.ts) and every
 * fsync, fdatasync, sync_file_range and synchronous msync sleeps SLOW_FSYNC_MS milliseconds
 * (default 50) before doing the real call. SQLite's commits and checkpoints, libuv's fs.fsync:
 * whatever the process flushes pays the delay on the thread that asked for it.
 *
 * Evidence that it works: at exit it prints the number of delayed calls per function to
 * stderr; with SLOW_FSYNC_LOG=<file> it also appends one line per call:
 * "<function> <epoch ms at entry> <fd>".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static atomic_long calls_fsync, calls_fdatasync, calls_sync_file_range, calls_msync;

static long delay_ms(void) {
  const char *text = getenv("SLOW_FSYNC_MS");
  return text ? atol(text) : 50;
}

static void note(const char *name, long fd) {
  const char *path = getenv("SLOW_FSYNC_LOG");
  if (!path) return;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  FILE *log = fopen(path, "a");
  if (!log) return;
  fprintf(log, "%s %lld %ld\n", name, (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000, fd);
  fclose(log);
}

/* Sleeps the whole delay even when a signal interrupts the sleep. */
static void slow_down(void) {
  long ms = delay_ms();
  struct timespec left = {ms / 1000, (ms % 1000) * 1000000L};
  int saved = errno;
  while (nanosleep(&left, &left) == -1 && errno == EINTR) {
  }
  errno = saved;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

int fsync(int fd) {
  atomic_fetch_add(&calls_fsync, 1);
  note("fsync", fd);
  slow_down();
  return REAL(fsync)(fd);
}

int fdatasync(int fd) {
  atomic_fetch_add(&calls_fdatasync, 1);
  note("fdatasync", fd);
  slow_down();
  return REAL(fdatasync)(fd);
}

int sync_file_range(int fd, off_t offset, off_t nbytes, unsigned int flags) {
  atomic_fetch_add(&calls_sync_file_range, 1);
  note("sync_file_range", fd);
  slow_down();
  return REAL(sync_file_range)(fd, offset, nbytes, flags);
}

int msync(void *addr, size_t length, int flags) {
  if (flags & MS_SYNC) {
    atomic_fetch_add(&calls_msync, 1);
    note("msync", -1);
    slow_down();
  }
  return REAL(msync)(addr, length, flags);
}

__attribute__((destructor)) static void report(void) {
  fprintf(stderr,
          "slow-fsync: pid %d delayed %ld ms each: fsync %ld, fdatasync %ld, sync_file_range %ld, "
          "msync %ld\n",
          (int)getpid(), delay_ms(), atomic_load(&calls_fsync), atomic_load(&calls_fdatasync),
          atomic_load(&calls_sync_file_range), atomic_load(&calls_msync));
}
