/*
 * routing_table_test.c -- the chunk manager: building and validating tables, key and range
 * lookups, shard/collection versions, incremental updates (MongoDB's flatten-and-merge),
 * the version bumps of split/merge/move driven through a table-driven scenario, historical
 * routing from chunk history, and a large table checked against a linear scan.
 */
#include "base/unit_test.h"
#include "sharding/routing_table.h"

static const char *EPOCH = "5f1a2b3c4d5e6f7081920304";
#define MINK "{'$minKey': 1}"
#define MAXK "{'$maxKey': 1}"

typedef struct spec {
    const char *min, *max; /* JSON values of field x */
    const char *shard;
    uint32_t major, minor;
} spec_t;

static shl_chunk_version_t
generation(uint32_t t)
{
    bson_oid_t e;
    bson_oid_init_from_string(&e, EPOCH);
    e.bytes[0] = (uint8_t)t;
    return shl_chunk_version_make(&e, (shl_ts_t){t, 0}, 0, 0);
}

static bson_t *
xkey(const char *v)
{
    char json[256];
    snprintf(json, sizeof(json), "{'x': %s}", v);
    return shl_test_bson(json);
}

static void
make_chunk(const spec_t *s, uint32_t gen_t, shl_chunk_type_t *c)
{
    memset(c, 0, sizeof(*c));
    c->min = xkey(s->min);
    c->max = xkey(s->max);
    c->shard = bson_strdup(s->shard);
    c->version = generation(gen_t);
    c->version.major = s->major;
    c->version.minor = s->minor;
}

static shl_chunk_type_t *
make_chunks(const spec_t *specs, size_t n, uint32_t gen_t)
{
    shl_chunk_type_t *cs = bson_malloc0((n ? n : 1) * sizeof(*cs));
    for (size_t i = 0; i < n; i++) {
        make_chunk(&specs[i], gen_t, &cs[i]);
    }
    return cs;
}

static int
build_table(const spec_t *specs, size_t n, shl_routing_table_t **rt, shl_status_t *st)
{
    bson_t *pattern = shl_test_bson("{'x': 1}");
    shl_routing_table_info_t info;
    shl_chunk_type_t *cs = make_chunks(specs, n, 10);
    int ret;

    memset(&info, 0, sizeof(info));
    info.ns = "test.coll";
    info.key_pattern = pattern;
    info.allow_migrations = true;
    info.generation = generation(10);
    ret = shl_routing_table_new(&info, cs, n, rt, st);
    shl_chunk_types_free(cs, n);
    bson_destroy(pattern);
    return ret;
}

/* The shard owning x = v now (or "" with the error code in *code). */
static const char *
owner(const shl_routing_table_t *rt, const char *v, const shl_ts_t *at, int *code)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *k = xkey(v);
    const char *shard = "";
    *code = shl_routing_table_shard_for_key(rt, k, at, &shard, &st);
    bson_destroy(k);
    return *code == 0 ? shard : "";
}

#define ASSERT_OWNER(rt, v, want)                                                                  \
    do {                                                                                           \
        int code_;                                                                                 \
        ASSERT_STR_EQ(owner((rt), (v), NULL, &code_), (want));                                     \
    } while (0)

#define ASSERT_VERSION(ver, M, m)                                                                  \
    do {                                                                                           \
        shl_chunk_version_t v_ = (ver);                                                            \
        ASSERT_INT_EQ(v_.major, (M));                                                              \
        ASSERT_INT_EQ(v_.minor, (m));                                                              \
    } while (0)

SHL_TEST(routing_table_build_and_lookup)
{
    static const spec_t specs[] = {
        {"10", MAXK, "s0", 1, 2},
        {MINK, "0", "s0", 1, 0},
        {"0", "10", "s1", 1, 1},
    };
    shl_status_t st = SHL_STATUS_INIT;
    shl_routing_table_t *rt;
    int code;

    ASSERT_INT_EQ(build_table(specs, 3, &rt, &st), 0);
    ASSERT_INT_EQ(shl_routing_table_nchunks(rt), 3);
    ASSERT_STR_EQ(shl_routing_table_ns(rt), "test.coll");
    ASSERT_OWNER(rt, "-5", "s0");
    ASSERT_OWNER(rt, MINK, "s0");
    ASSERT_OWNER(rt, "null", "s0");
    ASSERT_OWNER(rt, "0", "s1");
    ASSERT_OWNER(rt, "9.5", "s1");
    ASSERT_OWNER(rt, "10", "s0");
    ASSERT_OWNER(rt, "'str'", "s0");
    owner(rt, MAXK, NULL, &code);
    ASSERT_INT_EQ(code, SHL_CODE_SHARD_KEY_NOT_FOUND);

    ASSERT_VERSION(shl_routing_table_shard_version(rt, "s0"), 1, 2);
    ASSERT_VERSION(shl_routing_table_shard_version(rt, "s1"), 1, 1);
    ASSERT_VERSION(shl_routing_table_shard_version(rt, "nope"), 0, 0);
    shl_chunk_version_t g = generation(10), nv = shl_routing_table_shard_version(rt, "nope");
    ASSERT(shl_chunk_version_same_generation(&nv, &g));
    ASSERT_VERSION(shl_routing_table_collection_version(rt), 1, 2);
    ASSERT_INT_EQ(shl_routing_table_nshards_owning(rt), 2);

    bson_t min, max;
    shl_routing_table_chunk_bounds(rt, 1, &min, &max);
    ASSERT_BSON_EQ(&min, "{'x': 0}");
    ASSERT_BSON_EQ(&max, "{'x': 10}");
    ASSERT_STR_EQ(shl_routing_table_chunk_shard(rt, 1), "s1");

    bson_t *k = xkey("3");
    size_t idx = 99;
    ASSERT_INT_EQ(shl_routing_table_find_chunk(rt, k, &idx, &st), 0);
    ASSERT_INT_EQ(idx, 1);
    bson_destroy(k);
    shl_routing_table_release(rt);
}

