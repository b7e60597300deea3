/* The file guard of the NVRTC helper (specgen-nvrtc): the C library's
 * file-system entry points, interposed so that NVRTC, which resolves them from
 * the helper executable first, can reach only the directories the compiler
 * allows (the CUDA Toolkit's headers and the caller's include dirs).
 *
 * Why in C: these definitions replace the C library's own, and C++ would
 * demand they repeat each declaration's exception specification exactly.
 *
 * Why beside Landlock: Landlock is the kernel's enforcement and covers every
 * path, but kernels before 5.13 and some containers lack it. The guard works
 * everywhere NVRTC reaches files through the C library, which is how it does
 * (its imports: open, fopen, __xstat, access, opendir, realpath, ...). A path
 * outside the allowed directories does not exist as far as NVRTC can tell:
 * every call answers ENOENT, so `__has_include` cannot probe the host.
 * Anything that would run a program or change the file system is refused.
 *
 * Armed once by specgen_guard_arm(); until then every call passes through. */
#define _GNU_SOURCE
#include "file_guard.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

enum { max_roots = 32 };
static char roots[max_roots][PATH_MAX];
static size_t root_count;
static int armed;
static unsigned long denied;

int specgen_guard_arm(const char* const* dirs, size_t n) {
  root_count = 0;
  for (size_t i = 0; i < n && root_count < max_roots; ++i) {
    char* real = realpath(dirs[i], NULL); /* not armed yet: the C library's own */
    if (!real) continue;                   /* a missing dir allows nothing */
    size_t len = strlen(real);
    if (len + 2 > PATH_MAX) {
      free(real);
      continue;
    }
    memcpy(roots[root_count], real, len + 1);
    if (len == 0 || real[len - 1] != '/') strcat(roots[root_count], "/");
    free(real);
    ++root_count;
  }
  armed = 1;
  return (int)root_count;
}

unsigned long specgen_guard_denied(void) { return denied; }

/* Counted where a path resolved outside the roots (allowed_at) or a change
 * was refused (deny_forbidden); a path that resolves nowhere is simply absent. */

/* The C library's definition of `name`, found past this executable; a C
 * library without it (stat before glibc 2.33, say) makes the call fail. */
#define REAL(name, ret, params, failure)                  \
  typedef ret(*name##_fn) params;                         \
  static name##_fn real_##name;                           \
  if (!real_##name) {                                     \
    void* found = dlsym(RTLD_NEXT, #name);                \
    memcpy(&real_##name, &found, sizeof found);           \
  }                                                       \
  if (!real_##name) {                                     \
    errno = ENOSYS;                                       \
    return failure;                                       \
  }

static int under_a_root(const char* canonical) {
  size_t len = strlen(canonical);
  for (size_t i = 0; i < root_count; ++i) {
    size_t rl = strlen(roots[i]);
    /* "/a/b/" allows "/a/b" itself and everything below it. */
    if (len + 1 == rl && strncmp(canonical, roots[i], len) == 0) return 1;
    if (len >= rl && strncmp(canonical, roots[i], rl) == 0) return 1;
  }
  return 0;
}

/* Whether `path`, relative to `dirfd`, names something inside an allowed
 * directory once symbolic links and ".." are resolved. A path that does not
 * resolve is not allowed: to the caller it does not exist, which is true or
 * indistinguishable from true. */
static int allowed_at(int dirfd, const char* path) {
  if (!armed) return 1;
  if (!path) return 0;
  char joined[PATH_MAX];
  if (path[0] != '/' && dirfd != AT_FDCWD) {
    char link[64], dir[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t n = syscall(SYS_readlink, link, dir, sizeof dir - 1);
    if (n <= 0) return 0;
    dir[n] = '\0';
    if ((size_t)snprintf(joined, sizeof joined, "%s/%s", dir, path) >= sizeof joined) return 0;
    path = joined;
  }
  char canonical[PATH_MAX];
  /* The unarmed realpath: glibc's, which calls no interposed function. */
  REAL(realpath, char*, (const char*, char*), 0);
  if (!real_realpath(path, canonical)) return 0;
  if (under_a_root(canonical)) return 1;
  ++denied; /* it exists, outside: a read the guard stopped */
  return 0;
}
static int allowed(const char* path) { return allowed_at(AT_FDCWD, path); }

static int deny_missing(void) {
  errno = ENOENT;
  return -1;
}
static int deny_forbidden(void) {
  ++denied;
  errno = EACCES;
  return -1;
}
/* Opening for anything but reading is refused even inside the roots. */
static int writes(int flags) { return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)); }

/* ---- opening ---------------------------------------------------------------- */

static int open_common(int dirfd, const char* path, int flags, mode_t mode) {
  if (armed && writes(flags)) return deny_forbidden();
  if (!allowed_at(dirfd, path)) return deny_missing();
  return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}

static mode_t mode_arg(int flags, va_list ap) {
  return ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_common(AT_FDCWD, path, flags, mode);
}
int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_common(AT_FDCWD, path, flags, mode);
}
int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_common(dirfd, path, flags, mode);
}
int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  return open_common(dirfd, path, flags, mode);
}
int __open_2(const char* path, int flags) { return open_common(AT_FDCWD, path, flags, 0); }
int __open64_2(const char* path, int flags) { return open_common(AT_FDCWD, path, flags, 0); }
int __openat_2(int dirfd, const char* path, int flags) { return open_common(dirfd, path, flags, 0); }
int creat(const char* path, mode_t mode) {
  (void)path;
  (void)mode;
  if (armed) return deny_forbidden();
  return (int)syscall(SYS_creat, path, mode);
}

