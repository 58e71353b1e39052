/*
 * op_context.c -- generic command arguments and interruption (see op_context.h).
 */
#include "bson/bson_iter.h"
#include "net/op_context.h"

#include <endian.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/options.h"
#include "base/str.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "net/server.h"

/* The generic arguments the op context reads; everything else is the command's. */
typedef enum {
    F_OTHER,
    F_LSID,
    F_TXN_NUMBER,
    F_AUTOCOMMIT,
    F_START_TXN,
    F_READ_CONCERN,
    F_WRITE_CONCERN,
    F_SHARD_VERSION,
    F_DATABASE_VERSION,
    F_CLUSTER_TIME,
    F_MAX_TIME_MS,
    F_CLIENT_OP_KEY,
} op_field_t;

/* Which of them the key of 'len' bytes is: one compare at most (this runs per field). */
static op_field_t
op_field(const char *k, size_t len)
{
    static const struct {
        const char *name;
        size_t len;
        op_field_t f;
    } fields[] = {
        {"lsid", 4, F_LSID},
        {"txnNumber", 9, F_TXN_NUMBER},
        {"autocommit", 10, F_AUTOCOMMIT},
        {"startTransaction", 16, F_START_TXN},
        {"readConcern", 11, F_READ_CONCERN},
        {"writeConcern", 12, F_WRITE_CONCERN},
        {"shardVersion", 12, F_SHARD_VERSION},
        {"databaseVersion", 15, F_DATABASE_VERSION},
        {"$clusterTime", 12, F_CLUSTER_TIME},
        {"maxTimeMS", 9, F_MAX_TIME_MS},
        {"clientOperationKey", 18, F_CLIENT_OP_KEY},
    };
    op_field_t f = F_OTHER;
    for (size_t i = 0; f == F_OTHER && i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (fields[i].len == len && fields[i].name[0] == k[0] &&
            memcmp(fields[i].name, k, len) == 0) {
            f = fields[i].f;
        }
    }
    return f;
}

/* Whether access control is on (--auth or --keyFile). */
static bool
access_control(void)
{
    return shl_opt_bool(SHL_OPT_auth) || shl_opt_str(SHL_OPT_keyFile)[0] != '\0' ||
           strcmp(shl_opt_str(SHL_OPT_clusterAuthMode), "x509") == 0;
}

/*
 * The request's lsid belongs to its connection's user, as MongoDB's: without a uid the
 * user's digest is filled in; a uid is taken as given from __system (a router acting for its
 * client), from an operation started internally and while access control is off, and must
 * otherwise be the user's own.
 */
static int
lsid_owner(shl_op_ctx_t *op, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    if (op->conn == NULL || op->conn->system_user) {
        goto done;
    }
    if (!shl_bson_iter_find_key(&it, &op->lsid, "uid")) {
        memcpy(op->lsid_key.uid, op->conn->user_digest, SHL_LSID_UID_LEN);
    } else if (access_control() &&
               memcmp(op->lsid_key.uid, op->conn->user_digest, SHL_LSID_UID_LEN) != 0) {
        SHL_FAIL(st, SHL_CODE_UNAUTHORIZED, "Unauthorized to set user digest in LogicalSessionId");
    }
done:
    return ret;
}

