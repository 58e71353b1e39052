/*
 * sharding_hooks.h -- the seam between the data node's commands (src/db) and the shard
 * role (src/shard), which db must not call: the shard module installs a version check at
 * start-up; every collection-level command calls it with its namespace before touching
 * data. The check answers StaleConfig / StaleDbVersion, or "run", optionally with an
 * orphan filter that reads apply to every document they return (seeds/002 "Shard
 * versioning", docs/design/sharding-protocol.md "Router -> shard").
 *
 * Without installed hooks (standalone, config server) every check passes unfiltered.
 */
#ifndef SHL_DB_SHARDING_HOOKS_H
#define SHL_DB_SHARDING_HOOKS_H

#include <bson/bson.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/status.h"
#include "net/op_context.h"
#include "net/service_context.h"
#include "storage/write.h"

/*
 * shl_db_orphan_filter_t -- "does this shard own the document's shard key?" for one
 * namespace at one routing version. Immutable and refcounted: a cursor keeps its filter
 * for its whole life, whatever refreshes happen meanwhile. Implementations embed it as
 * their first member and set the two functions.
 */
typedef struct shl_db_orphan_filter {
    atomic_int refs;
    /* true when this shard owns 'doc' (a whole document). Thread-safe, never blocks. */
    bool (*owns)(const struct shl_db_orphan_filter *f, const bson_t *doc);
    /* true when documents 'a' and 'b' have the same shard key value (always, for an
     * unsharded collection). Thread-safe, never blocks. */
    bool (*same_key)(const struct shl_db_orphan_filter *f, const bson_t *a, const bson_t *b);
    /* frees the filter; called by the last release. */
    void (*destroy)(struct shl_db_orphan_filter *f);
} shl_db_orphan_filter_t;

/* shl_db_orphan_filter_ref / _release -- take / drop a reference (NULL: no-op). */
shl_db_orphan_filter_t *shl_db_orphan_filter_ref(shl_db_orphan_filter_t *f);
void shl_db_orphan_filter_release(shl_db_orphan_filter_t *f);

/* shl_db_orphan_filter_owns -- true when 'f' is NULL (no filtering) or owns 'doc'. */
bool shl_db_orphan_filter_owns(const shl_db_orphan_filter_t *f, const bson_t *doc);

/*
 * shl_db_check_shard_key_update --
 *     MongoDB's rules for a user's update that turned 'pre' into 'post' under the write filter
 *     'f' (NULL: unversioned or unsharded, nothing to check), when the document's shard key
 *     value changed: NotSingleValueField when the new key holds an array; InvalidOptions for a
 *     multi-update; IllegalOperation outside a retryable write (no txnNumber); and
 *     WouldChangeOwningShard (283, extra {preImage, postImage, shouldUpsert: false}) when
 *     the new key belongs to another shard: the router then moves the document in an internal
 *     transaction. A change that keeps the document on this shard, in a retryable write,
 *     passes.
 */
int shl_db_check_shard_key_update(const shl_op_ctx_t *op, const shl_db_orphan_filter_t *f,
                                  bool multi, const bson_t *pre, const bson_t *post,
                                  shl_status_t *st);

/*
 * shl_db_check_upsert_owned --
 *     An upsert's new document 'doc' under the write filter 'f' (NULL: nothing to check) that
 *     belongs to another shard: WouldChangeOwningShard with {preImage: {}, postImage: doc,
 *     shouldUpsert: true} in a retryable write or a transaction (the router inserts it on its
 *     owner in a transaction), else IllegalOperation, as MongoDB 7.0.
 */
int shl_db_check_upsert_owned(const shl_op_ctx_t *op, const shl_db_orphan_filter_t *f,
                              const bson_t *doc, shl_status_t *st);

/* What the command does with the namespace. Reads return only owned documents; updates,
 * deletes and findAndModify leave orphans alone (MongoDB's write stages skip them when
 * the request is versioned); inserts and DDL are only checked. */
typedef enum shl_db_shard_access {
    SHL_DB_SHARD_READ,  /* find, count, distinct, aggregate, explain: orphan filter */
    SHL_DB_SHARD_WRITE, /* insert, update, delete, findAndModify: orphan filter */
    SHL_DB_SHARD_DDL,   /* createIndexes, dropIndexes, create, drop: none */
    /* listCollections, listIndexes: no filter; a database critical section blocks them
     * only in its commit phase (like a read), as MongoDB's catalog reads. */
    SHL_DB_SHARD_CATALOG,
} shl_db_shard_access_t;

