/*
 * exec_plan.c -- whole plans (exec.h): the access path from exec_access_select topped
 * with SORT, SKIP, LIMIT and PROJECTION as MongoDB stacks them, the snapshot the plan
 * reads in, explain output, and the plan as a cursor source.
 */
#include "bson/bson_iter.h"
#include "db/exec.h"

#include <string.h>

#include "bson/keystring.h"
#include "db/cursor_manager.h"
#include "db/index_kinds.h"
#include "query/text.h"

/* MongoDB uses PROJECTION_SIMPLE for inclusions/exclusions of top-level fields. */
static bool
projection_is_simple(const bson_t *spec)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, spec)) {
        return false;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (k[0] == '$' || strchr(k, '.') != NULL ||
            !(BSON_ITER_HOLDS_NUMBER(&it) || BSON_ITER_HOLDS_BOOL(&it))) {
            return false;
        }
    }
    return true;
}

/* The indexes the leaves of 's' scan (their explain's indexName), into p->index_names. */
static void
collect_index_names(exec_plan_t *p, const exec_stage_t *s)
{
    for (; s != NULL; s = s->child) {
        if (s->child == NULL && s->nchildren == 0 && s->ops->explain != NULL) {
            bson_t tmp = BSON_INITIALIZER;
            bson_iter_t it;
            s->ops->explain(s, &tmp);
            if (bson_iter_init_find(&it, &tmp, "indexName") && BSON_ITER_HOLDS_UTF8(&it)) {
                p->index_names =
                    bson_realloc(p->index_names, (p->nindex_names + 1) * sizeof(char *));
                p->index_names[p->nindex_names++] = bson_strdup(bson_iter_utf8(&it, NULL));
            }
            bson_destroy(&tmp);
        }
        for (size_t i = 0; i < s->nchildren; i++) {
            collect_index_names(p, s->children[i]);
        }
    }
}

const char *
exec_plan_dropped_index(const exec_plan_t *p, const shl_collection_t *coll)
{
    for (size_t i = 0; i < p->nindex_names; i++) {
        if (shl_collection_find_index(coll, p->index_names[i]) == NULL) {
            return p->index_names[i];
        }
    }
    return NULL;
}

/* The value of an equality predicate on top-level 'path' in 'filter' ({path: v} or
 * {path: {$eq: v}}, v no regex, array or operator document), false when there is none. */
static bool
prefix_equality(const bson_t *filter, const char *path, bson_value_t *out)
{
    bson_iter_t it, sub;
    bool found = false;
    if (!bson_iter_init_find(&it, filter, path)) {
        return false;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) && shl_iter_next(&sub) &&
        shl_iter_key(&sub)[0] == '$') {
        if (strcmp(shl_iter_key(&sub), "$eq") != 0) {
            return false;
        }
        it = sub;
        found = !shl_iter_next(&sub);
    } else {
        found = true;
    }
    found = found && !BSON_ITER_HOLDS_REGEX(&it) && !BSON_ITER_HOLDS_ARRAY(&it) &&
            !(BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &sub) &&
              shl_iter_next(&sub) && shl_iter_key(&sub)[0] == '$');
    if (found) {
        *out = *bson_iter_value(&it);
    }
    return found;
}

/* Whether some ordinary index of 'coll' leads with a top-level field of 'clause'. */
static bool
clause_indexed(const shl_collection_t *coll, const bson_t *clause)
{
    bool indexed = false;
    for (size_t i = 0; i < coll->nindexes && !indexed; i++) {
        bson_iter_t k, c;
        if (db_index_is_text(coll->indexes[i]->spec) ||
            !bson_iter_init(&k, coll->indexes[i]->key_pattern) || !shl_iter_next(&k)) {
            continue;
        }
        indexed = shl_iter_key(&k)[0] != '$' && bson_iter_init_find(&c, clause, shl_iter_key(&k));
    }
    return indexed;
}

/* A $text under $or: every other clause must be able to use an index, as MongoDB's planner
 * requires (NoQueryExecutionPlans, 291). */
