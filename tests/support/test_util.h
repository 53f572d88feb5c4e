/* Shared helpers for integration tests: child processes stopped by PID, polling with
 * deadlines, raw HTTP requests over mc_net sockets. */
#ifndef MC_TESTS_SUPPORT_TEST_UTIL_H
#define MC_TESTS_SUPPORT_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* fork+exec argv (argv[0] is the path) with stdout/stderr appended to log_path (or /dev/null
 * if NULL). Returns the pid, -1 on failure. The child dies with the parent (PDEATHSIG). */
pid_t mt_spawn(char *const argv[], const char *log_path);
/* Send sig, then wait up to timeout_ms for the exit; SIGKILL if it does not exit. Returns the
 * wait status, or -1. */
int mt_stop(pid_t pid, int sig, int timeout_ms);

/* One HTTP/1.0-style exchange: send `request` raw, read until EOF (max cap bytes) into a heap
 * buffer (*resp_p, NUL-terminated). Returns the status code parsed from the first line, or -1. */
int mt_http_raw(uint16_t port, const char *request, size_t req_len, char **resp_p);
/* Poll GET path on port until it returns 200 or timeout_ms passes. 0 ok, -1 timed out. */
int mt_wait_http_ok(uint16_t port, const char *path, int timeout_ms);

/* Poll a log file until `needle` appears in its first 64 KiB; 0 found, -1 timed out. */
int mt_wait_log(const char *path, const char *needle, int timeout_ms);
/* The last 2 KiB of the log at path on stderr (nothing when it cannot be read). */
void mt_print_log_tail(const char *path);

/* kill(pid, SIGSTOP) returns before the process is stopped: send it and wait until every
 * thread of pid shows state 'T' in /proc (or timeout_ms passes). 0 stopped, -1 not. */
int mt_freeze(pid_t pid, int timeout_ms);

/* A fresh temp directory (mkdtemp under TMPDIR or /tmp) into out[len]; rm -rf by mt_rmdir. */
int mt_tmpdir(char *out, size_t len);
void mt_rmdir(const char *dir);

/* KernelPageSize in KiB (4 or 2048) of the first mapping of process pid that contains addr,
 * or, with addr 0, whose name contains `name` (e.g. "mc-te-shareable"); from
 * /proc/<pid>/smaps. -1 if there is none. */
long mt_mapping_page_kb(pid_t pid, uint64_t addr, const char *name);

/* Path of a built program: $MC_BIN_DIR/name, else ../bin/name next to this test. */
void mt_bin_path(const char *name, char *out, size_t len);

#endif