SHL_TEST(routing_table_rejects_bad_chunk_sets)
{
    static const struct {
        spec_t chunks[3];
        size_t n;
        const char *reason_prefix;
    } cases[] = {
        {{{MINK, "0", "s0", 1, 0}, {"5", MAXK, "s0", 1, 1}}, 2, "Gap exists in the routing table"},
        /* overlapping chunks: the newer wins (MongoDB's flatten), here leaving a gap */
        {{{MINK, "5", "s0", 1, 2}, {"3", "7", "s1", 1, 0}, {"7", MAXK, "s0", 1, 1}},
         3,
         "Gap exists in the routing table between chunks [{ x: MinKey }, { x: 5 }) and "
         "[{ x: 7 }, { x: MaxKey })"},
        {{{"0", MAXK, "s0", 1, 0}}, 1, "Not all elements of { x: 0 } are of type minKey"},
        {{{MINK, "0", "s0", 1, 0}}, 1, "Not all elements of { x: 0 } are of type maxKey"},
        {{{MINK, MAXK, "s0", 1, 0}}, 0, "Chunk map found to be empty after refresh"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        shl_status_t st = SHL_STATUS_INIT;
        shl_routing_table_t *rt = NULL;
        int ret = build_table(cases[i].chunks, cases[i].n, &rt, &st);
        if (ret != SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS || rt != NULL ||
            strncmp(st.reason, cases[i].reason_prefix, strlen(cases[i].reason_prefix)) != 0) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu: %d %s", i, ret, st.reason);
            return;
        }
    }
}

SHL_TEST(routing_table_rejects_other_generation_and_bad_width)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_routing_table_t *rt = NULL;
    bson_t *pattern = shl_test_bson("{'x': 1}");
    shl_routing_table_info_t info;
    spec_t s = {MINK, MAXK, "s0", 1, 0};
    shl_chunk_type_t c;

    memset(&info, 0, sizeof(info));
    info.ns = "test.coll";
    info.key_pattern = pattern;
    info.generation = generation(10);
    make_chunk(&s, 11, &c);
    ASSERT_INT_EQ(shl_routing_table_new(&info, &c, 1, &rt, &st),
                  SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS);
    ASSERT(strstr(st.reason, "has timestamp different from that of the collection") != NULL);
    shl_chunk_type_cleanup(&c);

    make_chunk(&s, 10, &c);
    bson_destroy(c.max);
    c.max = shl_test_bson("{'x': {'$maxKey': 1}, 'y': {'$maxKey': 1}}");
    ASSERT_INT_EQ(shl_routing_table_new(&info, &c, 1, &rt, &st), SHL_CODE_BAD_VALUE);
    shl_chunk_type_cleanup(&c);

    bson_destroy(pattern);
    pattern = shl_test_bson("{'x': -1}");
    info.key_pattern = pattern;
    make_chunk(&s, 10, &c);
    ASSERT_INT_EQ(shl_routing_table_new(&info, &c, 1, &rt, &st), SHL_CODE_BAD_VALUE);
    ASSERT(rt == NULL);
    shl_chunk_type_cleanup(&c);
    bson_destroy(pattern);
}

/* Shards for [min, max) or [min, max], joined with ','. */
static void
range_shards(const shl_routing_table_t *rt, const char *min, const char *max, bool incl,
             const shl_ts_t *at, char *buf, size_t cap, int *code)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *a = xkey(min), *b = xkey(max);
    const char *names[16];
    size_t n = 0;

    buf[0] = '\0';
    *code = shl_routing_table_shards_for_range(rt, a, b, incl, at, names, &n, &st);
    for (size_t i = 0; i < n; i++) {
        strncat(buf, i ? "," : "", cap - strlen(buf) - 1);
        strncat(buf, names[i], cap - strlen(buf) - 1);
    }
    bson_destroy(a);
    bson_destroy(b);
}