static int
text_or_check(const shl_collection_t *coll, const bson_t *filter, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, arr;
    if (!bson_iter_init_find(&it, filter, "$or") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr)) {
        goto done;
    }
    while (shl_iter_next(&arr)) {
        const uint8_t *data;
        uint32_t len;
        bson_t clause;
        bson_value_t v;
        int n = 0;
        bool in_or;
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
            continue;
        }
        bson_iter_document(&arr, &len, &data);
        if (!bson_init_static(&clause, data, len)) {
            continue;
        }
        shl_text_find(&clause, &v, &n, &in_or);
        if (n == 0 && !clause_indexed(coll, &clause)) {
            SHL_FAIL(st, SHL_CODE_NO_QUERY_EXECUTION_PLANS,
                     "error processing query: planner returned error :: caused by :: Failed to "
                     "produce a solution for TEXT under OR - other non-TEXT clauses under OR "
                     "have to be indexed as well.");
        }
    }
done:
    return ret;
}

/* The matcher's per-document search for a $text under $or. */
static int
text_or_match(void *arg, const bson_t *doc, bool *matched, shl_status_t *st)
{
    double score;
    return shl_text_query_match(arg, doc, matched, &score, st);
}

/*
 * The text search's access path over the collection's text index: per positive term of
 * the query, an IXSCAN of the keys (prefix values, term, *) under an OR (each RecordId
 * once), FETCH with the rest of the filter, then TEXT_MATCH (phrases, negations, the
 * score). IndexNotFound (27) without a text index, as MongoDB's planner; a compound index's
 * prefix fields need equality predicates (NoQueryExecutionPlans, 291).
 */
static int
text_access(exec_plan_t *p, const exec_query_t *q, exec_stage_t **root, shl_status_t *st)
{
    int ret = 0;
    const shl_index_t *idx = NULL;
    shl_text_index_t *ti = NULL;
    shl_text_query_t *tq = NULL;
    bson_t norm = BSON_INITIALIZER;
    bson_value_t *prefix = NULL;
    size_t nprefix = 0;
    exec_stage_t **scans = NULL;
    size_t nterms = 0;
    bson_iter_t it, k;
    const shl_collection_t *coll = p->coll;

    *root = NULL;
    for (size_t i = 0; coll != NULL && i < coll->nindexes && idx == NULL; i++) {
        idx = db_index_is_text(coll->indexes[i]->spec) ? coll->indexes[i] : NULL;
    }
    if (coll == NULL) {
        *root = exec_eof_new(); /* no collection: no documents */
        p->access = EXEC_ACCESS_EOF;
        goto done;
    }
    if (idx == NULL) {
        SHL_FAIL(st, SHL_CODE_INDEX_NOT_FOUND, "text index required for $text query");
    }
    SHL_ERR(shl_text_index_new(idx->spec, &ti, st));
    SHL_ERR(shl_text_query_new(&q->text, ti, &tq, st));
    /* The prefix fields: the normalised key's fields before _fts. */
    shl_text_index_append_normalized(ti, &norm);
    if (bson_iter_init_find(&it, &norm, "key") && bson_iter_recurse(&it, &k)) {
        prefix = bson_malloc0((bson_count_keys(&norm) + 8) * sizeof(bson_value_t));
        while (shl_iter_next(&k) && strcmp(shl_iter_key(&k), "_fts") != 0) {
            bson_value_t v;
            if (!prefix_equality(&q->filter, shl_iter_key(&k), &v) ||
                (q->collator != NULL && v.value_type == BSON_TYPE_UTF8)) {
                SHL_FAIL(st, SHL_CODE_NO_QUERY_EXECUTION_PLANS,
                         "error processing query: planner returned error :: caused by :: failed "
                         "to use text index to satisfy $text query (if text index is compound, "
                         "are equality predicates given for all prefix fields?)");
            }
            prefix = bson_realloc(prefix, (nprefix + 1) * sizeof(bson_value_t));
            prefix[nprefix++] = v;
        }
    }
    if (q->text_in_or) {
        /* The $or's other clauses bring documents the search does not: a collection scan
         * whose filter searches each document; TEXT_MATCH scores those the search matches. */
        SHL_ERR(text_or_check(coll, &q->filter, st));
        *root = exec_collscan_new(coll, true, q->matcher, 0);
        p->access = EXEC_ACCESS_COLLSCAN;
        *root = exec_text_match_new(*root, ti, tq, q->text_score, true, q->matcher, text_or_match);
        ti = NULL;
        tq = NULL;
        goto done;
    }
    nterms = shl_text_query_nterms(tq);
    scans = bson_malloc0((nterms + 1) * sizeof(exec_stage_t *));
    for (size_t i = 0; i < nterms; i++) {
        const char *term = shl_text_query_term(tq, i);
        shl_keystring_t lo, hi;
        bson_value_t t;
        t.value_type = BSON_TYPE_UTF8;
        t.value.v_utf8.str = (char *)(uintptr_t)term; /* read only by the encoder */
        t.value.v_utf8.len = (uint32_t)strlen(term);
        shl_keystring_init(&lo);
        shl_keystring_init(&hi);
        for (size_t j = 0; j < nprefix; j++) {
            shl_keystring_append_value(&lo, &prefix[j], false);
            shl_keystring_append_value(&hi, &prefix[j], false);
        }
        shl_keystring_append_value(&lo, &t, false);
        shl_keystring_append_value(&hi, &t, false);
        shl_keystring_append_max_suffix(&hi);
        {
            shl_key_bound_t b0 = {lo.data, lo.len}, b1 = {hi.data, hi.len};
            scans[i] = exec_ixscan_new(idx, &b0, &b1, true, "text");
        }
        shl_keystring_cleanup(&lo);
        shl_keystring_cleanup(&hi);
    }
    if (nterms == 0) {
        *root = exec_eof_new(); /* only negations: nothing matches, as in MongoDB */
        p->access = EXEC_ACCESS_EOF;
    } else {
        exec_stage_t *scan = exec_or_new_named(scans, nterms, true);
        const shl_matcher_t *rest =
            q->matcher != NULL && !shl_matcher_is_trivial(q->matcher) ? q->matcher : NULL;
        *root = exec_fetch_new(scan, coll, rest);
        p->access = EXEC_ACCESS_IXSCAN;
    }
    nterms = 0;
    *root = exec_text_match_new(*root, ti, tq, q->text_score, false, NULL, NULL);
    ti = NULL;
    tq = NULL;
done:
    for (size_t i = 0; i < nterms; i++) {
        exec_stage_destroy(scans[i]);
    }
    bson_free(scans);
    bson_free(prefix);
    bson_destroy(&norm);
    shl_text_query_destroy(tq);
    shl_text_index_destroy(ti);
    return ret;
}

