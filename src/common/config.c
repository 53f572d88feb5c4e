/* Option parsing for every program (config.h): number/size/bool parsers, then one pass over
 * the option table in precedence order (defaults already in the targets < --config_path JSON
 * file < environment variables < command-line flags), each value range-checked, and --help
 * printed from the table. Parsed strings are kept for the life of the process. */
#include "common/config.h"

#include "common/alloc.h"
#include "common/log.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

mc_status_t mc_parse_bool(const char *s, bool *value_p)
{
    static const char *yes[] = {"1", "true", "yes", "on"};
    static const char *no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < MC_ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *value_p = true;
            return MC_OK;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *value_p = false;
            return MC_OK;
        }
    }
    return MC_ERR_INVALID_PARAMS;
}

mc_status_t mc_parse_int(const char *s, int64_t *value_p)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno || end == s || *end != '\0')
        return MC_ERR_INVALID_PARAMS;
    *value_p = v;
    return MC_OK;
}

mc_status_t mc_parse_double(const char *s, double *value_p)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !isfinite(v))
        return MC_ERR_INVALID_PARAMS;
    *value_p = v;
    return MC_OK;
}

mc_status_t mc_parse_size(const char *s, uint64_t *bytes_p)
{
    static const struct { const char *suffix; unsigned shift; } units[] = {
        {"", 0},    {"b", 0},    {"k", 10},  {"kb", 10}, {"kib", 10}, {"m", 20},
        {"mb", 20}, {"mib", 20}, {"g", 30},  {"gb", 30}, {"gib", 30}, {"t", 40},
        {"tb", 40}, {"tib", 40},
    };
    char *end;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return MC_ERR_INVALID_PARAMS;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0 || !isfinite(v))
        return MC_ERR_INVALID_PARAMS;
    while (isspace((unsigned char)*end))
        end++;
    for (size_t i = 0; i < MC_ARRAY_LEN(units); i++) {
        if (strcasecmp(end, units[i].suffix) == 0) {
            double bytes = ldexp(v, (int)units[i].shift);
            if (bytes >= 18446744073709551615.0 || bytes != floor(bytes))
                return MC_ERR_INVALID_PARAMS;
            *bytes_p = (uint64_t)bytes;
            return MC_OK;
        }
    }
    return MC_ERR_INVALID_PARAMS;
}

/* Parsed string values live for the whole process: they are chained from a global list so
 * that they stay reachable (and leak checkers agree) wherever the target variable lives. */
struct kept_string {
    struct kept_string *next;
    char text[];
};
static struct kept_string *kept_strings;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *config_keep_string(const char *value)
{
    size_t len = strlen(value);
    struct kept_string *k = mc_malloc(sizeof(*k) + len + 1);
    if (!k)
        return NULL;
    memcpy(k->text, value, len + 1);
    pthread_mutex_lock(&kept_lock);
    k->next = kept_strings;
    kept_strings = k;
    pthread_mutex_unlock(&kept_lock);
    return k->text;
}

static mc_option_t *config_find(const mc_config_spec_t *spec, const char *name, size_t len)
{
    for (size_t i = 0; i < spec->n_options; i++) {
        if (strlen(spec->options[i].name) == len && strncmp(spec->options[i].name, name, len) == 0)
            return &spec->options[i];
    }
    return NULL;
}