SHL_TEST(routing_table_range_targeting)
{
    static const spec_t specs[] = {
        {MINK, "0", "s0", 1, 0},
        {"0", "10", "s1", 1, 1},
        {"10", "20", "s2", 1, 2},
        {"20", MAXK, "s0", 1, 3},
    };
    static const struct {
        const char *min, *max;
        bool incl;
        const char *want;
    } cases[] = {
        {MINK, MAXK, true, "s0,s1,s2"}, {"1", "5", false, "s1"},      {"0", "10", false, "s1"},
        {"0", "10", true, "s1,s2"},     {"-1", "0", false, "s0"},     {"-1", "0", true, "s0,s1"},
        {"5", "15", false, "s1,s2"},    {"15", "25", false, "s0,s2"}, {"25", MAXK, true, "s0"},
        {"7", "7", true, "s1"},
    };
    shl_status_t st = SHL_STATUS_INIT;
    shl_routing_table_t *rt;
    char buf[128];
    int code;

    ASSERT_INT_EQ(build_table(specs, 4, &rt, &st), 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        range_shards(rt, cases[i].min, cases[i].max, cases[i].incl, NULL, buf, sizeof(buf), &code);
        if (code != 0 || strcmp(buf, cases[i].want) != 0) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu: [%s, %s%c -> '%s', want '%s'", i,
                               cases[i].min, cases[i].max, cases[i].incl ? ']' : ')', buf,
                               cases[i].want);
        }
    }
    shl_routing_table_release(rt);
}

/* ---- the operation scenario ---- */

typedef enum { OP_SPLIT, OP_MOVE, OP_MERGE } op_kind_t;

typedef struct step {
    op_kind_t op;
    const char *a;        /* split/move: chunk min; merge: range min */
    const char *b;        /* split: points "p1,p2"; move: to shard; merge: range max */
    uint32_t at;          /* cluster time of a move/merge */
    const char *layout;   /* expected "min..max@shard:M|m" per chunk, space separated */
    const char *versions; /* expected shard versions "s0=M|m s1=M|m" and "coll=M|m" */
} step_t;

static const step_t scenario[] = {
    {OP_SPLIT, MINK, "0,100", 0, "min..0@s0:1|1 0..100@s0:1|2 100..max@s0:1|3",
     "s0=1|3 s1=0|0 coll=1|3"},
    {OP_MOVE, "0", "s1", 100, "min..0@s0:2|1 0..100@s1:2|0 100..max@s0:1|3",
     "s0=2|1 s1=2|0 coll=2|1"},
    {OP_MOVE, "100", "s1", 200, "min..0@s0:3|1 0..100@s1:2|0 100..max@s1:3|0",
     "s0=3|1 s1=3|0 coll=3|1"},
    {OP_SPLIT, "100", "200", 0, "min..0@s0:3|1 0..100@s1:2|0 100..200@s1:3|2 200..max@s1:3|3",
     "s0=3|1 s1=3|3 coll=3|3"},
    {OP_MERGE, "0", "200", 300, "min..0@s0:3|1 0..200@s1:3|4 200..max@s1:3|3",
     "s0=3|1 s1=3|4 coll=3|4"},
    /* the donor's last chunk leaves: no control chunk, the donor's version drops to 0|0 */
    {OP_MOVE, MINK, "s1", 400, "min..0@s1:4|0 0..200@s1:3|4 200..max@s1:3|3",
     "s0=0|0 s1=4|0 coll=4|0"},
    {OP_MOVE, "200", "s0", 500, "min..0@s1:5|1 0..200@s1:3|4 200..max@s0:5|0",
     "s0=5|0 s1=5|1 coll=5|1"},
};

static const char *
bound_str(const bson_t *b, char *buf, size_t cap)
{
    bson_iter_t it;
    bson_iter_init(&it, b);
    bson_iter_next(&it);
    if (BSON_ITER_HOLDS_MINKEY(&it)) {
        return "min";
    }
    if (BSON_ITER_HOLDS_MAXKEY(&it)) {
        return "max";
    }
    snprintf(buf, cap, "%" PRId64, bson_iter_as_int64(&it));
    return buf;
}

