/* The operator console on the master's admin HTTP port: static assets built into the binary
 * (/console, /console/console.js, /console/console.css), the event stream as JSON
 * (/console/events, answered on the loop thread), and, with a token file, browser sessions:
 * a signed GET /console/login_link mints a one-time code; /console/login?code= consumes it
 * and sets an HttpOnly session cookie that authorizes GET requests (read-only) until it
 * expires. Contract and caps: docs/operations.md "Console", docs/security.md "HTTP ports". */
#ifndef MC_MASTER_CONSOLE_H
#define MC_MASTER_CONSOLE_H

#include "master/master.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#define MC_CONSOLE_CODE_TTL_MS 60000u          /* a login code is valid 60 s, once */
#define MC_CONSOLE_SESSION_TTL_MS 43200000u    /* a session lasts 12 h (no renewal) */
#define MC_CONSOLE_MAX_CODES 16u               /* unused codes held; the oldest is dropped */
#define MC_CONSOLE_MAX_SESSIONS 64u            /* live sessions; the oldest is dropped */
#define MC_CONSOLE_EVENTS_MAX 256u             /* events per /console/events answer */
#define MC_CONSOLE_COOKIE "mc_console"

typedef struct mc_console mc_console_t;

/* NULL when out of memory. Thread-safe afterwards (HTTP threads). */
mc_console_t *mc_console_create(void);
void mc_console_free(mc_console_t *c);

/* A static asset of the console (or NULL): its body (static, NUL-free length *len_p) and
 * its content type. "/console" and "/console/" name the page. */
const char *mc_console_asset(const char *url, size_t *len_p, const char **type_p);

/* Does the request carry the cookie of a live session? */
bool mc_console_session_ok(mc_console_t *c, struct MHD_Connection *conn);

/* A fresh one-time login code (64 hex digits + NUL into code). */
void mc_console_new_code(mc_console_t *c, char code[65]);

/* Consumes a login code: true (and a new session id, 64 hex + NUL, in sid) if it was live. */
bool mc_console_login(mc_console_t *c, const char *code, char sid[65]);

/* Answers a GET of /console... (authorized already; events excepted): the assets,
 * /console/login_link (409 without a keyring: auth = false) and /console/login?code= (303 to
 * /console with the session cookie; 403 for an unknown, used or expired code); 404 else. */
enum MHD_Result mc_console_http(mc_console_t *con, struct MHD_Connection *c, const char *url,
                                bool auth);
/* Owner (loop) thread: events from from_seq on (at most MC_CONSOLE_EVENTS_MAX) as JSON
 * {"epoch","first_seq","next_seq","gap","enabled","events":[{seq,kind,key,size,segment,host}]};
 * key bytes outside printable ASCII are written \xNN. NULL when out of memory. */
char *mc_console_events_json(mc_master_t *m, uint64_t from_seq);

#endif
