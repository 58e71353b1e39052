/*
 * cmd_apply_ops.c -- applyOps: a list of CRUD operations in oplog form applied in one
 * storage transaction, so they commit (and survive a crash) all together or not at all.
 * MongoDB's config server commits chunk splits, merges and migrations this way; ours does
 * too (src/config). Supported ops: 'i' (insert; an existing _id is replaced, as MongoDB's
 * applyOps upserts inserts), 'u' (replacement by o2._id; 'b: true' upserts), 'd' (delete
 * by o._id; a missing document is fine) and 'n'. Collections must exist.
 */
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "bson/update_diff.h"

#include "db/db_private.h"
#include "storage/index.h"
#include "storage/write.h"

/* More operations than this are refused: the transaction stays bounded. */
#define APPLY_OPS_MAX 10000

typedef struct apply_op {
    char op;
    const char *ns;
    bson_t o, o2;
    bool has_o2;
    bool upsert;
    size_t coll; /* index into the sorted handles */
} apply_op_t;

typedef struct apply_ctx {
    shl_op_ctx_t *op;
    apply_op_t *ops;
    size_t nops;
    shl_coll_handle_t *handles; /* one per distinct namespace, sorted by name */
    size_t nhandles;
} apply_ctx_t;

static int
parse_op(const bson_t *entry, size_t i, apply_op_t *out, shl_status_t *st)
{
    bson_iter_t it;
    const char *op = NULL;
    int ret = 0;

    memset(out, 0, sizeof(*out));
    if (bson_iter_init_find(&it, entry, "op") && BSON_ITER_HOLDS_UTF8(&it)) {
        op = bson_iter_utf8(&it, NULL);
    }
    if (op == NULL || strlen(op) != 1 || strchr("iudn", op[0]) == NULL) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "applyOps[%zu]: 'op' must be one of i, u, d, n", i);
    }
    out->op = op[0];
    if (out->op == 'n') {
        goto done;
    }
    if (!bson_iter_init_find(&it, entry, "ns") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "applyOps[%zu]: 'ns' must be a string", i);
    }
    out->ns = bson_iter_utf8(&it, NULL);
    if (!shl_bson_get_subdoc(entry, "o", &out->o)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "applyOps[%zu]: 'o' must be an object", i);
    }
    out->has_o2 = shl_bson_get_subdoc(entry, "o2", &out->o2);
    out->upsert = bson_iter_init_find(&it, entry, "b") && bson_iter_as_bool(&it);
    if (out->op == 'u') {
        bson_iter_t first;
        if (!out->has_o2 || !bson_iter_init_find(&it, &out->o2, "_id")) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "applyOps[%zu]: an update needs o2._id", i);
        }
        bson_t diff;
        if (!shl_update_diff_of(&out->o, &diff) && bson_iter_init(&first, &out->o) &&
            shl_iter_next(&first) && shl_iter_key(&first)[0] == '$') {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "applyOps[%zu]: only replacement-style and $v:2 updates are supported", i);
        }
    } else if (!bson_iter_init_find(&it, &out->o, "_id")) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "applyOps[%zu]: 'o' needs an _id", i);
    }
done:
    return ret;
}

/* The transaction body: every op in order (re-runnable: no side effects outside txn). */
static int
apply_all(shl_storage_txn_t *txn, void *varg, shl_status_t *st)
{
    apply_ctx_t *a = varg;
    int ret = 0;

    for (size_t i = 0; i < a->nops; i++) {
        apply_op_t *o = &a->ops[i];
        const shl_collection_t *coll;
        bson_iter_t it;
        bson_t cur = BSON_INITIALIZER, diff;
        int64_t rid = 0;
        bool found = false;

        if (o->op == 'n') {
            bson_destroy(&cur);
            continue;
        }
        coll = a->handles[o->coll].coll;
        bson_iter_init_find(&it, o->op == 'u' ? &o->o2 : &o->o, "_id");
        bson_destroy(&cur);
        ret = shl_doc_find_by_id(txn, coll, bson_iter_value(&it), &cur, &rid, &found, st);
        if (ret == 0) {
            if (o->op == 'd') {
                ret = found ? shl_doc_delete(txn, coll, rid, &cur, NULL, st) : 0;
                if (ret == 0 && found) {
                    shl_db_sharding_observe_write(a->op, coll->ns, &cur, NULL);
                }
            } else if (found && o->op == 'u' && shl_update_diff_of(&o->o, &diff)) {
                /* A $v:2 update: the diff applied to the document. */
                bson_t post;
                if (!shl_update_diff_apply(&cur, &diff, &post)) {
                    ret = shl_status_set(st, SHL_CODE_BAD_VALUE,
                                         "applyOps[%zu]: malformed $v:2 update", i);
                } else {
                    shl_write_opts_t wo = {.describe_update = true};
                    ret = shl_doc_update(txn, coll, rid, &cur, &post, &wo, st);
                }
                if (ret == 0) {
                    shl_db_sharding_observe_write(a->op, coll->ns, &cur, &post);
                }
                bson_destroy(&post);
            } else if (found) {
                ret = shl_doc_update(txn, coll, rid, &cur, &o->o, NULL, st);
                if (ret == 0) {
                    shl_db_sharding_observe_write(a->op, coll->ns, &cur, &o->o);
                }
            } else if (o->op == 'u' && shl_update_diff_of(&o->o, &diff)) {
                ret = shl_status_set(st, SHL_CODE_NO_MATCHING_DOCUMENT,
                                     "applyOps[%zu]: update of a document that does not exist "
                                     "in %s",
                                     i, o->ns);
            } else if (o->op == 'u' && !o->upsert) {
                ret = shl_status_set(st, SHL_CODE_NO_MATCHING_DOCUMENT,
                                     "applyOps[%zu]: update of a document that does not exist "
                                     "in %s",
                                     i, o->ns);
            } else {
                ret = shl_doc_insert(txn, coll, &o->o, NULL, NULL, st);
                if (ret == 0) {
                    shl_db_sharding_observe_write(a->op, coll->ns, NULL, &o->o);
                }
            }
        }
        bson_destroy(&cur);
        SHL_ERR(ret);
    }
done:
    return ret;
}

