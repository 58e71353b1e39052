/*
 * rs_monitor.c -- see rs_monitor.h. A table of sets (by set name) each with its known hosts,
 * its primary ("" when unknown) and its secondaries, filled by a round of hellos to every
 * known host. A round is a fan-out, so it costs one round trip whatever the set's size.
 */
#include "net/rs_monitor.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/str.h"
#include "bson/bson_iter.h"
#include "net/client.h"

#define RS_MAX_SETS 64
#define RS_MAX_HOSTS 16
#define RS_NAME_MAX 128
#define RS_HELLO_TIMEOUT_MS 2000
#define RS_POLL_MS 200

typedef struct rs_set {
    char name[RS_NAME_MAX];
    char hosts[RS_MAX_HOSTS][SHL_CLIENT_HOST_MAX];
    size_t nhosts;
    char primary[SHL_CLIENT_HOST_MAX]; /* "" = unknown */
    char secondaries[RS_MAX_HOSTS][SHL_CLIENT_HOST_MAX];
    size_t nsecondaries;
    unsigned next_secondary; /* round robin over secondaries */
} rs_set_t;

/* The process's sets; guarded by 'mu'. Entries are never removed. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static rs_set_t sets[RS_MAX_SETS];
static size_t nsets;

bool
shl_rs_monitor_is_set(const char *s)
{
    const char *slash = strchr(s, '/');
    return slash != NULL && slash != s && strchr(slash, ',') != NULL;
}

shl_rs_read_pref_t
shl_rs_monitor_pref_of(const bson_t *cmd)
{
    bson_iter_t it, f;
    shl_rs_read_pref_t pref = SHL_RS_PRIMARY;
    const char *mode;

    if (cmd == NULL || !bson_iter_init_find(&it, cmd, "$readPreference") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &f) ||
        !bson_iter_find(&f, "mode") || !BSON_ITER_HOLDS_UTF8(&f)) {
        return pref;
    }
    mode = bson_iter_utf8(&f, NULL);
    if (strcmp(mode, "primaryPreferred") == 0) {
        pref = SHL_RS_PRIMARY_PREFERRED;
    } else if (strcmp(mode, "secondary") == 0) {
        pref = SHL_RS_SECONDARY;
    } else if (strcmp(mode, "secondaryPreferred") == 0) {
        pref = SHL_RS_SECONDARY_PREFERRED;
    } else if (strcmp(mode, "nearest") == 0) {
        pref = SHL_RS_NEAREST;
    }
    return pref;
}

static const char *
pref_name(shl_rs_read_pref_t pref)
{
    static const char *const names[] = {"primary", "primaryPreferred", "secondary",
                                        "secondaryPreferred", "nearest"};
    return names[pref];
}

static void
add_host_locked(rs_set_t *s, const char *h, size_t len)
{
    if (len == 0 || len >= SHL_CLIENT_HOST_MAX || s->nhosts >= RS_MAX_HOSTS) {
        return;
    }
    for (size_t i = 0; i < s->nhosts; i++) {
        if (strlen(s->hosts[i]) == len && strncmp(s->hosts[i], h, len) == 0) {
            return;
        }
    }
    memcpy(s->hosts[s->nhosts], h, len);
    s->hosts[s->nhosts][len] = '\0';
    s->nhosts++;
}

/* The set named by 'conn_string', made (with its seed hosts) if new. Caller holds mu. */
static rs_set_t *
find_set_locked(const char *conn_string, shl_status_t *st)
{
    const char *slash = strchr(conn_string, '/');
    size_t nlen = slash == NULL ? 0 : (size_t)(slash - conn_string);
    rs_set_t *s = NULL;

    if (nlen == 0 || nlen >= RS_NAME_MAX) {
        shl_status_set(st, SHL_CODE_FAILED_TO_PARSE, "invalid replica set connection string '%s'",
                       conn_string);
        return NULL;
    }
    for (size_t i = 0; i < nsets; i++) {
        if (strlen(sets[i].name) == nlen && strncmp(sets[i].name, conn_string, nlen) == 0) {
            s = &sets[i];
        }
    }
    if (s == NULL) {
        if (nsets == RS_MAX_SETS) {
            shl_status_set(st, SHL_CODE_FAILED_TO_PARSE, "too many replica sets");
            return NULL;
        }
        s = &sets[nsets++];
        memset(s, 0, sizeof(*s));
        memcpy(s->name, conn_string, nlen);
    }
    /* Seeds are added every time: a longer string for a known set teaches new members. */
    for (const char *p = slash + 1; *p != '\0';) {
        size_t len = strcspn(p, ",");
        add_host_locked(s, p, len);
        p += len;
        p += *p == ',' ? 1 : 0;
    }
    return s;
}

