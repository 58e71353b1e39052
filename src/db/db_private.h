/*
 * db_private.h -- what the data node's command files share: the node's state (storage
 * engine, cursor manager, topology), the operation's write timestamp that becomes
 * operationTime, read/write concern handling, and small request helpers. Not used
 * outside src/db.
 */
#ifndef SHL_DB_PRIVATE_H
#define SHL_DB_PRIVATE_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/namespace.h"
#include "base/options.h"
#include "base/status.h"
#include "bson/collation.h"
#include "db/cursor_manager.h"
#include "db/sharding_hooks.h"
#include "net/command.h"
#include "db/repl_hooks.h"
#include "net/op_context.h"
#include "net/read_concern_support.h"
#include "net/write_concern.h"
#include "query/pipeline.h"
#include "storage/storage.h"

/* The data node's state: svc->role_state. Fields are set at start-up, then read-only. */
typedef struct db_node {
    shl_service_ctx_t *svc;
    shl_storage_engine_t *eng;
    shl_cursor_manager_t *cursors;
    bool repl_set; /* --replSet: a replica set member (a set of one) */

    /* The cursor reaper thread (clientCursorMonitor). */
    pthread_t reaper;
    bool reaper_started;
    pthread_mutex_t reaper_lock; /* guards reaper_stop */
    pthread_cond_t reaper_cond;
    bool reaper_stop;

    /* The TTL monitor (ttl.c); stops with the reaper (reaper_stop, reaper_cond). */
    pthread_t ttl;
    bool ttl_started;
    /* The periodic no-op writer (change_stream.c), replica set members only; stops with the
     * reaper. */
    pthread_t noop;
    bool noop_started;
    /* The pre-image remover (pre_images.c), replica set members only; stops with the reaper. */
    pthread_t preimages;
    bool preimages_started;
    int64_t ttl_passes;  /* atomic: serverStatus metrics.ttl.passes */
    int64_t ttl_deleted; /* atomic: metrics.ttl.deletedDocuments */

    /* Installed by the shard role before serving (sharding_hooks.h); zero otherwise. */
    shl_db_sharding_hooks_t sharding;
    /* Installed by repl before serving for a multi-member set (repl_hooks.h); zero otherwise. */
    shl_db_repl_hooks_t repl;

    /* Sessions checked out by retryable writes (replica set members; NULL otherwise). */
    struct db_session_catalog *sessions;
    /* Multi-document transactions (txn_participant.c); NULL with 'sessions'. */
    struct db_txn_registry *txns;

    /* User write blocking (user_write_block.c): atomic; written by setUserWriteBlockMode
     * after its durable copy in config.user_writes_critical_sections, read by every write. */
    atomic_bool uwb_blocked;

    /* The newest write time a finished command committed (read_concern_wait.c: a plain
     * replica set member's afterClusterTime waits for it); atomic, only moves forward. */
    _Atomic uint64_t last_applied;
} db_node_t;

/*
 * db_write_retry --
 *     shl_storage_write_retry for the write commands: also reports the documents the
 *     committed attempt wrote to the sharding op observer (sharding_hooks.h), after the
 *     commit (a unit run inside another reports with the outer one). Errors: as
 *     shl_storage_write_retry.
 */
int db_write_retry(shl_op_ctx_t *op, shl_storage_engine_t *eng, shl_storage_txn_fn fn, void *arg,
                   uint64_t *last_ts, shl_status_t *st);

/*
 * db_sessions_init --
 *     The node's logical session cache (db_sessions.c): its cursors and transaction-record
 *     reap; outside a cluster also its own config.system.sessions, and the refresh thread
 *     started. Shards and config servers set their collection and start it themselves.
 */
int db_sessions_init(db_node_t *node, shl_status_t *st);

/*
 * db_node_every --
 *     The loop of a node's periodic thread: every 'secs_opt' seconds (read each time, at least
 *     1) call pass(node), until the node stops (reaper_stop, reaper_cond; reaper_lock is not
 *     held during pass). Returns when the node stops.
 */
void db_node_every(db_node_t *node, shl_opt_id_t secs_opt, void (*pass)(db_node_t *node));