int
shl_op_ctx_init(shl_op_ctx_t *op, shl_service_ctx_t *svc, struct shl_conn *conn, const bson_t *body,
                const char *db, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;

    memset(op, 0, sizeof(*op));
    op->svc = svc;
    op->conn = conn;
    op->body = body;
    op->start_mono_us = shl_clock_mono_us();
    shl_str_copy(op->db, sizeof(op->db), db);
    if (!bson_iter_init(&it, body)) {
        SHL_FAIL(st, SHL_CODE_INVALID_BSON, "invalid command document");
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        op_field_t f = op_field(k, shl_iter_key_len(&it));
        if (f == F_OTHER) {
            continue;
        }
        if ((f == F_LSID || f == F_TXN_NUMBER) &&
            (BSON_ITER_HOLDS_NULL(&it) || BSON_ITER_HOLDS_UNDEFINED(&it))) {
            continue; /* MongoDB's parser takes a null session field as an absent one */
        }
        if (f == F_LSID) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !shl_bson_iter_view(&it, &op->lsid)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'OperationSessionInfo.lsid' is the wrong type '%s', "
                         "expected type 'object'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            SHL_ERR(shl_lsid_parse(&op->lsid, &op->lsid_key, st));
            SHL_ERR(lsid_owner(op, st));
            op->has_lsid = true;
        } else if (f == F_TXN_NUMBER) {
            if (!BSON_ITER_HOLDS_INT64(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'OperationSessionInfo.txnNumber' is the wrong type '%s', "
                         "expected type 'long'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            op->has_txn_number = true;
            op->txn_number = bson_iter_as_int64(&it);
        } else if (f == F_AUTOCOMMIT) {
            if (!BSON_ITER_HOLDS_BOOL(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "autocommit must be a boolean");
            }
            op->has_autocommit = true;
            op->autocommit = bson_iter_bool(&it);
        } else if (f == F_START_TXN) {
            if (!BSON_ITER_HOLDS_BOOL(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "startTransaction must be a boolean");
            }
            op->start_transaction = bson_iter_bool(&it);
        } else if (f == F_READ_CONCERN) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !shl_bson_iter_view(&it, &op->read_concern)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "readConcern must be an object");
            }
            op->has_read_concern = true;
        } else if (f == F_WRITE_CONCERN) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !shl_bson_iter_view(&it, &op->write_concern)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "writeConcern must be an object");
            }
            op->has_write_concern = true;
        } else if (f == F_SHARD_VERSION) {
            if (!shl_bson_iter_view(&it, &op->shard_version)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "shardVersion must be an object");
            }
            op->has_shard_version = true;
        } else if (f == F_DATABASE_VERSION) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !shl_bson_iter_view(&it, &op->database_version)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "databaseVersion must be an object");
            }
            op->has_database_version = true;
        } else if (f == F_CLUSTER_TIME) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !shl_bson_iter_view(&it, &op->cluster_time)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "$clusterTime must be an object");
            }
            op->has_cluster_time = true;
        } else if (f == F_MAX_TIME_MS) {
            int64_t ms;
            if (!BSON_ITER_HOLDS_NUMBER(&it)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "maxTimeMS must be a number");
            }
            ms = bson_iter_as_int64(&it);
            if (ms < 0 || (BSON_ITER_HOLDS_DOUBLE(&it) && bson_iter_double(&it) != (double)ms)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "%s value for maxTimeMS is out of range [0, 2147483647]", k);
            }
            if (ms > INT32_MAX) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "maxTimeMS value is out of range");
            }
            if (ms > 0) {
                op->deadline_us = op->start_mono_us + ms * 1000;
            }
        } else if (f == F_CLIENT_OP_KEY) {
            bson_subtype_t sub;
            uint32_t len = 0;
            const uint8_t *data = NULL;
            if (BSON_ITER_HOLDS_BINARY(&it)) {
                bson_iter_binary(&it, &sub, &len, &data);
            }
            if (data == NULL || sub != BSON_SUBTYPE_UUID || len != SHL_OP_KEY_LEN) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field 'clientOperationKey' is the wrong type, expected a UUID");
            }
            memcpy(op->op_key, data, SHL_OP_KEY_LEN);
            op->has_op_key = true;
        }
    }
done:
    return ret;
}

int
shl_op_check_interrupt(shl_op_ctx_t *op, shl_status_t *st)
{
    int ret = 0;
    if (atomic_load(&op->killed) && !atomic_load(&op->svc->shutting_down)) {
        ret = shl_status_set(st, SHL_CODE_INTERRUPTED, "operation was interrupted");
    } else if (atomic_load(&op->killed)) {
        /* The shutdown kills what still runs when its grace period ends. */
        ret = shl_status_set(st, SHL_CODE_INTERRUPTED_AT_SHUTDOWN, "interrupted at shutdown");
    } else if (op->deadline_us != 0 && shl_clock_mono_us() >= op->deadline_us) {
        ret = shl_status_set(st, SHL_CODE_MAX_TIME_MS_EXPIRED, "operation exceeded time limit");
    } else if (atomic_load(&op->svc->shutting_down)) {
        ret = shl_status_set(st, SHL_CODE_INTERRUPTED_AT_SHUTDOWN, "interrupted at shutdown");
    }
    return ret;
}

