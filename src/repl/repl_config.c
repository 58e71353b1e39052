/*
 * repl_config.c -- a replica set configuration: parsing and MongoDB's validation rules, the
 * normalised document replSetGetConfig answers, and the pure arithmetic of the majority
 * commit point (docs/design/replication.md "Configuration", "Commit point").
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "repl/repl_private.h"

/* MongoDB bounds secondaryDelaySecs by a year (366 days). */
#define MAX_DELAY_SECS (3600LL * 24 * 366)

/* The document or array at 'it' as a view (false for another type). */
static bool
iter_subdoc(const bson_iter_t *it, bson_t *out)
{
    const uint8_t *data = NULL;
    uint32_t len = 0;

    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_document(it, &len, &data);
    } else if (BSON_ITER_HOLDS_ARRAY(it)) {
        bson_iter_array(it, &len, &data);
    }
    return data != NULL && bson_init_static(out, data, len);
}

static bool
is_number(const bson_iter_t *it)
{
    return BSON_ITER_HOLDS_INT32(it) || BSON_ITER_HOLDS_INT64(it) || BSON_ITER_HOLDS_DOUBLE(it) ||
           BSON_ITER_HOLDS_DECIMAL128(it);
}

static int
parse_member(bson_iter_t *mit, repl_member_t *m, shl_status_t *st)
{
    bson_iter_t it;
    bson_t doc;
    bool has_id = false, has_priority = false, has_votes = false;
    int ret = 0;

    if (!BSON_ITER_HOLDS_DOCUMENT(mit) || !iter_subdoc(mit, &doc)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "Each member of the replica set configuration must "
                                             "be an object");
    }
    memset(m, 0, sizeof(*m));
    m->priority = 1.0;
    m->votes = 1;
    bson_iter_init(&it, &doc);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "_id") == 0) {
            if (!is_number(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "member _id must be a number");
            }
            int64_t v = bson_iter_as_int64(&it);
            if (v < 0 || v > INT32_MAX) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "_id field value of %lld is out of range",
                         (long long)v);
            }
            m->id = (int32_t)v;
            has_id = true;
        } else if (strcmp(k, "host") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "member host must be a string");
            }
            const char *h = bson_iter_utf8(&it, NULL);
            if (h[0] == '\0' || strlen(h) >= sizeof(m->host)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Empty or too long host string '%s'", h);
            }
            /* A host without a port is on MongoDB's default port. */
            if ((strchr(h, ':') == NULL
                     ? snprintf(m->host, sizeof(m->host), "%s:27017", h)
                     : snprintf(m->host, sizeof(m->host), "%s", h)) >= (int)sizeof(m->host)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Empty or too long host string '%s'", h);
            }
        } else if (strcmp(k, "priority") == 0) {
            if (!is_number(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "priority must be a number");
            }
            m->priority = bson_iter_as_double(&it);
            has_priority = true;
        } else if (strcmp(k, "votes") == 0) {
            if (!is_number(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "votes must be a number");
            }
            double v = bson_iter_as_double(&it);
            /* MongoDB truncates a fractional vote count toward zero. */
            m->votes = (int32_t)trunc(v);
            has_votes = true;
        } else if (strcmp(k, "hidden") == 0) {
            m->hidden = bson_iter_as_bool(&it);
        } else if (strcmp(k, "arbiterOnly") == 0) {
            m->arbiter = bson_iter_as_bool(&it);
        } else if (strcmp(k, "secondaryDelaySecs") == 0) {
            if (!is_number(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "secondaryDelaySecs must be a number");
            }
            m->secondary_delay_secs = bson_iter_as_int64(&it);
        } else if (strcmp(k, "slaveDelay") == 0) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "Use secondaryDelaySecs instead of slaveDelay in a member configuration");
        } else if (strcmp(k, "tags") == 0) {
            bson_iter_t t;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &t)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "tags must be an object");
            }
            while (bson_iter_next(&t)) {
                if (!BSON_ITER_HOLDS_UTF8(&t)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "tags.%s field has non-string value",
                             bson_iter_key(&t));
                }
            }
        } else if (strcmp(k, "buildIndexes") == 0) {
            /* accepted and kept in the document; not used yet */
        } else {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "Unexpected field %s in replica set member configuration", k);
        }
    }
    if (!has_id) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Missing expected field \"_id\"");
    }
    if (m->host[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Missing expected field \"host\"");
    }
    if (m->arbiter && !has_priority) {
        m->priority = 0;
    }
    (void)has_votes;
    if (m->priority < 0 || m->priority > 1000) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "priority field value of %g is out of range",
                 m->priority);
    }
    if (m->votes != 0 && m->votes != 1) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "votes field value is %d. It must be 0 or 1",
                 (int)m->votes);
    }
    if (m->secondary_delay_secs < 0 || m->secondary_delay_secs > MAX_DELAY_SECS) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "secondaryDelaySecs field value of %lld seconds is out "
                                         "of range",
                 (long long)m->secondary_delay_secs);
    }
    if (m->arbiter) {
        if (m->votes != 1) {
            SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                     "Arbiter must vote (cannot have 0 votes)");
        }
        if (m->priority != 0) {
            SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                     "priority must be 0 when arbiterOnly=true");
        }
    }
    if (m->votes == 0 && m->priority != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                 "priority must be 0 when non-voting (votes:0)");
    }
    if (m->hidden && m->priority != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG, "priority must be 0 when hidden=true");
    }
    if (m->secondary_delay_secs > 0 && m->priority != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                 "priority must be 0 when secondaryDelaySecs is used");
    }
