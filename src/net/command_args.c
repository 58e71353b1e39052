/*
 * command_args.c -- see command_args.h.
 */
#include "bson/bson_iter.h"
#include "net/command_args.h"

#include "bson/bson_util.h"
#include "net/op_context.h"

#include <pthread.h>
#include <string.h>

/* MongoDB's generic command arguments, grouped by first byte (generic_index relies on it). */
static const char *const generic_args[] = {"$db",
                                           "$readPreference",
                                           "$clusterTime",
                                           "$configTime",
                                           "$topologyTime",
                                           "$audit",
                                           "$client",
                                           "$configServerState",
                                           "$queryOptions",
                                           "$tenant",
                                           "autocommit",
                                           "apiVersion",
                                           "apiStrict",
                                           "apiDeprecationErrors",
                                           "allowImplicitCollectionCreation",
                                           "comment",
                                           "clientOperationKey",
                                           "coordinator",
                                           "databaseVersion",
                                           "expectPrefix",
                                           "help",
                                           "lsid",
                                           "maxTimeMS",
                                           "maxTimeMSOpOnly",
                                           "mayBypassWriteBlocking",
                                           "readConcern",
                                           "readPreference",
                                           "startTransaction",
                                           "stmtId",
                                           "stmtIds",
                                           "shardVersion",
                                           "startOrContinueTransaction",
                                           "txnNumber",
                                           "txnRetryCounter",
                                           "versionContext",
                                           "writeConcern",
                                           NULL};

/* Where each first byte's names start in generic_args, and how many there are. */
static uint8_t generic_start[256], generic_count[256];
static pthread_once_t generic_once = PTHREAD_ONCE_INIT;

static void
generic_index(void)
{
    for (uint8_t i = 0; generic_args[i] != NULL; i++) {
        uint8_t c = (uint8_t)generic_args[i][0];
        if (generic_count[c] == 0) {
            generic_start[c] = i;
        }
        /* Grouped: a first byte's names are contiguous. */
        SHL_INVARIANT(generic_start[c] + generic_count[c] == i);
        generic_count[c]++;
    }
}

bool
shl_cmd_is_generic_arg(const char *field)
{
    /* Per field of every command: only the names sharing its first byte are compared. */
    uint8_t c = (uint8_t)field[0];
    bool found = false;

    pthread_once(&generic_once, generic_index);
    for (uint8_t i = generic_start[c]; !found && i < generic_start[c] + generic_count[c]; i++) {
        found = strcmp(generic_args[i], field) == 0;
    }
    return found;
}

uint32_t
shl_cmd_fields_present(const bson_t *cmd, const char *const *names)
{
    uint32_t mask = 0;
    bson_iter_t it;

    if (bson_iter_init(&it, cmd)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            for (uint32_t i = 0; i < 32 && names[i] != NULL; i++) {
                if (names[i][0] == k[0] && strcmp(names[i], k) == 0) {
                    mask |= 1u << i;
                    break;
                }
            }
        }
    }
    return mask;
}

uint32_t
shl_cmd_fields_find(const bson_t *cmd, const char *const *names, shl_cmd_field_t *found)
{
    uint32_t mask = 0;
    bson_iter_t it;

    if (bson_iter_init(&it, cmd)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            for (uint32_t i = 0; i < 32 && names[i] != NULL; i++) {
                if (names[i][0] == k[0] && strcmp(names[i], k) == 0) {
                    if ((mask & (1u << i)) == 0) {
                        found[i].it = it;
                        mask |= 1u << i;
                    }
                    break;
                }
            }
        }
    }
    return mask;
}

const char *
shl_cmd_name(const bson_t *cmd)
{
    bson_iter_t it;
    return bson_iter_init(&it, cmd) && shl_iter_next(&it) ? shl_iter_key(&it) : "";
}

int
shl_cmd_check_fields(const bson_t *cmd, const char *const *allowed, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bool first = true;

    if (!bson_iter_init(&it, cmd)) {
        SHL_FAIL(st, SHL_CODE_INVALID_BSON, "invalid command");
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bool ok = first || shl_cmd_is_generic_arg(k);
        first = false;
        for (int i = 0; !ok && allowed != NULL && allowed[i] != NULL; i++) {
            ok = strcmp(allowed[i], k) == 0;
        }
        if (!ok) {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD, "BSON field '%s.%s' is an unknown field.",
                     shl_cmd_name(cmd), k);
        }
    }