static void
layout_of(const shl_routing_table_t *rt, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t i = 0; i < shl_routing_table_nchunks(rt); i++) {
        bson_t min, max;
        char a[32], b[32], one[128];
        shl_chunk_version_t v = shl_routing_table_chunk_version(rt, i);
        shl_routing_table_chunk_bounds(rt, i, &min, &max);
        snprintf(one, sizeof(one), "%s%s..%s@%s:%u|%u", i ? " " : "", bound_str(&min, a, sizeof(a)),
                 bound_str(&max, b, sizeof(b)), shl_routing_table_chunk_shard(rt, i), v.major,
                 v.minor);
        strncat(out, one, cap - strlen(out) - 1);
    }
}

static void
versions_of(const shl_routing_table_t *rt, char *out, size_t cap)
{
    shl_chunk_version_t s0 = shl_routing_table_shard_version(rt, "s0");
    shl_chunk_version_t s1 = shl_routing_table_shard_version(rt, "s1");
    shl_chunk_version_t c = shl_routing_table_collection_version(rt);
    snprintf(out, cap, "s0=%u|%u s1=%u|%u coll=%u|%u", s0.major, s0.minor, s1.major, s1.minor,
             c.major, c.minor);
}

/* Apply one step to *rt (replaced by the updated table). */
static int
apply_step(shl_routing_table_t **rt, const step_t *s, shl_status_t *st)
{
    int ret = 0;
    shl_chunk_type_t *changed = NULL, merged;
    size_t nchanged = 0;
    bson_t *a = xkey(s->a), *b = NULL;
    bson_t *points[8];
    size_t npoints = 0;
    shl_routing_table_t *next = NULL;

    memset(&merged, 0, sizeof(merged));
    if (s->op == OP_SPLIT) {
        char buf[64], *save = NULL;
        snprintf(buf, sizeof(buf), "%s", s->b);
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            points[npoints++] = xkey(tok);
        }
        SHL_ERR(shl_routing_table_plan_split(*rt, a, (const bson_t *const *)points, npoints,
                                             &changed, &nchanged, st));
    } else if (s->op == OP_MOVE) {
        SHL_ERR(shl_routing_table_plan_move(*rt, a, s->b, (shl_ts_t){s->at, 0}, &changed, &nchanged,
                                            st));
    } else {
        b = xkey(s->b);
        SHL_ERR(shl_routing_table_plan_merge(*rt, a, b, (shl_ts_t){s->at, 0}, &merged, st));
    }
    if (s->op == OP_MERGE) {
        SHL_ERR(shl_routing_table_update(*rt, &merged, 1, &next, st));
    } else {
        SHL_ERR(shl_routing_table_update(*rt, changed, nchanged, &next, st));
    }
    shl_routing_table_release(*rt);
    *rt = next;
done:
    for (size_t i = 0; i < npoints; i++) {
        bson_destroy(points[i]);
    }
    shl_chunk_types_free(changed, nchanged);
    shl_chunk_type_cleanup(&merged);
    bson_destroy(a);
    if (b != NULL) {
        bson_destroy(b);
    }
    return ret;
}

/* Rebuild a table from scratch from another's chunks (what a full refresh would load). */
static shl_routing_table_t *
rebuild(const shl_routing_table_t *rt)
{
    size_t n = shl_routing_table_nchunks(rt);
    shl_chunk_type_t *cs = bson_malloc0(n * sizeof(*cs));
    shl_routing_table_info_t info;
    shl_routing_table_t *out = NULL;
    shl_status_t st = SHL_STATUS_INIT;

    for (size_t i = 0; i < n; i++) {
        shl_routing_table_chunk_to_type(rt, i, &cs[n - 1 - i]); /* reversed on purpose */
    }
    memset(&info, 0, sizeof(info));
    info.ns = shl_routing_table_ns(rt);
    info.key_pattern = &shl_routing_table_key_pattern(rt)->pattern;
    info.generation = shl_routing_table_collection_version(rt);
    SHL_INVARIANT(shl_routing_table_new(&info, cs, n, &out, &st) == 0);
    shl_chunk_types_free(cs, n);
    return out;
}

