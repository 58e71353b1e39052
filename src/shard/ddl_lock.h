/*
 * ddl_lock.h -- the primary shard's DDL lock manager (issue 17 item 3; seeds/000 "Serializing
 * conflicting operations"). MongoDB 6.1 removed the distributed lock collection
 * (config.locks is no longer written); 7.0's DDLLockManager keeps the locks in memory on the
 * database's primary shard, a database resource then collection resources, taken by the DDL
 * coordinator and released in reverse order at its end, and taken again when a coordinator
 * resumes after a restart. Two modes: IX (collection DDL on the database: compatible with
 * IX) and X (exclusive). A table of named resources ("db", "db.coll"); thread-safe.
 */
#ifndef SHL_SHARD_DDL_LOCK_H
#define SHL_SHARD_DDL_LOCK_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

typedef enum shard_ddl_mode {
    SHARD_DDL_IX, /* intent: other IX holders may share the resource */
    SHARD_DDL_X,  /* exclusive */
} shard_ddl_mode_t;

typedef struct shard_ddl_locks shard_ddl_locks_t;

/* shard_ddl_locks_new / _destroy -- an empty table; destroy expects no holder left. */
shard_ddl_locks_t *shard_ddl_locks_new(void);
void shard_ddl_locks_destroy(shard_ddl_locks_t *l);

/*
 * shard_ddl_lock_acquire --
 *     Take 'resource' in 'mode' for 'reason' (copied; shown by shard_ddl_locks_report),
 *     waiting while a conflicting holder has it. 'interrupted' (may be NULL) is asked every
 *     100 ms; true ends the wait with InterruptedAtShutdown. timeout_ms > 0 bounds the wait:
 *     LockBusy (46) after it. Returns 0 or the code.
 */
int shard_ddl_lock_acquire(shard_ddl_locks_t *l, const char *resource, shard_ddl_mode_t mode,
                           const char *reason, int64_t timeout_ms, bool (*interrupted)(void *),
                           void *arg, shl_status_t *st);

/* shard_ddl_lock_release -- give back one hold of 'resource' in 'mode'. */
void shard_ddl_lock_release(shard_ddl_locks_t *l, const char *resource, shard_ddl_mode_t mode);

/*
 * shard_ddl_locks_report --
 *     Append to 'out' one array element per held resource, as currentOp's lock view of a
 *     DDL coordinator: {resource, type: "DDLDatabase"|"DDLCollection", mode: "IX"|"X",
 *     holders, reason}.
 */
void shard_ddl_locks_report(shard_ddl_locks_t *l, bson_t *out);

/* shard_ddl_locks_held -- holders of 'resource' now (tests). */
int shard_ddl_locks_held(shard_ddl_locks_t *l, const char *resource);

/* shard_ddl_locks_waiting -- threads waiting for 'resource' now (tests await a waiter). */
int shard_ddl_locks_waiting(shard_ddl_locks_t *l, const char *resource);

#endif
