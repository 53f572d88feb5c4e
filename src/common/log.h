/* Logging through one redirectable sink.
 *
 * Library code never prints: it calls MC_LOG_*, which formats the message and hands it to the
 * current sink (default: stderr with a timestamp). Programs may change the level; bindings
 * (Python) install their own sink with mc_log_set_sink(). Thread-safe.
 */
#ifndef MC_COMMON_LOG_H
#define MC_COMMON_LOG_H

#include "mooncake/log.h"

void mc_log_write(mc_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* True if messages of this level would be delivered (cheap: one relaxed load). */
int mc_log_enabled(mc_log_level_t level);

#define MC_LOG_(lvl, ...)                                                                          \
    do {                                                                                           \
        if (mc_log_enabled(lvl))                                                                   \
            mc_log_write(lvl, __FILE__, __LINE__, __VA_ARGS__);                                    \
    } while (0)
#define MC_LOG_DEBUG(...) MC_LOG_(MC_LOG_LEVEL_DEBUG, __VA_ARGS__)
#define MC_LOG_INFO(...) MC_LOG_(MC_LOG_LEVEL_INFO, __VA_ARGS__)
#define MC_LOG_WARN(...) MC_LOG_(MC_LOG_LEVEL_WARN, __VA_ARGS__)
#define MC_LOG_ERROR(...) MC_LOG_(MC_LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