SHL_TEST(routing_table_operation_scenario)
{
    static const spec_t start[] = {{MINK, MAXK, "s0", 1, 0}};
    shl_status_t st = SHL_STATUS_INIT;
    shl_routing_table_t *rt;
    char got[512];

    ASSERT_INT_EQ(build_table(start, 1, &rt, &st), 0);
    for (size_t i = 0; i < sizeof(scenario) / sizeof(scenario[0]); i++) {
        shl_routing_table_t *before = shl_routing_table_ref(rt), *fresh;
        char before_layout[512], fresh_layout[512];

        layout_of(before, before_layout, sizeof(before_layout));
        if (apply_step(&rt, &scenario[i], &st) != 0) {
            shl_test_fail_here(__FILE__, __LINE__, "step %zu failed: %s", i, st.reason);
            shl_routing_table_release(before);
            break;
        }
        layout_of(rt, got, sizeof(got));
        if (strcmp(got, scenario[i].layout) != 0) {
            shl_test_fail_here(__FILE__, __LINE__, "step %zu layout\n  got:  %s\n  want: %s", i,
                               got, scenario[i].layout);
        }
        versions_of(rt, got, sizeof(got));
        if (strcmp(got, scenario[i].versions) != 0) {
            shl_test_fail_here(__FILE__, __LINE__, "step %zu versions\n  got:  %s\n  want: %s", i,
                               got, scenario[i].versions);
        }
        /* the old snapshot is untouched */
        layout_of(before, got, sizeof(got));
        ASSERT_STR_EQ(got, before_layout);
        shl_routing_table_release(before);
        /* a full rebuild from the same chunks agrees with the incremental update */
        fresh = rebuild(rt);
        layout_of(fresh, fresh_layout, sizeof(fresh_layout));
        layout_of(rt, got, sizeof(got));
        ASSERT_STR_EQ(fresh_layout, got);
        versions_of(fresh, fresh_layout, sizeof(fresh_layout));
        versions_of(rt, got, sizeof(got));
        ASSERT_STR_EQ(fresh_layout, got);
        shl_routing_table_release(fresh);
    }
    ASSERT_INT_EQ(shl_routing_table_nshards_owning(rt), 2);
    ASSERT_OWNER(rt, "-1", "s1");
    ASSERT_OWNER(rt, "150", "s1");
    ASSERT_OWNER(rt, "250", "s0");
    shl_routing_table_release(rt);
}

SHL_TEST(routing_table_historical_routing)
{
    static const spec_t start[] = {{MINK, MAXK, "s0", 1, 0}};
    static const step_t steps[] = {
        {OP_SPLIT, MINK, "0", 0, "", ""},
        {OP_MOVE, "0", "s1", 100, "", ""},
        {OP_MOVE, "0", "s2", 200, "", ""},
    };
    shl_status_t st = SHL_STATUS_INIT;
    shl_routing_table_t *rt;
    shl_chunk_type_t *cs;
    shl_routing_table_t *with_history;
    char buf[64];
    int code;

    /* Give the first chunk a history starting at 50, as shardCollection writes one. */
    ASSERT_INT_EQ(build_table(start, 1, &rt, &st), 0);
    {
        shl_chunk_type_t c;
        char s0[] = "s0";
        shl_chunk_history_t h = {{50, 0}, s0};
        shl_routing_table_chunk_to_type(rt, 0, &c);
        shl_chunk_type_set_history(&c, &h, 1);
        c.version.minor = 1;
        ASSERT_INT_EQ(shl_routing_table_update(rt, &c, 1, &with_history, &st), 0);
        shl_chunk_type_cleanup(&c);
        shl_routing_table_release(rt);
        rt = with_history;
    }
    for (size_t i = 0; i < 3; i++) {
        ASSERT_INT_EQ(apply_step(&rt, &steps[i], &st), 0);
    }
    shl_ts_t t40 = {40, 0}, t50 = {50, 0}, t150 = {150, 0}, t250 = {250, 0};
    ASSERT_STR_EQ(owner(rt, "5", NULL, &code), "s2");
    ASSERT_STR_EQ(owner(rt, "5", &t250, &code), "s2");
    ASSERT_STR_EQ(owner(rt, "5", &t150, &code), "s1");
    ASSERT_STR_EQ(owner(rt, "5", &t50, &code), "s0");
    owner(rt, "5", &t40, &code);
    ASSERT_INT_EQ(code, SHL_CODE_STALE_CHUNK_HISTORY);
    ASSERT_STR_EQ(owner(rt, "-5", &t150, &code), "s0"); /* the split kept the history */

    range_shards(rt, MINK, MAXK, true, &t150, buf, sizeof(buf), &code);
    ASSERT_STR_EQ(buf, "s0,s1");
    range_shards(rt, MINK, MAXK, true, NULL, buf, sizeof(buf), &code);
    ASSERT_STR_EQ(buf, "s0,s2");
    range_shards(rt, MINK, MAXK, true, &t40, buf, sizeof(buf), &code);
    ASSERT_INT_EQ(code, SHL_CODE_STALE_CHUNK_HISTORY);
    /* names known from history stay resolvable */
    ASSERT_INT_EQ(shl_routing_table_nshard_names(rt), 3);
    ASSERT_VERSION(shl_routing_table_shard_version(rt, "s1"), 0, 0);
    ASSERT_INT_EQ(shl_routing_table_shard_valid_after(rt, "s2").t, 200);

    cs = bson_malloc0(sizeof(*cs));
    shl_routing_table_chunk_to_type(rt, 1, cs);
    ASSERT_INT_EQ(cs->nhistory, 3);
    ASSERT_STR_EQ(cs->history[0].shard, "s2");
    ASSERT_STR_EQ(cs->history[2].shard, "s0");
    ASSERT(cs->has_on_current_shard_since && cs->on_current_shard_since.t == 200);
    ASSERT_INT_EQ(shl_chunk_type_validate(cs, &st), 0);
    shl_chunk_types_free(cs, 1);

    /* A merge with no validAfter given takes the newest first validAfter of the merged
     * chunks (MongoDB's): [0, 10) arrived on s2 at 200, [10, MaxKey) has been there since
     * (its split copied the history). */
    {
        static const step_t more[] = {
            {OP_SPLIT, "0", "10", 0, "", ""},
        };
        shl_chunk_type_t merged;
        bson_t *p0 = xkey("0"), *pmax = xkey(MAXK);
        ASSERT_INT_EQ(apply_step(&rt, &more[0], &st), 0);
        ASSERT_INT_EQ(shl_routing_table_plan_merge(rt, p0, pmax, SHL_TS_NULL, &merged, &st), 0);
        ASSERT_INT_EQ(merged.nhistory, 1);
        ASSERT_STR_EQ(merged.history[0].shard, "s2");
        ASSERT_INT_EQ(merged.history[0].valid_after.t, 200);
        ASSERT(merged.on_current_shard_since.t == 200);
        shl_chunk_type_cleanup(&merged);
        bson_destroy(p0);
        bson_destroy(pmax);
    }
    shl_routing_table_release(rt);
}