static FILE* fopen_common(const char* name, const char* path, const char* how) {
  if (armed && how && (strchr(how, 'w') || strchr(how, 'a') || strchr(how, '+'))) {
    deny_forbidden();
    return NULL;
  }
  if (!allowed(path)) {
    deny_missing();
    return NULL;
  }
  FILE* (*f)(const char*, const char*);
  void* found = dlsym(RTLD_NEXT, name);
  memcpy(&f, &found, sizeof found);
  if (!f) {
    errno = ENOSYS;
    return NULL;
  }
  return f(path, how);
}
FILE* fopen(const char* path, const char* how) { return fopen_common("fopen", path, how); }
FILE* fopen64(const char* path, const char* how) { return fopen_common("fopen64", path, how); }
FILE* freopen(const char* path, const char* how, FILE* stream) {
  if (armed) {
    deny_forbidden();
    return NULL;
  }
  REAL(freopen, FILE*, (const char*, const char*, FILE*), NULL);
  return real_freopen(path, how, stream);
}

DIR* opendir(const char* path) {
  if (!allowed(path)) {
    deny_missing();
    return NULL;
  }
  REAL(opendir, DIR*, (const char*), NULL);
  return real_opendir(path);
}

/* ---- asking about files ------------------------------------------------------- */

#define STAT_LIKE(name, type)                          \
  int name(const char* path, type* out) {              \
    if (!allowed(path)) return deny_missing();         \
    REAL(name, int, (const char*, type*), -1);           \
    return real_##name(path, out);                     \
  }
STAT_LIKE(stat, struct stat)
STAT_LIKE(stat64, struct stat64)
STAT_LIKE(lstat, struct stat)
STAT_LIKE(lstat64, struct stat64)
STAT_LIKE(statfs, struct statfs)
STAT_LIKE(statfs64, struct statfs64)

/* The versioned stat entry points of older C libraries, which NVRTC imports. */
#define XSTAT_LIKE(name, type)                         \
  int name(int ver, const char* path, type* out) {     \
    if (!allowed(path)) return deny_missing();         \
    REAL(name, int, (int, const char*, type*), -1);      \
    return real_##name(ver, path, out);                \
  }
XSTAT_LIKE(__xstat, struct stat)
XSTAT_LIKE(__xstat64, struct stat64)
XSTAT_LIKE(__lxstat, struct stat)
XSTAT_LIKE(__lxstat64, struct stat64)

/* fstat(fd) arrives as fstatat(fd, "", AT_EMPTY_PATH): an open descriptor
 * was checked when it was opened. (The headers promise `path` is not null;
 * the volatile read keeps the compiler from trusting that promise.) */
