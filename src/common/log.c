/* The logger behind MC_LOG_* (log.h): a process-wide level (info until a program or binding
 * sets another: programs take MC_LOG_LEVEL / --log_level in mc_config_main, Python in
 * mooncake/__init__.py; read with one relaxed atomic load) and one sink, stderr with a UTC
 * timestamp unless a binding installed its own. Messages are cut at 1 KiB; the sink is called
 * under a mutex, so lines from different threads never interleave. */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static _Atomic int log_level = MC_LOG_LEVEL_INFO;
static pthread_mutex_t log_sink_lock = PTHREAD_MUTEX_INITIALIZER;
static mc_log_sink_fn log_sink; /* NULL = stderr; guarded by log_sink_lock */
static void *log_sink_arg;

static const char *level_name(mc_log_level_t level)
{
    switch (level) {
    case MC_LOG_LEVEL_DEBUG: return "DEBUG";
    case MC_LOG_LEVEL_INFO: return "INFO";
    case MC_LOG_LEVEL_WARN: return "WARN";
    case MC_LOG_LEVEL_ERROR: return "ERROR";
    default: return "?";
    }
}

int mc_log_enabled(mc_log_level_t level)
{
    return (int)level >= atomic_load_explicit(&log_level, memory_order_relaxed);
}

void mc_log_set_level(mc_log_level_t level)
{
    atomic_store(&log_level, level);
}

mc_log_level_t mc_log_get_level(void)
{
    return (mc_log_level_t)atomic_load(&log_level);
}

mc_status_t mc_log_level_parse(const char *s, mc_log_level_t *level_p)
{
    static const struct { const char *name; mc_log_level_t level; } names[] = {
        {"debug", MC_LOG_LEVEL_DEBUG}, {"info", MC_LOG_LEVEL_INFO}, {"warn", MC_LOG_LEVEL_WARN},
        {"warning", MC_LOG_LEVEL_WARN}, {"error", MC_LOG_LEVEL_ERROR}, {"off", MC_LOG_LEVEL_OFF},
    };
    for (size_t i = 0; s && i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *level_p = names[i].level;
            return MC_OK;
        }
    }
    return MC_ERR_INVALID_PARAMS;
}

void mc_log_set_sink(mc_log_sink_fn sink, void *arg)
{
    pthread_mutex_lock(&log_sink_lock);
    log_sink = sink;
    log_sink_arg = arg;
    pthread_mutex_unlock(&log_sink_lock);
}

void mc_log_write(mc_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;

    pthread_mutex_lock(&log_sink_lock);
    if (log_sink) {
        log_sink(level, base, line, msg, log_sink_arg);
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        fprintf(stderr, "%02d:%02d:%02d.%03ld %-5s %s:%d %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                ts.tv_nsec / 1000000, level_name(level), base, line, msg);
    }
    pthread_mutex_unlock(&log_sink_lock);
}