int
exec_plan_build(shl_storage_engine_t *eng, shl_storage_txn_t *txn, uint64_t read_ts,
                shl_collection_t *coll, const char *ns, exec_query_t *q, exec_plan_t **out,
                shl_status_t *st)
{
    int ret = 0;
    /* bson_t members (rejected) are over-aligned types. */
    exec_plan_t *p = bson_aligned_alloc0(BSON_ALIGNOF(exec_plan_t), sizeof(*p));
    exec_stage_t *root = NULL;
    bool sorted = false, covered = false, rej_open = true;
    bson_t rej;

    *out = NULL;
    p->q = q;
    snprintf(p->ns, sizeof(p->ns), "%s", ns);
    p->coll = coll != NULL ? shl_collection_ref(coll) : NULL;
    bson_init(&p->rejected);
    bson_init(&p->stripped);
    bson_append_array_begin(&p->rejected, "r", 1, &rej);
    /* The snapshot first: a multi-plan trial reads in it. */
    if (txn != NULL) {
        p->txn = txn;
        p->borrowed_txn = true;
    } else {
        shl_storage_txn_opts_t o = {.read_timestamp = read_ts};
        SHL_ERR(shl_storage_txn_begin(eng, read_ts != 0 ? &o : NULL, &p->txn, st));
    }
    if (p->coll != NULL) {
        /* Plan from metadata read after the snapshot: a write that makes an index multikey
         * publishes the flag before it commits, so every array this snapshot can show is
         * known to the plan (no intersected bounds over it). Same collection and indexes
         * (DDL is excluded by the caller's lock); only flags can have grown. */
        shl_collection_t *latest;
        SHL_ERR(shl_storage_txn_snapshot(p->txn, st));
        latest = shl_catalog_get(eng, p->coll->ns);
        if (latest != NULL && memcmp(latest->uuid, p->coll->uuid, 16) == 0 &&
            latest->nindexes == p->coll->nindexes) {
            shl_collection_release(p->coll);
            p->coll = latest;
        } else {
            shl_collection_release(latest);
        }
        if (read_ts != 0) {
            /* A read in the past must not use an index built after it: the index holds
             * no keys for that time (snapshot reads, docs/design/snapshot_reads.md). */
            shl_collection_t *visible;
            SHL_ERR(shl_collection_visible_at(eng, p->coll, read_ts, &visible, st));
            shl_collection_release(p->coll);
            p->coll = visible;
        }
    }
    if (!q->has_collation && p->coll != NULL && q->collator == NULL) {
        /* A command without a collation runs under the collection's default. */
        shl_collator_t *def = exec_collection_collator(p->coll);
        if (def != NULL) {
            exec_query_set_collator(q, def, false);
            shl_collator_release(def);
        }
    }
    if (q->has_text) {
        bson_append_array_end(&p->rejected, &rej);
        rej_open = false;
        SHL_ERR(text_access(p, q, &root, st));
    } else {
        exec_ctx_t trial = {NULL, p->txn};
        ret =
            exec_access_select(p->coll, q, &trial, &root, &p->access, &sorted, &covered, &rej, st);
        bson_append_array_end(&p->rejected, &rej);
        rej_open = false;
        SHL_ERR(ret);
    }
    if (p->access == EXEC_ACCESS_IXSCAN || p->access == EXEC_ACCESS_COUNT_SCAN ||
        p->access == EXEC_ACCESS_OR) {
        collect_index_names(p, root);
        if (p->nindex_names > 0) {
            snprintf(p->index_name, sizeof(p->index_name), "%s", p->index_names[0]);
        }
    }
    if (q->orphan_filter != NULL) {
        /* Below SORT/SKIP/LIMIT so orphans never count, above the fetch so the whole
         * document (its shard key) is there -- where MongoDB puts it. */
        root = exec_sharding_filter_new(root, q->orphan_filter);
    }
    if (q->has_sort && !sorted) {
        int64_t keep = q->limit > 0 ? q->limit + q->skip : 0;
        root = exec_sort_new(root, q->sort_pattern, &q->sort, keep);
        if (q->show_record_id) {
            exec_sort_keep_record_ids(root);
        }
    }
    if (q->skip > 0) {
        root = exec_skip_new(root, q->skip);
    }
    if (q->limit > 0) {
        root = exec_limit_new(root, q->limit);
    }
    if (q->has_projection && !covered && !q->return_key) {
        root = exec_projection_new(root, q->proj, &q->projection,
                                   projection_is_simple(&q->projection), q->matcher);
        if (q->let != NULL) {
            exec_projection_set_vars(root, q->let);
        }
    }
    if (q->return_key || q->show_record_id) {
        bson_t id_kp = BSON_INITIALIZER;
        const bson_t *kp = NULL;
        bool unique = true;
        BSON_APPEND_INT32(&id_kp, "_id", 1);
        /* 'unique' here: the index's keys carry no RecordId (shl_index_t.rid_suffix). */
        if (p->access == EXEC_ACCESS_IDHACK) {
            kp = &id_kp;
        } else if (p->index_name[0] != '\0' && p->coll != NULL) {
            const shl_index_t *idx = shl_collection_find_index(p->coll, p->index_name);
            kp = idx != NULL ? idx->key_pattern : NULL;
            unique = idx != NULL && !idx->rid_suffix;
        }
        root = exec_return_key_new(root, kp, unique, q->return_key, q->show_record_id);
        bson_destroy(&id_kp);
    }
    if (q->count_only) {
        root = exec_count_new(root);
    }
    p->root = root;
    root = NULL;
    *out = p;
    p = NULL;
done:
    if (rej_open) {
        bson_append_array_end(&p->rejected, &rej);
    }
    exec_stage_destroy(root);
    if (p != NULL) {
        exec_plan_destroy(p);
    }
    return ret;
}

