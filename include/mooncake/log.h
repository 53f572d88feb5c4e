/* Public logging control: level and sink. */
#ifndef MOONCAKE_LOG_H
#define MOONCAKE_LOG_H

#include "mooncake/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mc_log_level {
    MC_LOG_LEVEL_DEBUG = 10,
    MC_LOG_LEVEL_INFO = 20,
    MC_LOG_LEVEL_WARN = 30,
    MC_LOG_LEVEL_ERROR = 40,
    MC_LOG_LEVEL_OFF = 100,
} mc_log_level_t;

/* Sink: receives one formatted message (no trailing newline). `msg` is borrowed for the call.
 * Called from any thread; must not call back into Mooncake. */
typedef void (*mc_log_sink_fn)(mc_log_level_t level, const char *file, int line, const char *msg,
                               void *arg);

/* Replace the sink; NULL restores the default stderr sink. */
MC_API void mc_log_set_sink(mc_log_sink_fn sink, void *arg);
MC_API void mc_log_set_level(mc_log_level_t level);
MC_API mc_log_level_t mc_log_get_level(void);
/* Parse "debug|info|warn|error|off" (case-insensitive); returns MC_ERR_INVALID_PARAMS otherwise. */
MC_API mc_status_t mc_log_level_parse(const char *s, mc_log_level_t *level_p);

#ifdef __cplusplus
}
#endif
#endif