done:
    return ret;
}

static int
wrong_type(const bson_t *cmd, const bson_iter_t *it, const char *expected, shl_status_t *st)
{
    return shl_status_set(
        st, SHL_CODE_TYPE_MISMATCH, "BSON field '%s.%s' is the wrong type '%s', expected type '%s'",
        shl_cmd_name(cmd), shl_iter_key(it), shl_bson_type_name(shl_iter_type(it)), expected);
}

int
shl_cmd_field_bool(const bson_t *cmd, const bson_iter_t *it, bool *out, shl_status_t *st)
{
    /* MongoDB's IDL accepts numbers for bool ("safeBool"). */
    if (!BSON_ITER_HOLDS_BOOL(it) && !BSON_ITER_HOLDS_NUMBER(it)) {
        return wrong_type(cmd, it, "bool", st);
    }
    *out = bson_iter_as_bool(it);
    return 0;
}

int
shl_cmd_get_bool(const bson_t *cmd, const char *field, bool *out, shl_status_t *st)
{
    bson_iter_t it;
    if (!shl_bson_iter_find_key(&it, cmd, field)) {
        return 0;
    }
    return shl_cmd_field_bool(cmd, &it, out, st);
}

int
shl_cmd_get_int64(const bson_t *cmd, const char *field, int64_t *out, bool *found, shl_status_t *st)
{
    bson_iter_t it;
    if (found != NULL) {
        *found = false;
    }
    if (!shl_bson_iter_find_key(&it, cmd, field)) {
        return 0;
    }
    if (!BSON_ITER_HOLDS_NUMBER(&it)) {
        return wrong_type(cmd, &it, "long", st);
    }
    if (BSON_ITER_HOLDS_DOUBLE(&it)) {
        double d = bson_iter_double(&it);
        if (d != d || d >= 9.2233720368547758e18 || d < -9.2233720368547758e18) {
            return shl_status_set(st, SHL_CODE_BAD_VALUE,
                                  "BSON field '%s.%s' has a value out of range", shl_cmd_name(cmd),
                                  field);
        }
    }
    *out = bson_iter_as_int64(&it);
    if (found != NULL) {
        *found = true;
    }
    return 0;
}

int
shl_cmd_get_string(const bson_t *cmd, const char *field, const char **out, bool *found,
                   shl_status_t *st)
{
    bson_iter_t it;
    if (found != NULL) {
        *found = false;
    }
    if (!shl_bson_iter_find_key(&it, cmd, field)) {
        return 0;
    }
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        return wrong_type(cmd, &it, "string", st);
    }
    *out = bson_iter_utf8(&it, NULL);
    if (found != NULL) {
        *found = true;
    }
    return 0;
}

static int
get_container(const bson_t *cmd, const char *field, bson_t *out, bool *found, bool array,
              shl_status_t *st)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    if (found != NULL) {
        *found = false;
    }
    if (!shl_bson_iter_find_key(&it, cmd, field)) {
        return 0;
    }
    if (array ? !BSON_ITER_HOLDS_ARRAY(&it) : !BSON_ITER_HOLDS_DOCUMENT(&it)) {
        return wrong_type(cmd, &it, array ? "array" : "object", st);
    }
    if (array) {
        bson_iter_array(&it, &len, &data);
    } else {
        bson_iter_document(&it, &len, &data);
    }
    if (!bson_init_static(out, data, len)) {
        return shl_status_set(st, SHL_CODE_INVALID_BSON, "invalid BSON in field %s", field);
    }
    if (found != NULL) {
        *found = true;
    }
    return 0;
}

int
shl_cmd_field_doc(const bson_t *cmd, const bson_iter_t *it, bson_t *out, shl_status_t *st)
{
    const uint8_t *data;
    uint32_t len;

    if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        return wrong_type(cmd, it, "object", st);
    }
    bson_iter_document(it, &len, &data);
    if (!bson_init_static(out, data, len)) {
        return shl_status_set(st, SHL_CODE_INVALID_BSON, "invalid BSON in field %s",
                              shl_iter_key(it));
    }
    return 0;
}

