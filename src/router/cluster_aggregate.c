/*
 * cluster_aggregate.c -- the router's aggregate: the pipeline is split into a shards part
 * (the streaming stages up to the first blocking one, plus that stage's shard half) and a
 * merge part run at the router by the pipeline engine (src/query/pipeline.h) over the merged
 * shard cursors: $sort is merged by its key, $limit also pushed to the shards, $group split
 * into partial groups and a final group ($avg as sum and count), $count as $group+$project.
 * A pipeline that targets one shard runs there whole, unless it reads another collection
 * ($lookup, $unionWith, $graphLookup, nested too) that is sharded or the shard is not the
 * database's primary: a shard sees only its local copy, so those stages then run in the
 * merger, whose environment reads the foreign collection through the router's own routing
 * (as MongoDB 5.1+ does). A final $out/$merge is written by the router
 * (cluster_agg_output.c) unless the one shard reached is where its target lives. Issue 6
 * item 3 ("reads").
 */
#include <string.h>

#include "base/clock.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "net/command_args.h"
#include "net/service.h"
#include "query/expression.h"
#include "router/router_private.h"
#include "session/session_commands.h"
#include "session/sessions_collection.h"

/* Stages that run document by document and may run on each shard (the stage table's split
 * property, query/pipeline.h). */
static bool
is_streaming(const char *name)
{
    return shl_pipeline_stage_split(name) == SHL_PIPELINE_SPLIT_STREAMING;
}

typedef struct agg_plan {
    const bson_t *cmd;
    int64_t now_ms;        /* $$NOW of the shards and the merger */
    uint64_t cluster_time; /* $$CLUSTER_TIME of the shards and the merger (0: none) */
    bson_t pipeline; /* the user's (static view) */
    const bson_t *filter;
    bson_t filter_view;
    bson_t shards_part; /* array */
    uint32_t nshards;
    bson_t merge_a; /* array: the merge part (up to and including a split $group) */
    uint32_t nmerge_a;
    bson_t merge_b; /* array: after the $avg fix-up */
    uint32_t nmerge_b;
    bool split;   /* a blocking stage was found: there is a merge part */
    bool has_avg; /* merge_b is used */
    char **avg_fields;
    bool has_sort;
    bson_t sort; /* static view of the split $sort's spec */
    bool explain;
    bool single; /* the last build sent the whole pipeline to one shard */
    /* Where the other namespaces live, as the catalog cache knows it: computed by
     * plan_routing before each attempt (the previous one's stale error may have refreshed
     * one of them). */
    shl_router_t *r;
    const char *db;                   /* the aggregate's database */
    const shl_pipeline_output_t *out; /* the final $out/$merge, or NULL */
    /* Stages reading other collections ($lookup, $unionWith, $graphLookup, nested too): */
    bool has_foreign;     /* some stage reads another collection */
    bool foreign_sharded; /* one of those collections is sharded */
    char **unsharded;     /* the others ("db.coll", once each; bson_strfreev) */
    size_t nunsharded;
    /* A $out/$merge ending the pipeline: where its target lives (router_agg_out_locate). */
    bool has_output;
    bool out_sharded;
    char out_primary[SHL_SHARD_ID_MAX]; /* "" when unknown */
    char out_ns[SHL_NS_MAX + 1];
    shl_database_version_t out_db_version; /* of the target's database, when out_primary */
} agg_plan_t;

static void
arr_push_doc(bson_t *arr, uint32_t *n, const bson_t *doc)
{
    char k[16];
    const char *kp;
    bson_uint32_to_string((*n)++, &kp, k, sizeof(k));
    bson_append_document(arr, kp, -1, doc);
}

/* Append {name: value} as one stage. */
static void
arr_push_stage(bson_t *arr, uint32_t *n, const char *name, const bson_value_t *v)
{
    bson_t st = BSON_INITIALIZER;
    bson_append_value(&st, name, -1, v);
    arr_push_doc(arr, n, &st);
    bson_destroy(&st);
}

/* The expression {$and: [{$gt: [e, null]}, {$lt: [e, ""]}]}: e is a number (canonical order
 * puts numbers between null and strings), so $sum of {$cond: [it, 1, 0]} counts what $avg
 * averages. */
static void
append_numeric_count(bson_t *out, const char *field, const bson_value_t *e)
{
    bson_t f, sum, args, and, andv, gt, gta, lt, lta;

    BSON_APPEND_DOCUMENT_BEGIN(out, field, &f);
    BSON_APPEND_DOCUMENT_BEGIN(&f, "$sum", &sum);
    BSON_APPEND_ARRAY_BEGIN(&sum, "$cond", &args);
    BSON_APPEND_DOCUMENT_BEGIN(&args, "0", &and);
    BSON_APPEND_ARRAY_BEGIN(&and, "$and", &andv);
    BSON_APPEND_DOCUMENT_BEGIN(&andv, "0", &gt);
    BSON_APPEND_ARRAY_BEGIN(&gt, "$gt", &gta);
    bson_append_value(&gta, "0", 1, e);
    bson_append_null(&gta, "1", 1);
    bson_append_array_end(&gt, &gta);
    bson_append_document_end(&andv, &gt);
    BSON_APPEND_DOCUMENT_BEGIN(&andv, "1", &lt);
    BSON_APPEND_ARRAY_BEGIN(&lt, "$lt", &lta);
    bson_append_value(&lta, "0", 1, e);
    bson_append_utf8(&lta, "1", 1, "", 0);
    bson_append_array_end(&lt, &lta);
    bson_append_document_end(&andv, &lt);
    bson_append_array_end(&and, &andv);
    bson_append_document_end(&args, &and);
    BSON_APPEND_INT32(&args, "1", 1);
    BSON_APPEND_INT32(&args, "2", 0);
    bson_append_array_end(&sum, &args);
    bson_append_document_end(&f, &sum);
    bson_append_document_end(out, &f);
}

/* {field: {op: "$field"}} */
static void
append_merge_acc(bson_t *out, const char *field, const char *op, const char *src_field)
{
    bson_t f;
    char path[SHL_NS_MAX + 32];
    snprintf(path, sizeof(path), "$%s", src_field);
    BSON_APPEND_DOCUMENT_BEGIN(out, field, &f);
    BSON_APPEND_UTF8(&f, op, path);
    bson_append_document_end(out, &f);
}

/*
 * Split a $group spec into the shards' partial group and the router's final one. Returns
 * false (outputs unusable) when an accumulator has no merge here ($push, $addToSet, ...):
 * the caller then runs the whole $group at the router.
 */
static bool
split_group(const bson_t *spec, bson_t *partial, bson_t *merge, char ***avg_fields)
{
    bson_iter_t it, acc;
    size_t navg = 0;

    *avg_fields = NULL;
    bson_iter_init(&it, spec);
    while (shl_iter_next(&it)) {
        const char *f = shl_iter_key(&it);
        const char *op;
        const bson_value_t *e;
        char nname[SHL_NS_MAX + 32];

        if (strcmp(f, "_id") == 0) {
            bson_append_iter(partial, NULL, 0, &it);
            BSON_APPEND_UTF8(merge, "_id", "$_id");
            continue;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &acc) ||
            !shl_iter_next(&acc)) {
            return false;
        }
        op = shl_iter_key(&acc);
        e = bson_iter_value(&acc);
        if (strcmp(op, "$sum") == 0 || strcmp(op, "$count") == 0) {
            bson_t pf;
            BSON_APPEND_DOCUMENT_BEGIN(partial, f, &pf);
            if (strcmp(op, "$count") == 0) {
                BSON_APPEND_INT32(&pf, "$sum", 1);
            } else {
                bson_append_value(&pf, "$sum", 4, e);
            }
            bson_append_document_end(partial, &pf);
            append_merge_acc(merge, f, "$sum", f);
        } else if (strcmp(op, "$min") == 0 || strcmp(op, "$max") == 0 ||
                   strcmp(op, "$first") == 0 || strcmp(op, "$last") == 0) {
            bson_append_iter(partial, NULL, 0, &it);
            append_merge_acc(merge, f, op, f);
        } else if (strcmp(op, "$avg") == 0) {
            bson_t pf;
            BSON_APPEND_DOCUMENT_BEGIN(partial, f, &pf);
            bson_append_value(&pf, "$sum", 4, e);
            bson_append_document_end(partial, &pf);
            snprintf(nname, sizeof(nname), "__shl_avgn_%s", f);
            append_numeric_count(partial, nname, e);
            append_merge_acc(merge, f, "$sum", f);
            append_merge_acc(merge, nname, "$sum", nname);
            *avg_fields = bson_realloc(*avg_fields, (navg + 2) * sizeof(char *));
            (*avg_fields)[navg++] = bson_strdup(f);
            (*avg_fields)[navg] = NULL;
        } else {
            if (*avg_fields != NULL) {
                bson_strfreev(*avg_fields);
                *avg_fields = NULL;
            }
            return false;
        }
    }
    return true;
}