/* db_pre_image_remover_main -- the thread that deletes expired pre-images (pre_images.c;
 * arg: the node), every expiredChangeStreamPreImageRemovalJobSleepSecs. */
void *db_pre_image_remover_main(void *arg);

/* setClusterParameter / getClusterParameter (changeStreamOptions; pre_images.c). */
void db_register_pre_image_commands(shl_command_registry_t *reg);

/* db_oplog_oldest -- the timestamp of the oldest oplog entry (0: empty; change_stream.c). */
int db_oplog_oldest(shl_storage_engine_t *eng, uint64_t *ts, shl_status_t *st);

/*
 * db_delete_matching --
 *     Delete every document of 'ns' that matches 'filter' (using index 'index' when not NULL,
 *     hidden or not) through the normal delete path, so oplog entries are written: the TTL
 *     monitor's and the pre-image remover's deletes. *deleted receives how many. Takes the
 *     collection lock shared; retries write conflicts. A missing collection or index deletes
 *     nothing. Errors: the query's and the storage's.
 */
int db_delete_matching(db_node_t *node, const char *ns, const bson_t *filter, const char *index,
                       int64_t *deleted, shl_status_t *st);

/* db_ttl_main -- the TTL monitor thread's body (arg: the node). */
void *db_ttl_main(void *arg);

/* db_node -- the node of the process serving 'op'. */
db_node_t *db_node(const shl_op_ctx_t *op);

/*
 * db_cmd_begin --
 *     Called first by every data-node command: advances the storage clock from the
 *     request's $clusterTime (gossip; replica set members only).
 */
void db_cmd_begin(shl_op_ctx_t *op);

/*
 * db_op_note_write_ts / db_op_take_write_ts --
 *     The newest timestamp this operation wrote (its operationTime and what write
 *     concern waits for). Kept per thread: a command and its reply decoration run on
 *     the same thread; take resets it.
 */
void db_op_note_write_ts(uint64_t ts);
uint64_t db_op_write_ts(void);
uint64_t db_op_take_write_ts(void);

/* ---------------------------------------------------------------- namespaces */

/*
 * db_ns_from_cmd --
 *     The namespace "<op->db>.<first field>" of a collection command, validated
 *     (InvalidNamespace 73 with MongoDB's messages).
 */
int db_ns_from_cmd(const shl_op_ctx_t *op, const bson_t *cmd, shl_ns_t *ns, shl_status_t *st);

/*
 * db_sharding_check_no_filter --
 *     shl_db_sharding_check for commands that do not filter (writes, DDL): the version
 *     check only. Errors: StaleConfig, StaleDbVersion, a failed refresh's.
 */
int db_sharding_check_no_filter(shl_op_ctx_t *op, const char *ns, shl_db_shard_access_t access,
                                shl_status_t *st);

/* db_ns_is_oplog -- "local.oplog.rs". */
bool db_ns_is_oplog(const char *ns);

/*
 * db_check_user_write_ns --
 *     Whether users may write to 'ns' (MongoDB's userAllowedWriteNS): not the oplog,
 *     not system.profile/system.views, no ".system." inside the name. Errors:
 *     InvalidNamespace, IllegalOperation for the oplog.
 */
int db_check_user_write_ns(const shl_ns_t *ns, shl_status_t *st);

/* ---------------------------------------------------------------- concerns */

/* The parsed readConcern (net/read_concern_support.h), under the data node's names. */
typedef shl_rc_level_t db_rc_level_t;
#define DB_RC_LOCAL SHL_RC_LOCAL
#define DB_RC_MAJORITY SHL_RC_MAJORITY
#define DB_RC_AVAILABLE SHL_RC_AVAILABLE
#define DB_RC_LINEARIZABLE SHL_RC_LINEARIZABLE
#define DB_RC_SNAPSHOT SHL_RC_SNAPSHOT
typedef shl_read_concern_t db_read_concern_t;

/*
 * db_read_concern_get --
 *     Parse and validate the request's readConcern for a read command, with MongoDB's errors
 *     in its order (shl_read_concern_parse: field types and names, the combinations
 *     ReadConcernArgs refuses; then the topology: linearizable and
 *     afterOpTime need a replica set (NotAReplicaSet), afterClusterTime too
 *     (IllegalOperation)). local, available, majority and linearizable (on a set of one, a
 *     majority read) are accepted; snapshot goes to db_snapshot_read_prepare. An
 *     afterClusterTime waits, without locks and within maxTimeMS, as
 *     db_rc_wait_after_cluster_time (read_concern_wait.h) says.
 */