static mc_status_t config_apply(const mc_config_spec_t *spec, mc_option_t *opt, const char *value,
                                const char *origin)
{
    mc_status_t st = MC_OK;
    double numeric = 0;
    switch (opt->type) {
    case MC_OPT_BOOL:
        st = mc_parse_bool(value, (bool *)opt->target);
        break;
    case MC_OPT_INT: {
        int64_t v;
        st = mc_parse_int(value, &v);
        if (st == MC_OK) {
            numeric = (double)v;
            if (!(opt->min < opt->max) || (numeric >= opt->min && numeric <= opt->max))
                *(int64_t *)opt->target = v;
        }
        break;
    }
    case MC_OPT_SIZE: {
        uint64_t v;
        st = mc_parse_size(value, &v);
        if (st == MC_OK) {
            numeric = (double)v;
            if (!(opt->min < opt->max) || (numeric >= opt->min && numeric <= opt->max))
                *(uint64_t *)opt->target = v;
        }
        break;
    }
    case MC_OPT_DOUBLE: {
        double v;
        st = mc_parse_double(value, &v);
        if (st == MC_OK) {
            numeric = v;
            if (!(opt->min < opt->max) || (numeric >= opt->min && numeric <= opt->max))
                *(double *)opt->target = v;
        }
        break;
    }
    case MC_OPT_STRING: {
        const char *copy = config_keep_string(value);
        if (!copy)
            return MC_ERR_NO_MEMORY;
        *(const char **)opt->target = copy;
        break;
    }
    }
    if (st != MC_OK) {
        fprintf(stderr, "%s: invalid value '%s' for %s (from %s)\n", spec->program, value,
                opt->name, origin);
        return MC_ERR_INVALID_PARAMS;
    }
    if (opt->type != MC_OPT_BOOL && opt->type != MC_OPT_STRING && opt->min < opt->max &&
        (numeric < opt->min || numeric > opt->max)) {
        fprintf(stderr, "%s: %s=%s (from %s) is out of range [%g, %g]\n", spec->program,
                opt->name, value, origin, opt->min, opt->max);
        return MC_ERR_INVALID_PARAMS;
    }
    return MC_OK;
}

mc_status_t mc_config_set(const mc_config_spec_t *spec, const char *name, const char *value,
                          const char *origin)
{
    mc_option_t *opt = config_find(spec, name, strlen(name));
    if (!opt) {
        fprintf(stderr, "%s: unknown option '%s' (from %s); see --help\n", spec->program, name,
                origin);
        return MC_ERR_INVALID_PARAMS;
    }
    return config_apply(spec, opt, value, origin);
}

static mc_status_t config_load_json(const mc_config_spec_t *spec, const char *path)
{
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        fprintf(stderr, "%s: cannot read config %s: %s (line %d)\n", spec->program, path, err.text,
                err.line);
        return MC_ERR_INVALID_PARAMS;
    }
    mc_status_t st = MC_OK;
    if (!json_is_object(root)) {
        fprintf(stderr, "%s: config %s: top level must be an object\n", spec->program, path);
        st = MC_ERR_INVALID_PARAMS;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (st != MC_OK)
            break;
        if (strcmp(key, "config_path") == 0)
            continue;
        char buf[64];
        const char *text = NULL;
        if (json_is_string(val))
            text = json_string_value(val);
        else if (json_is_true(val))
            text = "true";
        else if (json_is_false(val))
            text = "false";
        else if (json_is_integer(val)) {
            snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(val));
            text = buf;
        } else if (json_is_real(val)) {
            snprintf(buf, sizeof(buf), "%.17g", json_real_value(val));
            text = buf;
        }
        if (!text) {
            fprintf(stderr, "%s: config %s: value of '%s' must be a string, number or bool\n",
                    spec->program, path, key);
            st = MC_ERR_INVALID_PARAMS;
            break;
        }
        st = mc_config_set(spec, key, text, path);
    }
    json_decref(root);
    return st;
}

static void config_print_default(const mc_option_t *opt)
{
    switch (opt->type) {
    case MC_OPT_BOOL: printf("%s", *(bool *)opt->target ? "true" : "false"); break;
    case MC_OPT_INT: printf("%lld", (long long)*(int64_t *)opt->target); break;
    case MC_OPT_SIZE: printf("%llu", (unsigned long long)*(uint64_t *)opt->target); break;
    case MC_OPT_DOUBLE: printf("%g", *(double *)opt->target); break;
    case MC_OPT_STRING: {
        const char *s = *(const char **)opt->target;
        if (s)
            printf("\"%s\"", s);
        else
            printf("unset");
        break;
    }
    }
}

