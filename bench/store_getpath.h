/* mc_store_bench --getpath: the store's get path next to the raw Transfer Engine moving the
 * same bytes, in the same run (store_getpath.c). */
#ifndef MC_BENCH_STORE_GETPATH_H
#define MC_BENCH_STORE_GETPATH_H

#include "mooncake/store.h"
#include "mooncake/te.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct mc_getpath_cfg {
    mc_store_t *writer;              /* puts the keys, then reads them (cold, then warm) */
    mc_store_t *other;               /* never saw the keys: its one round is the first read */
    mc_store_t *fed;                 /* NULL, or never read the keys either but follows the
                                        placement feed for the prefix "gp-": its one round is
                                        the first read with the feed (first_fed) */
    const mc_te_config_t *te_tuning; /* the store's engine tuning, copied for the raw engine */
    const char *transport;           /* label: "tcp" or "shm" */
    uint32_t warm_rounds;            /* writer rounds after the cold one (median; >= 1) */
    const char *cases;               /* comma list of shape names; "" = all */
    uint32_t reps;                   /* repetitions on fresh keys, medians reported (1..64) */
    const char *master_addr;         /* host:port, for the round-trip probe (--cases=rtt) */
} mc_getpath_cfg_t;

/* Shape names, for --cases: 4k128, 4m64, 32m1, 4m32x8; 4k512 (512 x 4 KiB), 4k128w
 * (24 x 128 x 4 KiB) and 256k64 (20 x 64 x 256 KiB) run only when named. "rtt" (only when
 * named) runs the round-trip probe first: BatchGetReplicaList of 1, 32 and 128 keys with the
 * RPC client's busy poll at 50 (default), 0 and 300 us, raw engine reads of 1, 32 and 128
 * replicas of 4 KiB, and a loopback TCP ping-pong of the lookups' byte sizes (sleeping and
 * spinning reader): one "getpath_rtt" line of p50/p90 microseconds. */
#define MC_GETPATH_SHAPES "4k128,4m64,32m1,4m32x8"

/* Whether `name` is one of the items of the comma list `list`. */
bool mc_bench_list_has(const char *list, const char *name);

/* Runs every selected shape and prints one JSON line per shape ("bench":"getpath"): req/s of the
 * raw engine (mean of a round before and a round after the store's), of the writer's cold round,
 * its warm rounds (median), the other client's first read and (cfg->fed) the fed client's
 * first read, and their ratios to the engine (store_over_te_*), each the median over cfg->reps
 * repetitions on fresh keys; fed_lookups and fed_unpushed (sums over the repetitions) say how
 * many of the fed reads asked the master and how many keys the feed had not delivered when
 * the fed round started; cold_lookups the same for the writer's cold round; te_cpu_us_per_key,
 * warm_cpu_us_per_key and store_over_te_warm_cpu the reading threads' own CPU time per key
 * (engine, warm store rounds) and its ratio, engine over store; te_call_p50_us and
 * first_call_p50_us the median wall time of one call (the engine's: mean of its two rounds) and
 * store_over_te_first_p50 their ratio, engine over store (steadier than the req/s ratio on a
 * shared machine, where a few descheduled calls drag a round's rate down). Keys are removed
 * after each shape. Returns 0, or 1 when a shape could not run (setup failure; read errors are
 * reported in the line and void its ratios). */
int mc_getpath_run(const mc_getpath_cfg_t *cfg);

#endif
