/*
 * ddl_coordinator_base.h -- what every DDL coordinator on the primary shard shares (MongoDB
 * 7.0's ShardingDDLCoordinator): the state document's _id {namespace, operationType} in
 * config.system.sharding_ddl_coordinators, the DDL locks taken before the first phase (the
 * database, then the collections in name order) with the databaseVersion checked again once
 * they are held, the join rule (the request fields that must match), the remote calls to
 * the config server and the participants, stopping and resuming migrations, the collection's
 * critical section on the participants, and the commit that undoes and aborts on a refusal.
 * A coordinator type is its phases plus a shard_ddl_kind_t (SHARD_DDL_COORD_TYPE).
 * docs/design/coordinators.md "The DDL coordinator base".
 */
#ifndef SHL_SHARD_DDL_COORDINATOR_BASE_H
#define SHL_SHARD_DDL_COORDINATOR_BASE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "shard/ddl_lock.h"
#include "sharding/coordinator.h"

#define SHARD_DDL_COORD_COLL "system.sharding_ddl_coordinators"

/*
 * The databaseVersion check run once the locks are held ('arg' the shard state): Stale-
 * DbVersion when 'dbv' ({uuid, timestamp, lastMod}) is not the version of ns's database or
 * this shard is no longer its primary.
 */
typedef int (*shard_ddl_db_check_fn)(void *arg, const char *ns, const bson_t *dbv,
                                     shl_status_t *st);

/* One kind of DDL coordinator: a coordinator type's 'arg'. */
typedef struct shard_ddl_kind {
    const char *op; /* _id.operationType */
    /* SHARD_DDL_IX: collection DDL (the database in IX, the namespace -- and the collection
     * the document's 'also' field names -- in X); SHARD_DDL_X: database DDL. */
    shard_ddl_mode_t db_mode;
    const char *also;
    /* The request fields an identical request has equal (NULL-terminated; a field missing
     * from both is equal); NULL: every request for the namespace joins. */
    const char *const *same_fields;
    /* Set by shard_ddl_kinds_setup; read-only once coordinators run. */
    shard_ddl_locks_t *locks;
    shard_ddl_db_check_fn db_check;
    void *db_check_arg;
} shard_ddl_kind_t;

/* A DDL coordinator type over 'kind_' (a shard_ddl_kind_t *) and the phase table 'phases_':
 * the base's hooks, MongoDB's retry of retryable errors until done. */
#define SHARD_DDL_COORD_TYPE(name_, phases_, kind_, same_, owns_)                                  \
    {                                                                                              \
        .name = (name_), .coll = SHARD_DDL_COORD_COLL, .phases = (phases_),                        \
        .nphases = sizeof(phases_) / sizeof((phases_)[0]), .same = (same_), .owns = (owns_),       \
        .acquire = shard_ddl_acquire, .release = shard_ddl_release,                                \
        .report_held = shard_ddl_report_held, .max_attempts = -1, .backoff_ms = 100,               \
        .arg = (kind_)                                                                             \
    }

/* SHARD_DDL_DEFINE_TYPE -- define the coordinator type 'var_' of 'kind_' (a static
 * shard_ddl_kind_t) with its 'owns' and 'same' hooks, which call shard_ddl_owns_op /
 * shard_ddl_same with the kind (the framework's hooks see no type). */