/* Stage i of the user's pipeline: its name and spec value. */
typedef struct stage_ref {
    const char *name;
    bson_value_t v;
} stage_ref_t;

static size_t
list_stages(const bson_t *pipeline, stage_ref_t **out)
{
    size_t n = 0, cap = bson_count_keys(pipeline) + 1;
    bson_iter_t it, s;

    *out = bson_malloc0(cap * sizeof(**out));
    bson_iter_init(&it, pipeline);
    while (shl_iter_next(&it)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &s) && shl_iter_next(&s)) {
            (*out)[n].name = shl_iter_key(&s);
            (*out)[n].v = *bson_iter_value(&s);
            n++;
        }
    }
    return n;
}

/* {$skip: s}, {$limit: l} at stage i: each shard needs to send at most s + l documents. */
static void
push_skip_limit(agg_plan_t *p, const stage_ref_t *s, size_t n, size_t i)
{
    bson_t tmp = BSON_INITIALIZER;
    bson_iter_t a, b;

    if (i + 1 >= n || strcmp(s[i].name, "$skip") != 0 || strcmp(s[i + 1].name, "$limit") != 0) {
        bson_destroy(&tmp);
        return;
    }
    bson_append_value(&tmp, "s", 1, &s[i].v);
    bson_append_value(&tmp, "l", 1, &s[i + 1].v);
    if (bson_iter_init_find(&a, &tmp, "s") && BSON_ITER_HOLDS_NUMBER(&a) &&
        bson_iter_init_find(&b, &tmp, "l") && BSON_ITER_HOLDS_NUMBER(&b)) {
        bson_value_t lim;
        lim.value_type = BSON_TYPE_INT64;
        lim.value.v_int64 = bson_iter_as_int64(&a) + bson_iter_as_int64(&b);
        arr_push_stage(&p->shards_part, &p->nshards, "$limit", &lim);
    }
    bson_destroy(&tmp);
}

static void
split_pipeline(agg_plan_t *p)
{
    stage_ref_t *s = NULL;
    size_t n = list_stages(&p->pipeline, &s), i = 0;
    bson_t *rest = &p->merge_a;
    uint32_t *nrest = &p->nmerge_a;

    bson_init(&p->shards_part);
    bson_init(&p->merge_a);
    bson_init(&p->merge_b);
    if (n > 0 && shl_pipeline_stage_split(s[0].name) == SHL_PIPELINE_SPLIT_EACH_SHARD) {
        /* One document per shard (and index), made by each shard: the merger only
         * concatenates them, as mongos does. */
        arr_push_stage(&p->shards_part, &p->nshards, s[0].name, &s[0].v);
        i++;
    }
    while (i < n && is_streaming(s[i].name)) {
        arr_push_stage(&p->shards_part, &p->nshards, s[i].name, &s[i].v);
        i++;
    }
    if (i == n) {
        goto done;
    }
    p->split = true;
    if (strcmp(s[i].name, "$sort") == 0 && s[i].v.value_type == BSON_TYPE_DOCUMENT) {
        arr_push_stage(&p->shards_part, &p->nshards, "$sort", &s[i].v);
        p->has_sort =
            bson_init_static(&p->sort, s[i].v.value.v_doc.data, s[i].v.value.v_doc.data_len);
        i++;
        /* A following $limit (after an optional $skip) bounds what each shard must send. */
        if (i < n && strcmp(s[i].name, "$limit") == 0) {
            arr_push_stage(&p->shards_part, &p->nshards, "$limit", &s[i].v);
        } else {
            push_skip_limit(p, s, n, i);
        }
    } else if (strcmp(s[i].name, "$limit") == 0) {
        arr_push_stage(&p->shards_part, &p->nshards, "$limit", &s[i].v);
    } else if (strcmp(s[i].name, "$skip") == 0) {
        push_skip_limit(p, s, n, i);
    } else if (strcmp(s[i].name, "$group") == 0 && s[i].v.value_type == BSON_TYPE_DOCUMENT) {
        bson_t spec, partial = BSON_INITIALIZER, merge = BSON_INITIALIZER, st;
        char **avg = NULL;
        bson_init_static(&spec, s[i].v.value.v_doc.data, s[i].v.value.v_doc.data_len);
        if (split_group(&spec, &partial, &merge, &avg)) {
            bson_init(&st);
            BSON_APPEND_DOCUMENT(&st, "$group", &partial);
            arr_push_doc(&p->shards_part, &p->nshards, &st);
            bson_reinit(&st);
            BSON_APPEND_DOCUMENT(&st, "$group", &merge);
            arr_push_doc(&p->merge_a, &p->nmerge_a, &st);
            bson_destroy(&st);
            i++;
            if (avg != NULL) {
                p->has_avg = true;
                p->avg_fields = avg;
                rest = &p->merge_b;
                nrest = &p->nmerge_b;
            }
        }
        bson_destroy(&partial);
        bson_destroy(&merge);
    } else if (strcmp(s[i].name, "$sortByCount") == 0) {
        /* {$group: {_id: expr, count: {$sum: 1}}}, {$sort: {count: -1}}, as MongoDB. */
        bson_t st = BSON_INITIALIZER, g, f, so;
        BSON_APPEND_DOCUMENT_BEGIN(&st, "$group", &g);
        bson_append_value(&g, "_id", 3, &s[i].v);
        BSON_APPEND_DOCUMENT_BEGIN(&g, "count", &f);
        BSON_APPEND_INT32(&f, "$sum", 1);
        bson_append_document_end(&g, &f);
        bson_append_document_end(&st, &g);
        arr_push_doc(&p->shards_part, &p->nshards, &st);
        bson_reinit(&st);
        BSON_APPEND_DOCUMENT_BEGIN(&st, "$group", &g);
        BSON_APPEND_UTF8(&g, "_id", "$_id");
        BSON_APPEND_DOCUMENT_BEGIN(&g, "count", &f);
        BSON_APPEND_UTF8(&f, "$sum", "$count");
        bson_append_document_end(&g, &f);
        bson_append_document_end(&st, &g);
        arr_push_doc(&p->merge_a, &p->nmerge_a, &st);
        bson_reinit(&st);
        BSON_APPEND_DOCUMENT_BEGIN(&st, "$sort", &so);
        BSON_APPEND_INT32(&so, "count", -1);
        bson_append_document_end(&st, &so);
        arr_push_doc(&p->merge_a, &p->nmerge_a, &st);
        bson_destroy(&st);
        i++;
    } else if (strcmp(s[i].name, "$count") == 0 && s[i].v.value_type == BSON_TYPE_UTF8) {
        const char *name = s[i].v.value.v_utf8.str;
        bson_t st = BSON_INITIALIZER, g, f, pr;
        char path[SHL_NS_MAX + 32];
        BSON_APPEND_DOCUMENT_BEGIN(&st, "$group", &g);
        BSON_APPEND_NULL(&g, "_id");
        BSON_APPEND_DOCUMENT_BEGIN(&g, name, &f);
        BSON_APPEND_INT32(&f, "$sum", 1);
        bson_append_document_end(&g, &f);
        bson_append_document_end(&st, &g);
        arr_push_doc(&p->shards_part, &p->nshards, &st);
        bson_reinit(&st);
        snprintf(path, sizeof(path), "$%s", name);
        BSON_APPEND_DOCUMENT_BEGIN(&st, "$group", &g);
        BSON_APPEND_NULL(&g, "_id");
        BSON_APPEND_DOCUMENT_BEGIN(&g, name, &f);
        BSON_APPEND_UTF8(&f, "$sum", path);
        bson_append_document_end(&g, &f);
        bson_append_document_end(&st, &g);
        arr_push_doc(&p->merge_a, &p->nmerge_a, &st);
        bson_reinit(&st);
        BSON_APPEND_DOCUMENT_BEGIN(&st, "$project", &pr);
        BSON_APPEND_INT32(&pr, "_id", 0);
        BSON_APPEND_INT32(&pr, name, 1);
        bson_append_document_end(&st, &pr);
        arr_push_doc(&p->merge_a, &p->nmerge_a, &st);
        bson_destroy(&st);
        i++;
    }
    for (; i < n; i++) {
        arr_push_stage(rest, nrest, s[i].name, &s[i].v);
    }
done:
    bson_free(s);
}

