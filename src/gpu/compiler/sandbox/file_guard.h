/* The file guard of the NVRTC helper (file_guard.c). */
#ifndef SPECGEN_SANDBOX_FILE_GUARD_H
#define SPECGEN_SANDBOX_FILE_GUARD_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

/* From now on, file-system calls reach only `dirs` and what lies below them
 * (after resolving links); anything else does not exist, and nothing may be
 * written, removed or executed. Returns how many of `dirs` exist. Irrevocable. */
int specgen_guard_arm(const char* const* dirs, size_t n);

/* Calls refused since arming: reads of something that exists outside the
 * allowed directories, and every attempt to write, remove or execute. */
unsigned long specgen_guard_denied(void);

#ifdef __cplusplus
}
#endif
#endif
