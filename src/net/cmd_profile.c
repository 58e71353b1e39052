/*
 * cmd_profile.c -- the `profile` command on every process. Shale keeps no system.profile
 * collection, so the profiling level stays 0 everywhere: a router answers as mongos (levels
 * 0 and -1 only, BadValue otherwise), a data node refuses levels 1 and 2 the same way.
 * Level 0 sets this process's slowms / sampleRate (process-wide) and the database's filter
 * (per database, as MongoDB 7.0); -1 only reads them. Reply {was, slowms, sampleRate, filter?,
 * note?} with the old values, as MongoDB 7.0's ProfileCmdBase.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/log.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/common_commands.h"
#include "net/service_context.h"

/* A database's profile filter (kept for the process's life once set). */
typedef struct db_filter {
    struct db_filter *next;
    char db[128];
    bson_t *filter; /* NULL: none */
} db_filter_t;

/* The process's settings; 'g_filters' and 'g_sample_rate' are guarded by 'g_mu'. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_slowms = 100;
static double g_sample_rate = 1.0;
static db_filter_t *g_filters;

/* The entry of 'db', created if 'create'; NULL otherwise. Called with g_mu held. */
static db_filter_t *
filter_entry(const char *db, bool create)
{
    db_filter_t *f;

    for (f = g_filters; f != NULL; f = f->next) {
        if (strcmp(f->db, db) == 0) {
            return f;
        }
    }
    if (create) {
        f = bson_malloc0(sizeof(*f));
        snprintf(f->db, sizeof(f->db), "%s", db);
        f->next = g_filters;
        g_filters = f;
    }
    return f;
}

/* A number field as int64 / double; TypeMismatch for anything else. */
static int
number_field(const bson_iter_t *it, const char *name, bson_value_t *out, shl_status_t *st)
{
    int ret = 0;

    if (!shl_bson_type_is_number(bson_iter_type(it))) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field 'profile.%s' is the wrong type '%s', expected types '[long, int, "
                 "decimal, double]'",
                 name, shl_bson_type_name(bson_iter_type(it)));
    }
    *out = *bson_iter_value((bson_iter_t *)(uintptr_t)it);
done:
    return ret;
}

static int
cmd_profile(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bson_value_t v;
    int64_t level = 0;
    bool has_slowms = false, has_rate = false, has_filter = false, unset_filter = false;
    int32_t slowms = 0;
    double rate = 0;
    bson_t filter_view;
    bool router = op->svc->role == SHL_ROLE_ROUTER;

    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "empty command");
    }
    SHL_ERR(number_field(&it, "profile", &v, st));
    level = shl_bson_value_safe_int64(&v);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "slowms") == 0) {
            SHL_ERR(number_field(&it, k, &v, st));
            slowms = (int32_t)shl_bson_value_safe_int64(&v);
            has_slowms = true;
        } else if (strcmp(k, "sampleRate") == 0) {
            SHL_ERR(number_field(&it, k, &v, st));
            rate = shl_bson_value_as_double(&v);
            has_rate = true;
        } else if (strcmp(k, "filter") == 0) {
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                const uint8_t *data;
                uint32_t len;
                bson_iter_document(&it, &len, &data);
                bson_init_static(&filter_view, data, len);
            } else if (BSON_ITER_HOLDS_UTF8(&it) &&
                       strcmp(bson_iter_utf8(&it, NULL), "unset") == 0) {
                unset_filter = true;
            } else {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Expected an object, or the string 'unset'.");
            }
            has_filter = true;
        }
    }
    if (has_rate && !(rate >= 0.0 && rate <= 1.0)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "'sampleRate' must be between 0.0 and 1.0 inclusive");
    }
    if (router && level != 0 && level != -1) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Profiling is not permitted on mongoS: the 'profile' field should be 0 to change "
                 "'slowms', 'sampleRate', or 'filter' settings for logging, or -1 to view current "
                 "values");
    }
    if (!router && (level < -1 || level > 2)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Invalid profiling level: %lld", (long long)level);
    }
    if (!router && level != 0 && level != -1) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                 "Profiling level %lld is not supported: Shale keeps no system.profile "
                 "collection; use 0 to change 'slowms', 'sampleRate', or 'filter' settings for "
                 "logging, or -1 to view current values",
                 (long long)level);
    }

    pthread_mutex_lock(&g_mu);
    {
        db_filter_t *f = filter_entry(op->db, has_filter);
        const bson_t *old_filter = f != NULL ? f->filter : NULL;

        BSON_APPEND_INT32(reply, "was", 0);
        BSON_APPEND_INT32(reply, "slowms", atomic_load(&g_slowms));
        BSON_APPEND_DOUBLE(reply, "sampleRate", g_sample_rate);
        if (old_filter != NULL) {
            BSON_APPEND_DOCUMENT(reply, "filter", old_filter);
        }
        if (old_filter != NULL || (has_filter && !unset_filter)) {
            BSON_APPEND_UTF8(reply, "note",
                             "When a filter expression is set, slowms and sampleRate are not used "
                             "for profiling and slow-query log lines.");
        }
        /* As MongoDB, slowms / sampleRate / filter apply with -1 too; the level stays 0. */
        if (has_slowms) {
            atomic_store(&g_slowms, slowms);
        }
        if (has_rate) {
            g_sample_rate = rate;
        }
        if (has_filter) {
            if (f->filter != NULL) {
                bson_destroy(f->filter);
                f->filter = NULL;
            }
            if (!unset_filter) {
                f->filter = bson_copy(&filter_view);
            }
        }
    }
    pthread_mutex_unlock(&g_mu);
    if (level == 0 || has_slowms || has_rate) {
        SHL_LOG_INFO(COMMAND, 48742, "Profiler settings changed", "slowms",
                     BCON_INT32(atomic_load(&g_slowms)));
    }
done:
    return ret;
}

static const shl_command_t profile_cmd = {
    .name = "profile",
    .run = cmd_profile,
    .help = "{profile: 0 | -1, slowms?, sampleRate?, filter?}: the slow-operation settings "
            "(no profiler: levels 1 and 2 are refused)",
};

void
shl_profile_commands_register(shl_command_registry_t *reg)
{
    shl_command_registry_add(reg, &profile_cmd);
}