static void
unsharded_clear(agg_plan_t *p)
{
    for (size_t i = 0; i < p->nunsharded; i++) {
        bson_free(p->unsharded[i]);
    }
    bson_free(p->unsharded);
    p->unsharded = NULL;
    p->nunsharded = 0;
}

static void
plan_cleanup(agg_plan_t *p)
{
    unsharded_clear(p);
    bson_destroy(&p->shards_part);
    bson_destroy(&p->merge_a);
    bson_destroy(&p->merge_b);
    if (p->avg_fields != NULL) {
        bson_strfreev(p->avg_fields);
    }
}

/* One entry of SHL_INVOLVED_VERSIONS_FIELD: 'ns' routed as unsharded in a database of
 * version 'dbv'. */
static void
append_involved(bson_t *arr, uint32_t *n, const char *ns, const shl_database_version_t *dbv)
{
    char key[16];
    const char *kp;
    bson_t e;
    shl_shard_version_t sv = shl_shard_version_unsharded();

    bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
    BSON_APPEND_DOCUMENT_BEGIN(arr, kp, &e);
    BSON_APPEND_UTF8(&e, "ns", ns);
    shl_shard_version_append(&e, "shardVersion", &sv);
    if (!shl_database_version_is_fixed(dbv)) {
        shl_database_version_append(&e, "databaseVersion", dbv);
    }
    bson_append_document_end(arr, &e);
}

static void
build_agg(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    static const char *const skip[] = {"pipeline", "cursor", "explain", SHL_INVOLVED_VERSIONS_FIELD,
                                       NULL};
    agg_plan_t *p = arg;
    shl_router_shards_t t;
    bson_t cur;
    (void)shard;

    if (p->filter != NULL && shl_router_collation_strips(p->cmd, rr)) {
        bson_t tf;
        shl_router_targeting_filter(p->cmd, rr, p->filter, &tf);
        shl_router_target_filter(rr, &tf, &t);
        bson_destroy(&tf);
    } else {
        shl_router_target_filter(rr, p->filter, &t);
    }
    /* A shard reads foreign collections from its local copy, which is complete only for an
     * unsharded collection on the database's primary shard; otherwise the stages reading
     * them run in the merger here, which reads them through the router. */
    p->single = t.n == 1 && (!p->has_foreign ||
                             (!p->foreign_sharded && strcmp(t.names[0], rr->db.primary) == 0));
    /* A data node writes $out/$merge to its local copy, which is the target only when that
     * is unsharded and the shard is its database's primary; otherwise the router writes. */
    p->single = p->single &&
                (!p->has_output || (!p->out_sharded && strcmp(t.names[0], p->out_primary) == 0));
    shl_router_shards_cleanup(&t);
    router_copy_command(p->cmd, skip, cmd);
    if (p->now_ms != 0) {
        router_append_runtime_constants(p->now_ms, p->cluster_time, cmd);
    }
    BSON_APPEND_ARRAY(cmd, "pipeline", p->single ? &p->pipeline : &p->shards_part);
    if (p->single && (p->nunsharded > 0 || p->has_output)) {
        /* The shard reads and writes these over its local copies because this router's
         * cache says they are unsharded (and the shard their primary): the shard checks
         * that, so a shardCollection this router missed comes back as StaleConfig naming
         * the collection, which the retry refreshes and re-plans with (plan_routing). */
        bson_t arr;
        uint32_t n = 0;
        BSON_APPEND_ARRAY_BEGIN(cmd, SHL_INVOLVED_VERSIONS_FIELD, &arr);
        for (size_t i = 0; i < p->nunsharded; i++) {
            append_involved(&arr, &n, p->unsharded[i], &rr->db.version);
        }
        if (p->has_output) {
            append_involved(&arr, &n, p->out_ns, &p->out_db_version);
        }
        bson_append_array_end(cmd, &arr);
    }
    if (p->explain) {
        BSON_APPEND_BOOL(cmd, "explain", true);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(cmd, "cursor", &cur);
        bson_append_document_end(cmd, &cur);
    }
}

int
router_cursor_batch_size(const bson_t *cmd, int64_t *out, bool *zero, shl_status_t *st)
{
    bson_iter_t it, sub;
    int ret = 0;

    *out = 0;
    *zero = false;
    if (!bson_iter_init_find(&it, cmd, "cursor")) {
        goto done;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                 "BSON field '%s.cursor' is the wrong type '%s', expected type 'object'",
                 shl_cmd_name(cmd), shl_bson_type_name(shl_iter_type(&it)));
    }
    bson_iter_recurse(&it, &sub);
    if (bson_iter_find(&sub, "batchSize")) {
        if (!BSON_ITER_HOLDS_NUMBER(&sub)) {
            SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                     "BSON field 'cursor.batchSize' is the wrong type '%s', expected types "
                     "'[long, int, decimal, double]'",
                     shl_bson_type_name(shl_iter_type(&sub)));
        }
        *out = bson_iter_as_int64(&sub);
        if (*out < 0) {
            SHL_FAIL(st, 51024, "BSON field 'batchSize' value must be >= 0, actual value '%lld'",
                     (long long)*out);
        }
        *zero = *out == 0;
    }
done:
    return ret;
}

/* The merger part as one array: merge_a then merge_b. */
static void
merger_part(const agg_plan_t *p, bson_t *out)
{
    uint32_t nm = 0;
    bson_iter_t it;
    const bson_t *parts[2] = {&p->merge_a, &p->merge_b};

    bson_init(out);
    for (size_t k = 0; k < 2; k++) {
        bson_iter_init(&it, parts[k]);
        while (shl_iter_next(&it)) {
            char key[16];
            const char *kp;
            bson_uint32_to_string(nm++, &kp, key, sizeof(key));
            bson_append_value(out, kp, -1, bson_iter_value(&it));
        }
    }
}

void
router_agg_split(const bson_t *pipeline, bson_t *shards_part, bson_t *merger, bool *split)
{
    agg_plan_t p;

    memset(&p, 0, sizeof(p));
    bson_init_static(&p.pipeline, bson_get_data(pipeline), pipeline->len);
    split_pipeline(&p);
    bson_copy_to(&p.shards_part, shards_part);
    merger_part(&p, merger);
    *split = p.split;
    plan_cleanup(&p);
}