int
shl_cmd_get_doc(const bson_t *cmd, const char *field, bson_t *out, bool *found, shl_status_t *st)
{
    return get_container(cmd, field, out, found, false, st);
}

int
shl_cmd_get_array(const bson_t *cmd, const char *field, bson_t *out, bool *found, shl_status_t *st)
{
    return get_container(cmd, field, out, found, true, st);
}

int
shl_cmd_collection_arg(const bson_t *cmd, const char **out, shl_status_t *st)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it)) {
        return shl_status_set(st, SHL_CODE_INVALID_NAMESPACE, "collection name has invalid type %s",
                              shl_bson_type_name(shl_iter_type(&it)));
    }
    *out = bson_iter_utf8(&it, NULL);
    if ((*out)[0] == '\0') {
        return shl_status_set(st, SHL_CODE_INVALID_NAMESPACE, "Invalid namespace specified");
    }
    return 0;
}

static void
append_ids(bson_t *reply, const char *key, const int64_t *ids, size_t n)
{
    bson_t arr;
    char k[16];
    const char *kp;

    BSON_APPEND_ARRAY_BEGIN(reply, key, &arr);
    for (size_t i = 0; i < n; i++) {
        bson_uint32_to_string((uint32_t)i, &kp, k, sizeof(k));
        bson_append_int64(&arr, kp, -1, ids[i]);
    }
    bson_append_array_end(reply, &arr);
}

int
shl_cmd_kill_cursors(const bson_t *cmd, bool (*kill)(void *arg, int64_t id), void *arg,
                     bson_t *reply, shl_status_t *st)
{
    static const char *const fields[] = {"cursors", NULL};
    bson_t ids;
    bool found;
    bson_iter_t it;
    int64_t *killed = NULL, *missing = NULL;
    size_t nk = 0, nm = 0, cap;
    int ret = 0;

    SHL_ERR(shl_cmd_check_fields(cmd, fields, st));
    SHL_ERR(shl_cmd_get_array(cmd, "cursors", &ids, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'killCursors.cursors' is missing but a required field");
    }
    cap = bson_count_keys(&ids) + 1;
    killed = bson_malloc(cap * sizeof(int64_t));
    missing = bson_malloc(cap * sizeof(int64_t));
    bson_iter_init(&it, &ids);
    while (shl_iter_next(&it)) {
        int64_t id;
        if (!BSON_ITER_HOLDS_INT64(&it)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'killCursors.cursors.%s' is the wrong type '%s', expected "
                     "type 'long'",
                     shl_iter_key(&it), shl_bson_type_name(shl_iter_type(&it)));
        }
        id = bson_iter_int64(&it);
        if (kill(arg, id)) {
            killed[nk++] = id;
        } else {
            missing[nm++] = id;
        }
    }
    append_ids(reply, "cursorsKilled", killed, nk);
    append_ids(reply, "cursorsNotFound", missing, nm);
    append_ids(reply, "cursorsAlive", NULL, 0);
    append_ids(reply, "cursorsUnknown", NULL, 0);
done:
    bson_free(killed);
    bson_free(missing);
    return ret;
}

int
shl_cmd_kill_cursors_owned(const struct shl_op_ctx *op, const char *ns, const bson_t *cmd,
                           bool (*kill)(void *arg, int64_t id),
                           bool (*owner)(void *arg, int64_t id, uint8_t *out), void *arg,
                           bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, ids;
    uint8_t who[SHL_LSID_UID_LEN];

    if (!shl_op_acts_for_all_users(op) && bson_iter_init_find(&it, cmd, "cursors") &&
        BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &ids)) {
        while (bson_iter_next(&ids)) {
            if (BSON_ITER_HOLDS_INT64(&ids) && owner(arg, bson_iter_int64(&ids), who) &&
                !shl_op_may_use_owned(op, who)) {
                SHL_FAIL(st, SHL_CODE_UNAUTHORIZED, "not authorized to kill cursor on %s", ns);
            }
        }
    }
    ret = shl_cmd_kill_cursors(cmd, kill, arg, reply, st);
done:
    return ret;
}