int db_read_concern_get(shl_op_ctx_t *op, db_read_concern_t *rc, shl_status_t *st);

/*
 * db_snapshot_read_prepare --
 *     readConcern {level: "snapshot"} outside a transaction (find, aggregate, distinct;
 *     docs/design/snapshot_reads.md): needs a replica set (NotAReplicaSet); picks the time
 *     the read runs at into rc->at_cluster_time -- the requested atClusterTime, else the
 *     newest committed time (the no-holes point), at least afterClusterTime -- and waits,
 *     without locks and within maxTimeMS, until every write at or below it has committed
 *     (a time ahead of this node advances its clock first). SnapshotTooOld when the time is
 *     older than the history storage keeps (minSnapshotHistoryWindowInSeconds).
 */
int db_snapshot_read_prepare(shl_op_ctx_t *op, db_read_concern_t *rc, shl_status_t *st);

/* db_snapshot_append_time -- append the read's atClusterTime to a distinct reply. */
void db_snapshot_append_time(const db_read_concern_t *rc, bson_t *reply);

/*
 * db_read_timestamp --
 *     The storage read timestamp for 'rc': 0 (latest committed) for local/available;
 *     the no-holes point for majority. On a set of one MongoDB's majority-committed
 *     point is the journaled point; storage exposes no "journaled timestamp", so the
 *     no-holes point is used: a majority read never sees a hole, but may see a j:false
 *     write up to journalCommitInterval before it is journaled.
 */
uint64_t db_read_timestamp(const db_node_t *node, const db_read_concern_t *rc);

/*
 * db_read_ts_for --
 *     The read timestamp of a read of collection 'ns' under 'rc', for exec_plan_build (which
 *     refuses a collection created after it: SnapshotUnavailable, catalog.h
 *     shl_collection_check_visible): in a transaction, the transaction's own
 *     (db_txn_read_ts_for); else db_read_timestamp's, except that a majority read of a
 *     collection created (or renamed) after the majority point first waits for that point
 *     to reach it (db_rc_wait_majority), as MongoDB's majority reads wait for a new
 *     collection to become visible rather than fail. Call without locks. Errors: the
 *     wait's (MaxTimeMSExpired, Interrupted).
 */
int db_read_ts_for(shl_op_ctx_t *op, const db_read_concern_t *rc, const char *ns, uint64_t *ts,
                   shl_status_t *st);

/*
 * db_write_concern_get --
 *     Parse the request's writeConcern and validate it against the topology as
 *     MongoDB's validateWriteConcern: on a standalone w > 1 or a tag fails with
 *     BadValue. Errors: FailedToParse, BadValue.
 */
int db_write_concern_get(shl_op_ctx_t *op, shl_write_concern_t *wc, shl_status_t *st);

/*
 * db_write_concern_wait --
 *     Satisfy 'wc' after the operation's writes: j / w:"majority" wait until the
 *     journal holds everything up to the op's write timestamp (or now); on a replica
 *     set of one, w > 1 appends writeConcernError UnsatisfiableWriteConcern (100) and a
 *     tag UnknownReplWriteConcern (79) to 'reply', as MongoDB does after the write.
 *     A journal flush failure also becomes a writeConcernError.
 */
void db_write_concern_wait(shl_op_ctx_t *op, const shl_write_concern_t *wc, bson_t *reply);

/* ---------------------------------------------------------------- misc */

/* db_append_ts -- append a packed timestamp as BSON Timestamp. */
void db_append_ts(bson_t *doc, const char *key, uint64_t ts);

/* db_check_collation -- validate the collation in 'field' of 'cmd' (if any): shl_collator_new's errors. */
int db_check_collation(const bson_t *cmd, const char *field, shl_status_t *st);

/*
 * db_cmd_collator --
 *     The collation 'cmd' names in 'field': *has says whether it names one; *out is a new
 *     reference (NULL: simple or absent). Errors: shl_collator_new's.
 */