/* A member in state 'pref' into out; false if the monitor knows none. Caller holds mu. */
static bool
pick_locked(rs_set_t *s, shl_rs_read_pref_t pref, char *out, size_t n)
{
    bool has_primary = s->primary[0] != '\0';
    bool has_secondary = s->nsecondaries > 0;
    bool use_secondary = false;

    switch (pref) {
    case SHL_RS_PRIMARY:
        break;
    case SHL_RS_PRIMARY_PREFERRED:
        use_secondary = !has_primary;
        break;
    case SHL_RS_SECONDARY:
        use_secondary = true;
        break;
    case SHL_RS_SECONDARY_PREFERRED:
    case SHL_RS_NEAREST:
        use_secondary = has_secondary;
        break;
    }
    if (use_secondary) {
        if (!has_secondary) {
            return false;
        }
        shl_str_copy(out, n, s->secondaries[s->next_secondary++ % s->nsecondaries]);
        return true;
    }
    if (!has_primary) {
        return false;
    }
    shl_str_copy(out, n, s->primary);
    return true;
}

/* The electionId of a hello reply (zero if none), for choosing between two primaries. */
static void
election_id_of(const bson_t *reply, bson_oid_t *oid)
{
    bson_iter_t it;

    memset(oid, 0, sizeof(*oid));
    if (bson_iter_init_find(&it, reply, "electionId") && BSON_ITER_HOLDS_OID(&it)) {
        bson_oid_copy(bson_iter_oid(&it), oid);
    }
}

/* One round of hellos to every known host of set 'name'; updates the entry. */
static void
refresh(shl_conn_pool_t *pool, const char *conn_string)
{
    char hosts[RS_MAX_HOSTS][SHL_CLIENT_HOST_MAX];
    shl_fanout_req_t reqs[RS_MAX_HOSTS];
    shl_fanout_result_t res[RS_MAX_HOSTS];
    bson_t *hello = BCON_NEW("hello", BCON_INT32(1));
    size_t n = 0, best = SIZE_MAX;
    bson_oid_t best_id, id;
    shl_status_t st = SHL_STATUS_INIT;
    rs_set_t *s;
    char name[RS_NAME_MAX];

    pthread_mutex_lock(&mu);
    s = find_set_locked(conn_string, &st);
    if (s != NULL) {
        shl_str_copy(name, sizeof(name), s->name);
        n = s->nhosts;
        memcpy(hosts, s->hosts, n * sizeof(hosts[0]));
    }
    pthread_mutex_unlock(&mu);
    for (size_t i = 0; i < n; i++) {
        reqs[i].host = hosts[i];
        reqs[i].db = "admin";
        reqs[i].cmd = hello;
        reqs[i].op_key = NULL;
    }
    if (n == 0) {
        goto done;
    }
    shl_client_fanout(pool, reqs, n, RS_HELLO_TIMEOUT_MS, res);
    memset(&best_id, 0, sizeof(best_id));
    pthread_mutex_lock(&mu);
    s = find_set_locked(conn_string, &st);
    s->primary[0] = '\0';
    s->nsecondaries = 0;
    for (size_t i = 0; i < n; i++) {
        bson_iter_t it, arr;
        bool same_set = bson_iter_init_find(&it, &res[i].reply, "setName") &&
                        BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), name) == 0;
        if (res[i].code != 0 || !same_set) {
            continue;
        }
        if (bson_iter_init_find(&it, &res[i].reply, "hosts") && BSON_ITER_HOLDS_ARRAY(&it) &&
            bson_iter_recurse(&it, &arr)) {
            while (bson_iter_next(&arr)) {
                if (BSON_ITER_HOLDS_UTF8(&arr)) {
                    uint32_t len;
                    const char *h = bson_iter_utf8(&arr, &len);
                    add_host_locked(s, h, len);
                }
            }
        }
        if (bson_iter_init_find(&it, &res[i].reply, "isWritablePrimary") &&
            bson_iter_as_bool(&it)) {
            election_id_of(&res[i].reply, &id);
            if (best == SIZE_MAX || bson_oid_compare(&id, &best_id) > 0) {
                best = i;
                bson_oid_copy(&id, &best_id);
            }
        } else if (bson_iter_init_find(&it, &res[i].reply, "secondary") && bson_iter_as_bool(&it) &&
                   s->nsecondaries < RS_MAX_HOSTS) {
            shl_str_copy(s->secondaries[s->nsecondaries++], SHL_CLIENT_HOST_MAX, hosts[i]);
        }
    }
    if (best != SIZE_MAX) {
        shl_str_copy(s->primary, sizeof(s->primary), hosts[best]);
    }
    pthread_mutex_unlock(&mu);
    shl_fanout_results_cleanup(res, n);
    SHL_LOG_DEBUG(1, NETWORK, 4616201, "replica set monitor refreshed", "set", BCON_UTF8(name),
                  "primary", BCON_UTF8(best != SIZE_MAX ? hosts[best] : ""));
