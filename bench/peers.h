/* Peer measurements for benchmarks: what the machine and well-known servers reach on the same
 * workload, measured in the same run, so that our figures can be read as ratios.
 *
 *   memcpy     single-thread memcpy between two warm, pre-faulted buffers
 *   memcached  GET of one N-byte value from a memcached we start on a free loopback port
 *              (our own minimal text-protocol client: one SET, then timed GETs)
 *   iperf3     one TCP stream over loopback (iperf3 -J, parsed with jansson)
 *   redis      redis-benchmark against a redis-server we start on a free loopback port, or on
 *              a unix domain socket (the same-host peer of the engine's shm transport)
 *
 * Servers are started as child processes (fork + exec, stdout/stderr to /dev/null unless
 * MC_PEERS_VERBOSE is set), waited for by polling their port with a deadline, and stopped by
 * PID (SIGTERM, then SIGKILL after 3 s). Nothing is ever killed by name.
 *
 * All functions fill a caller-owned mc_peer_result_t; on failure they return an error status,
 * set r->ok = 0 and put a one-line reason into r->error. They never exit the process.
 * Not thread-safe (they fork); call them from one thread with nothing else measuring.
 */
#ifndef MC_BENCH_PEERS_H
#define MC_BENCH_PEERS_H

#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct mc_peer_result {
    int ok;            /* 1 when the figures below are valid */
    char peer[32];     /* "memcpy", "memcached_get", "memcached_set", "iperf3", "redis_get"... */
    size_t block;      /* object / copy size in bytes (0 if not applicable) */
    unsigned runs;     /* timed repetitions that make up the figures */
    double gib_s;      /* from the median repetition (bytes / median time) */
    double gib_s_best; /* from the fastest repetition */
    double req_s;      /* operations per second (median-based), 0 if not applicable */
    double p50_us, p99_us; /* per-operation latency, 0 if not measured */
    char error[160];   /* reason when ok == 0 */
} mc_peer_result_t;

/* Single-thread memcpy of `size` bytes between warm buffers; each of `runs` repetitions copies
 * at least `bytes_per_run` bytes. Defaults when 0: 9 runs of 4 GiB. */
mc_status_t mc_peer_memcpy(size_t size, uint64_t bytes_per_run, unsigned runs,
                           mc_peer_result_t *r);

/* Start memcached on a free loopback port (-L, -m large enough for the values, -I 64m unless the
 * value needs more), SET `keys` distinct `size`-byte values, then GET them in turn, `runs`
 * times in all (each verified). keys = 1 reads one value over and over (it may stay in the
 * CPU caches); several keys larger than the caches together measure cold reads, as a store
 * that holds many objects sees them. Fills get_r (and set_r if not NULL); get_r's name says
 * "memcached_get" for one key, "memcached_get_<keys>keys" otherwise. runs 0 = 20. */
mc_status_t mc_peer_memcached(size_t size, unsigned keys, unsigned runs, mc_peer_result_t *get_r,
                              mc_peer_result_t *set_r);

/* The same memcached, kept running for interleaved measurements: start sets `keys` (1..64)
 * distinct `size`-byte values and checks one GET; get reads key k % keys into a buffer of the
 * session and times it (verified: the length and a byte the previous GET's data could not
 * satisfy; the whole value by the first GET in start); set writes key k % keys again (*secs
 * may be NULL). err receives a one-line reason when start fails. stop ends the server (NULL
 * is fine). */
typedef struct mc_peer_memcached mc_peer_memcached_t;
mc_status_t mc_peer_memcached_start(size_t size, unsigned keys, mc_peer_memcached_t **m_p,
                                    char *err, size_t err_len);
mc_status_t mc_peer_memcached_get(mc_peer_memcached_t *m, unsigned k, double *secs);
mc_status_t mc_peer_memcached_set(mc_peer_memcached_t *m, unsigned k, double *secs);
void mc_peer_memcached_stop(mc_peer_memcached_t *m);

/* iperf3 server (-1, one-off) + client, one stream for `seconds` (0 = 3) over 127.0.0.1. */
mc_status_t mc_peer_iperf3(unsigned seconds, mc_peer_result_t *r);

/* How redis-benchmark reaches the redis-server we start: TCP on a free loopback port, or a
 * unix domain socket (Redis's best same-host transport: --unixsocket in a private 0700
 * temporary directory, --port 0; the socket and the directory are removed at the end). */
typedef enum { MC_PEER_REDIS_TCP, MC_PEER_REDIS_UNIX } mc_peer_redis_via_t;

/* redis-server + redis-benchmark -t set,get -d size -c clients -n requests [-P pipeline] over
 * `via`. Fills set_r and get_r (req/s; gib_s = req/s * size), named "redis_set"/"redis_get"
 * over TCP and "redis_unix_set"/"redis_unix_get" over the unix socket. A redis-server that
 * exits or does not listen on the socket fails with a reason that says so. */
mc_status_t mc_peer_redis_benchmark_via(mc_peer_redis_via_t via, size_t size, unsigned clients,
                                        unsigned requests, unsigned pipeline,
                                        mc_peer_result_t *set_r, mc_peer_result_t *get_r);
/* The same over TCP. */
mc_status_t mc_peer_redis_benchmark(size_t size, unsigned clients, unsigned requests,
                                    unsigned pipeline, mc_peer_result_t *set_r,
                                    mc_peer_result_t *get_r);

/* Print a result as one JSON line {"bench":"peer","peer",...,"date","host"} to stdout. */
void mc_peer_print_json(const mc_peer_result_t *r);

/* Helpers shared with the benchmarks. */
/* Resident set size of a process in KiB from /proc/<pid>/status VmRSS; -1 if unreadable. */
long mc_peer_rss_kb(pid_t pid);
/* Any "<field>:  N kB" line of /proc/<pid>/status (e.g. "RssAnon", "RssShmem", "VmHWM") in
 * KiB; -1 if unreadable. */
long mc_peer_status_kb(pid_t pid, const char *field);
/* "2024-05-01T12:00:00Z" (UTC, now). `out` at least 32 bytes. */
void mc_peer_date(char *out, size_t len);
/* Host name (gethostname), "unknown" on failure. */
void mc_peer_host(char *out, size_t len);
/* Find an executable in PATH (and /usr/sbin, /usr/bin); returns a static-lifetime heap string
 * owned by the caller (free it) or NULL. */
char *mc_peer_which(const char *name);
/* Stop a child by PID: SIGTERM, wait up to grace_ms, then SIGKILL; reaps it. */
void mc_peer_stop_child(pid_t pid, unsigned grace_ms);

#endif