/* mongos's aggregate explain: splitPipeline and the shards' own explain output. */
static void
append_agg_explain(shl_op_ctx_t *op, const agg_plan_t *p, shl_router_shard_result_t *results,
                   size_t n, bson_t *reply)
{
    shl_router_t *r = shl_router_get(op);
    bson_t sp, shards, si;

    BSON_APPEND_UTF8(reply, "mergeType", p->single ? "anyShard" : "mongos");
    if (p->single) {
        BSON_APPEND_NULL(reply, "splitPipeline");
    } else {
        bson_t merger;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "splitPipeline", &sp);
        BSON_APPEND_ARRAY(&sp, "shardsPart", &p->shards_part);
        merger_part(p, &merger);
        BSON_APPEND_ARRAY(&sp, "mergerPart", &merger);
        bson_destroy(&merger);
        bson_append_document_end(reply, &sp);
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "shards", &shards);
    for (size_t i = 0; i < n; i++) {
        bson_t sh;
        char host[SHL_CLIENT_HOST_MAX];
        router_shard_host(r, results[i].shard, host, sizeof(host));
        BSON_APPEND_DOCUMENT_BEGIN(&shards, results[i].shard, &sh);
        BSON_APPEND_UTF8(&sh, "host", host);
        shl_router_copy_reply_fields(&results[i].res.reply, &sh);
        bson_append_document_end(&shards, &sh);
    }
    bson_append_document_end(reply, &shards);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "serverInfo", &si);
    BSON_APPEND_UTF8(&si, "host", op->svc->me);
    bson_append_document_end(reply, &si);
}

/*
 * collectionless_aggregate --
 *     `aggregate: 1` on a user database: a pipeline starting with $documents needs no shard,
 *     so it runs here whole (stages that read collections fail with NotImplemented) and the
 *     results come back in the first batch, or go to the target of a final $out/$merge.
 */
static int
collectionless_aggregate(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_t pipeline, let, docs = BSON_INITIALIZER;
    bool found, has_let = false, bypass = false;
    shl_pipeline_opts_t opts;
    shl_pipeline_t *pl = NULL;
    router_agg_out_t *w = NULL;
    shl_ns_t ns;
    const char *first;

    SHL_ERR(shl_cmd_get_array(cmd, "pipeline", &pipeline, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'aggregate.pipeline' is missing but a required field");
    }
    if (!bson_has_field(cmd, "cursor")) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "The 'cursor' option is required, except for aggregate with the explain "
                 "argument");
    }
    SHL_ERR(shl_cmd_get_doc(cmd, "let", &let, &has_let, st));
    memset(&opts, 0, sizeof(opts));
    opts.vars = has_let ? &let : NULL;
    SHL_ERR(shl_pipeline_parse(&pipeline, &opts, &pl, st));
    first = shl_pipeline_first_stage(pl);
    if (first == NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                 "{aggregate: 1} is not valid for an empty pipeline.");
    }
    if (strcmp(first, "$documents") != 0) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                 "{aggregate: 1} is not valid for '%s'; a collection is required.", first);
    }
    if (shl_pipeline_output(pl) != NULL) {
        SHL_ERR(shl_cmd_get_bool(cmd, "bypassDocumentValidation", &bypass, st));
        SHL_ERR(router_agg_out_begin(op, pl, op->db, bypass, &w, st));
    }
    /* With $out/$merge the documents go to the target a batch at a time and the reply's
     * cursor is empty, as MongoDB's; without, they all come back in the first batch, which
     * must fit in a reply. */
    for (uint32_t n = 0;; n++) {
        const bson_t *d;
        char k[16];
        const char *kp;
        SHL_ERR(shl_pipeline_next(pl, &d, st));
        if (d == NULL) {
            break;
        }
        SHL_ERR(shl_msg_reply_doc_check(d->len, st));
        if (!shl_bson_array_has_room(&docs, n, d->len, SHL_ROUTER_CURSOR_MAX_BATCH_BYTES)) {
            if (w == NULL) {
                SHL_FAIL(st, SHL_CODE_BSON_OBJECT_TOO_LARGE,
                         "the results of a collection-less aggregate exceed %d bytes",
                         SHL_ROUTER_CURSOR_MAX_BATCH_BYTES);
            }
            SHL_ERR(router_agg_out_write(w, &docs, st));
            bson_reinit(&docs);
            n = 0;
        }
        bson_uint32_to_string(n, &kp, k, sizeof(k));
        bson_append_document(&docs, kp, -1, d);
    }
    if (w != NULL) {
        SHL_ERR(router_agg_out_write(w, &docs, st));
        SHL_ERR(router_agg_out_commit(w, st));
        bson_reinit(&docs);
    }
    SHL_ERR(shl_ns_make(&ns, op->db, "$cmd.aggregate", st));
    shl_router_cursor_reply(reply, ns.full, 0, true, &docs, false);
done:
    router_agg_out_destroy(w);
    shl_pipeline_destroy(pl);
    bson_destroy(&docs);
    return ret;
}

/* Whether the first stage of 'pipeline' (an array) is named 'name'. */
static bool
first_stage_is(const bson_t *pipeline, const char *name)
{
    bson_iter_t it, stage;
    return bson_iter_init(&it, pipeline) && shl_iter_next(&it) && BSON_ITER_HOLDS_DOCUMENT(&it) &&
           bson_iter_recurse(&it, &stage) && shl_iter_next(&stage) &&
           strcmp(shl_iter_key(&stage), name) == 0;
}

/* The documents of config.collections (the sharded collections), read through this router. */
static size_t
sharded_namespaces(shl_op_ctx_t *op, bson_t *reply, bson_t **docs)
{
    bson_t cmd = BSON_INITIALIZER;
    bson_iter_t it, cur, batch;
    size_t n = 0, cap = 0;

    *docs = NULL;
    BSON_APPEND_UTF8(&cmd, "find", "collections");
    BSON_APPEND_INT32(&cmd, "batchSize", 100000);
    shl_service_run_command(op->svc, NULL, &cmd, "config", reply);
    if (bson_iter_init_find(&it, reply, "cursor") && bson_iter_recurse(&it, &cur) &&
        bson_iter_find(&cur, "firstBatch") && bson_iter_recurse(&cur, &batch)) {
        while (shl_iter_next(&batch)) {
            const uint8_t *data;
            uint32_t len;
            if (!BSON_ITER_HOLDS_DOCUMENT(&batch)) {
                continue;
            }
            if (n == cap) {
                cap = cap == 0 ? 16 : cap * 2;
                *docs = bson_realloc(*docs, cap * sizeof(**docs));
            }
            bson_iter_document(&batch, &len, &data);
            bson_init_static(&(*docs)[n++], data, len);
        }
    }
    bson_destroy(&cmd);
    return n;
}

/*
 * Append {ns, shards: [{shardName, numOrphanedDocs, numOwnedDocuments, ownedSizeBytes,
 * orphanedSizeBytes}]} for the sharded collection 'ns' to 'out' under key 'key', from the
 * router's own collStats (each shard's count, average size and orphan count). False when
 * the collection is gone (dropped meanwhile).
 */
static bool
append_distribution(shl_op_ctx_t *op, const char *ns, const char *key, bson_t *out)
{
    shl_ns_t n;
    shl_status_t st;
    bson_t cmd = BSON_INITIALIZER, reply, doc, arr;
    bson_iter_t it, shards;
    bool ok = false;
    uint32_t i = 0;

    bson_init(&reply);
    if (shl_ns_parse(&n, ns, &st) == 0) {
        BSON_APPEND_UTF8(&cmd, "collStats", n.coll);
        bson_destroy(&reply);
        shl_service_run_command(op->svc, NULL, &cmd, n.db, &reply);
        ok = bson_iter_init_find(&it, &reply, "shards") && bson_iter_recurse(&it, &shards);
    }
    if (ok) {
        BSON_APPEND_DOCUMENT_BEGIN(out, key, &doc);
        BSON_APPEND_UTF8(&doc, "ns", ns);
        BSON_APPEND_ARRAY_BEGIN(&doc, "shards", &arr);
        while (shl_iter_next(&shards)) {
            bson_iter_t f;
            int64_t count = 0, orphans = 0, avg = 0;
            char k[16];
            const char *kp;
            bson_t e;
            if (!bson_iter_recurse(&shards, &f)) {
                continue;
            }
            while (shl_iter_next(&f)) {
                const char *fk = shl_iter_key(&f);
                int64_t v = BSON_ITER_HOLDS_NUMBER(&f) ? bson_iter_as_int64(&f) : 0;
                if (strcmp(fk, "count") == 0) {
                    count = v;
                } else if (strcmp(fk, "numOrphanDocs") == 0) {
                    orphans = v;
                } else if (strcmp(fk, "avgObjSize") == 0) {
                    avg = v;
                }
            }
            orphans = orphans > count ? count : orphans;
            bson_uint32_to_string(i++, &kp, k, sizeof(k));
            BSON_APPEND_DOCUMENT_BEGIN(&arr, kp, &e);
            BSON_APPEND_UTF8(&e, "shardName", shl_iter_key(&shards));
            BSON_APPEND_INT64(&e, "numOrphanedDocs", orphans);
            BSON_APPEND_INT64(&e, "numOwnedDocuments", count - orphans);
            BSON_APPEND_INT64(&e, "ownedSizeBytes", (count - orphans) * avg);
            BSON_APPEND_INT64(&e, "orphanedSizeBytes", orphans * avg);
            bson_append_document_end(&arr, &e);
        }
        bson_append_array_end(&doc, &arr);
        bson_append_document_end(out, &doc);
    }
    bson_destroy(&cmd);
    bson_destroy(&reply);
    return ok;
}

