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
#include "shard/ddl_lock.h"
#include "sharding/coordinator.h"

#define SHARD_DDL_COORD_COLL "system.sharding_ddl_coordinators"

/* The two coordinator types ("dropCollection", "dropDatabase"); their 'arg' is the lock
 * table set by shard_ddl_coords_setup. */
extern shl_coord_type_t shard_drop_coll_type;
extern shl_coord_type_t shard_drop_db_type;

/* shard_ddl_coords_setup -- give both types the process's DDL lock table (borrowed; must
 * outlive every coordinator). Call once before any coordinator runs. */
void shard_ddl_coords_setup(shard_ddl_locks_t *locks);

/*
 * shard_ddl_drop_collection --
 *     Run (or join) the dropCollection coordinator of 'ns' on 'svc' and wait for its end.
 *     Returns 0 (also when nothing existed) or the coordinator's error; InterruptedAtShutdown
 *     when the process stops first (the document stays and the next start finishes the drop).
 */
int shard_ddl_drop_collection(shl_coord_service_t *svc, const char *ns, shl_status_t *st);

/* shard_ddl_drop_database -- the same for the dropDatabase coordinator of 'db'. */
int shard_ddl_drop_database(shl_coord_service_t *svc, const char *db, shl_status_t *st);

/* shard_ddl_coords_register -- _shardsvrDropCollection, _shardsvrDropDatabase. */
void shard_ddl_coords_register(shl_command_registry_t *reg);

#endif