static int empty_path(const char* path, int flags) {
  const char* volatile p = path;
  return p && p[0] == '\0' && (flags & AT_EMPTY_PATH);
}

int fstatat(int dirfd, const char* path, struct stat* out, int flags) {
  if (!empty_path(path, flags) && !allowed_at(dirfd, path)) return deny_missing();
  REAL(fstatat, int, (int, const char*, struct stat*, int), -1);
  return real_fstatat(dirfd, path, out, flags);
}
int fstatat64(int dirfd, const char* path, struct stat64* out, int flags) {
  if (!empty_path(path, flags) && !allowed_at(dirfd, path)) return deny_missing();
  REAL(fstatat64, int, (int, const char*, struct stat64*, int), -1);
  return real_fstatat64(dirfd, path, out, flags);
}
int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* out) {
  if (!empty_path(path, flags) && !allowed_at(dirfd, path)) return deny_missing();
  REAL(statx, int, (int, const char*, int, unsigned, struct statx*), -1);
  return real_statx(dirfd, path, flags, mask, out);
}

int access(const char* path, int how) {
  if (armed && (how & W_OK)) return deny_forbidden();
  if (!allowed(path)) return deny_missing();
  REAL(access, int, (const char*, int), -1);
  return real_access(path, how);
}
int euidaccess(const char* path, int how) { return access(path, how); }
int eaccess(const char* path, int how) { return access(path, how); }
int faccessat(int dirfd, const char* path, int how, int flags) {
  if (armed && (how & W_OK)) return deny_forbidden();
  if (!allowed_at(dirfd, path)) return deny_missing();
  REAL(faccessat, int, (int, const char*, int, int), -1);
  return real_faccessat(dirfd, path, how, flags);
}

ssize_t readlink(const char* path, char* buf, size_t size) {
  if (!allowed(path)) return deny_missing();
  return syscall(SYS_readlink, path, buf, size);
}
ssize_t readlinkat(int dirfd, const char* path, char* buf, size_t size) {
  if (!allowed_at(dirfd, path)) return deny_missing();
  return syscall(SYS_readlinkat, dirfd, path, buf, size);
}

char* realpath(const char* path, char* resolved) {
  if (!allowed(path)) {
    deny_missing();
    return NULL;
  }
  REAL(realpath, char*, (const char*, char*), NULL);
  return real_realpath(path, resolved);
}

/* ---- changing the file system or running programs: never once armed ------------ */

#define REFUSED(ret, name, params, args, failure) \
  ret name params {                               \
    if (armed) {                                  \
      deny_forbidden();                           \
      return failure;                             \
    }                                             \
    REAL(name, ret, params, failure);           \
    return real_##name args;                      \
  }
REFUSED(int, mkdir, (const char* p, mode_t m), (p, m), -1)
REFUSED(int, rmdir, (const char* p), (p), -1)
REFUSED(int, unlink, (const char* p), (p), -1)
REFUSED(int, rename, (const char* a, const char* b), (a, b), -1)
REFUSED(int, chdir, (const char* p), (p), -1)
REFUSED(int, execv, (const char* p, char* const a[]), (p, a), -1)
REFUSED(int, execve, (const char* p, char* const a[], char* const e[]), (p, a, e), -1)
REFUSED(int, execvp, (const char* p, char* const a[]), (p, a), -1)
REFUSED(int, system, (const char* c), (c), -1)
REFUSED(FILE*, popen, (const char* c, const char* t), (c, t), NULL)
REFUSED(pid_t, fork, (void), (), -1)
REFUSED(pid_t, vfork, (void), (), -1)

/* NVRTC loads its builtins library at its first compile; the helper has
 * loaded it already, so a library that is loaded is found, nothing else. */
void* dlopen(const char* file, int mode) {
  REAL(dlopen, void*, (const char*, int), NULL);
  if (!armed || !file) return real_dlopen(file, mode);
  void* loaded = real_dlopen(file, mode | RTLD_NOLOAD);
  if (!loaded) ++denied;
  return loaded;
}