/*
 * sharded_data_distribution --
 *     `aggregate: 1` on admin starting with {$shardedDataDistribution: {}} (MongoDB 6.0.3+,
 *     what mongosh's sh.status() shows): one document per sharded collection with, per
 *     shard, its owned and orphaned documents and bytes (from the shards' collStats and
 *     their range deletion tasks' orphan counts). The documents then go through the rest of
 *     the pipeline here, as a $documents source. Errors: FailedToParse for a spec that is
 *     not an empty object; the rest of the pipeline's.
 */
static int
sharded_data_distribution(shl_op_ctx_t *op, const bson_t *cmd, const bson_t *pipeline,
                          bson_t *reply, shl_status_t *st)
{
    int ret = 0;
    bson_t coll_reply = BSON_INITIALIZER, *colls = NULL, fwd = BSON_INITIALIZER, arr, src, docs;
    bson_iter_t it, stage;
    size_t n = 0;
    uint32_t ndocs = 0, k = 0;

    bson_iter_init(&it, pipeline);
    shl_iter_next(&it);
    if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &stage) ||
        !shl_iter_next(&stage) || !BSON_ITER_HOLDS_DOCUMENT(&stage)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "The $shardedDataDistribution stage specification must be an object");
    }
    {
        bson_iter_t spec;
        if (bson_iter_recurse(&stage, &spec) && shl_iter_next(&spec)) {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                     "BSON field '$shardedDataDistribution.%s' is an unknown field.",
                     shl_iter_key(&spec));
        }
    }
    n = sharded_namespaces(op, &coll_reply, &colls);
    /* The same command, its pipeline's first stage replaced by $documents of the result. */
    bson_iter_init(&it, cmd);
    while (shl_iter_next(&it)) {
        const char *key = shl_iter_key(&it);
        if (strcmp(key, "pipeline") != 0) {
            bson_append_iter(&fwd, NULL, 0, &it);
            continue;
        }
        BSON_APPEND_ARRAY_BEGIN(&fwd, "pipeline", &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &src);
        BSON_APPEND_ARRAY_BEGIN(&src, "$documents", &docs);
        for (size_t i = 0; i < n; i++) {
            bson_iter_t id;
            char key_buf[16];
            const char *kp;
            if (!bson_iter_init_find(&id, &colls[i], "_id") || !BSON_ITER_HOLDS_UTF8(&id)) {
                continue;
            }
            bson_uint32_to_string(ndocs, &kp, key_buf, sizeof(key_buf));
            ndocs += append_distribution(op, bson_iter_utf8(&id, NULL), kp, &docs) ? 1 : 0;
        }
        bson_append_array_end(&src, &docs);
        bson_append_document_end(&arr, &src);
        /* the stages after $shardedDataDistribution */
        bson_iter_recurse(&it, &stage);
        shl_iter_next(&stage);
        while (shl_iter_next(&stage)) {
            char key_buf[16];
            const char *kp;
            bson_uint32_to_string(++k, &kp, key_buf, sizeof(key_buf));
            bson_append_value(&arr, kp, -1, bson_iter_value(&stage));
        }
        bson_append_array_end(&fwd, &arr);
    }
    ret = collectionless_aggregate(op, &fwd, reply, st);
done:
    bson_free(colls);
    bson_destroy(&coll_reply);
    bson_destroy(&fwd);
    return ret;
}

/*
 * find_foreign --
 *     Whether 'pipeline' has stages that read another collection ($lookup, $unionWith,
 *     $graphLookup, also inside the sub-pipelines of $lookup, $unionWith and $facet), and
 *     whether one of those collections is sharded (as the catalog cache knows it; a lookup
 *     error counts as unsharded, as the shards then decide); the others are listed in
 *     p->unsharded, for the shard to check. Never fails.
 */
static void
find_foreign(shl_router_t *r, const char *db, const bson_t *pipeline, int depth, agg_plan_t *p)
{
    bson_iter_t it, stage, arg;

    if (depth > 20 || !bson_iter_init(&it, pipeline)) {
        return;
    }
    while (shl_iter_next(&it)) {
        const char *name, *from = NULL;
        bson_t view;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &stage) ||
            !shl_iter_next(&stage)) {
            continue;
        }
        name = shl_iter_key(&stage);
        if (strcmp(name, "$lookup") != 0 && strcmp(name, "$unionWith") != 0 &&
            strcmp(name, "$graphLookup") != 0 && strcmp(name, "$facet") != 0) {
            continue;
        }
        if (BSON_ITER_HOLDS_UTF8(&stage)) {
            from = bson_iter_utf8(&stage, NULL); /* {$unionWith: "coll"} */
        } else if (BSON_ITER_HOLDS_DOCUMENT(&stage) && bson_iter_recurse(&stage, &arg)) {
            while (shl_iter_next(&arg)) {
                const char *k = shl_iter_key(&arg);
                bson_iter_t sub;
                if ((strcmp(k, "from") == 0 || strcmp(k, "coll") == 0) &&
                    BSON_ITER_HOLDS_UTF8(&arg)) {
                    from = bson_iter_utf8(&arg, NULL);
                } else if (strcmp(k, "from") == 0 && BSON_ITER_HOLDS_DOCUMENT(&arg) &&
                           bson_iter_recurse(&arg, &sub) && bson_iter_find(&sub, "coll") &&
                           BSON_ITER_HOLDS_UTF8(&sub)) {
                    from = bson_iter_utf8(&sub, NULL); /* from: {db, coll} */
                } else if (BSON_ITER_HOLDS_ARRAY(&arg) &&
                           (strcmp(k, "pipeline") == 0 || strcmp(name, "$facet") == 0)) {
                    const uint8_t *data;
                    uint32_t len;
                    bson_iter_array(&arg, &len, &data);
                    if (bson_init_static(&view, data, len)) {
                        find_foreign(r, db, &view, depth + 1, p);
                    }
                }
            }
        }
        if (from != NULL && from[0] != '\0') {
            char ns[SHL_NS_MAX + 1];
            shl_routing_table_t *rt = NULL;
            shl_status_t st = SHL_STATUS_INIT;
            bool known = false;
            p->has_foreign = true;
            snprintf(ns, sizeof(ns), "%s.%s", db, from);
            if (shl_catalog_cache_get_collection(r->cache, ns, &rt, &st) == 0 && rt != NULL) {
                shl_routing_table_release(rt);
                p->foreign_sharded = true;
                continue;
            }
            for (size_t i = 0; i < p->nunsharded && !known; i++) {
                known = strcmp(p->unsharded[i], ns) == 0;
            }
            if (!known) {
                p->unsharded = bson_realloc(p->unsharded, (p->nunsharded + 1) * sizeof(char *));
                p->unsharded[p->nunsharded++] = bson_strdup(ns);
            }
        }
    }
}

/* ---------------------------------------------------------------- the merger's environment */

