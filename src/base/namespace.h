/*
 * namespace.h -- database and collection names: validation with MongoDB's rules and
 * errors, and splitting "db.coll". Used by data nodes and routers alike.
 */
#ifndef SHL_BASE_NAMESPACE_H
#define SHL_BASE_NAMESPACE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#define SHL_DB_NAME_MAX 64 /* database names are shorter than this */
#define SHL_NS_MAX 255     /* a full namespace "db.coll" is at most this long */

typedef struct shl_ns {
    char db[SHL_DB_NAME_MAX];
    char coll[SHL_NS_MAX + 1];
    char full[SHL_NS_MAX + 1]; /* "db.coll" */
} shl_ns_t;

/* shl_ns_check_db -- InvalidNamespace (73) unless 'db' is a valid database name. */
int shl_ns_check_db(const char *db, shl_status_t *st);

/*
 * shl_ns_make --
 *     Validate and build "db.coll". Collection names must be non-empty, contain no
 *     '\0' or '$' (except MongoDB's few special names), not start with '.', and the
 *     namespace must be at most 255 bytes. Errors: InvalidNamespace.
 */
int shl_ns_make(shl_ns_t *ns, const char *db, const char *coll, shl_status_t *st);

/* shl_ns_parse -- split "db.coll" and validate (as shl_ns_make). */
int shl_ns_parse(shl_ns_t *ns, const char *full, shl_status_t *st);

/* shl_ns_is_system -- the collection name starts with "system.". */
bool shl_ns_is_system(const shl_ns_t *ns);

/* shl_ns_is_internal_db -- admin, config or local. */
bool shl_ns_is_internal_db(const char *db);

#endif