static int
cmp_ns(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int
cmd_apply_ops(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    db_node_t *node = db_node(op);
    apply_ctx_t a = {0};
    const char **names = NULL;
    shl_write_concern_t wc;
    bson_iter_t it, arr;
    bson_t results;
    uint64_t ts = 0;
    size_t n = 0;
    int ret = 0;

    db_cmd_begin(op);
    SHL_ERR(db_write_concern_get(op, &wc, st));
    if (!bson_iter_init_find(&it, cmd, "applyOps") || !BSON_ITER_HOLDS_ARRAY(&it)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "ops has to be an array");
    }
    bson_iter_recurse(&it, &arr);
    while (shl_iter_next(&arr)) {
        n++;
    }
    if (n > APPLY_OPS_MAX) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "applyOps takes at most %d operations", APPLY_OPS_MAX);
    }
    a.ops = bson_malloc0((n + 1) * sizeof(apply_op_t));
    names = bson_malloc0((n + 1) * sizeof(char *));
    bson_iter_recurse(&it, &arr);
    while (shl_iter_next(&arr)) {
        const uint8_t *data;
        uint32_t len;
        bson_t entry;
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "applyOps entries must be objects");
        }
        bson_iter_document(&arr, &len, &data);
        bson_init_static(&entry, data, len);
        SHL_ERR(parse_op(&entry, a.nops, &a.ops[a.nops], st));
        a.nops++;
    }
    /* Lock each namespace once, in name order (the lock order of docs/design/locking.md). */
    for (size_t i = 0; i < a.nops; i++) {
        if (a.ops[i].op != 'n') {
            names[a.nhandles++] = a.ops[i].ns;
        }
    }
    qsort(names, a.nhandles, sizeof(char *), cmp_ns);
    {
        size_t k = 0;
        for (size_t i = 0; i < a.nhandles; i++) {
            if (k == 0 || strcmp(names[k - 1], names[i]) != 0) {
                names[k++] = names[i];
            }
        }
        a.nhandles = k;
    }
    a.handles = bson_malloc0((a.nhandles + 1) * sizeof(shl_coll_handle_t));
    for (size_t i = 0; i < a.nhandles; i++) {
        shl_ns_t ns;
        SHL_ERR(shl_ns_parse(&ns, names[i], st));
        SHL_ERR(db_sharding_check_no_filter(op, ns.full, SHL_DB_SHARD_WRITE, st));
        SHL_ERR(shl_storage_coll_acquire(node->eng, names[i], SHL_LOCK_SHARED, &a.handles[i], st));
        if (a.handles[i].coll == NULL) {
            SHL_FAIL(st, SHL_CODE_NAMESPACE_NOT_FOUND, "applyOps: namespace %s does not exist",
                     names[i]);
        }
    }
    for (size_t i = 0; i < a.nops; i++) {
        if (a.ops[i].op == 'n') {
            continue;
        }
        for (size_t k = 0; k < a.nhandles; k++) {
            if (strcmp(names[k], a.ops[i].ns) == 0) {
                a.ops[i].coll = k;
            }
        }
    }
    a.op = op;
    SHL_ERR(db_write_retry(op, node->eng, apply_all, &a, &ts, st));
    if (ts != 0) {
        db_op_note_write_ts(ts);
    }
    BSON_APPEND_INT32(reply, "applied", (int32_t)a.nops);
    BSON_APPEND_ARRAY_BEGIN(reply, "results", &results);
    for (size_t i = 0; i < a.nops; i++) {
        char key[16];
        const char *k;
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof(key));
        bson_append_bool(&results, k, -1, true);
    }
    bson_append_array_end(reply, &results);
    db_write_concern_wait(op, &wc, reply);
done:
    for (size_t i = 0; a.handles != NULL && i < a.nhandles; i++) {
        shl_storage_coll_release(&a.handles[i]);
    }
    bson_free(a.handles);
    bson_free(a.ops);
    bson_free(names);
    return ret;
}

static const shl_command_t k_apply_ops = {"applyOps",
                                          {NULL},
                                          cmd_apply_ops,
                                          SHL_CMD_ADMIN_ONLY | SHL_CMD_NEEDS_PRIMARY |
                                              SHL_CMD_WRITE,
                                          "apply CRUD operations in oplog form atomically"};

void
db_register_apply_ops_command(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &k_apply_ops);
}