done:
    return ret;
}

static int
parse_settings(const bson_t *doc, repl_config_t *out, bool initiate, shl_status_t *st)
{
    bson_iter_t it;
    bool has_id = false;
    int ret = 0;

    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "heartbeatIntervalMillis") == 0 || strcmp(k, "electionTimeoutMillis") == 0 ||
            strcmp(k, "heartbeatTimeoutSecs") == 0 || strcmp(k, "catchUpTimeoutMillis") == 0 ||
            strcmp(k, "catchUpTakeoverDelayMillis") == 0) {
            if (!is_number(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "%s must be a number", k);
            }
            int64_t v = bson_iter_as_int64(&it);
            if (strcmp(k, "heartbeatIntervalMillis") == 0) {
                if (v <= 0) {
                    SHL_FAIL(st, SHL_CODE_BAD_VALUE, "heartbeatIntervalMillis must be positive");
                }
                out->heartbeat_interval_ms = v;
            } else if (strcmp(k, "electionTimeoutMillis") == 0) {
                if (v <= 0) {
                    SHL_FAIL(st, SHL_CODE_BAD_VALUE, "electionTimeoutMillis must be positive");
                }
                out->election_timeout_ms = v;
            } else if (strcmp(k, "catchUpTimeoutMillis") == 0) {
                if (v < -1) {
                    SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                             "catch-up timeout must be positive, 0 (no catch-up) or -1 (infinite)");
                }
                out->catch_up_timeout_ms = v;
            } else if (strcmp(k, "catchUpTakeoverDelayMillis") == 0) {
                if (v < -1) {
                    SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                             "catch-up takeover delay must be -1 (no catch-up takeover) or greater");
                }
                out->catch_up_takeover_delay_ms = v;
            }
        } else if (strcmp(k, "replicaSetId") == 0) {
            if (!BSON_ITER_HOLDS_OID(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "replicaSetId must be an ObjectId");
            }
            bson_oid_copy(bson_iter_oid(&it), &out->replica_set_id);
            has_id = true;
        } else if (strcmp(k, "getLastErrorModes") == 0) {
            bson_iter_t mode, tag;
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &mode)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "getLastErrorModes must be an object");
            }
            while (bson_iter_next(&mode)) {
                if (!BSON_ITER_HOLDS_DOCUMENT(&mode) || !bson_iter_recurse(&mode, &tag)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "mode %s must be an object",
                             bson_iter_key(&mode));
                }
                while (bson_iter_next(&tag)) {
                    if (!is_number(&tag) || bson_iter_as_int64(&tag) <= 0) {
                        SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                                 "Value of tag %s in mode %s must be a positive number",
                                 bson_iter_key(&tag), bson_iter_key(&mode));
                    }
                }
            }
        } else if (strcmp(k, "chainingAllowed") == 0 ||
                   strcmp(k, "getLastErrorDefaults") == 0) {
            /* kept in the document */
        } else {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Unexpected field %s in replica set settings", k);
        }
    }
    if (!has_id && initiate) {
        bson_oid_init(&out->replica_set_id, NULL);
    }
done:
    return ret;
}