SHL_TEST(routing_table_incremental_refresh_rules)
{
    static const spec_t start[] = {
        {MINK, "0", "s0", 1, 0},
        {"0", MAXK, "s1", 1, 1},
    };
    shl_status_t st = SHL_STATUS_INIT;
    shl_routing_table_t *rt, *next = NULL;
    char got[256];

    ASSERT_INT_EQ(build_table(start, 2, &rt, &st), 0);

    /* older than the collection version: MongoDB's 626840 */
    {
        spec_t s = {MINK, "0", "s1", 1, 0};
        shl_chunk_type_t c;
        make_chunk(&s, 10, &c);
        ASSERT_INT_EQ(shl_routing_table_update(rt, &c, 1, &next, &st), 626840);
        shl_chunk_type_cleanup(&c);
    }
    /* another generation: a full refresh is needed */
    {
        spec_t s = {MINK, "0", "s1", 2, 0};
        shl_chunk_type_t c;
        make_chunk(&s, 11, &c);
        ASSERT_INT_EQ(shl_routing_table_update(rt, &c, 1, &next, &st),
                      SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS);
        shl_chunk_type_cleanup(&c);
    }
    /* a refresh returns lastmod >= the cached collection version: the unchanged newest
     * chunk comes back along with the changes; two generations of the same range in one
     * batch (a split then a merge) keep the newer */
    {
        static const spec_t changed[] = {
            {"0", MAXK, "s1", 1, 1},   /* unchanged, == collection version */
            {"0", "50", "s1", 1, 2},   /* split ... */
            {"50", MAXK, "s1", 1, 3},  /* ... */
            {"0", MAXK, "s1", 1, 4},   /* ... merged back */
            {MINK, "-10", "s0", 1, 5}, /* a split of the first chunk */
            {"-10", "0", "s0", 1, 6},
        };
        shl_chunk_type_t *cs = make_chunks(changed, 6, 10);
        ASSERT_INT_EQ(shl_routing_table_update(rt, cs, 6, &next, &st), 0);
        layout_of(next, got, sizeof(got));
        ASSERT_STR_EQ(got, "min..-10@s0:1|5 -10..0@s0:1|6 0..max@s1:1|4");
        versions_of(next, got, sizeof(got));
        ASSERT_STR_EQ(got, "s0=1|6 s1=1|4 coll=1|6");
        shl_chunk_types_free(cs, 6);
        shl_routing_table_release(next);
    }
    /* a partial change that leaves a hole is refused */
    {
        spec_t s = {MINK, "-5", "s0", 1, 2};
        shl_chunk_type_t c;
        make_chunk(&s, 10, &c);
        ASSERT_INT_EQ(shl_routing_table_update(rt, &c, 1, &next, &st),
                      SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS);
        ASSERT(strncmp(st.reason, "Gap exists", 10) == 0);
        shl_chunk_type_cleanup(&c);
    }
    /* no change: an equal table */
    ASSERT_INT_EQ(shl_routing_table_update(rt, NULL, 0, &next, &st), 0);
    ASSERT_INT_EQ(shl_routing_table_nchunks(next), 2);
    shl_routing_table_release(next);
    shl_routing_table_release(rt);
}

