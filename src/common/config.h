/* Program configuration: one option table per program, filled from (lowest to highest
 * precedence) the built-in defaults already stored in the targets, a JSON file given by
 * --config_path (keys = option names), environment variables named in the table, and
 * command-line flags (--name=value or --name value; booleans also bare --name).
 *
 * Every value is validated: unknown flags, malformed numbers and out-of-range values are
 * refused with a message naming the option. --help prints the table with current defaults.
 */
#ifndef MC_COMMON_CONFIG_H
#define MC_COMMON_CONFIG_H

#include "mooncake/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum mc_opt_type {
    MC_OPT_BOOL,   /* target: bool* ; "true/false/1/0/yes/no" */
    MC_OPT_INT,    /* target: int64_t* */
    MC_OPT_SIZE,   /* target: uint64_t* ; accepts "512MB", "4 GiB", "4096" */
    MC_OPT_DOUBLE, /* target: double* */
    MC_OPT_STRING, /* target: const char** ; parsed values are heap copies kept for the
                      process lifetime */
} mc_opt_type_t;

typedef struct mc_option {
    const char *name;   /* flag name without dashes, also the JSON key */
    mc_opt_type_t type;
    void *target;
    const char *env;    /* environment variable that sets it, or NULL */
    const char *help;
    double min, max;    /* numeric range check when min < max */
} mc_option_t;

typedef struct mc_config_spec {
    const char *program;
    const char *summary; /* one paragraph printed by --help */
    mc_option_t *options;
    size_t n_options;
} mc_config_spec_t;

/* Parse. On --help prints usage to stdout and sets *help_p = 1 (returns MC_OK). Errors are
 * printed to stderr and returned as MC_ERR_INVALID_PARAMS. Positional arguments are refused. */
mc_status_t mc_config_parse(const mc_config_spec_t *spec, int argc, char **argv, int *help_p);

/* Program entry helper: applies MC_LOG_LEVEL from the environment (a bad value is an error),
 * then mc_config_parse, then, if the table has a string option named "log_level", applies it
 * (so the option wins over the variable) (mc_log_level_parse; a bad level is an error naming the option).
 * Returns -1 when main should go on, else the status main should return: 0 after --help,
 * 2 after a bad option or level. */
int mc_config_main(const mc_config_spec_t *spec, int argc, char **argv);

/* Apply one option by name from a string value (used by the parser and by bindings). */
mc_status_t mc_config_set(const mc_config_spec_t *spec, const char *name, const char *value,
                          const char *origin);

/* Sizes: plain bytes or a number with B, KB/KiB/K, MB/MiB/M, GB/GiB/G, TB/TiB/T (all powers of
 * 1024, as upstream Mooncake reads them), optional space, case-insensitive. */
mc_status_t mc_parse_size(const char *s, uint64_t *bytes_p);
mc_status_t mc_parse_bool(const char *s, bool *value_p);
mc_status_t mc_parse_int(const char *s, int64_t *value_p);
mc_status_t mc_parse_double(const char *s, double *value_p);

#endif
