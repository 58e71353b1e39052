/*
 * ddl_rename_coordinator.c -- the renameCollection coordinator on the database's primary
 * shard (ddl_coordinators.h; seeds/000 "Sharding DDL Coordinator"; MongoDB 7.0's
 * RenameCollectionCoordinator) for a rename whose source or target is sharded, and the
 * _shardsvrRenameCollection command that starts or joins it. It replaced the config
 * server's own rename coordinator (its document collection and recovery thread).
 */
#include <string.h>

#include "base/log.h"
#include "base/namespace.h"
#include "net/command_args.h"
#include "shard/ddl_coordinators.h"
#include "shard/shard_private.h"

#define OP_RENAME "renameCollection"

/* ------------------------------------------------------------------------- helpers */

/* The rename's two namespaces (_id.namespace and "to"). */
static int
doc_names(const bson_t *doc, shl_ns_t *from, shl_ns_t *to, shl_status_t *st)
{
    char ns[SHL_NS_MAX + 1];
    bson_iter_t it;
    int ret = 0;

    shard_ddl_doc_namespace(doc, ns, sizeof ns);
    SHL_ERR(shl_ns_parse(from, ns, st));
    if (!bson_iter_init_find(&it, doc, "to") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "rename coordinator document without 'to'");
    }
    SHL_ERR(shl_ns_parse(to, bson_iter_utf8(&it, NULL), st));
done:
    return ret;
}

/* Append doc's 'field' (if present) to 'cmd' as 'as'. */
static void
copy_field(bson_t *cmd, const char *as, const bson_t *doc, const char *field)
{
    bson_iter_t it;

    if (bson_iter_init_find(&it, doc, field)) {
        bson_append_iter(cmd, as, -1, &it);
    }
}

/* Whether 'coll' exists on 'target' ('db'), and its info.uuid copied into 'uuid' (a
 * document {uuid: <binary>} or empty). */
static int
remote_coll(shl_coord_t *c, const shl_remote_target_t *target, const char *db, const char *coll,
            bool *exists, bson_t *uuid, shl_status_t *st)
{
    bson_t cmd = BSON_INITIALIZER, filter, reply = BSON_INITIALIZER;
    bson_iter_t it;
    int ret = 0;

    *exists = false;
    bson_reinit(uuid);
    BSON_APPEND_INT32(&cmd, "listCollections", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    BSON_APPEND_UTF8(&filter, "name", coll);
    bson_append_document_end(&cmd, &filter);
    bson_destroy(&reply);
    SHL_ERR(
        shl_remote_run(shl_coord_remote(c), target, db, &cmd, &shard_ddl_read_opts, &reply, st));
    if (bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch.0", &it)) {
        bson_iter_t u;
        *exists = true;
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &u) &&
            bson_iter_find_descendant(&u, "info.uuid", &u)) {
            bson_append_iter(uuid, "uuid", -1, &u);
        }
    }
done:
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return ret;
}

static bool
same_uuid(const bson_t *a, const bson_t *b)
{
    return bson_equal(a, b);
}

/* ----------------------------------------------------------------------- the phases */

/*
 * checkPreconditions (not checkpointed; any error ends the rename with nothing done): the
 * source exists; a sharded target needs dropTarget; on every shard an unsharded target needs
 * dropTarget, a copy of the source has the source's UUID and no migration of either name
 * runs. Learns the source's UUID, whether it is sharded, the sharded target's UUID and the
 * participants (every shard). With nothing sharded (any more) the primary renames locally.
 */
