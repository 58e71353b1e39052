/*
 * ddl_coordinators.h -- DDL coordinators on the database's primary shard (issue 17 item 3;
 * seeds/000 "Cluster DDL operations", "Sharding DDL Coordinator", "DDL operations"), on the
 * coordinator framework (sharding/coordinator.h). The router sends MongoDB 7.0's
 * _shardsvrDropCollection / _shardsvrDropDatabase to the primary shard; it runs a
 * "dropCollection" / "dropDatabase" coordinator whose state documents live in
 * config.system.sharding_ddl_coordinators ({_id: {namespace, operationType}, phase,
 * collInfo?}), holding the DDL locks (ddl_lock.h: the database in IX then the collection
 * in X for a collection drop; the database in X for a database drop). Phases:
 *
 *   dropCollection: freezeCollection (read config.collections, stop migrations with
 *     _configsvrSetAllowMigrations), enterCriticalSection (_shardsvrParticipantBlock on
 *     every shard), dropCollection (_configsvrCommitDropCollection, then
 *     _shardsvrDropCollectionParticipant on every shard), releaseCriticalSection
 *     (_shardsvrParticipantBlock Unblock: refresh, leave the section).
 *   dropDatabase: drop (each sharded collection: stop migrations and remove its metadata;
 *     _shardsvrDropDatabaseParticipant on every shard; _configsvrCommitDropDatabase;
 *     _flushDatabaseCacheUpdates on every shard).
 *
 * Every phase is idempotent; an identical request joins the running coordinator.
 * docs/design/coordinators.md.
 */
#ifndef SHL_SHARD_DDL_COORDINATORS_H
#define SHL_SHARD_DDL_COORDINATORS_H

#include <bson/bson.h>

#include "base/status.h"
#include "net/command.h"
#include "shard/ddl_coordinator_base.h"
#include "shard/ddl_lock.h"
#include "sharding/coordinator.h"

/* The two coordinator types ("dropCollection", "dropDatabase"); their 'arg' is their
 * shard_ddl_kind_t, set up by shard_ddl_coords_setup. */
extern shl_coord_type_t shard_drop_coll_type;
extern shl_coord_type_t shard_drop_db_type;

/* shard_ddl_coords_setup -- give every DDL coordinator type the process's DDL lock table and
 * databaseVersion check (borrowed; must outlive every coordinator; 'check' NULL: none).
 * Call once before any coordinator runs. */
void shard_ddl_coords_setup(shard_ddl_locks_t *locks, shard_ddl_db_check_fn check,
                            void *check_arg);

/*
 * shard_ddl_drop_collection --
 *     Run (or join) the dropCollection coordinator of 'ns' on 'svc' and wait for its end.
 *     'dbv' (NULL: none; as for every entry point below) is the request's databaseVersion,
 *     checked again once the coordinator holds its locks (StaleDbVersion).
 *     Returns 0 (also when nothing existed) or the coordinator's error; InterruptedAtShutdown
 *     when the process stops first (the document stays and the next start finishes the drop).
 */
int shard_ddl_drop_collection(shl_coord_service_t *svc, const char *ns, const bson_t *dbv,
                              shl_status_t *st);

/* shard_ddl_drop_database -- the same for the dropDatabase coordinator of 'db'. */
int shard_ddl_drop_database(shl_coord_service_t *svc, const char *db, const bson_t *dbv,
                            shl_status_t *st);

/* shard_ddl_coords_register -- _shardsvrDropCollection, _shardsvrDropDatabase,
 * _shardsvrCreateCollection. */
void shard_ddl_coords_register(shl_command_registry_t *reg);