static void config_usage(const mc_config_spec_t *spec)
{
    printf("Usage: %s [--option=value ...]\n\n%s\n\nOptions:\n", spec->program, spec->summary);
    for (size_t i = 0; i < spec->n_options; i++) {
        const mc_option_t *opt = &spec->options[i];
        printf("  --%s (default ", opt->name);
        config_print_default(opt);
        printf(")");
        if (opt->env)
            printf(" [env %s]", opt->env);
        printf("\n      %s\n", opt->help);
    }
    printf("  --config_path=FILE\n      JSON object of option names to values, applied before "
           "environment and flags\n  --help\n      print this message\n");
}

mc_status_t mc_config_parse(const mc_config_spec_t *spec, int argc, char **argv, int *help_p)
{
    *help_p = 0;
    /* Pass 1: --help and --config_path, which must be applied before anything else. */
    const char *config_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            config_usage(spec);
            *help_p = 1;
            return MC_OK;
        }
        if (strncmp(argv[i], "--config_path=", 14) == 0)
            config_path = argv[i] + 14;
        else if (strcmp(argv[i], "--config_path") == 0 && i + 1 < argc)
            config_path = argv[++i];
    }
    if (config_path && *config_path && config_load_json(spec, config_path) != MC_OK)
        return MC_ERR_INVALID_PARAMS;

    for (size_t i = 0; i < spec->n_options; i++) {
        mc_option_t *opt = &spec->options[i];
        const char *v = opt->env ? getenv(opt->env) : NULL;
        if (v && *v && config_apply(spec, opt, v, opt->env) != MC_OK)
            return MC_ERR_INVALID_PARAMS;
    }

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "%s: unexpected argument '%s'; see --help\n", spec->program, arg);
            return MC_ERR_INVALID_PARAMS;
        }
        arg += 2;
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (name_len == strlen("config_path") && strncmp(arg, "config_path", name_len) == 0) {
            if (!eq)
                i++;
            continue;
        }
        mc_option_t *opt = config_find(spec, arg, name_len);
        if (!opt) {
            fprintf(stderr, "%s: unknown option '--%.*s'; see --help\n", spec->program,
                    (int)name_len, arg);
            return MC_ERR_INVALID_PARAMS;
        }
        const char *value;
        if (eq) {
            value = eq + 1;
        } else if (opt->type == MC_OPT_BOOL &&
                   (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)) {
            value = "true";
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            fprintf(stderr, "%s: option '--%s' needs a value\n", spec->program, opt->name);
            return MC_ERR_INVALID_PARAMS;
        }
        if (config_apply(spec, opt, value, "command line") != MC_OK)
            return MC_ERR_INVALID_PARAMS;
    }
    return MC_OK;
}

int mc_config_main(const mc_config_spec_t *spec, int argc, char **argv)
{
    const char *env_level = getenv("MC_LOG_LEVEL");
    if (env_level && *env_level) {
        mc_log_level_t level;
        if (mc_log_level_parse(env_level, &level) != MC_OK) {
            fprintf(stderr, "%s: MC_LOG_LEVEL must be debug, info, warn, error or off, got '%s'\n",
                    spec->program, env_level);
            return 2;
        }
        mc_log_set_level(level);
    }
    int help = 0;
    if (mc_config_parse(spec, argc, argv, &help) != MC_OK)
        return 2;
    if (help)
        return 0;
    mc_option_t *opt = config_find(spec, "log_level", strlen("log_level"));
    if (opt && opt->type == MC_OPT_STRING && *(const char **)opt->target) {
        const char *text = *(const char **)opt->target;
        mc_log_level_t level;
        if (mc_log_level_parse(text, &level) != MC_OK) {
            fprintf(stderr, "%s: invalid --log_level '%s' (debug, info, warn, error, off)\n",
                    spec->program, text);
            return 2;
        }
        mc_log_set_level(level);
    }
    return -1;
}