void
exec_plan_own_query(exec_plan_t *p)
{
    p->own_query = true;
}

int
exec_plan_next(exec_plan_t *p, shl_op_ctx_t *op, exec_row_t *row, bool *eof, shl_status_t *st)
{
    exec_ctx_t ctx = {op, p->txn};
    int ret = exec_stage_next(p->root, &ctx, row, eof, st);
    if (ret == 0 && !*eof && row->doc != NULL && p->q->text_score && !p->q->text_score_keep) {
        bson_t out;
        if (shl_text_score_strip(row->doc, &out)) {
            bson_destroy(&p->stripped);
            p->stripped = out;
            row->doc = &p->stripped;
        }
    }
    return ret;
}

void
exec_plan_destroy(exec_plan_t *p)
{
    if (p == NULL) {
        return;
    }
    /* Stages hold storage cursors: close them before the transaction ends. */
    exec_stage_destroy(p->root);
    if (p->txn != NULL && !p->borrowed_txn) {
        shl_storage_txn_abort(p->txn);
    }
    shl_collection_release(p->coll);
    bson_destroy(&p->rejected);
    bson_destroy(&p->stripped);
    for (size_t i = 0; i < p->nindex_names; i++) {
        bson_free(p->index_names[i]);
    }
    bson_free(p->index_names);
    if (p->own_query && p->q != NULL) {
        exec_query_cleanup(p->q);
        bson_free(p->q);
    }
    bson_free(p);
}