/* The normalised document: MongoDB's field order, every member's fields spelled out. */
static void
build_doc(repl_config_t *cfg, const bson_t *in)
{
    bson_t members, m, settings;
    bson_iter_t it, sub;
    char key[16];

    bson_reinit(&cfg->doc);
    BSON_APPEND_UTF8(&cfg->doc, "_id", cfg->set_name);
    BSON_APPEND_INT32(&cfg->doc, "version", (int32_t)cfg->version);
    BSON_APPEND_INT64(&cfg->doc, "term", cfg->term);
    BSON_APPEND_ARRAY_BEGIN(&cfg->doc, "members", &members);
    for (int i = 0; i < cfg->n; i++) {
        const repl_member_t *mm = &cfg->members[i];
        snprintf(key, sizeof(key), "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(&members, key, &m);
        BSON_APPEND_INT32(&m, "_id", mm->id);
        BSON_APPEND_UTF8(&m, "host", mm->host);
        BSON_APPEND_BOOL(&m, "arbiterOnly", mm->arbiter);
        BSON_APPEND_BOOL(&m, "buildIndexes", true);
        BSON_APPEND_BOOL(&m, "hidden", mm->hidden);
        if (mm->priority == floor(mm->priority)) {
            BSON_APPEND_INT32(&m, "priority", (int32_t)mm->priority);
        } else {
            BSON_APPEND_DOUBLE(&m, "priority", mm->priority);
        }
        {
            /* The member's tags as given (parse_member checked them): w:"<mode>" counts them. */
            bson_t tags = BSON_INITIALIZER, given, in_members;
            char path[32];
            snprintf(path, sizeof(path), "%d", i);
            if (in != NULL && bson_iter_init_find(&it, in, "members") &&
                iter_subdoc(&it, &in_members) &&
                bson_iter_init_find(&it, &in_members, path) && BSON_ITER_HOLDS_DOCUMENT(&it) &&
                bson_iter_recurse(&it, &sub) && bson_iter_find(&sub, "tags") &&
                BSON_ITER_HOLDS_DOCUMENT(&sub) && iter_subdoc(&sub, &given)) {
                bson_copy_to(&given, &tags);
                bson_append_document(&m, "tags", -1, &tags);
            } else {
                bson_append_document(&m, "tags", -1, &tags);
            }
            bson_destroy(&tags);
        }
        BSON_APPEND_INT64(&m, "secondaryDelaySecs", mm->secondary_delay_secs);
        BSON_APPEND_INT32(&m, "votes", mm->votes);
        bson_append_document_end(&members, &m);
    }
    bson_append_array_end(&cfg->doc, &members);
    BSON_APPEND_INT64(&cfg->doc, "protocolVersion", 1);
    BSON_APPEND_BOOL(&cfg->doc, "writeConcernMajorityJournalDefault", true);
    BSON_APPEND_DOCUMENT_BEGIN(&cfg->doc, "settings", &settings);
    BSON_APPEND_BOOL(&settings, "chainingAllowed", true);
    BSON_APPEND_INT32(&settings, "heartbeatIntervalMillis", (int32_t)cfg->heartbeat_interval_ms);
    BSON_APPEND_INT32(&settings, "heartbeatTimeoutSecs", 10);
    BSON_APPEND_INT32(&settings, "electionTimeoutMillis", (int32_t)cfg->election_timeout_ms);
    BSON_APPEND_INT32(&settings, "catchUpTimeoutMillis", (int32_t)cfg->catch_up_timeout_ms);
    BSON_APPEND_INT32(&settings, "catchUpTakeoverDelayMillis",
                      (int32_t)cfg->catch_up_takeover_delay_ms);
    {
        bson_t modes = BSON_INITIALIZER, in_settings, given;
        if (in != NULL && shl_bson_get_subdoc(in, "settings", &in_settings) &&
            shl_bson_get_subdoc(&in_settings, "getLastErrorModes", &given)) {
            bson_copy_to(&given, &modes);
            bson_append_document(&settings, "getLastErrorModes", -1, &modes);
        } else {
            bson_append_document(&settings, "getLastErrorModes", -1, &modes);
        }
        bson_destroy(&modes);
    }
    BSON_APPEND_OID(&settings, "replicaSetId", &cfg->replica_set_id);
    bson_append_document_end(&cfg->doc, &settings);
}

int
repl_config_parse(const bson_t *doc, bool initiate, repl_config_t *out, shl_status_t *st)
{
    bson_iter_t it;
    bson_t members, settings;
    int ret = 0, voters = 0, electable = 0;

    memset(out, 0, sizeof(*out));
    bson_init(&out->doc);
    out->version = initiate ? 1 : 0;
    out->term = -1;
    out->heartbeat_interval_ms = 2000;
    out->election_timeout_ms = 10000;
    out->catch_up_timeout_ms = -1; /* MongoDB's default: catch up for as long as it takes */
    out->catch_up_takeover_delay_ms = 30000;
    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) {
        SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                 "replica set configuration must have a string _id (the set's name)");
    }
    if (strlen(bson_iter_utf8(&it, NULL)) >= sizeof(out->set_name) ||
        bson_iter_utf8(&it, NULL)[0] == '\0') {
        SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG, "replica set name is empty or too long");
    }
    snprintf(out->set_name, sizeof(out->set_name), "%s", bson_iter_utf8(&it, NULL));
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "_id") == 0 || strcmp(k, "members") == 0 || strcmp(k, "settings") == 0) {
            continue;
        }
        if (strcmp(k, "version") == 0) {
            if (!is_number(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "version must be a number");
            }
            out->version = bson_iter_as_int64(&it);
            if (out->version <= 0 || out->version > INT32_MAX) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "version field value of %lld is out of range",
                         (long long)out->version);
            }
        } else if (strcmp(k, "term") == 0) {
            out->term = bson_iter_as_int64(&it);
        } else if (strcmp(k, "protocolVersion") == 0) {
            if (!is_number(&it) || bson_iter_as_int64(&it) != 1) {
                SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                         "Only protocolVersion 1 is supported");
            }
        } else if (strcmp(k, "writeConcernMajorityJournalDefault") == 0 ||
                   strcmp(k, "configsvr") == 0) {
            /* accepted */
        } else {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "Unexpected field %s in replica set configuration",
                     k);
        }
    }
    if (out->version <= 0) {
        SHL_FAIL(st, SHL_CODE_NO_SUCH_KEY, "Missing expected field \"version\"");
    }
    if (!bson_iter_init_find(&it, doc, "members") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !iter_subdoc(&it, &members)) {
        SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                 "replica set configuration must have a 'members' array");
    }
    bson_iter_init(&it, &members);
    while (bson_iter_next(&it)) {
        if (out->n == REPL_MAX_MEMBERS) {
            SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                     "Replica set configuration contains more than %d members",
                     REPL_MAX_MEMBERS);
        }
        SHL_ERR(parse_member(&it, &out->members[out->n], st));
        for (int j = 0; j < out->n; j++) {
            if (out->members[j].id == out->members[out->n].id) {
                SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                         "Found two member configurations with same _id field, members.%d._id "
                         "== members.%d._id == %d",
                         j, out->n, (int)out->members[j].id);
            }
            if (strcasecmp(out->members[j].host, out->members[out->n].host) == 0) {
                SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                         "Found two member configurations with same host field, members.%d.host "
                         "== members.%d.host == %s",
                         j, out->n, out->members[j].host);
            }
        }
        voters += out->members[out->n].votes;
        if (out->members[out->n].priority > 0) {
            electable++;
        }
        out->n++;
    }
    if (voters < 1 || voters > REPL_MAX_VOTERS) {
        SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                 "Replica set configuration contains %d voting members, but must be at least 1 "
                 "and no more than %d",
                 voters, REPL_MAX_VOTERS);
    }
    if (electable == 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_REPLICA_SET_CONFIG,
                 "Replica set configuration must contain at least one non-arbiter member with "
                 "priority > 0");
    }
    if (bson_iter_init_find(&it, doc, "settings")) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !iter_subdoc(&it, &settings)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "settings must be an object");
        }
        SHL_ERR(parse_settings(&settings, out, initiate, st));
    } else if (initiate) {
        bson_oid_init(&out->replica_set_id, NULL);
    }
    build_doc(out, doc);