SHL_TEST(routing_table_plan_errors)
{
    static const spec_t start[] = {
        {MINK, "0", "s0", 1, 0},
        {"0", "100", "s0", 1, 1},
        {"100", MAXK, "s1", 1, 2},
    };
    shl_status_t st = SHL_STATUS_INIT;
    shl_routing_table_t *rt;
    shl_chunk_type_t *out = NULL, merged;
    size_t nout = 0;
    bson_t *zero = xkey("0"), *p50 = xkey("50"), *p20 = xkey("20"), *p150 = xkey("150");
    bson_t *p100 = xkey("100"), *pmax = xkey(MAXK), *parr = xkey("[1]"), *p10 = xkey("10");

    ASSERT_INT_EQ(build_table(start, 3, &rt, &st), 0);
    {
        const bson_t *pts[] = {p150};
        ASSERT_INT_EQ(shl_routing_table_plan_split(rt, zero, pts, 1, &out, &nout, &st),
                      SHL_CODE_INVALID_OPTIONS);
        ASSERT_STR_EQ(st.reason,
                      "Split key { x: 150 } not contained within chunk [{ x: 0 }, { x: 100 })");
    }
    {
        const bson_t *pts[] = {p50, p20};
        ASSERT_INT_EQ(shl_routing_table_plan_split(rt, zero, pts, 2, &out, &nout, &st),
                      SHL_CODE_INVALID_OPTIONS);
        ASSERT_STR_EQ(st.reason, "Split keys must be specified in strictly increasing order. "
                                 "Key { x: 20 } was specified after { x: 50 }.");
    }
    {
        const bson_t *pts[] = {zero};
        ASSERT_INT_EQ(shl_routing_table_plan_split(rt, zero, pts, 1, &out, &nout, &st),
                      SHL_CODE_INVALID_OPTIONS);
        ASSERT_STR_EQ(st.reason,
                      "Split on lower bound of chunk [{ x: 0 }, { x: 0 })is not allowed");
    }
    {
        const bson_t *pts[] = {p20, p20};
        ASSERT_INT_EQ(shl_routing_table_plan_split(rt, zero, pts, 2, &out, &nout, &st),
                      SHL_CODE_INVALID_OPTIONS);
    }
    {
        const bson_t *pts[] = {p100};
        ASSERT_INT_EQ(shl_routing_table_plan_split(rt, zero, pts, 1, &out, &nout, &st),
                      SHL_CODE_INVALID_OPTIONS);
    }
    {
        const bson_t *pts[] = {parr};
        ASSERT_INT_EQ(shl_routing_table_plan_split(rt, zero, pts, 1, &out, &nout, &st),
                      SHL_CODE_BAD_VALUE);
    }
    {
        const bson_t *pts[] = {p20};
        ASSERT_INT_EQ(shl_routing_table_plan_split(rt, p10, pts, 1, &out, &nout, &st),
                      SHL_CODE_ILLEGAL_OPERATION); /* no chunk starts at 10 */
    }
    ASSERT(out == NULL && nout == 0);
    /* merge across shards, off boundaries, a single chunk */
    ASSERT_INT_EQ(shl_routing_table_plan_merge(rt, zero, pmax, (shl_ts_t){1, 0}, &merged, &st),
                  SHL_CODE_ILLEGAL_OPERATION);
    ASSERT(strstr(st.reason, "more than one shard") != NULL);
    ASSERT_INT_EQ(shl_routing_table_plan_merge(rt, zero, p50, (shl_ts_t){1, 0}, &merged, &st),
                  SHL_CODE_ILLEGAL_OPERATION);
    ASSERT_INT_EQ(shl_routing_table_plan_merge(rt, zero, p100, (shl_ts_t){1, 0}, &merged, &st),
                  SHL_CODE_ILLEGAL_OPERATION);
    ASSERT(strstr(st.reason, "only one chunk") != NULL);
    /* a move to where the chunk already is */
    ASSERT_INT_EQ(shl_routing_table_plan_move(rt, zero, "s0", (shl_ts_t){1, 0}, &out, &nout, &st),
                  SHL_CODE_INVALID_OPTIONS);
    /* a good split keeps the _id on the first piece only, clears jumbo */
    {
        const bson_t *pts[] = {p20, p50};
        ASSERT_INT_EQ(shl_routing_table_plan_split(rt, zero, pts, 2, &out, &nout, &st), 0);
        ASSERT_INT_EQ(nout, 3);
        ASSERT_BSON_EQ(out[1].min, "{'x': 20}");
        ASSERT_BSON_EQ(out[1].max, "{'x': 50}");
        ASSERT_VERSION(out[2].version, 1, 5);
        ASSERT(!out[1].has_id);
        shl_chunk_types_free(out, nout);
    }
    bson_destroy(zero);
    bson_destroy(p50);
    bson_destroy(p20);
    bson_destroy(p150);
    bson_destroy(p100);
    bson_destroy(pmax);
    bson_destroy(parr);
    bson_destroy(p10);
    shl_routing_table_release(rt);
}