/* ---------------------------------------------------------------- explain */

void
exec_stage_explain(const exec_stage_t *s, bool exec_stats, bson_t *out)
{
    BSON_APPEND_UTF8(out, "stage", s->ops->name);
    if (exec_stats) {
        const exec_stats_t *x = &s->stats;
        BSON_APPEND_INT64(out, "nReturned", x->advanced);
        BSON_APPEND_INT32(out, "executionTimeMillisEstimate", 0);
        BSON_APPEND_INT64(out, "works", x->works);
        BSON_APPEND_INT64(out, "advanced", x->advanced);
        BSON_APPEND_INT64(out, "needTime", x->works - x->advanced - (x->is_eof ? 1 : 0));
        BSON_APPEND_INT64(out, "needYield", 0);
        BSON_APPEND_INT64(out, "saveState", 0);
        BSON_APPEND_INT64(out, "restoreState", 0);
        BSON_APPEND_BOOL(out, "isEOF", x->is_eof);
    }
    if (s->ops->explain != NULL) {
        s->ops->explain(s, out);
    }
    if (exec_stats) {
        const char *name = s->ops->name;
        if (strcmp(name, "COLLSCAN") == 0 || strcmp(name, "FETCH") == 0) {
            BSON_APPEND_INT64(out, "docsExamined", s->stats.docs_examined);
        } else if (strcmp(name, "COUNT_SCAN") == 0 || strcmp(name, "PROJECTION_COVERED") == 0) {
            BSON_APPEND_INT64(out, "keysExamined", s->stats.keys_examined);
            if (s->stats.docs_examined > 0) {
                BSON_APPEND_INT64(out, "docsExamined", s->stats.docs_examined);
            }
        } else if (strcmp(name, "COUNT") == 0) {
            BSON_APPEND_INT64(out, "nCounted", s->stats.advanced);
            BSON_APPEND_INT64(out, "nSkipped", 0);
        } else if (strcmp(name, "OR") == 0 || strcmp(name, "TEXT_OR") == 0) {
            BSON_APPEND_INT64(out, "dupsTested", s->stats.dups_tested);
            BSON_APPEND_INT64(out, "dupsDropped", s->stats.dups_dropped);
        } else if (strcmp(name, "IXSCAN") == 0) {
            BSON_APPEND_INT64(out, "keysExamined", s->stats.keys_examined);
            BSON_APPEND_INT64(out, "seeks", 1);
            BSON_APPEND_INT64(out, "dupsTested", s->stats.dups_tested);
            BSON_APPEND_INT64(out, "dupsDropped", s->stats.dups_dropped);
        } else if (strcmp(name, "IDHACK") == 0) {
            BSON_APPEND_INT64(out, "keysExamined", s->stats.keys_examined);
            BSON_APPEND_INT64(out, "docsExamined", s->stats.docs_examined);
        }
    }
    if (s->child != NULL) {
        bson_t in;
        BSON_APPEND_DOCUMENT_BEGIN(out, "inputStage", &in);
        exec_stage_explain(s->child, exec_stats, &in);
        bson_append_document_end(out, &in);
    }
    if (s->nchildren > 0) {
        bson_t arr;
        BSON_APPEND_ARRAY_BEGIN(out, "inputStages", &arr);
        for (size_t i = 0; i < s->nchildren; i++) {
            bson_t in;
            char k[16];
            const char *key;
            bson_uint32_to_string((uint32_t)i, &key, k, sizeof(k));
            bson_append_document_begin(&arr, key, -1, &in);
            exec_stage_explain(s->children[i], exec_stats, &in);
            bson_append_document_end(&arr, &in);
        }
        bson_append_array_end(out, &arr);
    }
}