done:
    return ret;
}

/* How many distinct values of tag 'tag' the members with want[i] (all when NULL) carry. */
static int
distinct_tag_values(const repl_config_t *cfg, const char *tag, const bool *want)
{
    const char *seen[REPL_MAX_MEMBERS];
    int n = 0, i = 0;
    bson_t members;
    bson_iter_t it;

    if (!bson_iter_init_find(&it, &cfg->doc, "members") || !iter_subdoc(&it, &members) ||
        !bson_iter_init(&it, &members)) {
        return 0;
    }
    while (bson_iter_next(&it) && i < cfg->n) {
        bson_iter_t t;
        bool dup = false;
        const char *v;
        if (want != NULL && !want[i++]) {
            continue;
        }
        if (want == NULL) {
            i++;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &t) ||
            !bson_iter_find(&t, "tags") || !BSON_ITER_HOLDS_DOCUMENT(&t) ||
            !bson_iter_recurse(&t, &t) || !bson_iter_find(&t, tag) || !BSON_ITER_HOLDS_UTF8(&t)) {
            continue;
        }
        v = bson_iter_utf8(&t, NULL);
        for (int j = 0; j < n && !dup; j++) {
            dup = strcmp(seen[j], v) == 0;
        }
        if (!dup) {
            seen[n++] = v;
        }
    }
    return n;
}