int64_t
shl_op_remaining_ms(const shl_op_ctx_t *op)
{
    int64_t left;
    if (op->deadline_us == 0) {
        return -1;
    }
    left = (op->deadline_us - shl_clock_mono_us()) / 1000;
    return left > 0 ? left : 0;
}

/* ---------------------------------------------------------------- in-progress list */

void
shl_op_register(shl_op_ctx_t *op)
{
    shl_service_ctx_t *svc = op->svc;

    /* app_name is written by the connection's first hello, on this thread, before
     * hello_seen; from then on it never changes, so other threads may read it. */
    op->app_name = op->conn != NULL && op->conn->hello_seen && op->conn->app_name[0] != '\0'
                       ? op->conn->app_name
                       : NULL;
    pthread_mutex_lock(&svc->ops_mu);
    if (svc->next_opid <= 0 || svc->next_opid == INT32_MAX) {
        svc->next_opid = 1;
    }
    op->opid = svc->next_opid++;
    op->ops_prev = NULL;
    op->ops_next = svc->ops;
    if (svc->ops != NULL) {
        svc->ops->ops_prev = op;
    }
    svc->ops = op;
    pthread_mutex_unlock(&svc->ops_mu);
}

void
shl_op_unregister(shl_op_ctx_t *op)
{
    shl_service_ctx_t *svc = op->svc;

    if (op->opid == 0) {
        return;
    }
    pthread_mutex_lock(&svc->ops_mu);
    if (op->ops_prev != NULL) {
        op->ops_prev->ops_next = op->ops_next;
    } else {
        svc->ops = op->ops_next;
    }
    if (op->ops_next != NULL) {
        op->ops_next->ops_prev = op->ops_prev;
    }
    op->ops_prev = op->ops_next = NULL;
    op->opid = 0;
    pthread_mutex_unlock(&svc->ops_mu);
}

