/*
 * write_concern.h -- parsing and reporting write concerns ({w, j, wtimeout}) with
 * MongoDB's rules. Waiting for them is the data node's job (db/).
 */
#ifndef SHL_NET_WRITE_CONCERN_H
#define SHL_NET_WRITE_CONCERN_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

typedef struct shl_write_concern {
    int32_t w; /* number of nodes; ignored when w_majority or w_tag[0] */
    bool w_majority;
    char w_tag[64]; /* a custom mode name; "" for none */
    bool j;         /* journaled acknowledgement requested */
    bool has_j;
    int64_t wtimeout_ms; /* 0 = no timeout */
    bool is_default;     /* the client sent no writeConcern */
    /* Where it came from, as MongoDB reports it: "clientSupplied", "implicitDefault",
     * "customDefault" (a router applied the cluster-wide default), ... Static storage. */
    const char *provenance;
} shl_write_concern_t;

/*
 * shl_write_concern_parse --
 *     Parse 'doc' (NULL or {}: is_default, {w: 1}, provenance "implicitDefault" -- the
 *     caller resolves the default, see shl_write_concern_set_default). A
 *     'provenance' field (what a router sends with a default it applied) is kept; without
 *     one the provenance is "clientSupplied". Errors: FailedToParse (9) for a bad
 *     w/j/wtimeout type or value, BadValue for an unknown provenance, with MongoDB's
 *     messages.
 */
int shl_write_concern_parse(const bson_t *doc, shl_write_concern_t *wc, shl_status_t *st);

/*
 * shl_write_concern_set_default --
 *     Make 'wc' a default concern: {w: "majority", wtimeout: 0} when 'majority', else
 *     {w: 1}, is_default set, with 'provenance' (static storage: "implicitDefault",
 *     "internalWriteDefault", ...).
 */
void shl_write_concern_set_default(shl_write_concern_t *wc, bool majority, const char *provenance);

/* shl_write_concern_unacknowledged -- {w: 0} without j: the client wants no reply. */
bool shl_write_concern_unacknowledged(const shl_write_concern_t *wc);

/* shl_write_concern_needs_journal -- j:true or w:"majority" (durable before acknowledging). */
bool shl_write_concern_needs_journal(const shl_write_concern_t *wc);

/* shl_write_concern_append -- the concern as {w, j?, wtimeout, provenance} under 'key'. */
void shl_write_concern_append(const shl_write_concern_t *wc, bson_t *out, const char *key);

#endif
