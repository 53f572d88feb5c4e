/* mooncake_auth_curl: one HTTP request signed with the cluster token (the Mooncake HTTP
 * challenge-response, src/common/http_auth.h), for operators and scripts calling the HTTP
 * metadata server, the master's admin/metrics port or a store client's HTTP port when they
 * require credentials.
 *
 *   mooncake_auth_curl --auth_token_file=F [-X METHOD] [-d DATA | -d @FILE] [--max_time=S] URL
 *
 * Prints the response body to stdout. Exit status: 0 for HTTP < 400; 22 for HTTP >= 400 (the
 * status and body on stderr, as curl -f); 7 when no answer came (connection refused, timeout);
 * 2 for a bad command line or token file. Without --auth_token_file (or MC_AUTH_TOKEN_FILE)
 * the request is sent unsigned. The request goes through the metadata client's libcurl helper
 * (src/common/http_client.c), which answers a challenge once and retries. */
#include "common/alloc.h"
#include "common/auth.h"
#include "common/http_auth.h"
#include "mooncake/log.h"
#include "te/metadata_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESP_MAX (256u << 20) /* largest body printed (/get_all_keys is capped at 16 MiB) */
#define DATA_MAX (64u << 20)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mooncake_auth_curl [--auth_token_file=FILE] [-X METHOD] [-d DATA|@FILE]\n"
            "                          [--max_time=SECONDS] [--verbose] URL\n"
            "Sends one HTTP request signed with the first secret of the token file\n"
            "(default: $MC_AUTH_TOKEN_FILE) and prints the response body. Exit 22 on HTTP >= 400\n"
            "(status on stderr), 7 when the server did not answer, 2 on usage errors.\n");
}

/* "-d @file": the file's bytes (heap, *len_p); NULL after a message. */
static char *read_file(const char *path, size_t *len_p)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "mooncake_auth_curl: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = mc_malloc(DATA_MAX + 1);
    size_t n = buf ? fread(buf, 1, DATA_MAX + 1, fp) : 0;
    fclose(fp);
    if (!buf || n > DATA_MAX) {
        fprintf(stderr, "mooncake_auth_curl: %s: larger than %u bytes\n", path, DATA_MAX);
        mc_free(buf);
        return NULL;
    }
    *len_p = n;
    return buf;
}

/* Value of "--name=V" or "--name V" / "-x V" at argv[*i]; NULL if argv[*i] is not that option. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] == '\0' && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

int main(int argc, char **argv)
{
    const char *token = getenv("MC_AUTH_TOKEN_FILE"), *method = NULL, *data = NULL, *url = NULL;
    const char *max_time = "30";
    int verbose = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--auth_token_file")))
            token = v;
        else if ((v = opt_value(argc, argv, &i, "-X")) ||
                 (v = opt_value(argc, argv, &i, "--request")))
            method = v;
        else if ((v = opt_value(argc, argv, &i, "-d")) || (v = opt_value(argc, argv, &i, "--data")))
            data = v;
        else if ((v = opt_value(argc, argv, &i, "--max_time")))
            max_time = v;
        else if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v"))
            verbose = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] != '-' && !url)
            url = argv[i];
        else {
            fprintf(stderr, "mooncake_auth_curl: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    char *end = NULL;
    double secs = strtod(max_time, &end);
    if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) ||
        !end || *end || !(secs >= 0.1 && secs <= 3600)) {
        usage(stderr);
        return 2;
    }
    mc_log_set_level(verbose ? MC_LOG_LEVEL_INFO : MC_LOG_LEVEL_WARN); /* token file errors */
    mc_auth_t *auth = NULL;
    mc_status_t st = mc_auth_load(token, &auth);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake_auth_curl: cannot load the token file %s: %s\n", token,
                mc_status_str(st));
        return 2;
    }
    if (!verbose) /* the outcome is reported below, once */
        mc_log_set_level(MC_LOG_LEVEL_OFF);
    char *body = NULL;
    size_t body_len = 0;
    if (data && data[0] == '@') {
        if (!(body = read_file(data + 1, &body_len)))
            return 2;
    } else if (data) {
        body = mc_strdup(data);
        body_len = strlen(data);
    }
    if (!method)
        method = data ? "POST" : "GET";
    mc_http_resp_t r;
    mc_http_auth_client_t nonce = MC_HTTP_AUTH_CLIENT_INIT;
    st = mc_http_request_auth(auth, &nonce, method, url, body, body_len,
                                   body ? "application/octet-stream" : NULL, RESP_MAX,
                                   (uint32_t)(secs * 1000), &r);
    mc_free(body);
    mc_auth_free(auth);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake_auth_curl: %s %s: %s\n", method, url, mc_status_str(st));
        return 7;
    }
    int rc = 0;
    if (r.code >= 400) {
        fprintf(stderr, "mooncake_auth_curl: HTTP %ld: %.*s\n", r.code,
                (int)(r.len < 4096 ? r.len : 4096), r.body);
        rc = 22;
    } else if (r.len && fwrite(r.body, 1, r.len, stdout) != r.len) {
        rc = 23;
    }
    mc_free(r.body);
    return rc;
}