/*
 * The merger reads other collections as a find through the router would: routed with the
 * catalog cache, targeted by the stage's filter (so an equality on the foreign shard key
 * reaches one shard), sent with the versions it was routed with (the shards filter orphans
 * and answer StaleConfig, which shl_router_scatter retries after a refresh), and merged by a
 * router cursor that fetches more as the stage pulls. Reads run under the operation that is
 * pulling the merge part: the owner cursor's op, set while it fills a batch.
 */
typedef struct agg_env {
    shl_pipeline_env_t env;
    shl_router_t *r;
    char db[SHL_NS_MAX + 1];
    bson_t generic; /* the user's arguments every foreign find carries (readConcern, lsid...) */
    shl_router_cursor_t *owner;
} agg_env_t;

/* One open foreign read: a router cursor, or NULL for a database that does not exist. */
typedef struct agg_foreign {
    shl_router_cursor_t *c;
    shl_router_cursor_t *owner;
    shl_pipeline_source_t src;
    /* A view on a sharded collection: its aggregate's first reply (router_view_foreign),
     * then the batches of its router cursor view_id (0: none left), served in order;
     * view_reply is NULL otherwise. */
    bson_t *view_reply;
    bson_t view_batch; /* the latest batch after the first (an array) */
    bson_iter_t view_it;
    bson_t view_doc;
    int64_t view_id;
    char view_ns[SHL_NS_MAX + 1];
    shl_router_t *r;
} agg_foreign_t;

typedef struct foreign_find {
    const char *coll;
    const bson_t *filter;
    const bson_t *generic;
    const shl_collator_t *coll_collator; /* the aggregate's (NULL: simple) */
} foreign_find_t;

static void
build_foreign_find(void *arg, const shl_router_routing_t *rr, const char *shard, bson_t *cmd)
{
    const foreign_find_t *f = arg;
    (void)rr;
    (void)shard;
    BSON_APPEND_UTF8(cmd, "find", f->coll);
    if (f->filter != NULL) {
        BSON_APPEND_DOCUMENT(cmd, "filter", f->filter);
    }
    /* The foreign collection is read under the aggregate's collation, not its own default
     * (an explicit {locale: "simple"} when the aggregate's is simple), as on a data node. */
    shl_collator_append_spec(cmd, "collation", f->coll_collator);
    bson_concat(cmd, f->generic);
}

/* The view's next batch from its router cursor (as a getMore would take it) into
 * f->view_batch, f->view_it over it; the cursor is gone once exhausted. */
static int
view_next_batch(agg_foreign_t *f, shl_status_t *st)
{
    int ret = 0;
    shl_router_t *r = f->r;
    shl_router_cursor_t *c = NULL;
    bool exhausted = true;

    bson_reinit(&f->view_batch);
    SHL_ERR(shl_router_cursor_manager_pin(r->cursors, f->view_id, f->view_ns, &c, st));
    ret = shl_router_cursor_fill_batch(f->owner->op, c, 0, false, &f->view_batch, &exhausted, st);
    shl_router_cursor_manager_unpin(r->cursors, c, exhausted || ret != 0);
    if (exhausted || ret != 0) {
        f->view_id = 0;
    }
    SHL_ERR(ret);
    bson_iter_init(&f->view_it, &f->view_batch);
done:
    return ret;
}

static int
foreign_next(void *arg, const bson_t **doc, shl_status_t *st)
{
    agg_foreign_t *f = arg;
    int ret = 0;

    *doc = NULL;
    if (f->view_reply != NULL) {
        bool more = shl_iter_next(&f->view_it);
        if (!more && f->view_id != 0) {
            SHL_ERR(view_next_batch(f, st));
            more = shl_iter_next(&f->view_it);
        }
        if (more && BSON_ITER_HOLDS_DOCUMENT(&f->view_it)) {
            const uint8_t *data;
            uint32_t len;
            bson_iter_document(&f->view_it, &len, &data);
            bson_init_static(&f->view_doc, data, len);
            *doc = &f->view_doc;
        }
        goto done;
    }
    if (f->c == NULL) {
        return 0;
    }
    f->c->op = f->owner->op;
    ret = f->src.next(f->src.arg, doc, st);
    f->c->op = NULL;
done:
    return ret;
}

static int
env_open(void *arg, const char *coll, const bson_t *filter, shl_pipeline_source_t *src,
         void **cursor, shl_status_t *st)
{
    agg_env_t *e = arg;
    shl_op_ctx_t *op = e->owner->op;
    agg_foreign_t *f = bson_aligned_alloc0(BSON_ALIGNOF(agg_foreign_t), sizeof(*f));
    foreign_find_t ff = {coll, filter, &e->generic, e->owner->collator};
    shl_router_shard_result_t *results = NULL;
    size_t nresults = 0;
    shl_ns_t ns;
    int ret = 0;

    SHL_INVARIANT(op != NULL);
    f->owner = e->owner;
    SHL_ERR(shl_ns_make(&ns, e->db, coll, st));
    /* Under a non-simple collation the filter's strings need not equal the shard key's
     * values: every shard is read (the shards still filter). */
    ret = shl_router_scatter(e->r, op, ns.full, e->owner->collator == NULL ? filter : NULL,
                             build_foreign_find, &ff, NULL, &results, &nresults, st);
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND) {
        /* No such database: an empty collection, as on a data node. */
        shl_status_clear(st);
        ret = 0;
    } else {
        SHL_ERR(ret);
        ret = router_cursor_from_results(op, e->r, ns.full, ns.db, ns.coll, results, nresults,
                                         false, &f->c, st);
        if (ret == SHL_CODE_COMMAND_ON_SHARDED_VIEW_NOT_SUPPORTED_ON_MONGOD) {
            /* A view on a sharded collection: its aggregate through this router. */
            f->view_reply = bson_new();
            f->r = e->r;
            bson_init(&f->view_batch);
            snprintf(f->view_ns, sizeof(f->view_ns), "%s", ns.full);
            SHL_ERR(
                router_view_foreign(op, coll, filter, &e->generic, f->view_reply, &f->view_id, st));
            SHL_INVARIANT(bson_iter_init(&f->view_it, f->view_reply) &&
                          bson_iter_find_descendant(&f->view_it, "cursor.firstBatch",
                                                    &f->view_it) &&
                          bson_iter_recurse(&f->view_it, &f->view_it));
        } else {
            SHL_ERR(ret);
            f->c->op = NULL;
            f->src = shl_router_cursor_source(f->c);
        }
    }
    src->next = foreign_next;
    src->arg = f;
    *cursor = f;
    f = NULL;
done:
    if (f != NULL && f->view_reply != NULL) {
        bson_destroy(f->view_reply);
        bson_destroy(&f->view_batch);
    }
    bson_free(f);
    shl_router_scatter_results_free(results, nresults);
    return ret;
}

static void
env_close(void *arg, void *cursor)
{
    agg_foreign_t *f = cursor;
    (void)arg;
    if (f != NULL) {
        shl_router_cursor_destroy(f->c); /* kills what the shards still hold */
        if (f->view_reply != NULL) {
            if (f->view_id != 0) {
                shl_router_cursor_manager_kill(f->r->cursors, f->view_id, f->view_ns);
            }
            bson_destroy(f->view_reply);
            bson_destroy(&f->view_batch);
        }
        bson_free(f);
    }
}

static void
env_free(void *state)
{
    agg_env_t *e = state;
    bson_destroy(&e->generic);
    bson_free(e);
}