int db_cmd_collator(const bson_t *cmd, const char *field, shl_collator_t **out, bool *has,
                    shl_status_t *st);

/* db_query_collation -- give 'q' the collation 'cmd' names in 'field' (none: 'q' keeps
 * the collection default exec_plan_build applies). Errors: shl_collator_new's. */
struct exec_query;
int db_query_collation(const bson_t *cmd, const char *field, struct exec_query *q,
                       shl_status_t *st);

/*
 * db_let_vars --
 *     The variables a command's expressions see: its `let` evaluated (shl_expr_let_vars)
 *     plus NOW (one time for the whole command) and CLUSTER_TIME on a replica-set member. Without `let` nothing is built unless
 *     'always'. *out is always initialised (the caller destroys it); *has says whether it
 *     holds the variables. Errors: TypeMismatch (14) for a non-object `let`, the
 *     expressions' errors.
 */
int db_let_vars(shl_op_ctx_t *op, const bson_t *cmd, bool always, bson_t *out, bool *has,
                shl_status_t *st);

/* db_cmd_get_hint -- the "hint" field: *has false when absent or empty. */
int db_cmd_get_hint(const bson_t *cmd, bool *has, bson_value_t *hint, shl_status_t *st);

/*
 * db_reply_array_cursor --
 *     Reply with a cursor over 'docs' (an array document; ownership moves here): the
 *     first batch now ('batch_size' 0: 101), the rest registered for getMore under 'ns'
 *     (listCollections, listIndexes, the aggregate stub).
 */
void db_reply_array_cursor(shl_op_ctx_t *op, const char *ns, bson_t *docs, int64_t batch_size,
                           bson_t *reply);

/*
 * db_cursor_batch_size --
 *     The cursor.batchSize option of listCollections/listIndexes/aggregate ({cursor:
 *     {batchSize: n}}). Errors: TypeMismatch, BadValue for a negative size.
 */
int db_cursor_batch_size(const bson_t *cmd, int64_t *out, shl_status_t *st);

/* ---------------------------------------------------------------- writes */

/*
 * db_doc_for_insert --
 *     MongoDB's fixDocumentForInsert: check 'doc' (size <= 16 MiB, nesting, _id not an
 *     array/regex/undefined, no '$'-prefixed fields inside an _id document, one _id) and
 *     put _id first, generating an ObjectId when missing. *out is NULL when 'doc' is fine
 *     as it is, else a new document (bson_destroy it). Top-level Timestamp(0, 0) values
 *     are replaced by the current cluster time. Errors: BadValue (2), Overflow (15),
 *     DollarPrefixedFieldName (52).
 */
int db_doc_for_insert(shl_storage_engine_t *eng, const bson_t *doc, bson_t **out, shl_status_t *st);

/*
 * db_doc_after_update --
 *     Checks on a document an update produced from 'old_doc': size (17419), _id unchanged
 *     (ImmutableField 66) and first -- a replacement without _id keeps the old one.
 *     *out is NULL when 'new_doc' is fine as it is, else a fixed copy to destroy.
 */
int db_doc_after_update(const bson_t *old_doc, const bson_t *new_doc, bson_t **out,
                        shl_status_t *st);

/*
 * db_ensure_collection --
 *     Implicit creation: make 'ns' exist (creating it with default options unless it
 *     does) and return with 'h' holding it locked in shared mode. The caller must not
 *     hold 'ns'. Errors: those of shl_catalog_create_collection except NamespaceExists.
 */
int db_ensure_collection(shl_op_ctx_t *op, const shl_ns_t *ns, shl_coll_handle_t *h,
                         shl_status_t *st);

/* ---------------------------------------------------------------- validation (validation.c) */

typedef struct shl_matcher shl_matcher_t;

/* A collection's document validator as one write command applies it. */
typedef struct db_validator {
    shl_matcher_t *m; /* NULL: nothing to check (none, level off, or bypassed) */
    bool moderate;    /* validationLevel moderate: updates of invalid documents pass */
    bool warn;        /* validationAction warn: log instead of failing */
    const char *ns;   /* borrowed from the collection snapshot */
    bson_t spec;      /* the validator, a view into the collection snapshot's options */
} db_validator_t;