#define SHARD_DDL_DEFINE_TYPE(var_, name_, phases_, kind_)                                         \
    static bool var_##_owns(const bson_t *doc)                                                     \
    {                                                                                              \
        return shard_ddl_owns_op(doc, (kind_).op);                                                 \
    }                                                                                              \
    static bool var_##_same(const bson_t *running, const bson_t *request)                          \
    {                                                                                              \
        return shard_ddl_same(&(kind_), running, request);                                         \
    }                                                                                              \
    shl_coord_type_t var_ = SHARD_DDL_COORD_TYPE(name_, phases_, &(kind_), var_##_same, var_##_owns)

/* The options of the coordinators' remote calls: durable (w: majority) or not (reads and
 * commands that carry their own write concern), retried when retryable (idempotent). */
extern const shl_remote_options_t shard_ddl_opts;
extern const shl_remote_options_t shard_ddl_read_opts;

/* shard_ddl_kind_setup -- give 'kind' the process's lock table and databaseVersion check
 * (borrowed; must outlive every coordinator). Once, before any coordinator runs. */
void shard_ddl_kind_setup(shard_ddl_kind_t *kind, shard_ddl_locks_t *locks,
                          shard_ddl_db_check_fn check, void *check_arg);

/*
 * shard_ddl_start --
 *     Run (or join) the coordinator of type 't' for 'ns' with the request 'fields' (copied
 *     into the document after its _id; NULL: none) and wait for its end. 'dbv' (NULL: none)
 *     is the request's databaseVersion, checked again once the locks are held. On success
 *     the operation's result is appended to 'reply' (NULL: dropped). Errors: the
 *     coordinator's; ConflictingOperationInProgress; StaleDbVersion; InterruptedAtShutdown.
 */
int shard_ddl_start(shl_coord_service_t *svc, const shl_coord_type_t *t, const char *ns,
                    const bson_t *fields, const bson_t *dbv, bson_t *reply, shl_status_t *st);

/* The request 'cmd''s databaseVersion, a view into 'cmd' held in 'view' (returned), or NULL
 * when it has none. */
const bson_t *shard_ddl_cmd_dbv(const bson_t *cmd, bson_t *view);

/* The base's hooks of a coordinator type (SHARD_DDL_COORD_TYPE). */
int shard_ddl_acquire(shl_coord_t *c, shl_status_t *st);
void shard_ddl_release(shl_coord_t *c);
void shard_ddl_report_held(const bson_t *doc, bson_t *op);
/* Whether 'doc' is of operationType 'op' (a type's 'owns'). */
bool shard_ddl_owns_op(const bson_t *doc, const char *op);
/* Whether 'request' is the operation 'running' runs: kind's same_fields equal. */
bool shard_ddl_same(const shard_ddl_kind_t *kind, const bson_t *running, const bson_t *request);

/* --- the document --- */

/* The operation's namespace (_id.namespace of 'doc') into 'out' ("" if none). */
void shard_ddl_doc_namespace(const bson_t *doc, char *out, size_t n);
/* The document's 'field' as a boolean (false when missing). */
bool shard_ddl_doc_bool(const bson_t *doc, const char *field);
/* The document's "participants" (NULL-terminated, bson_strfreev); false if it has none. */
bool shard_ddl_participants_of(const bson_t *doc, char ***ids, size_t *n);
/* Set the document's "participants" to the 'n' shard ids 'ids' (not persisted). */
void shard_ddl_set_participants(shl_coord_t *c, char **ids, size_t n);

/* --- remote calls --- */

/* find 'filter' in config.<coll> on the config server, read concern majority; *docs
 * (NULL-terminated, free with shard_ddl_docs_free) gets the first batch. */
int shard_ddl_config_find(shl_coord_t *c, const char *coll, const bson_t *filter, bson_t ***docs,
                          size_t *n, shl_status_t *st);
void shard_ddl_docs_free(bson_t **docs);
/* Run 'cmd' on database 'db' of every participant at once (w: majority, retried when
 * retryable); the first error. */
int shard_ddl_to_participants(shl_coord_t *c, const char *db, const bson_t *cmd, shl_status_t *st);
/* Run 'cmd' on the config server's admin database (w: majority, retried when retryable). */
int shard_ddl_to_config(shl_coord_t *c, const bson_t *cmd, shl_status_t *st);
/* The shards that may hold data of 'db' / the collections 'colls' (config.collections
 * entries): the database's primary, then every shard owning a chunk of one of them.
 * *ids (NULL-terminated, bson_strfreev) of *n. */
int shard_ddl_find_participants(shl_coord_t *c, const char *db, bson_t **colls, size_t ncolls,
                                char ***ids, size_t *n, shl_status_t *st);

/* --- the phases' common steps --- */

/* _configsvrSetAllowMigrations of 'ns' ('allow'), with doc's 'uuid_field' as its
 * collectionUUID (if present). Idempotent. */
int shard_ddl_set_allow_migrations(shl_coord_t *c, const char *ns, const bson_t *doc,
                                   const char *uuid_field, bool allow, shl_status_t *st);
/* Stop (freeze) or resume the migrations of the operation's namespace when its document's
 * "freezeMigrations" is true (a user who had stopped them keeps them stopped), with its
 * "collectionUUID". Usable as a phase. */
int shard_ddl_phase_freeze_migrations(shl_coord_t *c, shl_status_t *st);
int shard_ddl_resume_migrations(shl_coord_t *c, shl_status_t *st);
/* _shardsvrParticipantBlock of the operation's collection ("ReadsAndWrites" or "Unblock",
 * reason {command: 'why', ns}) on every participant, or on this shard alone ('self_only'). */
int shard_ddl_block(shl_coord_t *c, const char *why, bool block, bool self_only, shl_status_t *st);
/*
 * shard_ddl_commit --
 *     Run 'cmd' on database 'db' of 'target'; *reply (initialised by the callee) gets the
 *     answer. A refusal (an error that is not retryable) before the point of no return: run
 *     'undo' (NULL: nothing), and when it succeeds end the operation cleanly not done
 *     (shl_coord_abort) with the refusal; when it fails, its error (the phase runs again).
 */
int shard_ddl_commit(shl_coord_t *c, const shl_remote_target_t *target, const char *db,
                     const bson_t *cmd, int (*undo)(shl_coord_t *c, shl_status_t *st),
                     bson_t *reply, shl_status_t *st);

#endif