/* Give cursor 'c' (the merge part's owner) an environment; *out is borrowed from it. */
static void
install_env(shl_router_t *r, const char *db, const bson_t *cmd, shl_router_cursor_t *c,
            const shl_pipeline_env_t **out)
{
    static const char *const pass[] = {"readConcern", "comment",    "lsid",
                                       "txnNumber",   "autocommit", NULL};
    agg_env_t *e = bson_malloc0(sizeof(*e));
    bson_iter_t it;

    e->r = r;
    snprintf(e->db, sizeof(e->db), "%s", db);
    e->owner = c;
    bson_init(&e->generic);
    if (bson_iter_init(&it, cmd)) {
        while (shl_iter_next(&it)) {
            for (size_t i = 0; pass[i] != NULL; i++) {
                if (strcmp(shl_iter_key(&it), pass[i]) == 0) {
                    bson_append_iter(&e->generic, NULL, 0, &it);
                }
            }
        }
    }
    e->env.open = env_open;
    e->env.close = env_close;
    e->env.arg = e;
    c->env_state = e;
    c->env_state_free = env_free;
    *out = &e->env;
}

/*
 * write_output --
 *     Drain the merge part of 'c' (whose last stage, the $out/$merge of 'check', passes the
 *     documents through) into the output's target, in batches, then commit ($out's rename).
 *     A failure leaves an existing $out target as it was (the temporary collection is
 *     dropped); $merge's writes before the failure stay, as MongoDB's.
 */
static int
write_output(shl_op_ctx_t *op, shl_router_cursor_t *c, const shl_pipeline_t *check, const char *db,
             bool bypass, shl_status_t *st)
{
    router_agg_out_t *w = NULL;
    bson_t arr = BSON_INITIALIZER;
    bool exhausted = false;
    int ret = 0;

    SHL_ERR(router_agg_out_begin(op, check, db, bypass, &w, st));
    while (!exhausted) {
        bson_reinit(&arr);
        SHL_ERR(shl_router_cursor_fill_batch(op, c, 1000, false, &arr, &exhausted, st));
        SHL_ERR(router_agg_out_write(w, &arr, st));
    }
    SHL_ERR(router_agg_out_commit(w, st));
done:
    router_agg_out_destroy(w);
    bson_destroy(&arr);
    return ret;
}

/*
 * plan_routing --
 *     Where the other namespaces of the pipeline live, from the catalog cache: its foreign
 *     collections (find_foreign) and its output's target. Run before the first attempt and
 *     again before each retry (shl_router_dispatch's 'prepare'), as a StaleConfig naming one
 *     of them refreshed it meanwhile. Errors: $out to a sharded target (28769), before any
 *     shard runs anything, as mongos checks it when parsing.
 */
static int
plan_routing(void *arg, const shl_router_routing_t *rr, shl_status_t *st)
{
    agg_plan_t *p = arg;
    int ret = 0;
    (void)rr;

    p->has_foreign = p->foreign_sharded = false;
    unsharded_clear(p);
    find_foreign(p->r, p->db, &p->pipeline, 0, p);
    if (p->out != NULL) {
        const char *tdb = p->out->db != NULL ? p->out->db : p->db;
        p->has_output = true;
        snprintf(p->out_ns, sizeof(p->out_ns), "%s.%s", tdb, p->out->coll);
        router_agg_out_locate(p->r, p->out, p->db, &p->out_sharded, p->out_primary,
                              sizeof(p->out_primary), &p->out_db_version);
        if (p->out_sharded && !p->out->is_merge) {
            SHL_FAIL(st, SHL_CODE_NAMESPACE_CANNOT_BE_SHARDED,
                     "$out cannot output to a sharded collection: %s", p->out_ns);
        }
    }
done:
    return ret;
}

int
router_cmd_aggregate(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    int ret = router_aggregate_run(op, cmd, NULL, reply, st);
    return router_view_retry(op, cmd, ret, reply, st);
}