done:
    bson_destroy(hello);
}

static void
sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) != 0) {
    }
}

int
shl_rs_monitor_select(shl_conn_pool_t *pool, const char *conn_string, shl_rs_read_pref_t pref,
                      int64_t timeout_ms, char *out, size_t n, shl_status_t *st)
{
    int ret = 0;
    int64_t wait = timeout_ms <= 0 || timeout_ms > SHL_RS_MONITOR_WAIT_MS ? SHL_RS_MONITOR_WAIT_MS
                                                                          : timeout_ms;
    int64_t deadline = shl_clock_mono_us() / 1000 + wait;
    bool found = false, refreshed = false;
    rs_set_t *s;

    for (;;) {
        pthread_mutex_lock(&mu);
        s = find_set_locked(conn_string, st);
        found = s != NULL && pick_locked(s, pref, out, n);
        pthread_mutex_unlock(&mu);
        if (s == NULL) {
            ret = st->code;
            goto done;
        }
        if (found) {
            goto done;
        }
        if (refreshed) {
            if (shl_clock_mono_us() / 1000 >= deadline) {
                break;
            }
            sleep_ms(RS_POLL_MS);
        }
        refresh(pool, conn_string);
        refreshed = true;
    }
    SHL_FAIL(st, SHL_CODE_FAILED_TO_SATISFY_READ_PREFERENCE,
             "Could not find host matching read preference { mode: \"%s\" } for set %.*s",
             pref_name(pref), (int)(strchr(conn_string, '/') - conn_string), conn_string);
done:
    return ret;
}

void
shl_rs_monitor_note_error(const char *host, int code)
{
    if (!shl_code_in_category(code, SHL_CAT_NETWORK_ERROR | SHL_CAT_NOT_PRIMARY_ERROR |
                                        SHL_CAT_SHUTDOWN_ERROR)) {
        return;
    }
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nsets; i++) {
        rs_set_t *s = &sets[i];
        if (strcmp(s->primary, host) == 0) {
            SHL_LOG_INFO(NETWORK, 4616202, "replica set monitor: primary failed; rediscovering",
                         "set", BCON_UTF8(s->name), "host", BCON_UTF8(host), "code",
                         BCON_INT32(code));
            s->primary[0] = '\0';
        }
        for (size_t k = 0; k < s->nsecondaries; k++) {
            if (strcmp(s->secondaries[k], host) == 0) {
                memmove(s->secondaries[k], s->secondaries[k + 1],
                        (s->nsecondaries - k - 1) * sizeof(s->secondaries[0]));
                s->nsecondaries--;
                break;
            }
        }
    }
    pthread_mutex_unlock(&mu);
}

void
shl_rs_monitor_append_sets(bson_t *out)
{
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nsets; i++) {
        const rs_set_t *s = &sets[i];
        bson_t doc, arr;
        char key[24];

        BSON_APPEND_DOCUMENT_BEGIN(out, s->name, &doc);
        BSON_APPEND_ARRAY_BEGIN(&doc, "hosts", &arr);
        for (size_t k = 0; k < s->nhosts; k++) {
            snprintf(key, sizeof(key), "%zu", k);
            BSON_APPEND_UTF8(&arr, key, s->hosts[k]);
        }
        bson_append_array_end(&doc, &arr);
        if (s->primary[0] != '\0') {
            BSON_APPEND_UTF8(&doc, "primary", s->primary);
        } else {
            BSON_APPEND_NULL(&doc, "primary");
        }
        BSON_APPEND_ARRAY_BEGIN(&doc, "secondaries", &arr);
        for (size_t k = 0; k < s->nsecondaries; k++) {
            snprintf(key, sizeof(key), "%zu", k);
            BSON_APPEND_UTF8(&arr, key, s->secondaries[k]);
        }
        bson_append_array_end(&doc, &arr);
        bson_append_document_end(out, &doc);
    }
    pthread_mutex_unlock(&mu);
}