/*
 * db_validation_error_details --
 *     Append to 'out' (errInfo.details being built) why 'doc' fails 'validator', as MongoDB
 *     5.0+ describes it: {operatorName, specifiedAs, reason, consideredValue, ...}, $and /
 *     $or with clausesNotSatisfied [{index, details}], $jsonSchema with
 *     schemaRulesNotSatisfied (required: missingProperties; properties:
 *     propertiesNotSatisfied [{propertyName, details: [...]}]). Each clause is re-checked
 *     alone (validation_error.c); call only after the document failed. Does not block.
 */
void db_validation_error_details(const bson_t *validator, const bson_t *doc, bson_t *out);

/*
 * db_validation_options_check --
 *     Check a create/collMod command's validator (an object, parsed by the matcher;
 *     {} means none; refused in admin/local/config and on system.* collections),
 *     validationLevel (off|strict|moderate) and validationAction (error|warn), with
 *     MongoDB's errors: TypeMismatch (14), BadValue (2) "Enumeration value 'x' for field
 *     'create.validationLevel' is not a valid value.", InvalidOptions (72), matcher errors.
 */
int db_validation_options_check(const char *cmd_name, const bson_t *cmd, const shl_ns_t *ns,
                                shl_status_t *st);

/*
 * db_validator_init / db_validator_cleanup --
 *     The validator of 'coll' (the snapshot the write holds; may be NULL) for one write;
 *     'bypass' (bypassDocumentValidation) disables it. Errors: matcher errors for a
 *     stored validator that no longer parses.
 */
int db_validator_init(db_validator_t *v, const shl_collection_t *coll, bool bypass,
                      shl_status_t *st);
void db_validator_cleanup(db_validator_t *v);

/*
 * db_validator_check --
 *     Check 'new_doc' (with its _id) about to be written; 'old_doc' is the document it
 *     replaces (NULL for an insert or upsert). Passes when it matches, when moderate and
 *     'old_doc' did not match either, or with action warn (logged, id 20294). Errors:
 *     DocumentValidationFailure (121) "Document failed validation" with extra
 *     {errInfo: {failingDocumentId, details}}; $expr evaluation errors.
 */
int db_validator_check(const db_validator_t *v, const bson_t *old_doc, const bson_t *new_doc,
                       shl_status_t *st);

/* Command tables of each file, registered by node.c. */
/*
 * db_run_command --
 *     Run one of this node's commands on database 'db' as an internal operation (no session,
 *     no shard version, op->conn NULL); 'reply' is always initialised. A reply with
 *     writeErrors becomes the first error's status.
 */
int db_run_command(shl_op_ctx_t *op, const char *db, const bson_t *cmd, bson_t *reply,
                   shl_status_t *st);

void db_register_find_commands(shl_command_registry_t *reg);
void db_register_fam_commands(shl_command_registry_t *reg);
void db_register_write_commands(shl_command_registry_t *reg);
void db_register_ddl_commands(shl_command_registry_t *reg);
void db_register_list_commands(shl_command_registry_t *reg);
void db_register_stats_commands(shl_command_registry_t *reg);
void db_register_current_op_commands(shl_command_registry_t *reg);

/*
 * db_pipeline_current_op --
 *     Where $currentOp stands in the aggregate pipeline 'pipeline': 1 first, 2 later (only the
 *     first stage may be $currentOp), 0 nowhere.
 */
int db_pipeline_current_op(const bson_t *pipeline);

/*
 * db_current_op_aggregate --
 *     {aggregate: 1, pipeline: [{$currentOp: {...}}, ...], cursor} on the admin database:
 *     the node's operations in progress, as the currentOp command lists them, through the
 *     rest of the pipeline, in one batch of a cursor on admin.$cmd.aggregate. Errors:
 *     InvalidNamespace outside admin / aggregate: 1, 40602 for a later $currentOp, the
 *     stage's option errors (shl_current_op_spec_parse), the rest of the pipeline's.
 */
int db_current_op_aggregate(shl_op_ctx_t *op, const bson_t *cmd, const bson_t *pipeline,
                            bson_t *reply, shl_status_t *st);
void db_register_fsync_commands(shl_command_registry_t *reg);