int
router_aggregate_run(shl_op_ctx_t *op, const bson_t *cmd, const char *view_ns, bson_t *reply,
                     shl_status_t *st)
{
    shl_router_t *r = shl_router_get(op);
    agg_plan_t p;
    bson_iter_t it, first;
    shl_ns_t ns;
    bson_t let, letv = BSON_INITIALIZER;
    bool found, has_let = false, allow_disk = false, zero_batch = false, bypass = false;
    int64_t batch_size = 0;
    shl_pipeline_opts_t opts;
    shl_pipeline_t *check = NULL, *ma = NULL, *mb = NULL;
    shl_router_shard_result_t *results = NULL;
    size_t nresults = 0;
    shl_router_cursor_t *c = NULL;
    bson_t sessions_pipeline = BSON_INITIALIZER;
    int ret = 0;

    memset(&p, 0, sizeof(p));
    bson_init(&p.shards_part);
    bson_init(&p.merge_a);
    bson_init(&p.merge_b);
    p.cmd = cmd;
    if (!bson_iter_init(&it, cmd) || !shl_iter_next(&it)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "invalid aggregate command");
    }
    if (!BSON_ITER_HOLDS_UTF8(&it)) {
        bson_t pl;
        bool has_pl = false;
        SHL_ERR(shl_cmd_get_array(cmd, "pipeline", &pl, &has_pl, st));
        if (has_pl && shl_pipeline_stage_position(&pl, "$changeStream") == 1) {
            ret = router_change_stream_aggregate(op, cmd, NULL, &pl, reply, st);
            goto done;
        }
        if (has_pl && first_stage_is(&pl, "$shardedDataDistribution")) {
            if (strcmp(op->db, "admin") != 0 || !BSON_ITER_HOLDS_NUMBER(&it) ||
                bson_iter_as_double(&it) != 1.0) {
                SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                         "$shardedDataDistribution must be run against the 'admin' database "
                         "with {aggregate: 1}");
            }
            ret = sharded_data_distribution(op, cmd, &pl, reply, st);
            goto done;
        }
        if (has_pl && shl_pipeline_stage_position(&pl, "$listLocalSessions") == 1) {
            /* This router's own cache, as mongos answers it. */
            ret =
                shl_list_local_sessions_aggregate(op, cmd, &pl, shl_pipeline_run_array, reply, st);
            goto done;
        }
        if (has_pl && first_stage_is(&pl, "$currentOp")) {
            if (strcmp(op->db, "admin") != 0 || !BSON_ITER_HOLDS_NUMBER(&it) ||
                bson_iter_as_double(&it) != 1.0) {
                SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                         "$currentOp must be run against the 'admin' database with {aggregate: "
                         "1}");
            }
            ret = router_current_op_aggregate(op, cmd, &pl, reply, st);
            goto done;
        }
        if (router_is_config_db(op->db)) {
            /* A collection-less aggregate ({aggregate: 1}) of the admin/config database. */
            char agg_ns[SHL_NS_MAX + 1];
            snprintf(agg_ns, sizeof(agg_ns), "%s.$cmd.aggregate", op->db);
            SHL_ERR(router_cursor_batch_size(cmd, &batch_size, &zero_batch, st));
            ret = router_config_cursor_read(op, agg_ns, op->db, "$cmd.aggregate", cmd, batch_size,
                                            zero_batch, reply, st);
            goto done;
        }
        if (BSON_ITER_HOLDS_NUMBER(&it) && bson_iter_as_double(&it) == 1.0) {
            ret = collectionless_aggregate(op, cmd, reply, st);
            goto done;
        }
        SHL_FAIL(
            st, SHL_CODE_INVALID_NAMESPACE,
            "Invalid command format: the 'aggregate' field must specify a collection name or 1");
    }
    SHL_ERR(shl_ns_make(&ns, op->db, bson_iter_utf8(&it, NULL), st));
    SHL_ERR(shl_cmd_get_array(cmd, "pipeline", &p.pipeline, &found, st));
    if (!found) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field 'aggregate.pipeline' is missing but a required field");
    }
    if (shl_pipeline_stage_position(&p.pipeline, "$changeStream") == 1) {
        ret = router_change_stream_aggregate(op, cmd, ns.coll, &p.pipeline, reply, st);
        goto done;
    }
    if (first_stage_is(&p.pipeline, "$currentOp")) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                 "$currentOp must be run against the 'admin' database with {aggregate: 1}");
    }
    switch (shl_pipeline_stage_position(&p.pipeline, "$listLocalSessions")) {
    case 1: /* names a collection: its InvalidNamespace */
        ret = shl_list_local_sessions_aggregate(op, cmd, &p.pipeline, shl_pipeline_run_array, reply,
                                                st);
        goto done;
    case 2:
        SHL_FAIL(st, 40602, "$listLocalSessions is only valid as the first stage in a pipeline.");
    default:
        break;
    }
    /* $listSessions is the $match it stands for, run on the shards of config.system.sessions. */
    switch (shl_pipeline_stage_position(&p.pipeline, "$listSessions")) {
    case 1:
        bson_destroy(&sessions_pipeline);
        SHL_ERR(shl_list_sessions_rewrite(op, ns.full, &p.pipeline, &sessions_pipeline, st));
        bson_init_static(&p.pipeline, bson_get_data(&sessions_pipeline), sessions_pipeline.len);
        break;
    case 2:
        SHL_FAIL(st, 40602, "$listSessions is only valid as the first stage in a pipeline.");
    default:
        break;
    }
    SHL_ERR(shl_cmd_get_bool(cmd, "explain", &p.explain, st));
    SHL_ERR(shl_cmd_get_bool(cmd, "allowDiskUse", &allow_disk, st));
    if (!bson_has_field(cmd, "cursor") && !p.explain) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "The 'cursor' option is required, except for aggregate with the explain "
                 "argument");
    }
    SHL_ERR(router_cursor_batch_size(cmd, &batch_size, &zero_batch, st));
    SHL_ERR(shl_cmd_get_doc(cmd, "let", &let, &has_let, st));
    {
        /* The merger's variables: `let` evaluated once, $$NOW and $$CLUSTER_TIME of this
         * router, which the shards get too (legacyRuntimeConstants). */
        bson_t builtins = BSON_INITIALIZER, none = BSON_INITIALIZER;
        uint64_t ct;
        int64_t now;
        router_runtime_constants(op, &now, &ct);
        p.now_ms = now;
        p.cluster_time = ct;
        BSON_APPEND_DATE_TIME(&builtins, "NOW", now);
        if (ct != 0) {
            BSON_APPEND_TIMESTAMP(&builtins, "CLUSTER_TIME", (uint32_t)(ct >> 32), (uint32_t)ct);
        }
        bson_destroy(&letv);
        ret = shl_expr_let_vars(has_let ? &let : &none, now, &builtins, &letv, st);
        bson_destroy(&builtins);
        SHL_ERR(ret);
        bson_init_static(&let, bson_get_data(&letv), letv.len);
        has_let = true;
    }
    /* config.system.sessions is the one sharded collection of the config database: it is
     * routed like any other (to the config server while it is not sharded yet). */
    if (router_is_config_db(ns.db) && strcmp(ns.full, SHL_SESSIONS_NS) != 0) {
        if (p.explain) {
            bson_t res = BSON_INITIALIZER;
            bson_destroy(&res);
            ret = router_run_on_config(op, ns.db, cmd, &res, st);
            if (ret == 0) {
                shl_router_copy_reply_fields(&res, reply);
            }
            bson_destroy(&res);
        } else {
            ret = router_config_cursor_read(op, ns.full, ns.db, ns.coll, cmd, batch_size,
                                            zero_batch, reply, st);
        }
        goto done;
    }
    /* Parse the whole pipeline here: its errors come before any shard is contacted. */
    memset(&opts, 0, sizeof(opts));
    opts.allow_disk_use = allow_disk;
    opts.vars = has_let ? &let : NULL;
    opts.leading_text = true; /* a first $match's $text runs on the shards */
    SHL_ERR(shl_pipeline_parse(&p.pipeline, &opts, &check, st));
    bson_destroy(&p.shards_part);
    bson_destroy(&p.merge_a);
    bson_destroy(&p.merge_b);
    split_pipeline(&p);
    if (bson_iter_init(&first, &p.pipeline) && shl_iter_next(&first) &&
        BSON_ITER_HOLDS_DOCUMENT(&first)) {
        bson_t stage;
        bson_iter_t m;
        const uint8_t *data;
        uint32_t len;
        bson_iter_document(&first, &len, &data);
        if (bson_init_static(&stage, data, len) && bson_iter_init_find(&m, &stage, "$match") &&
            BSON_ITER_HOLDS_DOCUMENT(&m)) {
            bson_iter_document(&m, &len, &data);
            bson_init_static(&p.filter_view, data, len);
            p.filter = &p.filter_view;
        }
    }
    p.r = r;
    p.db = ns.db;
    p.out = shl_pipeline_output(check);
    if (p.out != NULL) {
        SHL_ERR(shl_cmd_get_bool(cmd, "bypassDocumentValidation", &bypass, st));
    }
    /* Once here, so that $out's error comes before the routing of the aggregate's own
     * namespace (a missing database), and again before each attempt. */
    SHL_ERR(plan_routing(&p, NULL, st));
    {
        shl_router_dispatch_t d = {.prepare = plan_routing,
                                   .prepare_arg = &p,
                                   .filter = p.filter,
                                   .build = build_agg,
                                   .build_arg = &p,
                                   .versions = SHL_ROUTER_VERSIONS_FULL};
        ret = shl_router_dispatch(r, op, ns.full, &d, NULL, &results, &nresults, st);
    }
    if (ret == SHL_CODE_NAMESPACE_NOT_FOUND && !p.explain) {
        bson_t empty = BSON_INITIALIZER;
        shl_router_cursor_reply(reply, view_ns != NULL ? view_ns : ns.full, 0, true, &empty,
                                false);
        ret = 0;
        goto done;
    }
    SHL_ERR(ret);
    if (p.explain) {
        for (size_t i = 0; i < nresults; i++) {
            if (results[i].res.code != 0) {
                *st = results[i].res.status;
                SHL_ERR(results[i].res.code);
            }
        }
        append_agg_explain(op, &p, results, nresults, reply);
        goto done;
    }
    /* A view's cursor is named after the view; its shards' cursors are the collection's. */
    SHL_ERR(router_cursor_from_results(op, r, view_ns != NULL ? view_ns : ns.full, ns.db, ns.coll,
                                       results, nresults, false, &c, st));
    /* The merge compares strings as the shards did: the command's collation. */
    SHL_ERR(shl_router_effective_collator(r, ns.full, cmd, &c->collator, st));
    opts.collator = c->collator;
    if (!p.single && p.split && p.nmerge_a == 0 && !p.has_avg) {
        /* Only a merge by the sort key. */
        if (p.has_sort) {
            SHL_ERR(shl_sort_pattern_new(&p.sort, &c->sort, st));
            shl_sort_pattern_set_collator(c->sort, c->collator);
        }
    } else if (!p.single && p.split) {
        if (has_let) {
            c->vars = bson_copy(&let);
            opts.vars = c->vars;
        }
        if (p.has_sort) {
            SHL_ERR(shl_sort_pattern_new(&p.sort, &c->sort, st));
            shl_sort_pattern_set_collator(c->sort, c->collator);
        }
        install_env(r, ns.db, cmd, c, &opts.env);
        SHL_ERR(shl_pipeline_parse(&p.merge_a, &opts, &ma, st));
        if (p.has_avg) {
            SHL_ERR(shl_pipeline_parse(&p.merge_b, &opts, &mb, st));
        }
        shl_router_cursor_set_merge(c, ma, mb, p.avg_fields);
        ma = mb = NULL;
        p.avg_fields = NULL;
    }
    if (!p.single && p.has_output) {
        bson_t empty = BSON_INITIALIZER;
        ret = write_output(op, c, check, ns.db, bypass, st);
        if (ret == 0) {
            shl_router_cursor_reply(reply, ns.full, 0, true, &empty, false);
        }
        bson_destroy(&empty);
        goto done;
    }
    ret = router_reply_cursor(op, c, batch_size, zero_batch, false, reply, st);
    c = NULL;
done:
    shl_router_cursor_destroy(c);
    shl_pipeline_destroy(ma);
    shl_pipeline_destroy(mb);
    shl_pipeline_destroy(check);
    shl_router_scatter_results_free(results, nresults);
    plan_cleanup(&p);
    bson_destroy(&sessions_pipeline);
    bson_destroy(&letv);
    return ret;
}