static int
phase_check(shl_coord_t *c, shl_status_t *st)
{
    shl_remote_target_t self = shl_remote_target_self();
    shl_ns_t from, to;
    bson_t filter = BSON_INITIALIZER, doc = BSON_INITIALIZER, uuid = BSON_INITIALIZER;
    bson_t other = BSON_INITIALIZER, cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    bson_t **src = NULL, **dst = NULL, **shards = NULL;
    size_t nsrc = 0, ndst = 0, nshards = 0;
    bool drop_target = shard_ddl_doc_bool(shl_coord_doc(c), "dropTarget"), exists = false;
    char **ids = bson_malloc0(sizeof(char *));
    size_t nids = 0;
    bson_iter_t it;
    int ret = 0;

    SHL_ERR(doc_names(shl_coord_doc(c), &from, &to, st));
    BSON_APPEND_UTF8(&filter, "_id", from.full);
    SHL_ERR(shard_ddl_config_find(c, "collections", &filter, &src, &nsrc, st));
    bson_reinit(&filter);
    BSON_APPEND_UTF8(&filter, "_id", to.full);
    SHL_ERR(shard_ddl_config_find(c, "collections", &filter, &dst, &ndst, st));
    if (nsrc > 0 && bson_iter_init_find(&it, src[0], "uuid")) {
        bson_append_iter(&uuid, "uuid", -1, &it);
    } else {
        SHL_ERR(remote_coll(c, &self, from.db, from.coll, &exists, &uuid, st));
        if (!exists) {
            SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "Source collection %s does not exist",
                     from.full);
        }
    }
    if (nsrc == 0 && ndst == 0) {
        /* Nothing sharded (any more): the primary renames, as for an unsharded collection. */
        BSON_APPEND_UTF8(&cmd, "renameCollection", from.full);
        BSON_APPEND_UTF8(&cmd, "to", to.full);
        BSON_APPEND_BOOL(&cmd, "dropTarget", drop_target);
        bson_destroy(&reply);
        SHL_ERR(shl_remote_run(shl_coord_remote(c), &self, "admin", &cmd, &shard_ddl_read_opts,
                               &reply, st));
        shl_coord_finish(c);
        goto done;
    }
    if (ndst > 0 && !drop_target) {
        SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS,
                 "Sharded target collection %s exists but dropTarget is not set", to.full);
    }
    bson_reinit(&filter);
    SHL_ERR(shard_ddl_config_find(c, "shards", &filter, &shards, &nshards, st));
    for (size_t k = 0; k < nshards; k++) {
        shl_remote_target_t t;
        const char *id;

        if (!bson_iter_init_find(&it, shards[k], "_id") || !BSON_ITER_HOLDS_UTF8(&it)) {
            continue;
        }
        id = bson_iter_utf8(&it, NULL);
        t = shl_remote_target_shard(id);
        if (ndst == 0 && !drop_target) {
            SHL_ERR(remote_coll(c, &t, to.db, to.coll, &exists, &other, st));
            if (exists) {
                SHL_FAIL(st, SHL_CODE_NAMESPACE_EXISTS, "target namespace exists");
            }
        }
        SHL_ERR(remote_coll(c, &t, from.db, from.coll, &exists, &other, st));
        if (exists && !bson_empty(&other) && !same_uuid(&other, &uuid)) {
            SHL_FAIL(st, SHL_CODE_COLLECTION_UUID_MISMATCH,
                     "Collection %s on shard %s has another UUID than the one being renamed",
                     from.full, id);
        }
        /* No migration of either name runs there (the participant's check). */
        bson_reinit(&cmd);
        BSON_APPEND_UTF8(&cmd, "_shardsvrRenameCollectionParticipant", from.coll);
        BSON_APPEND_UTF8(&cmd, "to", to.full);
        BSON_APPEND_BOOL(&cmd, "checkOnly", true);
        bson_destroy(&reply);
        SHL_ERR(shl_remote_run(shl_coord_remote(c), &t, from.db, &cmd, &shard_ddl_read_opts, &reply,
                               st));
        ids = bson_realloc(ids, sizeof(char *) * (nids + 2));
        ids[nids++] = bson_strdup(id);
        ids[nids] = NULL;
    }
    bson_copy_to_excluding_noinit(shl_coord_doc(c), &doc, "sourceUUID", "sourceSharded",
                                  "targetUUID", NULL);
    bson_iter_init_find(&it, &uuid, "uuid");
    bson_append_iter(&doc, "sourceUUID", -1, &it);
    BSON_APPEND_BOOL(&doc, "sourceSharded", nsrc > 0);
    if (ndst > 0 && bson_iter_init_find(&it, dst[0], "uuid")) {
        bson_append_iter(&doc, "targetUUID", -1, &it);
    }
    shl_coord_doc_set(c, &doc);
    shard_ddl_set_participants(c, ids, nids);