void
repl_config_tag_mode(const repl_config_t *cfg, const char *name, const bool *reached,
                     bool *found, bool *ok, bool *satisfiable)
{
    bson_t settings, modes, mode;
    bson_iter_t it;

    *found = shl_bson_get_subdoc(&cfg->doc, "settings", &settings) &&
             shl_bson_get_subdoc(&settings, "getLastErrorModes", &modes) &&
             shl_bson_get_subdoc(&modes, name, &mode);
    *ok = *found;
    *satisfiable = *found;
    if (*found && bson_iter_init(&it, &mode)) {
        while (bson_iter_next(&it)) {
            int64_t need = bson_iter_as_int64(&it);
            if (distinct_tag_values(cfg, bson_iter_key(&it), NULL) < need) {
                *satisfiable = false;
            }
            if (distinct_tag_values(cfg, bson_iter_key(&it), reached) < need) {
                *ok = false;
            }
        }
    }
}

void
repl_config_rebuild(repl_config_t *cfg)
{
    bson_t in;

    bson_copy_to(&cfg->doc, &in);
    build_doc(cfg, &in);
    bson_destroy(&in);
}

void
repl_config_cleanup(repl_config_t *cfg)
{
    bson_destroy(&cfg->doc);
    bson_init(&cfg->doc);
}

void
repl_config_copy(const repl_config_t *src, repl_config_t *dst)
{
    memcpy(dst, src, offsetof(repl_config_t, doc));
    bson_copy_to(&src->doc, &dst->doc);
}

int
repl_config_find(const repl_config_t *cfg, const char *host)
{
    int found = -1;

    for (int i = 0; i < cfg->n && found < 0; i++) {
        if (strcasecmp(cfg->members[i].host, host) == 0) {
            found = i;
        }
    }
    return found;
}

int
repl_config_voters(const repl_config_t *cfg)
{
    int n = 0;

    for (int i = 0; i < cfg->n; i++) {
        n += cfg->members[i].votes;
    }
    return n;
}

int
repl_config_majority(const repl_config_t *cfg)
{
    return repl_config_voters(cfg) / 2 + 1;
}

static int
desc_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : (x > y ? -1 : 0);
}

uint64_t
repl_commit_point(const repl_config_t *cfg, const uint64_t *durable)
{
    uint64_t v[REPL_MAX_MEMBERS];
    int n = 0, maj = repl_config_majority(cfg);

    for (int i = 0; i < cfg->n; i++) {
        if (cfg->members[i].votes > 0) {
            v[n++] = cfg->members[i].arbiter ? 0 : durable[i];
        }
    }
    qsort(v, (size_t)n, sizeof(v[0]), desc_u64);
    /* The maj-th highest: that many voters have it. */
    return maj <= n ? v[maj - 1] : 0;
}

int
repl_count_at(const repl_config_t *cfg, const uint64_t *applied, uint64_t ts)
{
    int n = 0;

    for (int i = 0; i < cfg->n; i++) {
        if (!cfg->members[i].arbiter && applied[i] >= ts) {
            n++;
        }
    }
    return n;
}

int
repl_optime_cmp(int64_t at, uint64_t ats, int64_t bt, uint64_t bts)
{
    int c = 0;

    if (at != bt) {
        c = at < bt ? -1 : 1;
    } else if (ats != bts) {
        c = ats < bts ? -1 : 1;
    }
    return c;
}