/*
 * The createCollection coordinator (ddl_create_coordinator.c), MongoDB 7.0's
 * CreateCollectionCoordinator for a sharded collection: the router sends
 * {_shardsvrCreateCollection: <coll>, shardKey, unique?, numInitialChunks?, collation?,
 * databaseVersion} to the database's primary shard, which checks user write blocking and the
 * databaseVersion, then runs or joins the coordinator
 * {_id: {namespace, operationType: "createCollection"}, shardKey, unique, numInitialChunks?,
 * collation?, phase} holding the database in IX and the collection in X. An identical request
 * joins the running one; one with other options gets ConflictingOperationInProgress (117).
 * Phases:
 *
 *   checkPreconditions (not checkpointed: an error leaves nothing): the shard key pattern is
 *     valid; config.collections (majority): sharded with the same key and unique -> the
 *     operation ends at once with the existing UUID; sharded otherwise -> AlreadyInitialized
 *     (23) "sharding already enabled for collection <ns>".
 *   enterCriticalSection: _shardsvrParticipantBlock ReadsAndWrites on this shard (reason
 *     {command: "create", ns}): versioned reads and writes of the namespace wait, so the
 *     emptiness the commit decides on (presplit of a hashed key) holds.
 *   commit (aborts cleanly on a refusal): _configsvrShardCollection on the config server (key validation,
 *     the shard key index on this shard, initial chunks, the participants that receive chunks
 *     get the collection with this shard's UUID, config.collections, routing flushes).
 *     Idempotent: after a crash the same request finds its own result. A refusal (bad options,
 *     a non-empty collection without an index, ...) leaves the critical section and ends the
 *     operation cleanly not done (the document goes).
 *   exitCriticalSection: _shardsvrParticipantBlock Unblock (refresh the filtering metadata,
 *     leave the section); the result {collectionsharded, collectionUUID} from
 *     config.collections.
 */
extern shl_coord_type_t shard_create_coll_type;

/* shard_ddl_create_register -- _shardsvrCreateCollection (called by
 * shard_ddl_coords_register). */
void shard_ddl_create_register(shl_command_registry_t *reg);

/*
 * shard_ddl_create_collection --
 *     Run (or join) the createCollection coordinator of 'ns' with the request 'req'
 *     ({shardKey, unique?, numInitialChunks?, collation?}; borrowed) and wait for its end.
 *     On success 'reply' gets {collectionsharded, collectionUUID}. Errors: as the phases
 *     above; ConflictingOperationInProgress; InterruptedAtShutdown.
 */
int shard_ddl_create_collection(shl_coord_service_t *svc, const char *ns, const bson_t *req,
                                const bson_t *dbv, bson_t *reply, shl_status_t *st);

/*
 * The renameCollection coordinator (ddl_rename_coordinator.c), MongoDB 7.0's
 * RenameCollectionCoordinator, for a rename whose source or target is sharded: the router
 * sends {_shardsvrRenameCollection: <from coll>, to: "<db>.<coll>", dropTarget?,
 * databaseVersion} to the primary shard of the source's database; the coordinator
 * {_id: {namespace: <from>, operationType: "renameCollection"}, to, dropTarget, phase,
 * sourceUUID, sourceSharded, targetUUID?, participants} holds the database in IX and both
 * collections in X (name order). An identical request (same to, dropTarget) joins; another
 * gets ConflictingOperationInProgress (117). Phases:
 *
 *   checkPreconditions (not checkpointed; any error ends it with nothing done): the source
 *     exists (NamespaceNotFound); a sharded target needs dropTarget (NamespaceExists); on
 *     every shard an unsharded target needs dropTarget, a copy of the source has its UUID
 *     (CollectionUUIDMismatch) and no migration of either name runs (117). Nothing sharded:
 *     the primary renames locally and the operation ends.
 *   freezeMigrations: _configsvrSetAllowMigrations false for the sharded source / target.
 *   blockCrudAndRename: _configsvrCommitDropCollection of a sharded target (dropTarget);
 *     _shardsvrRenameCollectionParticipant on every shard (block both names, persisted;
 *     rename the local copy; its range deletion tasks follow).
 *   renameMetadata: _configsvrRenameCollectionMetadata (same UUID, new epoch, migrations
 *     allowed) for a sharded source.
 *   unblockCRUD: _shardsvrRenameCollectionUnblockParticipant on every shard (refresh both
 *     names, leave the sections).
 */
extern shl_coord_type_t shard_rename_coll_type;

/* shard_ddl_rename_collection -- run (or join) the coordinator renaming 'from' to 'to' and
 * wait for its end. Errors: as the phases above; ConflictingOperationInProgress;
 * InterruptedAtShutdown. */
int shard_ddl_rename_collection(shl_coord_service_t *svc, const char *from, const char *to,
                                bool drop_target, const bson_t *dbv, shl_status_t *st);