bool
shl_op_kill(shl_service_ctx_t *svc, int64_t opid)
{
    bool found = false;

    pthread_mutex_lock(&svc->ops_mu);
    for (shl_op_ctx_t *o = svc->ops; o != NULL; o = o->ops_next) {
        if (o->opid == opid) {
            atomic_store(&o->killed, true);
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&svc->ops_mu);
    return found;
}

int
shl_op_kill_all(shl_service_ctx_t *svc)
{
    int n = 0;

    pthread_mutex_lock(&svc->ops_mu);
    for (shl_op_ctx_t *o = svc->ops; o != NULL; o = o->ops_next) {
        atomic_store(&o->killed, true);
        n++;
    }
    pthread_mutex_unlock(&svc->ops_mu);
    return n;
}

int
shl_op_kill_by_key(shl_service_ctx_t *svc, const uint8_t *key)
{
    int n = 0;

    pthread_mutex_lock(&svc->ops_mu);
    for (shl_op_ctx_t *o = svc->ops; o != NULL; o = o->ops_next) {
        if (o->has_op_key && memcmp(o->op_key, key, SHL_OP_KEY_LEN) == 0) {
            atomic_store(&o->killed, true);
            n++;
        }
    }
    pthread_mutex_unlock(&svc->ops_mu);
    return n;
}

int
shl_op_kill_sessions(shl_service_ctx_t *svc, bool (*match)(void *arg, const shl_lsid_t *lsid),
                     void *arg, const shl_op_ctx_t *self)
{
    int n = 0;

    pthread_mutex_lock(&svc->ops_mu);
    for (shl_op_ctx_t *o = svc->ops; o != NULL; o = o->ops_next) {
        if (o != self && o->has_lsid && match(arg, &o->lsid_key)) {
            atomic_store(&o->killed, true);
            n++;
        }
    }
    pthread_mutex_unlock(&svc->ops_mu);
    return n;
}

void
shl_op_sessions(shl_service_ctx_t *svc, void (*fn)(void *arg, const shl_lsid_t *lsid), void *arg)
{
    pthread_mutex_lock(&svc->ops_mu);
    for (shl_op_ctx_t *o = svc->ops; o != NULL; o = o->ops_next) {
        if (o->has_lsid) {
            fn(arg, &o->lsid_key);
        }
    }
    pthread_mutex_unlock(&svc->ops_mu);
}

/* Process-wide parts of the remote keys: a random half fixed at first use, and a counter. */
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static uint8_t key_nonce[8];
static atomic_uint_fast64_t key_counter;

static void
key_init(void)
{
    bson_oid_t oid;
    int64_t t = shl_clock_mono_us();

    /* libbson's ObjectId has 5 random bytes per process; mix in the clock for the rest. */
    bson_oid_init(&oid, NULL);
    memcpy(key_nonce, oid.bytes + 4, 5);
    memcpy(key_nonce + 5, &t, 3);
    /* Shaped as a version 4 UUID, as MongoDB's keys are: the version nibble in byte 6. */
    key_nonce[6] = (uint8_t)((key_nonce[6] & 0x0f) | 0x40);
}

const uint8_t *
shl_op_remote_key(shl_op_ctx_t *op)
{
    if (!op->has_remote_key) {
        /* The random half, then the UUID variant byte and 56 bits of the counter. */
        uint64_t tail = htole64((atomic_fetch_add(&key_counter, 1) << 8) | 0x80);
        pthread_once(&key_once, key_init);
        memcpy(op->remote_key, key_nonce, 8);
        memcpy(op->remote_key + 8, &tail, 8);
        op->has_remote_key = true;
    }
    return op->remote_key;
}

void
shl_current_op_append_match(const bson_t *cmd, const char *key, bson_t *stages)
{
    bson_iter_t it;
    bson_t stage, match;

    BSON_APPEND_DOCUMENT_BEGIN(stages, key, &stage);
    BSON_APPEND_DOCUMENT_BEGIN(&stage, "$match", &match);
    if (bson_iter_init(&it, cmd)) {
        while (shl_iter_next(&it)) {
            const char *k = shl_iter_key(&it);
            if (strcmp(k, "currentOp") != 0 && strcmp(k, "$all") != 0 &&
                strcmp(k, "$ownOps") != 0 && strcmp(k, "$truncateOps") != 0 &&
                !shl_cmd_is_generic_arg(k)) {
                bson_append_iter(&match, NULL, 0, &it);
            }
        }
    }
    bson_append_document_end(&stage, &match);
    bson_append_document_end(stages, &stage);
}

int
shl_current_op_spec_parse(const bson_iter_t *stage, bool in_cluster, shl_current_op_spec_t *out,
                          shl_status_t *st)
{
    static const char *const names[] = {"allUsers",     "idleConnections", "idleCursors",
                                        "idleSessions", "localOps",        "truncateOps",
                                        "backtrace",    "targetAllNodes",  NULL};
    bool *const fields[] = {&out->all_users,     &out->idle_connections, &out->idle_cursors,
                            &out->idle_sessions, &out->local_ops,        &out->truncate_ops,
                            &out->backtrace,     &out->target_all_nodes};
    bson_iter_t spec;
    int ret = 0;

    memset(out, 0, sizeof(*out));
    if (!BSON_ITER_HOLDS_DOCUMENT(stage) || !bson_iter_recurse(stage, &spec)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "$currentOp options must be specified in an object, but found: %s",
                 shl_bson_type_name(shl_iter_type(stage)));
    }
    /* The lite parse (before the stage is built) looks only at allUsers and localOps. */
    while (shl_iter_next(&spec)) {
        const char *k = shl_iter_key(&spec);
        if ((strcmp(k, "allUsers") == 0 || strcmp(k, "localOps") == 0) &&
            !BSON_ITER_HOLDS_BOOL(&spec)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "The '%s' parameter of the $currentOp stage must be a boolean value, but "
                     "found: %s",
                     k, shl_bson_type_name(shl_iter_type(&spec)));
        }
    }
    bson_iter_recurse(stage, &spec);
    while (shl_iter_next(&spec)) {
        const char *k = shl_iter_key(&spec);
        size_t i;
        for (i = 0; names[i] != NULL && strcmp(k, names[i]) != 0; i++) {
        }
        if (names[i] == NULL) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Unrecognized option '%s' in $currentOp stage.",
                     k);
        }
        if (!BSON_ITER_HOLDS_BOOL(&spec)) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "The '%s' parameter of the $currentOp stage must be a boolean value, but "
                     "found: %s",
                     k, shl_bson_type_name(shl_iter_type(&spec)));
        }
        *fields[i] = bson_iter_bool(&spec);
    }
    if (out->local_ops && out->target_all_nodes) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "The 'localOps' parameter of the $currentOp stage cannot be true when "
                 "'targetAllNodes' is also true");
    }
    if (out->target_all_nodes && !in_cluster) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$currentOp supports targetAllNodes parameter only for sharded clusters");
    }