done:
    if (ret != 0) {
        shl_coord_abort(c); /* nothing was done: the rename did not start */
    }
    bson_strfreev(ids);
    shard_ddl_docs_free(src);
    shard_ddl_docs_free(dst);
    shard_ddl_docs_free(shards);
    bson_destroy(&filter);
    bson_destroy(&doc);
    bson_destroy(&uuid);
    bson_destroy(&other);
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ret;
}

/* freezeMigrations: no chunk of either sharded collection moves from here on. */
static int
phase_freeze(shl_coord_t *c, shl_status_t *st)
{
    const bson_t *doc = shl_coord_doc(c);
    shl_ns_t from, to;
    int ret = 0;

    SHL_ERR(doc_names(doc, &from, &to, st));
    if (shard_ddl_doc_bool(doc, "sourceSharded")) {
        SHL_ERR(shard_ddl_set_allow_migrations(c, from.full, doc, "sourceUUID", false, st));
    }
    if (bson_has_field(doc, "targetUUID")) {
        SHL_ERR(shard_ddl_set_allow_migrations(c, to.full, doc, "targetUUID", false, st));
    }
done:
    return ret;
}

/* blockCrudAndRename: a sharded target's metadata goes (dropTarget); every shard blocks both
 * names and renames its copy (dropping its copy of the target). */
static int
phase_block_and_rename(shl_coord_t *c, shl_status_t *st)
{
    const bson_t *doc = shl_coord_doc(c);
    shl_ns_t from, to;
    bson_t cmd = BSON_INITIALIZER, wc;
    int ret = 0;

    SHL_ERR(doc_names(doc, &from, &to, st));
    if (bson_has_field(doc, "targetUUID")) {
        /* The sharded target's metadata, then its copies (by UUID: after a crash the name
         * may already hold the renamed collection, which stays). */
        BSON_APPEND_UTF8(&cmd, "_configsvrCommitDropCollection", to.full);
        copy_field(&cmd, "collectionUUID", doc, "targetUUID");
        SHL_ERR(shard_ddl_to_config(c, &cmd, st));
        bson_reinit(&cmd);
        BSON_APPEND_UTF8(&cmd, "_shardsvrDropCollectionParticipant", to.coll);
        copy_field(&cmd, "collectionUUID", doc, "targetUUID");
        SHL_ERR(shard_ddl_to_participants(c, to.db, &cmd, st));
        bson_reinit(&cmd);
    }
    BSON_APPEND_UTF8(&cmd, "_shardsvrRenameCollectionParticipant", from.coll);
    BSON_APPEND_UTF8(&cmd, "to", to.full);
    BSON_APPEND_BOOL(&cmd, "dropTarget", shard_ddl_doc_bool(doc, "dropTarget"));
    copy_field(&cmd, "sourceUUID", doc, "sourceUUID");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "writeConcern", &wc);
    BSON_APPEND_UTF8(&wc, "w", "majority");
    bson_append_document_end(&cmd, &wc);
    SHL_ERR(shard_ddl_to_participants(c, from.db, &cmd, st));
done:
    bson_destroy(&cmd);
    return ret;
}

/* renameMetadata: the catalog entry moves to the new name (a sharded source). */
static int
phase_rename_metadata(shl_coord_t *c, shl_status_t *st)
{
    const bson_t *doc = shl_coord_doc(c);
    shl_ns_t from, to;
    bson_t cmd = BSON_INITIALIZER;
    int ret = 0;

    SHL_ERR(doc_names(doc, &from, &to, st));
    if (shard_ddl_doc_bool(doc, "sourceSharded")) {
        BSON_APPEND_UTF8(&cmd, "_configsvrRenameCollectionMetadata", from.full);
        BSON_APPEND_UTF8(&cmd, "to", to.full);
        copy_field(&cmd, "sourceUUID", doc, "sourceUUID");
        SHL_ERR(shard_ddl_to_config(c, &cmd, st));
    }
done:
    bson_destroy(&cmd);
    return ret;
}

