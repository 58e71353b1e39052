/*
 * rs_monitor.h -- the internal client's replica set monitor (seeds/000 "Targeting a specific
 * host within a shard"; issue 18 item 5). The client accepts, wherever it takes a host, a
 * replica set connection string "set/h1:p1,h2:p2,..." naming more than one host; it asks
 * this monitor for the member to send to: the primary, or a secondary when the command
 * carries a $readPreference that allows one. The monitor learns the set from hello (setName,
 * hosts, isWritablePrimary, secondary, electionId) and forgets a primary when a command to it
 * fails with a network, not-primary or shutdown error, so the next command finds the new one.
 *
 * A string with one host (no ',') is not resolved: single-member sets and plain hosts go
 * straight to that host, exactly as before.
 *
 * Thread-safety: one process-wide table under one mutex; hellos are sent without it held.
 */
#ifndef SHL_NET_RS_MONITOR_H
#define SHL_NET_RS_MONITOR_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct shl_conn_pool;

/* How long a lookup waits for a member in the wanted state (MongoDB's targeter: 15 s). */
#define SHL_RS_MONITOR_WAIT_MS 15000

typedef enum shl_rs_read_pref {
    SHL_RS_PRIMARY,
    SHL_RS_PRIMARY_PREFERRED,
    SHL_RS_SECONDARY,
    SHL_RS_SECONDARY_PREFERRED,
    SHL_RS_NEAREST,
} shl_rs_read_pref_t;

/* shl_rs_monitor_is_set -- whether 's' is "set/h1,h2..." with more than one host. */
bool shl_rs_monitor_is_set(const char *s);

/*
 * shl_rs_monitor_pref_of --
 *     The read preference a command asks for: its $readPreference.mode (an unknown or missing
 *     mode: primary).
 */
shl_rs_read_pref_t shl_rs_monitor_pref_of(const bson_t *cmd);

/*
 * shl_rs_monitor_select --
 *     The "host:port" of a member of set 'conn_string' matching 'pref' into 'out' (size n),
 *     discovering the set with hellos through 'pool' when the monitor knows no such member,
 *     and waiting (polling every 200 ms) up to 'timeout_ms' (<= 0 or above
 *     SHL_RS_MONITOR_WAIT_MS: that) for one to appear. Blocks.
 *     Errors: FailedToSatisfyReadPreference (133); FailedToParse (a bad string).
 */
int shl_rs_monitor_select(struct shl_conn_pool *pool, const char *conn_string,
                          shl_rs_read_pref_t pref, int64_t timeout_ms, char *out, size_t n,
                          shl_status_t *st);

/*
 * shl_rs_monitor_note_error --
 *     A command to 'host' failed with 'code': a network, not-primary or shutdown error makes
 *     every set forget 'host' as its primary (and as a secondary). Other codes: no-op.
 */
void shl_rs_monitor_note_error(const char *host, int code);

/*
 * shl_rs_monitor_append_sets --
 *     For diagnostics: {<set>: {hosts: [...], primary: "h" or null, secondaries: [...]}} of
 *     every set the monitor knows, appended to 'out' as fields.
 */
void shl_rs_monitor_append_sets(bson_t *out);

#endif