done:
    return ret;
}

/* MongoDB's `op` of a command: the legacy operation type it stands for. */
static const char *
op_type(const char *cmd_name)
{
    static const char *const map[][2] = {{"find", "query"},    {"getMore", "getmore"},
                                         {"insert", "insert"}, {"update", "update"},
                                         {"delete", "remove"}, {NULL, NULL}};
    for (size_t i = 0; map[i][0] != NULL; i++) {
        if (strcmp(cmd_name, map[i][0]) == 0) {
            return map[i][1];
        }
    }
    return "command";
}

/* The namespace currentOp shows: db.coll when the command names a collection, else db.$cmd
 * (db.$cmd.aggregate for a collection-less aggregate). */
static void
op_ns(const shl_op_ctx_t *op, char *out, size_t n)
{
    bson_iter_t it;

    if (op->body != NULL && bson_iter_init(&it, op->body) && shl_iter_next(&it) &&
        BSON_ITER_HOLDS_UTF8(&it)) {
        const char *v = bson_iter_utf8(&it, NULL);
        if (strchr(v, '.') != NULL && strcmp(op->db, "admin") == 0) {
            shl_str_copy(out, n, v); /* getShardVersion, dataSize, ...: a full namespace */
        } else {
            snprintf(out, n, "%s.%s", op->db, v);
        }
    } else if (op->cmd_name != NULL && strcmp(op->cmd_name, "aggregate") == 0) {
        snprintf(out, n, "%s.$cmd.aggregate", op->db); /* {aggregate: 1}, as MongoDB shows it */
    } else {
        snprintf(out, n, "%s.$cmd", op->db);
    }
}

/* ISO-8601 with milliseconds and the +00:00 offset, as MongoDB prints currentOpTime. */
static void
iso_time(int64_t ms, char *out, size_t n)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    char buf[32];

    gmtime_r(&secs, &tm);
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, n, "%s.%03d+00:00", buf, (int)(ms % 1000));
}

/* A command as currentOp shows it: a password (createUser, updateUser) never appears, as
 * MongoDB redacts it. */
static void
append_redacted_command(bson_t *d, const bson_t *body)
{
    bson_iter_t it;
    bson_t c;

    if (!bson_iter_init_find(&it, body, "pwd")) {
        BSON_APPEND_DOCUMENT(d, "command", body);
        return;
    }
    BSON_APPEND_DOCUMENT_BEGIN(d, "command", &c);
    bson_iter_init(&it, body);
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "pwd") == 0) {
            BSON_APPEND_UTF8(&c, "pwd", "xxx");
        } else {
            bson_append_iter(&c, NULL, 0, &it);
        }
    }
    bson_append_document_end(d, &c);
}