/* shard_ddl_rename_register -- _shardsvrRenameCollection. */
void shard_ddl_rename_register(shl_command_registry_t *reg);

/*
 * The collMod coordinator (ddl_coll_mod_coordinator.c), MongoDB 7.0's CollModCoordinator:
 * the router sends {_shardsvrCollMod: <coll>, collModRequest: {<collMod's options>},
 * databaseVersion} to the primary shard; the coordinator
 * {_id: {namespace, operationType: "collMod"}, collModRequest, phase, sharded,
 * collectionUUID?, freezeMigrations, participants} holds the database in IX and the
 * collection in X; the same request joins, another conflicts (117). Phases:
 *   checkPreconditions (not checkpointed): sharded?, its UUID, the participants (the
 *     primary and the shards owning chunks);
 *   freezeMigrations: migrations of a sharded collection stop (unless a user stopped them);
 *   updateShards: _shardsvrCollModParticipant here first (a refusal ends the operation
 *     cleanly with its error), then on every participant (each checks the collection's UUID);
 *     migrations run again. The reply has the local collMod's fields
 *     (expireAfterSeconds_old/new, hidden_old/new).
 */
extern shl_coord_type_t shard_coll_mod_type;
int shard_ddl_coll_mod(shl_coord_service_t *svc, const char *ns, const bson_t *request,
                       const bson_t *dbv, bson_t *reply, shl_status_t *st);
/* shard_ddl_coll_mod_register -- _shardsvrCollMod, _shardsvrCollModParticipant. */
void shard_ddl_coll_mod_register(shl_command_registry_t *reg);

/*
 * The refineCollectionShardKey coordinator (ddl_refine_coordinator.c): the router sends
 * {_shardsvrRefineCollectionShardKey: <coll>, newShardKey, databaseVersion} to the primary
 * shard; the coordinator {_id: {namespace, operationType: "refineCollectionShardKey"},
 * newShardKey, phase, collectionUUID, freezeMigrations} holds the database in IX and the
 * collection in X. Phases: checkPreconditions (not checkpointed: sharded, else
 * NamespaceNotSharded (118); already this key: done), freezeMigrations, commit
 * (_configsvrRefineCollectionShardKey; a refusal resumes migrations and ends cleanly),
 * resumeMigrations.
 */
extern shl_coord_type_t shard_refine_type;
int shard_ddl_refine(shl_coord_service_t *svc, const char *ns, const bson_t *key,
                     const bson_t *dbv, shl_status_t *st);
/* shard_ddl_refine_register -- _shardsvrRefineCollectionShardKey. */
void shard_ddl_refine_register(shl_command_registry_t *reg);

/* The movePrimary coordinator (move_primary.c, MongoDB 7.0's MovePrimaryCoordinator:
 * clone, enterCriticalSection, commit, clean, exitCriticalSection), started by
 * _shardsvrMovePrimary; the database in X. Its kind's check argument is the shard state. */
extern shl_coord_type_t shard_move_primary_type;

/* shard_ddl_drop_indexes_register -- _shardsvrDropIndexes (ddl_drop_indexes.c): under the
 * collection's DDL locks, dropIndexes broadcast with shard versions; not a coordinator. */
void shard_ddl_drop_indexes_register(shl_command_registry_t *reg);

/* shard_sharding_events_register -- _shardsvrNotifyShardingEvent (sharding_events.c): writes
 * the no-op oplog entry change streams report as a shardCollection or
 * refineCollectionShardKey event (showExpandedEvents). */
void shard_sharding_events_register(shl_command_registry_t *reg);

/*
 * shard_ddl_notify_event --
 *     Coordinator 'c' tells its own shard's change streams that 'ns' was sharded ('type'
 *     "collectionSharded") or its key refined ("collectionKeyRefined"): 'entry' (may be NULL)
 *     the collection's config.collections entry (its uuid), 'desc' the event's
 *     operationDescription. At least once: a phase run again writes it again, as MongoDB's.
 */
int shard_ddl_notify_event(shl_coord_t *c, const char *type, const char *ns, const bson_t *entry,
                           const bson_t *desc, shl_status_t *st);

#endif