SHL_TEST(routing_table_hashed_key)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *pattern = shl_test_bson("{'h': 'hashed'}");
    bson_t *doc = shl_test_bson("{'_id': 1, 'h': 'abc'}"), key;
    shl_routing_table_info_t info;
    shl_chunk_type_t cs[2];
    shl_routing_table_t *rt;
    const char *shard;
    bson_iter_t it;

    memset(&info, 0, sizeof(info));
    memset(cs, 0, sizeof(cs));
    info.ns = "test.h";
    info.key_pattern = pattern;
    info.generation = generation(10);
    cs[0].min = shl_test_bson("{'h': {'$minKey': 1}}");
    cs[0].max = shl_test_bson("{'h': {'$numberLong': '0'}}");
    cs[0].shard = bson_strdup("s0");
    cs[1].min = shl_test_bson("{'h': {'$numberLong': '0'}}");
    cs[1].max = shl_test_bson("{'h': {'$maxKey': 1}}");
    cs[1].shard = bson_strdup("s1");
    for (int i = 0; i < 2; i++) {
        cs[i].version = generation(10);
        cs[i].version.major = 1;
        cs[i].version.minor = (uint32_t)i;
    }
    ASSERT_INT_EQ(shl_routing_table_new(&info, cs, 2, &rt, &st), 0);
    ASSERT_INT_EQ(shl_shard_key_extract_from_doc(shl_routing_table_key_pattern(rt), doc, &key, &st),
                  0);
    ASSERT(bson_iter_init_find(&it, &key, "h"));
    ASSERT_INT_EQ(shl_routing_table_shard_for_key(rt, &key, NULL, &shard, &st), 0);
    ASSERT_STR_EQ(shard, bson_iter_int64(&it) < 0 ? "s0" : "s1");
    bson_destroy(&key);
    shl_routing_table_release(rt);
    shl_chunk_type_cleanup(&cs[0]);
    shl_chunk_type_cleanup(&cs[1]);
    bson_destroy(pattern);
    bson_destroy(doc);
}

SHL_TEST(routing_table_large_table_matches_linear_scan)
{
    enum { N = 5000 };
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *pattern = shl_test_bson("{'x': 1, 'y': 1}");
    shl_routing_table_info_t info;
    shl_chunk_type_t *cs = bson_malloc0(N * sizeof(*cs));
    shl_routing_table_t *rt;
    char sh[16];

    /* Chunk i covers [{x: 10 i, y: MinKey}, {x: 10 (i+1), y: MinKey}); first and last open. */
    for (int i = 0; i < N; i++) {
        cs[i].min = bson_new();
        cs[i].max = bson_new();
        if (i == 0) {
            bson_append_minkey(cs[i].min, "x", -1);
        } else {
            BSON_APPEND_INT32(cs[i].min, "x", 10 * i);
        }
        bson_append_minkey(cs[i].min, "y", -1);
        if (i == N - 1) {
            bson_append_maxkey(cs[i].max, "x", -1);
            bson_append_maxkey(cs[i].max, "y", -1);
        } else {
            BSON_APPEND_INT32(cs[i].max, "x", 10 * (i + 1));
            bson_append_minkey(cs[i].max, "y", -1);
        }
        snprintf(sh, sizeof(sh), "s%d", i % 7);
        cs[i].shard = bson_strdup(sh);
        cs[i].version = generation(10);
        cs[i].version.major = 1;
        cs[i].version.minor = (uint32_t)i;
    }
    memset(&info, 0, sizeof(info));
    info.ns = "test.big";
    info.key_pattern = pattern;
    info.generation = generation(10);
    ASSERT_INT_EQ(shl_routing_table_new(&info, cs, N, &rt, &st), 0);
    ASSERT_INT_EQ(shl_routing_table_nshards_owning(rt), 7);
    ASSERT_VERSION(shl_routing_table_collection_version(rt), 1, N - 1);
    for (int k = -3; k < 10 * N + 3; k += 7) {
        bson_t key = BSON_INITIALIZER;
        size_t idx;
        BSON_APPEND_INT32(&key, "x", k);
        BSON_APPEND_UTF8(&key, "y", "v");
        ASSERT_INT_EQ(shl_routing_table_find_chunk(rt, &key, &idx, &st), 0);
        int want = k < 10 ? 0 : (k / 10 >= N ? N - 1 : k / 10);
        if ((int)idx != want) {
            shl_test_fail_here(__FILE__, __LINE__, "x=%d: chunk %zu, want %d", k, idx, want);
            bson_destroy(&key);
            break;
        }
        bson_destroy(&key);
    }
    shl_routing_table_release(rt);
    shl_chunk_types_free(cs, N);
    bson_destroy(pattern);
}