void
shl_op_list_append(shl_service_ctx_t *svc, bson_t *arr, uint32_t *n)
{
    int64_t now_us = shl_clock_mono_us();
    char now[48], ns[300], key[16];

    iso_time(shl_clock_wall_ms(), now, sizeof(now));
    pthread_mutex_lock(&svc->ops_mu);
    for (shl_op_ctx_t *o = svc->ops; o != NULL; o = o->ops_next) {
        int64_t us = now_us - o->start_mono_us;
        const char *kp;
        char desc[32];
        bson_t d, locks;

        bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(arr, kp, &d);
        BSON_APPEND_UTF8(&d, "type", "op");
        BSON_APPEND_UTF8(&d, "host", svc->me);
        if (o->conn != NULL) {
            snprintf(desc, sizeof(desc), "conn%lld", (long long)o->conn->id);
            BSON_APPEND_UTF8(&d, "desc", desc);
            BSON_APPEND_INT64(&d, "connectionId", o->conn->id);
            BSON_APPEND_UTF8(&d, "client", o->conn->remote);
        }
        if (o->app_name != NULL) {
            BSON_APPEND_UTF8(&d, "appName", o->app_name);
        }
        BSON_APPEND_BOOL(&d, "active", true);
        BSON_APPEND_UTF8(&d, "currentOpTime", now);
        BSON_APPEND_INT32(&d, "opid", o->opid);
        if (o->has_lsid) {
            BSON_APPEND_DOCUMENT(&d, "lsid", &o->lsid);
        }
        if (o->has_txn_number) {
            BSON_APPEND_INT64(&d, "txnNumber", o->txn_number);
        }
        BSON_APPEND_INT64(&d, "secs_running", us / 1000000);
        BSON_APPEND_INT64(&d, "microsecs_running", us);
        BSON_APPEND_UTF8(&d, "op", op_type(o->cmd_name != NULL ? o->cmd_name : ""));
        op_ns(o, ns, sizeof(ns));
        BSON_APPEND_UTF8(&d, "ns", ns);
        if (o->body != NULL) {
            append_redacted_command(&d, o->body);
        }
        BSON_APPEND_INT32(&d, "numYields", 0);
        BSON_APPEND_DOCUMENT_BEGIN(&d, "locks", &locks);
        bson_append_document_end(&d, &locks);
        BSON_APPEND_BOOL(&d, "waitingForLock", false);
        if (atomic_load(&o->killed)) {
            BSON_APPEND_BOOL(&d, "killPending", true);
        }
        if (svc->hooks.append_op != NULL) {
            svc->hooks.append_op(o, &d);
        }
        bson_append_document_end(arr, &d);
    }
    pthread_mutex_unlock(&svc->ops_mu);
    if (svc->hooks.append_current_op != NULL) {
        svc->hooks.append_current_op(svc, arr, n);
    }
}

SHL_FAILPOINT_DEFINE(userWriteBlockingTreatClientsAsUnprivileged)

void
shl_op_user_digest(const shl_op_ctx_t *op, uint8_t out[SHL_LSID_UID_LEN])
{
    if (op->conn != NULL) {
        memcpy(out, op->conn->user_digest, SHL_LSID_UID_LEN);
    } else {
        shl_lsid_user_digest("", out);
    }
}

bool
shl_op_acts_for_all_users(const shl_op_ctx_t *op)
{
    return op->conn == NULL || !access_control() || op->conn->system_user;
}

bool
shl_op_may_use_owned(const shl_op_ctx_t *op, const uint8_t owner[SHL_LSID_UID_LEN])
{
    return shl_op_acts_for_all_users(op) ||
           memcmp(op->conn->user_digest, owner, SHL_LSID_UID_LEN) == 0;
}

bool
shl_op_may_bypass_write_blocking(const shl_op_ctx_t *op)
{
    bson_iter_t it;
    bool bypass;

    if (op->conn == NULL) {
        bypass = true;
    } else if (op->body != NULL && bson_iter_init_find(&it, op->body, "mayBypassWriteBlocking")) {
        bypass = bson_iter_as_bool(&it);
    } else {
        bypass = !atomic_load_explicit(
            &SHL_FAILPOINT(userWriteBlockingTreatClientsAsUnprivileged)->active,
            memory_order_relaxed);
    }
    return bypass;
}