/* unblockCRUD: every shard refreshes both names and leaves their critical sections. */
static int
phase_unblock(shl_coord_t *c, shl_status_t *st)
{
    const bson_t *doc = shl_coord_doc(c);
    shl_ns_t from, to;
    bson_t cmd = BSON_INITIALIZER;
    int ret = 0;

    SHL_ERR(doc_names(doc, &from, &to, st));
    BSON_APPEND_UTF8(&cmd, "_shardsvrRenameCollectionUnblockParticipant", from.coll);
    BSON_APPEND_UTF8(&cmd, "to", to.full);
    SHL_ERR(shard_ddl_to_participants(c, from.db, &cmd, st));
    SHL_LOG_INFO(SHARDING, 4170220, "renamed collection", "from", BCON_UTF8(from.full), "to",
                 BCON_UTF8(to.full));
done:
    bson_destroy(&cmd);
    return ret;
}

static const shl_coord_phase_t rename_phases[] = {
    {"checkPreconditions", phase_check, false},
    {"freezeMigrations", phase_freeze, true},
    {"blockCrudAndRename", phase_block_and_rename, true},
    {"renameMetadata", phase_rename_metadata, true},
    {"unblockCRUD", phase_unblock, true},
};

/* The same rename: the same target and dropTarget (the running one learnt more). Both
 * names are locked in X. */
static const char *const rename_same[] = {"to", "dropTarget", NULL};
static shard_ddl_kind_t rename_kind = {
    .op = OP_RENAME, .db_mode = SHARD_DDL_IX, .also = "to", .same_fields = rename_same};

SHARD_DDL_DEFINE_TYPE(shard_rename_coll_type, "RenameCollectionCoordinator", rename_phases,
                      rename_kind);

/* ---------------------------------------------------------------------- entry points */

int
shard_ddl_rename_collection(shl_coord_service_t *svc, const char *from, const char *to,
                            bool drop_target, const bson_t *dbv, shl_status_t *st)
{
    bson_t fields = BSON_INITIALIZER;
    int ret;

    BSON_APPEND_UTF8(&fields, "to", to);
    BSON_APPEND_BOOL(&fields, "dropTarget", drop_target);
    ret = shard_ddl_start(svc, &shard_rename_coll_type, from, &fields, dbv, NULL, st);
    bson_destroy(&fields);
    return ret;
}

static int
cmd_rename_collection(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    shard_state_t *s = shard_state(op);
    const char *coll = NULL, *to_s = NULL;
    bool found = false, drop_target = false;
    bson_t dbv;
    shl_ns_t from, to;
    int ret = 0;

    (void)reply;
    SHL_ERR(shl_cmd_collection_arg(cmd, &coll, st));
    SHL_ERR(shl_ns_make(&from, op->db, coll, st));
    SHL_ERR(shl_cmd_get_string(cmd, "to", &to_s, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '_shardsvrRenameCollection.to' is missing but a required field");
    }
    if (shl_ns_parse(&to, to_s, st) != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid target namespace: %s", to_s);
    }
    SHL_ERR(shl_cmd_get_bool(cmd, "dropTarget", &drop_target, st));
    if (strcmp(from.db, to.db) != 0) {
        SHL_FAIL(st, SHL_CODE_COMMAND_FAILED,
                 "Source and destination collections must be on the same database.");
    }
    if (strcmp(from.full, to.full) == 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION, "Can't rename a collection to itself");
    }
    if (shl_ns_is_system(&to) || shl_ns_is_system(&from)) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OPERATION,
                 "Can't rename a sharded collection to or from a system namespace (%s -> %s)",
                 from.full, to.full);
    }
    SHL_ERR(shard_ddl_check_primary(s, op, from.full, st));
    SHL_ERR(shard_ddl_rename_collection(s->coords, from.full, to.full, drop_target,
                                        shard_ddl_cmd_dbv(cmd, &dbv), st));
done:
    return ret;
}

static const shl_command_t rename_coord_cmd = {
    .name = "_shardsvrRenameCollection",
    .run = cmd_rename_collection,
    .flags = SHL_CMD_INTERNAL | SHL_CMD_NEEDS_PRIMARY,
    .help = "internal: rename a collection of this primary shard's database everywhere"};

void
shard_ddl_rename_register(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &rename_coord_cmd);
}