static void
sum_stats(const exec_stage_t *s, int64_t *keys, int64_t *docs)
{
    for (; s != NULL; s = s->child) {
        *keys += s->stats.keys_examined;
        *docs += s->stats.docs_examined;
        for (size_t i = 0; i < s->nchildren; i++) {
            sum_stats(s->children[i], keys, docs);
        }
    }
}

void
exec_plan_explain(const exec_plan_t *p, bool exec_stats, int64_t n_returned, int64_t millis,
                  bson_t *out)
{
    bson_t qp, wp, rej, es, stages;

    BSON_APPEND_DOCUMENT_BEGIN(out, "queryPlanner", &qp);
    BSON_APPEND_UTF8(&qp, "namespace", p->ns);
    BSON_APPEND_BOOL(&qp, "indexFilterSet", false);
    BSON_APPEND_DOCUMENT(&qp, "parsedQuery", &p->q->filter);
    BSON_APPEND_BOOL(&qp, "maxIndexedOrSolutionsReached", false);
    BSON_APPEND_BOOL(&qp, "maxIndexedAndSolutionsReached", false);
    BSON_APPEND_BOOL(&qp, "maxScansToExplodeReached", false);
    BSON_APPEND_DOCUMENT_BEGIN(&qp, "winningPlan", &wp);
    exec_stage_explain(p->root, false, &wp);
    bson_append_document_end(&qp, &wp);
    {
        bson_iter_t it;
        const uint8_t *d = NULL;
        uint32_t l = 0;
        bson_t arr;
        if (bson_iter_init_find(&it, &p->rejected, "r") && BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_array(&it, &l, &d);
        }
        if (d != NULL && bson_init_static(&arr, d, l)) {
            BSON_APPEND_ARRAY(&qp, "rejectedPlans", &arr);
        } else {
            BSON_APPEND_ARRAY_BEGIN(&qp, "rejectedPlans", &rej);
            bson_append_array_end(&qp, &rej);
        }
    }
    bson_append_document_end(out, &qp);
    if (exec_stats) {
        int64_t keys = 0, docs = 0;
        sum_stats(p->root, &keys, &docs);
        BSON_APPEND_DOCUMENT_BEGIN(out, "executionStats", &es);
        BSON_APPEND_BOOL(&es, "executionSuccess", true);
        BSON_APPEND_INT64(&es, "nReturned", n_returned);
        BSON_APPEND_INT64(&es, "executionTimeMillis", millis);
        BSON_APPEND_INT64(&es, "totalKeysExamined", keys);
        BSON_APPEND_INT64(&es, "totalDocsExamined", docs);
        BSON_APPEND_DOCUMENT_BEGIN(&es, "executionStages", &stages);
        exec_stage_explain(p->root, true, &stages);
        bson_append_document_end(&es, &stages);
        bson_append_document_end(out, &es);
    }
}

/* ---------------------------------------------------------------- cursor source */

static int
plan_cursor_next(void *state, shl_op_ctx_t *op, const bson_t **doc, shl_status_t *st)
{
    exec_plan_t *p = state;
    exec_row_t row;
    bool eof = false;
    int ret;

    *doc = NULL;
    ret = exec_plan_next(p, op, &row, &eof, st);
    if (ret == 0 && !eof) {
        *doc = row.doc;
    }
    return ret;
}

static void
plan_cursor_destroy(void *state)
{
    exec_plan_destroy(state);
}

const shl_cursor_source_ops_t exec_plan_cursor_ops = {plan_cursor_next, plan_cursor_destroy};