/*
 * User write blocking (user_write_block.c, docs/design/user_write_blocking.md).
 * db_uwb_check -- UserWritesBlocked (371) when blocking is on, 'ns' ("db" or "db.coll") is not
 *     in admin/config/local, and the operation may not bypass (internal operations and
 *     requests a router marked mayBypassWriteBlocking: true bypass). Never blocks.
 * db_uwb_load -- read the durable state at start-up. Errors: storage errors.
 * db_uwb_parse_global -- the required bool 'global' of 'cmd_name' (IDLFailedToParse when
 *     missing, TypeMismatch when not a bool).
 * db_uwb_append_status -- serverStatus repl.userWriteBlockMode (replica set members:
 *     1 disabled, 2 enabled, as MongoDB's UserWriteBlockState).
 */
int db_uwb_check(shl_op_ctx_t *op, const char *ns, shl_status_t *st);
/* db_sharding_check_versions -- shl_db_sharding_check without the user write blocking check,
 * for insert/update/delete, which report UserWritesBlocked per statement (writeErrors). */
int db_sharding_check_versions(shl_op_ctx_t *op, const char *ns, shl_db_shard_access_t access,
                               shl_db_orphan_filter_t **filter, shl_status_t *st);
int db_uwb_load(db_node_t *node, shl_status_t *st);
int db_uwb_parse_global(const bson_t *cmd, const char *cmd_name, bool *global, shl_status_t *st);
void db_uwb_append_status(const db_node_t *node, bson_t *out);
void db_register_uwb_commands(shl_command_registry_t *reg);
void db_register_split_vector_command(shl_command_registry_t *reg);
void db_register_apply_ops_command(shl_command_registry_t *reg);

/* ---------------------------------------------------------------- aggregation (agg_stages.c) */

/*
 * db_agg_env_t -- the pipeline environment of one aggregate: $lookup/$unionWith read other
 * collections of 'db' at 'read_ts' (each in its own snapshot, without a collection lock);
 * $collStats/$indexStats describe the aggregated collection 'ns' (its current catalog
 * entry). 'op' is the operation pulling documents (the aggregate, then each getMore).
 */
typedef struct db_agg_env {
    shl_pipeline_env_t env;
    shl_op_ctx_t *op;
    char db[128];
    char ns[SHL_NS_MAX + 1];
    uint64_t read_ts;
    /* The aggregate's collation (borrowed; NULL: simple): the other collections read by
     * $lookup/$graphLookup/$unionWith are matched under it, not their own defaults. */
    shl_collator_t *collator;
} db_agg_env_t;

/* db_agg_env_init -- fill 'e' (caller's storage; nothing to clean up). */
void db_agg_env_init(db_agg_env_t *e, shl_op_ctx_t *op, const char *db, uint64_t read_ts);

/*
 * db_agg_out_* -- the writes of a pipeline ending in $out or $merge (shl_pipeline_output(p)
 * != NULL), fed batch by batch as the pipeline produces them.
 *   begin: check the target and prepare. $out creates a temporary collection in the target
 *     database with the target's options and indexes; $merge checks that the 'on' fields
 *     have a unique index (51183). *out is NULL on error.
 *   write: write the documents of the array 'docs' ($out: into the temporary collection, in
 *     insert batches cut to the command's limits; $merge: one update/insert per document by
 *     the 'on' fields).
 *   commit: $out renames the temporary collection over the target (dropTarget).
 *   destroy: drops a temporary collection not committed. NULL is fine.
 * The writes are validated against the target's validator unless 'bypass' (the aggregate's
 * bypassDocumentValidation). Call without collection handles held. Errors: the writes'
 * (DuplicateKey, DocumentValidationFailure, ...), 51132 missing 'on' fields, 13113
 * whenNotMatched: fail, 17152 capped $out target.
 */
typedef struct db_agg_out db_agg_out_t;
int db_agg_out_begin(shl_op_ctx_t *op, const shl_pipeline_t *p, const char *db, bool bypass,
                     db_agg_out_t **out, shl_status_t *st);
int db_agg_out_write(db_agg_out_t *w, const bson_t *docs, shl_status_t *st);
int db_agg_out_commit(db_agg_out_t *w, shl_status_t *st);
void db_agg_out_destroy(db_agg_out_t *w);

#endif