/*
 * shl_db_sharding_check_fn --
 *     Check the request's shardVersion / databaseVersion (op->has_shard_version,
 *     op->has_database_version) for 'ns' ("db.coll"; listCollections passes the bare
 *     database name, with a databaseVersion only). Called for every versioned request and
 *     for unversioned reads (the shard may hand those a filter that owns every document and
 *     only counts reads for the load policy). On success *filter is NULL (no
 *     filtering: unversioned request, unsharded collection, DDL) or one reference
 *     the caller releases. May block on a refresh from the config server. Errors:
 *     StaleConfig (13388), StaleDbVersion (249) with their extra info; the config
 *     server's errors when a needed refresh fails; BadValue/TypeMismatch for a malformed
 *     version.
 */
typedef int (*shl_db_sharding_check_fn)(void *arg, shl_op_ctx_t *op, const char *ns,
                                        shl_db_shard_access_t access,
                                        shl_db_orphan_filter_t **filter, shl_status_t *st);

/*
 * shl_db_sharding_check_involved_fn --
 *     Check another namespace 'ns' ("db.coll") a request reads or writes besides its own,
 *     against the versions the router routed it with: 'shard_version' (an iterator on a
 *     shardVersion value) and 'database_version' (on a databaseVersion value; NULL: none).
 *     The same verdicts and refreshes as the check of the request's own namespace, but
 *     nothing to filter: the router lists only namespaces it routed as unsharded (see
 *     SHL_INVOLVED_VERSIONS_FIELD). May block on a refresh. Errors: StaleConfig naming 'ns',
 *     StaleDbVersion naming its database; the config server's errors; BadValue /
 *     TypeMismatch for a malformed version.
 */
typedef int (*shl_db_sharding_check_involved_fn)(void *arg, shl_op_ctx_t *op, const char *ns,
                                                 const bson_iter_t *shard_version,
                                                 const bson_iter_t *database_version,
                                                 shl_status_t *st);

/*
 * shl_db_write_observer_fn --
 *     The op observer: db calls it for each document a user or internal write command
 *     inserted ('pre' NULL), updated (both) or deleted ('post' NULL) on collection 'ns',
 *     after the storage transaction that wrote it committed (the commands' write units
 *     buffer the images until then; a unit that fails or is retried reports nothing of the
 *     failed attempt). Versioned or not. Must not block or fail; it only records (a donor
 *     shard notes the _ids of the documents in the range it is migrating:
 *     migration_source.c).
 */
typedef void (*shl_db_write_observer_fn)(void *arg, const char *ns, const bson_t *pre,
                                         const bson_t *post);

/*
 * shl_db_write_observing_fn --
 *     Whether writes to 'ns' need observing now (checked inside the write's transaction;
 *     false: db skips buffering the images). Cheap, never blocks.
 */
typedef bool (*shl_db_write_observing_fn)(void *arg, const char *ns);

/*
 * shl_db_orphan_count_fn --
 *     How many documents of the collection with 'uuid' this node holds as orphans (the
 *     counts of its pending range deletions), for collStats' numOrphanDocs. Never fails:
 *     0 when unknown. May run a local read.
 */
typedef int64_t (*shl_db_orphan_count_fn)(void *arg, const uint8_t uuid[16]);

/*
 * shl_db_shard_name_fn --
 *     This node's shard name into out[n] (NUL-terminated); false when it is not (yet) a
 *     shard. $collStats and $indexStats documents carry it as `shard`.
 */
typedef bool (*shl_db_shard_name_fn)(void *arg, char *out, size_t n);

/*
 * shl_db_shard_key_fn --
 *     The shard key pattern of collection 'ns' into 'out' (initialised here; empty when
 *     false) when this shard's filtering metadata knows it sharded; false when unsharded or
 *     not known. Never loads: it answers from what the request's version check left.
 */
typedef bool (*shl_db_shard_key_fn)(void *arg, const char *ns, bson_t *out);

/*
 * shl_db_ddl_drain_fn --
 *     _shardsvrSetUserWriteBlockMode's first step on a shard (MongoDB's prepare phase): with
 *     'block', refuse new sharded DDL from now on and wait until the running DDL coordinators
 *     end; without, accept DDL again. Errors: the operation's interruption.
 */
typedef int (*shl_db_ddl_drain_fn)(void *arg, shl_op_ctx_t *op, bool block, shl_status_t *st);

typedef struct shl_db_sharding_hooks {
    void *arg; /* the installer's state, passed back to every call */
    shl_db_sharding_check_fn check;
    shl_db_sharding_check_involved_fn check_involved; /* may be NULL: not checked */
    shl_db_write_observer_fn on_write;                /* may be NULL */
    shl_db_write_observing_fn observing;              /* may be NULL: observe every write */
    shl_db_orphan_count_fn orphan_count;              /* may be NULL: no orphans */
    shl_db_shard_name_fn shard_name;                  /* may be NULL: not a shard */
    shl_db_shard_key_fn shard_key;                    /* may be NULL: nothing is sharded */
    shl_db_ddl_drain_fn drain_ddl;                    /* may be NULL: no DDL coordinators */
} shl_db_sharding_hooks_t;

/*
 * shl_db_sharding_hooks_install --
 *     Install 'hooks' (copied) on the data node of 'svc' (after shl_node_init, before the
 *     listener starts; not thread-safe).
 */
void shl_db_sharding_hooks_install(shl_service_ctx_t *svc, const shl_db_sharding_hooks_t *hooks);

/* shl_db_sharding_hooks_arg -- the installed hooks' 'arg' (NULL when none). */
void *shl_db_sharding_hooks_arg(const shl_service_ctx_t *svc);

/*
 * shl_db_sharding_check --
 *     What the commands call: runs the installed check, or passes (*filter = NULL) when
 *     none is installed or the request carries neither shardVersion nor databaseVersion.
 *     Errors: as shl_db_sharding_check_fn.
 */
int shl_db_sharding_check(shl_op_ctx_t *op, const char *ns, shl_db_shard_access_t access,
                          shl_db_orphan_filter_t **filter, shl_status_t *st);

/*
 * shl_db_sharding_check_involved --
 *     What aggregate (and each getMore of its cursor) calls: checks each entry of the
 *     field SHL_INVOLVED_VERSIONS_FIELD of 'cmd' (absent: nothing to do) with the installed
 *     check_involved; without one (standalone, config server) the field is only validated. Errors:
 * TypeMismatch / FailedToParse / InvalidNamespace for a malformed field; as
 * shl_db_sharding_check_involved_fn.
 */
int shl_db_sharding_check_involved(shl_op_ctx_t *op, const bson_t *cmd, shl_status_t *st);

/*
 * shl_db_txn_wait_writers --
 *     For a migration donor: wait until no open transaction of this node that wrote 'ns'
 *     under a shard version is left (db_txn_wait_writers: prepared ones until decided,
 *     in-progress ones at most 'unprepared_max_ms', then LockTimeout). Interruptible.
 *     With 'in_range' (NULL: all) only those whose writes of 'ns' observed during a capture
 *     include a document in_range(arg, doc) holds.
 */
int shl_db_txn_wait_writers(shl_op_ctx_t *op, const char *ns,
                            bool (*in_range)(void *arg, const bson_t *doc), void *arg,
                            int64_t unprepared_max_ms, shl_status_t *st);

/* shl_db_shard_key -- the installed shard_key, or false (with 'out' empty). */
bool shl_db_shard_key(const shl_op_ctx_t *op, const char *ns, bson_t *out);

/*
 * shl_db_document_key --
 *     MongoDB's documentKey of 'doc' in 'ns' into 'out' (initialised here): the shard key's
 *     fields (dotted names as keys) then _id when this shard knows 'ns' sharded (returns
 *     true), else {_id} (false).
 */
bool shl_db_document_key(const shl_op_ctx_t *op, const char *ns, const bson_t *doc, bson_t *out);

/*
 * shl_db_delete_opts --
 *     The write options of a user's delete of 'doc' from 'ns' (or update by operators, 'doc'
 *     the new document): on a sharded collection, 'base' (may be NULL; may be 'wo') copied
 *     into *wo with document_key = the document's key ('key', initialised here, destroyed by
 *     the caller), so the 'd' entry's o / the $v:2 'u' entry's o2 holds the shard key as
 *     MongoDB's does; otherwise 'base'.
 */
const shl_write_opts_t *shl_db_delete_opts(const shl_op_ctx_t *op, const char *ns,
                                           const bson_t *doc, const shl_write_opts_t *base,
                                           shl_write_opts_t *wo, bson_t *key);

/* shl_db_shard_name -- the installed shard_name, or false. */
bool shl_db_shard_name(const shl_op_ctx_t *op, char *out, size_t n);

/* shl_db_orphan_count -- the installed orphan_count for the collection, or 0. */
int64_t shl_db_orphan_count(const shl_op_ctx_t *op, const uint8_t uuid[16]);

/*
 * shl_db_sharding_observe_write --
 *     What the write paths call after writing one document inside a write unit run by
 *     db_write_retry (db_private.h): the images are kept until the unit commits, then
 *     passed to the observer. Outside such a unit the observer is called at once. Nothing
 *     when no observer is installed or it is not observing 'ns'.
 */
void shl_db_sharding_observe_write(const shl_op_ctx_t *op, const char *ns, const bson_t *pre,
                                   const bson_t *post);

#endif
