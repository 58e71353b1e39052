/*
 * window.c -- the window stages of MongoDB 7.0's aggregation: $setWindowFields (partitions,
 * sortBy, document and range windows, the accumulators of $group as window functions, $rank
 * $denseRank $documentNumber $shift $locf $linearFill), $densify, and the rewrite of $fill
 * into $setWindowFields + $addFields. pipeline.c calls in through pipeline_private.h.
 */
#include "query/pipeline_private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "bson/bson_compare.h"
#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "query/query_private.h"

#define WIN_MEM_EXCEEDED 5643011

__extension__ typedef __int128 i128;

/* The state of a removable accumulator ($sum, $avg, $count, $stdDevPop, $stdDevSamp): values
 * leave as well as enter, so a sliding window costs O(1) per document instead of refolding. */
typedef struct rstate {
    i128 isum;   /* the integers, exactly */
    double dsum; /* the other numbers, with dcomp: Neumaier's compensated sum */
    double dcomp;
    int64_t nlong;  /* int64 values in the window */
    int64_t nother; /* non-integer numbers in the window */
    int64_t count;  /* numbers in the window */
    double mean, m2;
    double my, c; /* $covariance*: the mean of y (mean is x's) and the co-moment */
} rstate_t;

typedef enum { WK_SWF, WK_DENSIFY } wkind_t;

typedef enum {
    WF_ACC,
    WF_RANK,
    WF_DENSE_RANK,
    WF_DOC_NUMBER,
    WF_SHIFT,
    WF_LOCF,
    WF_LINEAR,
    WF_EMA
} wf_kind_t;

typedef enum { BK_UNBOUNDED, BK_CURRENT, BK_VALUE } bkind_t;

/* One end of a window: documents windows use 'i', range windows 'v' (or 'i' units of a time
 * unit). */
typedef struct bound {
    bkind_t kind;
    int64_t i;
    double v;
} bound_t;

/* One output field of $setWindowFields. */
typedef struct wfunc {
    char *field;
    wf_kind_t kind;
    accdef_t acc;    /* WF_ACC; acc.field is "v" */
    shl_expr_t *arg; /* $shift output, $locf / $linearFill input */
    int64_t by;
    bson_value_t def; /* $shift default */
    double alpha;     /* $expMovingAvg */
    shl_expr_t *arg2; /* $covariance*: y (arg is x) */
    int cov;          /* 1 $covariancePop, 2 $covarianceSamp */
    bool deriv;       /* $derivative (arg is the input, unit the output's time unit) */
    bool integral;    /* $integral (likewise) */
    int deriv_unit;   /* -1: none */
    bool range;       /* a range window (else documents) */
    int unit;         /* range window's time unit, -1: none */
    bound_t lo, hi;   /* [unbounded, unbounded] by default */
    /* the accumulator over the window [st_lo, st_hi] of the current partition */
    accstate_t st;
    bool st_init;
    int64_t st_lo, st_hi, st_mem;
    bool removable;
    rstate_t rs;
    /* $first/$last read the window's end; $min/$max keep a monotonic deque of the window's
     * candidates (indices and values, owned), so sliding windows stay O(1) per document */
    bool endpoint, deque;
    int64_t *dq_idx;
    bson_value_t *dq_val;
    size_t dq_head, dq_tail, dq_cap;
} wfunc_t;

struct query_wstage {
    wkind_t kind;
    const bson_t *vars;
    const shl_collator_t *coll; /* the aggregate's collation (borrowed; NULL: simple) */
    int64_t sort_max_bytes;
    int64_t max_bytes; /* one partition's */
    /* $setWindowFields */
    shl_expr_t *partition;
    shl_sort_pattern_t *sort_by;  /* the user's; NULL without sortBy */
    size_t nsort;                 /* fields of sortBy */
    shl_sort_pattern_t *wrap_pat; /* over the {p: key, d: doc} wrappers; NULL: input order */
    char *sort_path;              /* sortBy's first field */
    bool sort_desc;
    wfunc_t *funcs;
    size_t nfuncs;
    /* input, wrapped as {p: partition key, d: document} */
    bool drained;
    shl_sorter_t *sorter;
    bson_t **inbuf; /* without a sort: the wrappers in input order (owned) */
    size_t nin, capin, inpos;
    int64_t in_mem;
    const bson_t *next_wrap; /* the first wrapper of the next partition */
    /* the current partition: views into the wrappers */
    bson_t *part;          /* views made once the partition is loaded (never moved after) */
    const uint8_t **pdata; /* the documents' bytes while loading */
    uint32_t *plen;
    bson_value_t *vals; /* sortBy's first field of each document (borrowed), EOD: missing */
    size_t npart, cappart, pos;
    bool have_part;
    int64_t mem;
    bson_t prev_key; /* rank state */
    bool have_prev_key;
    int64_t rank, dense;
    bson_value_t *locf; /* per function: the last non-null value */
    bson_t *out;
    /* $densify */
    char *field;
    char **pfields;
    size_t npfields;
    bool step_int;   /* step (and explicit bounds) are integers */
    double step;     /* numeric step */
    int64_t istep;   /* integer step / time units */
    int unit;        /* -1: numeric */
    int bounds_mode; /* 0 full, 1 partition, 2 explicit */
    bson_value_t blo, bhi;
    /* $densify runtime (full mode: the global min/max) */
    bson_value_t gmin, gmax;
    bool have_gmin;
    bson_value_t cur; /* next value to generate; EOD: not started */
    bool gen_done;
    bson_t cur_pkey; /* the partition's {field: value} of the partition fields */
    bool have_pkey;
    const bson_t *pending; /* an input wrapper waiting behind generated ones */
    bson_t pend_doc;       /* its document (a view; the stage does not move) */
};

/* ---------------------------------------------------------------- helpers */

static int
view_of(const bson_iter_t *it, bson_t *view)
{
    bson_iter_t copy = *it;
    return BSON_ITER_HOLDS_DOCUMENT(&copy) && query_bson_view(bson_iter_value(&copy), view);
}

/* The value at dotted 'path' of 'doc' (borrowed), EOD when missing. */
static void
path_value(const bson_t *doc, const char *path, bson_value_t *out)
{
    bson_iter_t it, d;

    out->value_type = BSON_TYPE_EOD;
    if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &d)) {
        *out = *bson_iter_value(&d);
    }
}

static const char *
type_name(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_EOD ? "missing" : shl_bson_type_name(v->value_type);
}

static bool
nullish(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_EOD || v->value_type == BSON_TYPE_NULL ||
           v->value_type == BSON_TYPE_UNDEFINED;
}

/* Evaluate a constant expression (window bounds, $shift's default) against an empty document. */
static int
eval_const(const bson_value_t *spec, const bson_t *vars, bson_value_t *out, shl_status_t *st)
{
    int ret = 0;
    shl_expr_t *e = NULL;
    bson_t empty = BSON_INITIALIZER;
    shl_expr_ctx_t ctx = {.root = &empty, .vars = vars, .now_ms = 0};

    out->value_type = BSON_TYPE_EOD;
    SHL_ERR(shl_expr_parse(spec, &e, st));
    SHL_ERR(shl_expr_evaluate(e, &ctx, out, st));
done:
    shl_expr_destroy(e);
    bson_destroy(&empty);
    return ret;
}

/* Whether 'v' refers to the document ($-prefixed strings other than $$NOW / user variables). */
static bool
refers_to_doc(const bson_value_t *v)
{
    bson_t view;
    bson_iter_t it;

    if (v->value_type == BSON_TYPE_UTF8) {
        const char *s = v->value.v_utf8.str;
        return s[0] == '$' &&
               (s[1] != '$' || strncmp(s, "$$ROOT", 6) == 0 || strncmp(s, "$$CURRENT", 9) == 0);
    }
    if ((v->value_type == BSON_TYPE_DOCUMENT || v->value_type == BSON_TYPE_ARRAY) &&
        query_bson_view(v, &view) && bson_iter_init(&it, &view)) {
        while (shl_iter_next(&it)) {
            if (strcmp(shl_iter_key(&it), "$literal") == 0) {
                continue;
            }
            if (refers_to_doc(bson_iter_value(&it))) {
                return true;
            }
        }
    }
    return false;
}

/* ---------------------------------------------------------------- $setWindowFields: parsing */

static bool
acc_removable(const accdef_t *d)
{
    return d->kind == ACC_SUM || d->kind == ACC_AVG || d->kind == ACC_STDDEV_POP ||
           d->kind == ACC_STDDEV_SAMP;
}

/* Parse one bound ("unbounded", "current" or a constant number) into 'b'. */
static int
parse_bound(const bson_t *vars, bson_iter_t *it, bool range, bool unit, bound_t *b,
            shl_status_t *st)
{
    int ret = 0;
    bson_value_t v;

    v.value_type = BSON_TYPE_EOD;
    if (BSON_ITER_HOLDS_UTF8(it)) {
        const char *s = bson_iter_utf8(it, NULL);
        if (strcmp(s, "unbounded") == 0) {
            b->kind = BK_UNBOUNDED;
            goto done;
        }
        if (strcmp(s, "current") == 0) {
            b->kind = BK_CURRENT;
            goto done;
        }
    }
    SHL_ERR(eval_const(bson_iter_value(it), vars, &v, st));
    b->kind = BK_VALUE;
    if (!range || unit) {
        int64_t i = 0;
        if (!query_value_is_number(&v) || !shl_bson_value_as_int64_exact(&v, &i)) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     range ? "With 'unit', range-based bounds must be an integer"
                           : "Numeric document-based bounds must be an integer");
        }
        b->i = i;
        b->v = (double)i;
    } else {
        if (!query_value_is_number(&v)) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "Range-based bounds expression must be a number");
        }
        b->v = query_value_as_double(&v);
    }
done:
    bson_value_destroy(&v);
    return ret;
}

static double
bound_pos(const bound_t *b, bool lower)
{
    if (b->kind == BK_UNBOUNDED) {
        return lower ? -INFINITY : INFINITY;
    }
    return b->kind == BK_CURRENT ? 0 : b->v;
}

/* Parse {documents: [lo, hi]} or {range: [lo, hi], unit: u} into 'f'. */
static int
parse_window(const bson_t *vars, const bson_iter_t *wit, wfunc_t *f, shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    bson_iter_t it, arr;
    const char *bad = "'window' field can only contain 'documents' as the only argument or 'range' "
                      "with an optional 'unit' field";
    bool have_docs = false, have_range = false, have_unit = false;
    bson_iter_t bounds_it;

    if (!view_of(wit, &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "'window' field must be an object");
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "documents") == 0 && !have_docs) {
            have_docs = true;
            bounds_it = it;
        } else if (strcmp(k, "range") == 0 && !have_range) {
            have_range = true;
            bounds_it = it;
        } else if (strcmp(k, "unit") == 0 && !have_unit) {
            have_unit = true;
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "'unit' must be a string, but got %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            f->unit = query_date_unit(bson_iter_utf8(&it, NULL));
            if (f->unit < 0) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "unknown time unit value: %s",
                         bson_iter_utf8(&it, NULL));
            }
        } else {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s", bad);
        }
    }
    if (have_docs == have_range || (have_docs && have_unit)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s", bad);
    }
    f->range = have_range;
    if (!BSON_ITER_HOLDS_ARRAY(&bounds_it) || !bson_iter_recurse(&bounds_it, &arr) ||
        bson_count_keys(&view) == 0) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Window bounds must be a 2-element array");
    }
    {
        bson_t a;
        const uint8_t *data;
        uint32_t len;
        bson_iter_array(&bounds_it, &len, &data);
        bson_init_static(&a, data, len);
        if (bson_count_keys(&a) != 2) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Window bounds must be a 2-element array");
        }
    }
    shl_iter_next(&arr);
    SHL_ERR(parse_bound(vars, &arr, f->range, have_unit, &f->lo, st));
    shl_iter_next(&arr);
    SHL_ERR(parse_bound(vars, &arr, f->range, have_unit, &f->hi, st));
    if (f->hi.kind == BK_UNBOUNDED && f->lo.kind != BK_UNBOUNDED) {
        /* [x, unbounded]: fine */
    } else if (bound_pos(&f->lo, true) > bound_pos(&f->hi, false)) {
        SHL_FAIL(st, 5339900, "Lower bound must not exceed upper bound");
    }
done:
    return ret;
}

/* Parse the rank-style functions' and $shift's arguments. */
static int
parse_shift(const bson_t *vars, const bson_iter_t *a, wfunc_t *f, shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    bson_iter_t it;
    bool have_by = false;

    if (!view_of(a, &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Argument to $shift must be an object");
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "output") == 0) {
            shl_expr_destroy(f->arg);
            f->arg = NULL;
            SHL_ERR(shl_expr_parse(bson_iter_value(&it), &f->arg, st));
        } else if (strcmp(k, "by") == 0) {
            const bson_value_t *v = bson_iter_value(&it);
            if (!query_value_is_number(v) || !shl_bson_value_as_int64_exact(v, &f->by) ||
                f->by < INT32_MIN || f->by > INT32_MAX) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "'$shift:by' field must be an integer, but found %s",
                         shl_bson_type_name(v->value_type));
            }
            have_by = true;
        } else if (strcmp(k, "default") == 0) {
            if (refers_to_doc(bson_iter_value(&it))) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "'$shift:default' expression must yield a constant value.");
            }
            bson_value_destroy(&f->def);
            SHL_ERR(eval_const(bson_iter_value(&it), vars, &f->def, st));
        } else {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Unknown argument in $shift");
        }
    }
    if (f->arg == NULL) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$shift requires an 'output' expression.");
    }
    if (!have_by) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$shift requires an 'by' expression.");
    }
done:
    return ret;
}

/* $expMovingAvg: {input: <expr>, N: <positive integer>} or {input, alpha: (0, 1)}. */
static int
parse_ema(const bson_t *vars, const bson_iter_t *a, wfunc_t *f, shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    bson_iter_t it;
    bool have_n = false, have_alpha = false;

    (void)vars;
    if (!view_of(a, &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$expMovingAvg must have exactly one argument that is an object");
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        const bson_value_t *v = bson_iter_value(&it);
        if (strcmp(k, "input") == 0) {
            shl_expr_destroy(f->arg);
            f->arg = NULL;
            SHL_ERR(shl_expr_parse(v, &f->arg, st));
        } else if (strcmp(k, "N") == 0) {
            int64_t n = 0;
            if (!query_value_is_number(v) || !shl_bson_value_as_int64_exact(v, &n) || n <= 0) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "'N' field must be an integer, but found type %s",
                         shl_bson_type_name(v->value_type));
            }
            f->alpha = 2.0 / ((double)n + 1.0);
            have_n = true;
        } else if (strcmp(k, "alpha") == 0) {
            double x = query_value_is_number(v) ? query_value_as_double(v) : 0;
            if (!query_value_is_number(v) || !(x > 0 && x < 1)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "'alpha' must be between 0 and 1 (exclusive)");
            }
            f->alpha = x;
            have_alpha = true;
        } else {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Got unrecognized field in $expMovingAvg: %s",
                     k);
        }
    }
    if (f->arg == NULL) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$expMovingAvg requires an 'input' expression");
    }
    if (have_n == have_alpha) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$expMovingAvg must have exactly one of 'N' and 'alpha' specified");
    }
done:
    return ret;
}

/* $derivative: {input: <expr>, unit?: "week" or smaller}. */
static int
parse_derivative(const bson_iter_t *a, wfunc_t *f, shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    bson_iter_t it;

    f->deriv = true;
    if (!view_of(a, &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$derivative expects an object, but got a %s",
                 shl_bson_type_name(shl_iter_type(a)));
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "input") == 0) {
            shl_expr_destroy(f->arg);
            f->arg = NULL;
            SHL_ERR(shl_expr_parse(bson_iter_value(&it), &f->arg, st));
        } else if (strcmp(k, "unit") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                         "$derivative expects 'unit' to be a string, but got %s",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            f->deriv_unit = query_date_unit(bson_iter_utf8(&it, NULL));
            if (f->deriv_unit < 0) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "unknown time unit value: %s",
                         bson_iter_utf8(&it, NULL));
            }
            if (f->deriv_unit > 5) { /* month, quarter, year: no fixed length */
                SHL_FAIL(st, 5490710, "$derivative with unit '%s' is not supported",
                         bson_iter_utf8(&it, NULL));
            }
        } else {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$derivative got unexpected argument: %s", k);
        }
    }
    if (f->arg == NULL) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$derivative requires an 'input' expression");
    }
done:
    return ret;
}

/* Parse one output field {<$fn>: arg, window: {...}} into 'f'. */
static int
parse_func(query_wstage_t *w, const char *field, const bson_iter_t *fit, wfunc_t *f,
           shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    bson_iter_t it, fn, win;
    bool have_fn = false, have_win = false;
    const char *name;

    f->field = bson_strdup(field);
    f->unit = -1;
    f->lo.kind = f->hi.kind = BK_UNBOUNDED;
    f->def.value_type = BSON_TYPE_NULL;
    if (!view_of(fit, &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "The field '%s' must be an object", field);
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "window") == 0) {
            have_win = true;
            win = it;
        } else if (k[0] != '$') {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Expected a $-prefixed window function, %s", k);
        } else if (have_fn) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "Window function %s found an unknown argument: %s", shl_iter_key(&fn), k);
        } else {
            have_fn = true;
            fn = it;
        }
    }
    if (!have_fn) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Expected a $-prefixed window function");
    }
    name = shl_iter_key(&fn);
    if (strcmp(name, "$rank") == 0 || strcmp(name, "$denseRank") == 0 ||
        strcmp(name, "$documentNumber") == 0) {
        bson_t a;
        f->kind = name[1] == 'r'
                      ? WF_RANK
                      : (name[1] == 'd' && name[2] == 'e' ? WF_DENSE_RANK : WF_DOC_NUMBER);
        if (have_win) {
            SHL_FAIL(st, 5371601, "Rank style window functions take no other arguments");
        }
        if (!view_of(&fn, &a) || !bson_empty(&a)) {
            SHL_FAIL(st, 5371603, "'%s' must be specified with '{}' as the value", name);
        }
        if (w->nsort != 1) {
            SHL_FAIL(st, 5371602,
                     "'%s' must be specified with a top level sortBy expression with exactly one "
                     "element",
                     name);
        }
        goto done;
    }
    if (strcmp(name, "$shift") == 0) {
        f->kind = WF_SHIFT;
        if (have_win) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$shift does not accept a 'window' field");
        }
        SHL_ERR(parse_shift(w->vars, &fn, f, st));
        if (w->nsort == 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$shift requires a sortBy");
        }
        goto done;
    }
    if (strcmp(name, "$expMovingAvg") == 0) {
        f->kind = WF_EMA;
        if (have_win) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "$expMovingAvg does not accept a 'window' field");
        }
        SHL_ERR(parse_ema(w->vars, &fn, f, st));
        if (w->nsort == 0) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$expMovingAvg requires an explicit 'sortBy'");
        }
        goto done;
    }
    if (strcmp(name, "$locf") == 0 || strcmp(name, "$linearFill") == 0) {
        f->kind = name[1] == 'l' && name[2] == 'o' ? WF_LOCF : WF_LINEAR;
        if (have_win) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "%s does not accept a 'window' field", name);
        }
        SHL_ERR(shl_expr_parse(bson_iter_value(&fn), &f->arg, st));
        if (f->kind == WF_LINEAR && w->nsort != 1) {
            SHL_FAIL(st, 605001, "$linearFill must have exactly one field in the sortBy");
        }
        goto done;
    }
    {
        static const char *const accs[] = {"$sum",        "$avg",           "$min",
                                           "$max",        "$count",         "$push",
                                           "$addToSet",   "$first",         "$last",
                                           "$stdDevPop",  "$stdDevSamp",    "$top",
                                           "$bottom",     "$topN",          "$bottomN",
                                           "$firstN",     "$lastN",         "$maxN",
                                           "$minN",       "$covariancePop", "$covarianceSamp",
                                           "$derivative", "$integral",      NULL};
        bool known = false;
        for (size_t i = 0; accs[i] != NULL; i++) {
            known = known || strcmp(accs[i], name) == 0;
        }
        static const char *const later[] = {"$percentile", "$median", NULL};
        for (size_t i = 0; !known && later[i] != NULL; i++) {
            if (strcmp(later[i], name) == 0) {
                SHL_FAIL(st, SHL_CODE_NOT_IMPLEMENTED,
                         "The window function %s is not supported by Shale yet", name);
            }
        }
        if (!known) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "Unrecognized window function, %s", name);
        }
    }
    f->kind = WF_ACC;
    f->acc.field = bson_strdup("v");
    f->deriv_unit = -1;
    if (strcmp(name, "$integral") == 0) {
        SHL_ERR(parse_derivative(&fn, f, st));
        f->deriv = false;
        f->integral = true;
        if (w->nsort != 1) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "$integral requires a sortBy that consists of exactly one field");
        }
    } else if (strcmp(name, "$derivative") == 0) {
        SHL_ERR(parse_derivative(&fn, f, st));
        if (!have_win) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "$derivative requires explicit window bounds");
        }
        if (w->nsort != 1) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "$derivative requires a sortBy that consists of exactly one field");
        }
    } else if (strcmp(name, "$covariancePop") == 0 || strcmp(name, "$covarianceSamp") == 0) {
        bson_t arr;
        bson_iter_t e;
        f->cov = name[11] == 'P' ? 1 : 2;
        if (!BSON_ITER_HOLDS_ARRAY(&fn) || !query_bson_view(bson_iter_value(&fn), &arr) ||
            bson_count_keys(&arr) != 2) {
            SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                     "%s requires an array of exactly two expressions", name);
        }
        bson_iter_init(&e, &arr);
        shl_iter_next(&e);
        SHL_ERR(shl_expr_parse(bson_iter_value(&e), &f->arg, st));
        shl_iter_next(&e);
        SHL_ERR(shl_expr_parse(bson_iter_value(&e), &f->arg2, st));
    } else {
        SHL_ERR(query_acc_parse(w->vars, &fn, &f->acc, st));
    }
    f->removable = f->cov == 0 && !f->deriv && !f->integral && acc_removable(&f->acc);
    f->endpoint = f->acc.kind == ACC_FIRST || f->acc.kind == ACC_LAST;
    f->deque = f->acc.kind == ACC_MIN || f->acc.kind == ACC_MAX;
    if (have_win) {
        SHL_ERR(parse_window(w->vars, &win, f, st));
        bool whole = f->lo.kind == BK_UNBOUNDED && f->hi.kind == BK_UNBOUNDED;
        if (f->range && w->nsort != 1) {
            SHL_FAIL(st, 5339902, "Range-based bounds require sortBy a single field");
        }
        if (!f->range && !whole && w->nsort == 0) {
            SHL_FAIL(st, 5339901, "Document-based bounds require a sortBy");
        }
    }
done:
    return ret;
}

/* Whether 'a' is 'b' or a path prefix of it. */
static bool
path_prefix(const char *a, const char *b)
{
    size_t n = strlen(a);
    return strncmp(a, b, n) == 0 && (b[n] == '\0' || b[n] == '.');
}

static int
parse_swf(query_wstage_t *w, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_t view, sort_view, out_view, wrap = BSON_INITIALIZER;
    bson_iter_t it;
    bool have_sort = false, have_out = false;
    const bson_value_t *part = NULL;
    bson_value_t pv;

    if (!view_of(arg, &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "the $setWindowFields stage specification must be an object, found %s",
                 shl_bson_type_name(shl_iter_type(arg)));
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "partitionBy") == 0) {
            pv = *bson_iter_value(&it);
            part = &pv;
        } else if (strcmp(k, "sortBy") == 0 || strcmp(k, "output") == 0) {
            if (!view_of(&it, k[0] == 's' ? &sort_view : &out_view)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$setWindowFields.%s' is the wrong type '%s', expected type "
                         "'object'",
                         k, shl_bson_type_name(shl_iter_type(&it)));
            }
            *(k[0] == 's' ? &have_sort : &have_out) = true;
        } else {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                     "BSON field '$setWindowFields.%s' is an unknown field.", k);
        }
    }
    if (!have_out) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '$setWindowFields.output' is missing but a required field");
    }
    if (part != NULL) {
        SHL_ERR(shl_expr_parse(part, &w->partition, st));
    }
    if (have_sort && !bson_empty(&sort_view)) {
        SHL_ERR(shl_sort_pattern_new(&sort_view, &w->sort_by, st));
        w->nsort = shl_sort_pattern_nfields(w->sort_by);
        bson_iter_init(&it, &sort_view);
        shl_iter_next(&it);
        w->sort_path = bson_strdup(shl_iter_key(&it));
        w->sort_desc = bson_iter_as_int64(&it) < 0;
    }
    /* The input sorted by partition key, then sortBy: {p: 1, "d.<field>": dir, ...}. */
    if (w->partition != NULL || w->sort_by != NULL) {
        BSON_APPEND_INT32(&wrap, "p", 1);
        if (w->sort_by != NULL) {
            bson_iter_init(&it, &sort_view);
            while (shl_iter_next(&it)) {
                char *k = bson_strdup_printf("d.%s", shl_iter_key(&it));
                bson_append_iter(&wrap, k, -1, &it);
                bson_free(k);
            }
        }
        SHL_ERR(shl_sort_pattern_new(&wrap, &w->wrap_pat, st));
    }
    w->funcs = bson_malloc0((bson_count_keys(&out_view) + 1) * sizeof(*w->funcs));
    bson_iter_init(&it, &out_view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (k[0] == '\0') {
            SHL_FAIL(st, 40352, "FieldPath cannot be constructed with empty string");
        }
        if (k[0] == '$') {
            SHL_FAIL(st, 16410,
                     "FieldPath field names may not start with '$'. Consider using "
                     "$getField or $setField.");
        }
        for (size_t i = 0; i < w->nfuncs; i++) {
            if (path_prefix(w->funcs[i].field, k) || path_prefix(k, w->funcs[i].field)) {
                SHL_FAIL(st, 6307900,
                         "$setWindowFields 'output' specification contains two conflicting paths. "
                         "Cannot specify both '%s' and '%s'",
                         w->funcs[i].field, k);
            }
        }
        w->nfuncs++;
        SHL_ERR(parse_func(w, k, &it, &w->funcs[w->nfuncs - 1], st));
    }
    w->locf = bson_malloc0((w->nfuncs + 1) * sizeof(*w->locf));
done:
    bson_destroy(&wrap);
    return ret;
}

/* ---------------------------------------------------------------- $setWindowFields: running */

static int
mem_exceeded(const query_wstage_t *w, shl_status_t *st)
{
    return shl_status_set(st, WIN_MEM_EXCEEDED,
                          "Exceeded memory limit in DocumentSourceSetWindowFields, used %lld bytes "
                          "but max allowed is %lld",
                          (long long)w->mem, (long long)w->max_bytes);
}

/* Read the whole input, wrapped as {p: key, d: doc}, into the sorter (or the input buffer). */
static int
swf_drain(query_wstage_t *w, const shl_pipeline_source_t *in, shl_status_t *st)
{
    int ret = 0;
    const bson_t *doc;
    bson_value_t key;
    bson_t *wrap = NULL;
    int64_t mem = 0;

    key.value_type = BSON_TYPE_EOD;
    if (w->wrap_pat != NULL) {
        w->sorter = shl_sorter_new(w->wrap_pat, 0, w->sort_max_bytes);
    }
    for (;;) {
        SHL_ERR(in->next(in->arg, &doc, st));
        if (doc == NULL) {
            break;
        }
        wrap = bson_new();
        if (w->partition != NULL) {
            shl_expr_ctx_t ctx = {.root = doc, .vars = w->vars, .now_ms = 0, .collator = w->coll};
            SHL_ERR(shl_expr_evaluate(w->partition, &ctx, &key, st));
            if (key.value_type == BSON_TYPE_ARRAY) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "An expression used to partition cannot evaluate to value of type array");
            }
        }
        if (key.value_type == BSON_TYPE_EOD) {
            key.value_type = BSON_TYPE_NULL; /* missing and null share a partition */
        }
        query_append_value(wrap, "p", 1, &key);
        BSON_APPEND_DOCUMENT(wrap, "d", doc);
        bson_value_destroy(&key);
        key.value_type = BSON_TYPE_EOD;
        if (w->sorter != NULL) {
            SHL_ERR(shl_sorter_add(w->sorter, wrap, st));
            bson_destroy(wrap);
        } else {
            /* One partition in input order: it is all held, so count it here. */
            mem += wrap->len + 32;
            if (mem > w->max_bytes) {
                w->mem = mem;
                SHL_ERR(mem_exceeded(w, st));
            }
            if (w->nin == w->capin) {
                w->capin = w->capin ? w->capin * 2 : 64;
                w->inbuf = bson_realloc(w->inbuf, w->capin * sizeof(*w->inbuf));
            }
            w->inbuf[w->nin++] = wrap;
        }
        wrap = NULL;
    }
    if (w->sorter != NULL) {
        shl_sorter_finish(w->sorter);
    }
    w->in_mem = mem;
    w->drained = true;
done:
    if (wrap != NULL) {
        bson_destroy(wrap);
    }
    bson_value_destroy(&key);
    return ret;
}

static const bson_t *
input_next(query_wstage_t *w)
{
    if (w->sorter != NULL) {
        return shl_sorter_next(w->sorter);
    }
    return w->inpos < w->nin ? w->inbuf[w->inpos++] : NULL;
}

static void
wrap_parts(const bson_t *wrap, bson_value_t *key, bson_t *doc)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    bson_iter_init_find(&it, wrap, "p");
    *key = *bson_iter_value(&it);
    bson_iter_init_find(&it, wrap, "d");
    bson_iter_document(&it, &len, &data);
    bson_init_static(doc, data, len);
}

static void
deque_clear(wfunc_t *f)
{
    for (size_t k = f->dq_head; k < f->dq_tail; k++) {
        bson_value_destroy(&f->dq_val[k]);
    }
    f->dq_head = f->dq_tail = 0;
}

static void
func_reset(query_wstage_t *w, wfunc_t *f)
{
    if (f->st_init && !f->removable && !f->endpoint && !f->deque && f->cov == 0 && !f->deriv &&
        !f->integral) {
        query_acc_cleanup(&f->st, &f->acc);
    }
    deque_clear(f);
    if (f->st_init) {
        w->mem -= f->st_mem;
    }
    f->st_init = false;
    f->st_mem = 0;
}

/* Load the next partition (its wrappers are borrowed from the sorter or the input buffer). */
static int
load_partition(query_wstage_t *w, shl_status_t *st)
{
    int ret = 0;
    const bson_t *wr = w->next_wrap != NULL ? w->next_wrap : input_next(w);
    bson_value_t key, k2;

    w->npart = w->pos = 0;
    w->mem = 0;
    w->next_wrap = NULL;
    w->have_part = wr != NULL;
    w->rank = w->dense = 0;
    if (w->have_prev_key) {
        bson_destroy(&w->prev_key);
        w->have_prev_key = false;
    }
    for (size_t i = 0; i < w->nfuncs; i++) {
        func_reset(w, &w->funcs[i]);
        bson_value_destroy(&w->locf[i]);
        w->locf[i].value_type = BSON_TYPE_EOD;
    }
    if (wr == NULL) {
        goto done;
    }
    /* Without a sort the one partition was counted as it was read. */
    w->mem = w->sorter != NULL ? 0 : w->in_mem;
    bson_t first;
    wrap_parts(wr, &key, &first);
    while (wr != NULL) {
        bson_t d;
        wrap_parts(wr, &k2, &d);
        if (shl_bson_value_compare_coll(&key, &k2, w->coll) != 0) {
            w->next_wrap = wr; /* partitions equal under the collation are one */
            break;
        }
        if (w->npart == w->cappart) {
            w->cappart = w->cappart ? w->cappart * 2 : 64;
            w->pdata = bson_realloc(w->pdata, w->cappart * sizeof(*w->pdata));
            w->plen = bson_realloc(w->plen, w->cappart * sizeof(*w->plen));
            w->vals = bson_realloc(w->vals, w->cappart * sizeof(*w->vals));
        }
        w->pdata[w->npart] = bson_get_data(&d);
        w->plen[w->npart] = d.len;
        if (w->sort_path != NULL) {
            path_value(&d, w->sort_path, &w->vals[w->npart]);
        }
        w->npart++;
        if (w->sorter != NULL) {
            /* Held documents count against the partition limit (MongoDB's cache does too). */
            w->mem += d.len + 64;
            if (w->mem > w->max_bytes) {
                SHL_ERR(mem_exceeded(w, st));
            }
        }
        wr = input_next(w);
    }
    /* A static bson_t points into itself: make the views where they stay. */
    bson_free(w->part);
    w->part = bson_malloc((w->npart + 1) * sizeof(*w->part));
    for (size_t i = 0; i < w->npart; i++) {
        bson_init_static(&w->part[i], w->pdata[i], w->plen[i]);
    }
done:
    return ret;
}

/* The value 'v' moved by 'delta' (a range bound): a double, or a date moved by time units. */
static bool
shift_value(const wfunc_t *f, const bson_value_t *v, const bound_t *b, bool neg, bson_value_t *out)
{
    if (f->unit >= 0) {
        int64_t ms = 0;
        out->value_type = BSON_TYPE_DATE_TIME;
        if (!query_date_add_utc(v->value.v_datetime, f->unit, neg ? -b->i : b->i, &ms)) {
            return false;
        }
        out->value.v_datetime = ms;
        return true;
    }
    out->value_type = BSON_TYPE_DOUBLE;
    out->value.v_double = query_value_as_double(v) + (neg ? -b->v : b->v);
    return true;
}

/* First index in [0, n) whose value is not "before" 'x' in the sort direction. */
static size_t
lower_index(const query_wstage_t *w, const bson_value_t *x, bool inclusive)
{
    size_t lo = 0, hi = w->npart;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = shl_bson_value_compare(&w->vals[mid], x);
        if (w->sort_desc) {
            c = -c;
        }
        if (c < 0 || (!inclusive && c == 0)) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static int64_t
sat_add(int64_t x, int64_t y)
{
    int64_t r = 0;
    if (__builtin_add_overflow(x, y, &r)) {
        r = y > 0 ? INT64_MAX : INT64_MIN;
    }
    return r;
}

/* The window [*a, *b] of document i (empty when *a > *b). */
static int
window_of(query_wstage_t *w, const wfunc_t *f, size_t i, int64_t *a, int64_t *b, shl_status_t *st)
{
    int ret = 0;
    int64_t n = (int64_t)w->npart, ii = (int64_t)i;

    if (!f->range) {
        /* Offsets may be any int64: saturate instead of overflowing. */
        *a =
            f->lo.kind == BK_UNBOUNDED ? 0 : (f->lo.kind == BK_CURRENT ? ii : sat_add(ii, f->lo.i));
        *b = f->hi.kind == BK_UNBOUNDED ? n - 1
                                        : (f->hi.kind == BK_CURRENT ? ii : sat_add(ii, f->hi.i));
        if (*a < 0) {
            *a = 0;
        }
        if (*b > n - 1) {
            *b = n - 1;
        }
        goto done;
    }
    const bson_value_t *v = &w->vals[i];
    if (f->unit >= 0 ? v->value_type != BSON_TYPE_DATE_TIME : !query_value_is_number(v)) {
        SHL_FAIL(st, f->unit >= 0 ? 5429513 : 5429414,
                 "Invalid range: Expected the sortBy field to be a %s, but it was %s",
                 f->unit >= 0 ? "Date" : "number", type_name(v));
    }
    /* In a descending sort, "before" means a larger value: the bounds move the other way. */
    bson_value_t x;
    if (f->lo.kind == BK_UNBOUNDED) {
        *a = 0;
    } else if (f->lo.kind == BK_CURRENT) {
        *a = ii;
    } else if (!shift_value(f, v, &f->lo, w->sort_desc, &x)) {
        /* past the dates' range: the bound is before or after everything in sort order */
        *a = f->lo.i < 0 ? 0 : n;
    } else {
        *a = (int64_t)lower_index(w, &x, true);
    }
    if (f->hi.kind == BK_UNBOUNDED) {
        *b = n - 1;
    } else if (f->hi.kind == BK_CURRENT) {
        *b = ii;
    } else if (!shift_value(f, v, &f->hi, w->sort_desc, &x)) {
        *b = f->hi.i > 0 ? n - 1 : -1;
    } else {
        *b = (int64_t)lower_index(w, &x, false) - 1;
    }
done:
    return ret;
}

/* Add (sign 1) or remove (sign -1) the value 'v' in 'r'. */
static void
rstate_apply(rstate_t *r, const bson_value_t *v, int sign)
{
    if (!query_value_is_number(v)) {
        return;
    }
    double x = query_value_as_double(v);
    if (v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64) {
        int64_t n = v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
        r->isum += sign > 0 ? (i128)n : -(i128)n;
        r->nlong += v->value_type == BSON_TYPE_INT64 ? sign : 0;
    } else {
        double y = sign > 0 ? x : -x, t = r->dsum + y;
        r->dcomp += fabs(r->dsum) >= fabs(y) ? (r->dsum - t) + y : (y - t) + r->dsum;
        r->dsum = t;
        r->nother += sign;
    }
    /* Welford's update, and its inverse for a value leaving. */
    if (sign > 0) {
        r->count++;
        double delta = x - r->mean;
        r->mean += delta / (double)r->count;
        r->m2 += delta * (x - r->mean);
    } else if (r->count <= 1) {
        r->count = 0;
        r->mean = r->m2 = 0;
    } else {
        double mean = ((double)r->count * r->mean - x) / (double)(r->count - 1);
        r->m2 -= (x - r->mean) * (x - mean);
        r->mean = mean;
        r->count--;
        if (r->m2 < 0 || r->count == 1) {
            r->m2 = 0; /* one value left: no spread, whatever rounding says */
        }
    }
    if (r->nother == 0) {
        r->dsum = r->dcomp = 0; /* no rounding left behind by values that came and went */
    }
}

/* {v: result} of a removable accumulator, typed as $group's would be. */
static void
rstate_result(const rstate_t *r, const accdef_t *d, bson_t *res)
{
    double total = (double)r->isum + (r->dsum + r->dcomp);

    switch (d->kind) {
    case ACC_SUM:
        if (r->nother > 0 || r->isum > INT64_MAX || r->isum < INT64_MIN) {
            BSON_APPEND_DOUBLE(res, "v", total);
        } else if (r->nlong == 0 && r->isum >= INT32_MIN && r->isum <= INT32_MAX) {
            BSON_APPEND_INT32(res, "v", (int32_t)r->isum);
        } else {
            BSON_APPEND_INT64(res, "v", (int64_t)r->isum);
        }
        break;
    case ACC_AVG:
        if (r->count == 0) {
            BSON_APPEND_NULL(res, "v");
        } else {
            BSON_APPEND_DOUBLE(res, "v", total / (double)r->count);
        }
        break;
    default: {
        int64_t div = d->kind == ACC_STDDEV_POP ? r->count : r->count - 1;
        if (div <= 0) {
            BSON_APPEND_NULL(res, "v");
        } else {
            BSON_APPEND_DOUBLE(res, "v", sqrt(r->m2 / (double)div));
        }
        break;
    }
    }
}

/* Slide the removable state of 'f' to the window [a, b] (both ends only move forward). */
static int
eval_removable(query_wstage_t *w, wfunc_t *f, int64_t a, int64_t b, bson_t *res, shl_status_t *st)
{
    int ret = 0;
    bson_value_t v;

    v.value_type = BSON_TYPE_EOD;
    if (!f->st_init || a < f->st_lo || b < f->st_hi || a > f->st_hi + 1) {
        memset(&f->rs, 0, sizeof(f->rs));
        f->st_init = true;
        f->st_lo = a;
        f->st_hi = a - 1;
    }
    for (int64_t j = f->st_hi + 1; j <= b; j++) {
        shl_expr_ctx_t ctx = {
            .root = &w->part[j], .vars = w->vars, .now_ms = 0, .collator = w->coll};
        SHL_ERR(shl_expr_evaluate(f->acc.arg, &ctx, &v, st));
        rstate_apply(&f->rs, &v, 1);
        bson_value_destroy(&v);
        v.value_type = BSON_TYPE_EOD;
        f->st_hi = j;
    }
    for (int64_t j = f->st_lo; j < a; j++) {
        shl_expr_ctx_t ctx = {
            .root = &w->part[j], .vars = w->vars, .now_ms = 0, .collator = w->coll};
        SHL_ERR(shl_expr_evaluate(f->acc.arg, &ctx, &v, st));
        rstate_apply(&f->rs, &v, -1);
        bson_value_destroy(&v);
        v.value_type = BSON_TYPE_EOD;
    }
    f->st_lo = a;
    rstate_result(&f->rs, &f->acc, res);
done:
    bson_value_destroy(&v);
    return ret;
}

/* $first / $last: the value at the window's first or last document (null: none, missing). */
static int
eval_endpoint(query_wstage_t *w, wfunc_t *f, int64_t a, int64_t b, bson_t *res, shl_status_t *st)
{
    int ret = 0;
    bson_value_t v;

    v.value_type = BSON_TYPE_EOD;
    if (a <= b) {
        shl_expr_ctx_t ctx = {.root = &w->part[f->acc.kind == ACC_FIRST ? a : b],
                              .vars = w->vars,
                              .now_ms = 0,
                              .collator = w->coll};
        SHL_ERR(shl_expr_evaluate(f->acc.arg, &ctx, &v, st));
    }
    if (v.value_type == BSON_TYPE_EOD) {
        BSON_APPEND_NULL(res, "v");
    } else {
        query_append_value(res, "v", 1, &v);
    }
done:
    bson_value_destroy(&v);
    return ret;
}

/* $min / $max over [a, b]: the deque holds, in window order, the values that may still be the
 * answer (each strictly better than those after it is not kept), so its front is the result.
 * Equal values stay, and the earliest is reported, as $group's first-seen tie rule. */
static int
eval_deque(query_wstage_t *w, wfunc_t *f, int64_t a, int64_t b, bson_t *res, shl_status_t *st)
{
    int ret = 0;
    bson_value_t v;
    int dir = f->acc.kind == ACC_MAX ? 1 : -1;

    v.value_type = BSON_TYPE_EOD;
    if (!f->st_init || a < f->st_lo || b < f->st_hi) {
        func_reset(w, f);
        f->st_init = true;
        f->st_lo = a;
        f->st_hi = a - 1;
    }
    for (int64_t j = f->st_hi < a - 1 ? a : f->st_hi + 1; j <= b; j++) {
        shl_expr_ctx_t ctx = {
            .root = &w->part[j], .vars = w->vars, .now_ms = 0, .collator = w->coll};
        SHL_ERR(shl_expr_evaluate(f->acc.arg, &ctx, &v, st));
        f->st_hi = j;
        if (nullish(&v)) {
            bson_value_destroy(&v);
            v.value_type = BSON_TYPE_EOD;
            continue;
        }
        while (f->dq_tail > f->dq_head &&
               dir * shl_expr_compare_coll(&f->dq_val[f->dq_tail - 1], &v, w->coll) < 0) {
            f->dq_tail--;
            f->st_mem -= query_value_size(&f->dq_val[f->dq_tail]);
            w->mem -= query_value_size(&f->dq_val[f->dq_tail]);
            bson_value_destroy(&f->dq_val[f->dq_tail]);
        }
        if (f->dq_tail == f->dq_cap) {
            /* Slide the live entries down before growing. */
            size_t live = f->dq_tail - f->dq_head;
            if (f->dq_head > 0 && live < f->dq_cap / 2) {
                memmove(f->dq_idx, f->dq_idx + f->dq_head, live * sizeof(*f->dq_idx));
                memmove(f->dq_val, f->dq_val + f->dq_head, live * sizeof(*f->dq_val));
                f->dq_head = 0;
                f->dq_tail = live;
            } else {
                f->dq_cap = f->dq_cap ? f->dq_cap * 2 : 16;
                f->dq_idx = bson_realloc(f->dq_idx, f->dq_cap * sizeof(*f->dq_idx));
                f->dq_val = bson_realloc(f->dq_val, f->dq_cap * sizeof(*f->dq_val));
            }
        }
        f->dq_idx[f->dq_tail] = j;
        f->dq_val[f->dq_tail++] = v; /* moved */
        f->st_mem += query_value_size(&v);
        w->mem += query_value_size(&v);
        v.value_type = BSON_TYPE_EOD;
        if (w->mem > w->max_bytes) {
            SHL_ERR(mem_exceeded(w, st));
        }
    }
    while (f->dq_head < f->dq_tail && f->dq_idx[f->dq_head] < a) {
        f->st_mem -= query_value_size(&f->dq_val[f->dq_head]);
        w->mem -= query_value_size(&f->dq_val[f->dq_head]);
        bson_value_destroy(&f->dq_val[f->dq_head++]);
    }
    f->st_lo = a;
    if (f->dq_head < f->dq_tail && a <= b) {
        query_append_value(res, "v", 1, &f->dq_val[f->dq_head]);
    } else {
        BSON_APPEND_NULL(res, "v");
    }
done:
    bson_value_destroy(&v);
    return ret;
}

/* Add (sign 1) or remove (sign -1) the pair (x, y) in the covariance state (Welford's online
 * co-moment and its inverse). */
static void
cov_apply(rstate_t *r, double x, double y, int sign)
{
    if (sign > 0) {
        r->count++;
        double dx = x - r->mean;
        r->mean += dx / (double)r->count;
        r->my += (y - r->my) / (double)r->count;
        r->c += dx * (y - r->my);
    } else if (r->count <= 1) {
        memset(r, 0, sizeof(*r));
    } else {
        double mx = ((double)r->count * r->mean - x) / (double)(r->count - 1);
        r->c -= (x - mx) * (y - r->my);
        r->my = ((double)r->count * r->my - y) / (double)(r->count - 1);
        r->mean = mx;
        r->count--;
        if (r->count == 1) {
            r->c = 0;
        }
    }
}

/* The pair of document j, when both values are numbers. */
static int
cov_pair(query_wstage_t *w, const wfunc_t *f, int64_t j, double *x, double *y, bool *ok,
         shl_status_t *st)
{
    int ret = 0;
    bson_value_t vx, vy;
    shl_expr_ctx_t ctx = {.root = &w->part[j], .vars = w->vars, .now_ms = 0, .collator = w->coll};

    vx.value_type = vy.value_type = BSON_TYPE_EOD;
    *ok = false;
    SHL_ERR(shl_expr_evaluate(f->arg, &ctx, &vx, st));
    SHL_ERR(shl_expr_evaluate(f->arg2, &ctx, &vy, st));
    if (query_value_is_number(&vx) && query_value_is_number(&vy)) {
        *x = query_value_as_double(&vx);
        *y = query_value_as_double(&vy);
        *ok = true;
    }
done:
    bson_value_destroy(&vx);
    bson_value_destroy(&vy);
    return ret;
}

/* $covariancePop / $covarianceSamp over [a, b], sliding like the removable accumulators. */
static int
eval_cov(query_wstage_t *w, wfunc_t *f, int64_t a, int64_t b, bson_t *res, shl_status_t *st)
{
    int ret = 0;
    double x = 0, y = 0;
    bool ok = false;

    if (!f->st_init || a < f->st_lo || b < f->st_hi || a > f->st_hi + 1) {
        memset(&f->rs, 0, sizeof(f->rs));
        f->st_init = true;
        f->st_lo = a;
        f->st_hi = a - 1;
    }
    for (int64_t j = f->st_hi + 1; j <= b; j++) {
        SHL_ERR(cov_pair(w, f, j, &x, &y, &ok, st));
        if (ok) {
            cov_apply(&f->rs, x, y, 1);
        }
        f->st_hi = j;
    }
    for (int64_t j = f->st_lo; j < a; j++) {
        SHL_ERR(cov_pair(w, f, j, &x, &y, &ok, st));
        if (ok) {
            cov_apply(&f->rs, x, y, -1);
        }
    }
    f->st_lo = a;
    int64_t div = f->cov == 1 ? f->rs.count : f->rs.count - 1;
    if (div <= 0) {
        BSON_APPEND_NULL(res, "v");
    } else {
        BSON_APPEND_DOUBLE(res, "v", f->rs.c / (double)div);
    }
done:
    return ret;
}

/* The x of $derivative: the sortBy value, a Date with 'unit' (in those units), else a number. */
static int
deriv_x(const query_wstage_t *w, const wfunc_t *f, int64_t j, double *x, shl_status_t *st)
{
    int ret = 0;
    const bson_value_t *v = &w->vals[j];
    static const double unit_ms[] = {1, 1000, 60000, 3600000, 86400000, 604800000};

    if (f->deriv_unit >= 0) {
        if (v->value_type != BSON_TYPE_DATE_TIME) {
            SHL_FAIL(st, f->integral ? 5423901 : 5624900,
                     "%s with unit expects the sortBy field to be a Date, but it was %s",
                     f->integral ? "$integral" : "$derivative", type_name(v));
        }
        *x = (double)v->value.v_datetime / unit_ms[f->deriv_unit];
    } else {
        if (!query_value_is_number(v)) {
            SHL_FAIL(st, f->integral ? 5423902 : 5624901,
                     "%s where the sortBy is a Date requires an 'unit', or the sortBy must be a "
                     "number, but it was %s",
                     f->integral ? "$integral" : "$derivative", type_name(v));
        }
        *x = query_value_as_double(v);
    }
done:
    return ret;
}

/* $derivative over [a, b]: the slope between the window's first and last documents. */
static int
eval_derivative(query_wstage_t *w, wfunc_t *f, size_t i, int64_t a, int64_t b, bson_t *res,
                shl_status_t *st)
{
    int ret = 0;
    double x0 = 0, x1 = 0;
    bson_value_t y0, y1;

    y0.value_type = y1.value_type = BSON_TYPE_EOD;
    SHL_ERR(deriv_x(w, f, (int64_t)i, &x0, st));
    if (a >= b) {
        BSON_APPEND_NULL(res, "v");
        goto done;
    }
    SHL_ERR(deriv_x(w, f, a, &x0, st));
    SHL_ERR(deriv_x(w, f, b, &x1, st));
    shl_expr_ctx_t c0 = {.root = &w->part[a], .vars = w->vars, .now_ms = 0, .collator = w->coll};
    shl_expr_ctx_t c1 = {.root = &w->part[b], .vars = w->vars, .now_ms = 0, .collator = w->coll};
    SHL_ERR(shl_expr_evaluate(f->arg, &c0, &y0, st));
    SHL_ERR(shl_expr_evaluate(f->arg, &c1, &y1, st));
    if (!query_value_is_number(&y0) || !query_value_is_number(&y1) || x1 == x0) {
        BSON_APPEND_NULL(res, "v");
    } else {
        BSON_APPEND_DOUBLE(res, "v",
                           (query_value_as_double(&y1) - query_value_as_double(&y0)) / (x1 - x0));
    }
done:
    bson_value_destroy(&y0);
    bson_value_destroy(&y1);
    return ret;
}

/* The trapezoid between documents j and j + 1 (0 when either value is not a number). */
static int
trapezoid(query_wstage_t *w, const wfunc_t *f, int64_t j, double *area, shl_status_t *st)
{
    int ret = 0;
    double x0 = 0, x1 = 0;
    bson_value_t y0, y1;
    shl_expr_ctx_t c0 = {.root = &w->part[j], .vars = w->vars, .now_ms = 0, .collator = w->coll};
    shl_expr_ctx_t c1 = {
        .root = &w->part[j + 1], .vars = w->vars, .now_ms = 0, .collator = w->coll};

    y0.value_type = y1.value_type = BSON_TYPE_EOD;
    *area = 0;
    SHL_ERR(deriv_x(w, f, j, &x0, st));
    SHL_ERR(deriv_x(w, f, j + 1, &x1, st));
    SHL_ERR(shl_expr_evaluate(f->arg, &c0, &y0, st));
    SHL_ERR(shl_expr_evaluate(f->arg, &c1, &y1, st));
    if (query_value_is_number(&y0) && query_value_is_number(&y1)) {
        *area = (x1 - x0) * (query_value_as_double(&y0) + query_value_as_double(&y1)) / 2;
    }
done:
    bson_value_destroy(&y0);
    bson_value_destroy(&y1);
    return ret;
}

/* $integral over [a, b]: the trapezoidal rule, sliding (a trapezoid enters with its right
 * document and leaves with its left one). */
static int
eval_integral(query_wstage_t *w, wfunc_t *f, size_t i, int64_t a, int64_t b, bson_t *res,
              shl_status_t *st)
{
    int ret = 0;
    double x = 0, area = 0;

    SHL_ERR(deriv_x(w, f, (int64_t)i, &x, st));
    if (!f->st_init || a < f->st_lo || b < f->st_hi || a > f->st_hi) {
        memset(&f->rs, 0, sizeof(f->rs));
        f->st_init = true;
        f->st_lo = a;
        f->st_hi = a; /* one document: no area yet */
    }
    for (int64_t j = f->st_hi + 1; j <= b; j++) {
        SHL_ERR(trapezoid(w, f, j - 1, &area, st));
        f->rs.dsum += area;
        f->st_hi = j;
    }
    for (int64_t j = f->st_lo; j < a; j++) {
        SHL_ERR(trapezoid(w, f, j, &area, st));
        f->rs.dsum -= area;
    }
    f->st_lo = a;
    if (a > b) {
        BSON_APPEND_NULL(res, "v");
    } else {
        BSON_APPEND_DOUBLE(res, "v", a == b ? 0.0 : f->rs.dsum);
    }
done:
    return ret;
}

/* The accumulator of 'f' over the window of document i, appended as {v: result} to 'res'. */
static int
eval_acc(query_wstage_t *w, wfunc_t *f, size_t i, bson_t *res, shl_status_t *st)
{
    int ret = 0;
    int64_t a = 0, b = 0;
    bson_value_t v;

    v.value_type = BSON_TYPE_EOD;
    SHL_ERR(window_of(w, f, i, &a, &b, st));
    if (a > b) {
        a = 0;
        b = -1;
    }
    if (f->deriv) {
        SHL_ERR(eval_derivative(w, f, i, a, b, res, st));
        goto done;
    }
    if (f->integral) {
        SHL_ERR(eval_integral(w, f, i, a, b, res, st));
        goto done;
    }
    if (f->cov != 0) {
        SHL_ERR(eval_cov(w, f, a, b, res, st));
        goto done;
    }
    if (f->removable) {
        SHL_ERR(eval_removable(w, f, a, b, res, st));
        goto done;
    }
    if (f->endpoint) {
        SHL_ERR(eval_endpoint(w, f, a, b, res, st));
        goto done;
    }
    if (f->deque) {
        SHL_ERR(eval_deque(w, f, a, b, res, st));
        goto done;
    }
    /* Windows only move forward in a sorted partition: extend the folded state when the
     * window keeps its start, else fold again from the start. */
    if (!f->st_init || f->st_lo != a || b < f->st_hi) {
        func_reset(w, f);
        query_acc_init(&f->st, &f->acc);
        f->st_init = true;
        f->st_lo = a;
        f->st_hi = a - 1;
    }
    for (int64_t j = f->st_hi + 1; j <= b; j++) {
        shl_expr_ctx_t ctx = {
            .root = &w->part[j], .vars = w->vars, .now_ms = 0, .collator = w->coll};
        int64_t grow = 0;
        SHL_ERR(shl_expr_evaluate(f->acc.arg, &ctx, &v, st));
        SHL_ERR(query_acc_add(&f->st, &f->acc, &v, &w->part[j], &grow, st));
        bson_value_destroy(&v);
        v.value_type = BSON_TYPE_EOD;
        f->st_mem += grow;
        w->mem += grow;
        f->st_hi = j;
        if (w->mem > w->max_bytes) {
            SHL_ERR(mem_exceeded(w, st));
        }
    }
    query_acc_result(&f->st, &f->acc, res);
done:
    bson_value_destroy(&v);
    return ret;
}

/* $linearFill of document i whose value is null: between the nearest non-null neighbours. */
static int
eval_linear(query_wstage_t *w, wfunc_t *f, size_t i, bson_value_t *out, shl_status_t *st)
{
    int ret = 0;
    bson_value_t y0, y1, y;
    int64_t i0 = -1, i1 = -1;

    y0.value_type = y1.value_type = y.value_type = BSON_TYPE_EOD;
    out->value_type = BSON_TYPE_NULL;
    for (size_t j = 0; j < w->npart; j++) {
        shl_expr_ctx_t ctx = {
            .root = &w->part[j], .vars = w->vars, .now_ms = 0, .collator = w->coll};
        const bson_value_t *x = &w->vals[j];
        if (!query_value_is_number(x) && x->value_type != BSON_TYPE_DATE_TIME) {
            SHL_FAIL(st, 6050106,
                     "The sortBy field of $linearFill must be a number or a date, but it was %s",
                     type_name(x));
        }
        if (j > i && i1 >= 0) {
            break;
        }
        if (j == i) {
            continue;
        }
        SHL_ERR(shl_expr_evaluate(f->arg, &ctx, &y, st));
        if (!nullish(&y)) {
            if (!query_value_is_number(&y)) {
                SHL_FAIL(st, 6050107, "Value to be filled by $linearFill must be numeric, found %s",
                         type_name(&y));
            }
            if (j < i) {
                bson_value_destroy(&y0);
                y0 = y;
                i0 = (int64_t)j;
            } else {
                y1 = y;
                i1 = (int64_t)j;
            }
            y.value_type = BSON_TYPE_EOD;
        }
        bson_value_destroy(&y);
        y.value_type = BSON_TYPE_EOD;
    }
    if (i0 >= 0 && i1 >= 0) {
        double x0 = shl_bson_value_as_double(&w->vals[i0]);
        double x1 = shl_bson_value_as_double(&w->vals[i1]);
        double x = shl_bson_value_as_double(&w->vals[i]);
        if (w->vals[i].value_type == BSON_TYPE_DATE_TIME) {
            x0 = (double)w->vals[i0].value.v_datetime;
            x1 = (double)w->vals[i1].value.v_datetime;
            x = (double)w->vals[i].value.v_datetime;
        }
        double a = query_value_as_double(&y0), b = query_value_as_double(&y1);
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = x1 == x0 ? a : a + (b - a) * (x - x0) / (x1 - x0);
    }
done:
    bson_value_destroy(&y0);
    bson_value_destroy(&y1);
    bson_value_destroy(&y);
    return ret;
}

/* The value of function 'f' for document i of the partition into *out (owned). */
static int
eval_func(query_wstage_t *w, size_t fi, size_t i, bson_value_t *out, shl_status_t *st)
{
    int ret = 0;
    wfunc_t *f = &w->funcs[fi];
    bson_t res = BSON_INITIALIZER;
    bson_iter_t it;
    shl_expr_ctx_t ctx = {.root = &w->part[i], .vars = w->vars, .now_ms = 0, .collator = w->coll};

    out->value_type = BSON_TYPE_EOD;
    switch (f->kind) {
    case WF_ACC:
        SHL_ERR(eval_acc(w, f, i, &res, st));
        if (bson_iter_init_find(&it, &res, "v")) {
            bson_value_copy(bson_iter_value(&it), out);
        }
        break;
    case WF_RANK:
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = (int32_t)w->rank;
        break;
    case WF_DENSE_RANK:
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = (int32_t)w->dense;
        break;
    case WF_DOC_NUMBER:
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = (int32_t)(i + 1);
        break;
    case WF_SHIFT: {
        int64_t j = (int64_t)i + f->by;
        if (j >= 0 && j < (int64_t)w->npart) {
            ctx.root = &w->part[j];
            SHL_ERR(shl_expr_evaluate(f->arg, &ctx, out, st));
        }
        if (out->value_type == BSON_TYPE_EOD) {
            bson_value_copy(&f->def, out);
        }
        break;
    }
    case WF_LOCF:
        SHL_ERR(shl_expr_evaluate(f->arg, &ctx, out, st));
        if (nullish(out)) {
            bson_value_destroy(out);
            out->value_type = BSON_TYPE_NULL;
            if (w->locf[fi].value_type != BSON_TYPE_EOD) {
                bson_value_copy(&w->locf[fi], out);
            }
        } else {
            bson_value_destroy(&w->locf[fi]);
            bson_value_copy(out, &w->locf[fi]);
        }
        break;
    case WF_EMA:
        /* Numbers move the average (the first one starts it); other values leave it. */
        SHL_ERR(shl_expr_evaluate(f->arg, &ctx, out, st));
        if (query_value_is_number(out)) {
            double x = query_value_as_double(out);
            bson_value_t *m = &w->locf[fi];
            if (m->value_type == BSON_TYPE_DOUBLE) {
                m->value.v_double = x * f->alpha + m->value.v_double * (1 - f->alpha);
            } else {
                m->value_type = BSON_TYPE_DOUBLE;
                m->value.v_double = x;
            }
        }
        bson_value_destroy(out);
        out->value_type = BSON_TYPE_NULL;
        if (w->locf[fi].value_type == BSON_TYPE_DOUBLE) {
            *out = w->locf[fi];
        }
        break;
    case WF_LINEAR:
        SHL_ERR(shl_expr_evaluate(f->arg, &ctx, out, st));
        if (nullish(out)) {
            bson_value_destroy(out);
            SHL_ERR(eval_linear(w, f, i, out, st));
        } else if (!query_value_is_number(out)) {
            SHL_FAIL(st, 6050107, "Value to be filled by $linearFill must be numeric, found %s",
                     type_name(out));
        }
        break;
    }
done:
    bson_destroy(&res);
    return ret;
}

static int
swf_next(query_wstage_t *w, const shl_pipeline_source_t *in, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    bson_t *cur = NULL;
    bson_value_t v;

    v.value_type = BSON_TYPE_EOD;
    *doc = NULL;
    if (!w->drained) {
        SHL_ERR(swf_drain(w, in, st));
        SHL_ERR(load_partition(w, st));
    }
    if (w->have_part && w->pos >= w->npart) {
        SHL_ERR(load_partition(w, st));
    }
    if (!w->have_part) {
        goto done;
    }
    size_t i = w->pos++;
    if (w->sort_by != NULL) {
        bson_t key;
        shl_sort_key_compute(w->sort_by, &w->part[i], &key);
        if (!w->have_prev_key || shl_sort_key_compare(w->sort_by, &w->prev_key, &key) != 0) {
            w->rank = (int64_t)i + 1;
            w->dense++;
        }
        if (w->have_prev_key) {
            bson_destroy(&w->prev_key);
        }
        bson_steal(&w->prev_key, &key);
        w->have_prev_key = true;
    }
    cur = bson_copy(&w->part[i]);
    for (size_t fi = 0; fi < w->nfuncs; fi++) {
        SHL_ERR(eval_func(w, fi, i, &v, st));
        bson_t *nxt = bson_new();
        query_copy_set_path(cur, w->funcs[fi].field, &v, nxt);
        bson_destroy(cur);
        cur = nxt;
        bson_value_destroy(&v);
        v.value_type = BSON_TYPE_EOD;
    }
    if (w->out != NULL) {
        bson_destroy(w->out);
    }
    w->out = cur;
    cur = NULL;
    *doc = w->out;
done:
    if (cur != NULL) {
        bson_destroy(cur);
    }
    bson_value_destroy(&v);
    return ret;
}

/* ---------------------------------------------------------------- $densify */

static int
field_path_check(const char *path, shl_status_t *st)
{
    int ret = 0;

    if (path[0] == '\0') {
        SHL_FAIL(st, 40352, "FieldPath cannot be constructed with empty string");
    }
    if (path[0] == '$') {
        SHL_FAIL(st, 16410,
                 "FieldPath field names may not start with '$'. Consider using "
                 "$getField or $setField.");
    }
done:
    return ret;
}

static bool
is_int_type(const bson_value_t *v)
{
    return v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64;
}

static int
parse_densify_range(query_wstage_t *w, const bson_t *range, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it;
    bson_value_t step;
    bool have_step = false, have_bounds = false;
    bson_iter_t bounds;

    bson_iter_init(&it, range);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "step") == 0) {
            if (!BSON_ITER_HOLDS_NUMBER(&it) && !BSON_ITER_HOLDS_DECIMAL128(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$densify.range.step' is the wrong type '%s', expected types "
                         "'[int, decimal, double, long']",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            step = *bson_iter_value(&it);
            have_step = true;
        } else if (strcmp(k, "unit") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$densify.range.unit' is the wrong type '%s', expected type "
                         "'string'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            w->unit = query_date_unit(bson_iter_utf8(&it, NULL));
            if (w->unit < 0) {
                SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE, "unknown time unit value: %s",
                         bson_iter_utf8(&it, NULL));
            }
        } else if (strcmp(k, "bounds") == 0) {
            bounds = it;
            have_bounds = true;
        } else {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                     "BSON field '$densify.range.%s' is an unknown field.", k);
        }
    }
    if (!have_step) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '$densify.range.step' is missing but a required field");
    }
    if (!have_bounds) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '$densify.range.bounds' is missing but a required field");
    }
    w->step = query_value_as_double(&step);
    if (!(w->step > 0)) {
        SHL_FAIL(st, 5733401,
                 "the step parameter in a range statement must be a strictly positive numeric "
                 "value");
    }
    w->step_int = is_int_type(&step);
    if (w->step_int) {
        w->istep = step.value_type == BSON_TYPE_INT32 ? step.value.v_int32 : step.value.v_int64;
    }
    if (w->unit >= 0) {
        if (w->step != floor(w->step) || w->step > 9.2e18) {
            SHL_FAIL(st, 6586400,
                     "The step parameter in a range satement must be a whole number when "
                     "densifying a date range");
        }
        w->istep = (int64_t)w->step;
    }
    if (BSON_ITER_HOLDS_UTF8(&bounds)) {
        const char *b = bson_iter_utf8(&bounds, NULL);
        if (strcmp(b, "full") == 0) {
            w->bounds_mode = 0;
        } else if (strcmp(b, "partition") == 0) {
            w->bounds_mode = 1;
        } else {
            SHL_FAIL(st, 5946802, "Bounds string must either be 'full' or 'partition'");
        }
    } else if (BSON_ITER_HOLDS_ARRAY(&bounds)) {
        bson_t arr;
        bson_iter_t a;
        const bson_value_t *lo, *hi;
        query_bson_view(bson_iter_value(&bounds), &arr);
        if (bson_count_keys(&arr) != 2) {
            SHL_FAIL(st, 5733403,
                     "a bounding array in a range statement must have exactly two elements");
        }
        bson_iter_init(&a, &arr);
        shl_iter_next(&a);
        bson_value_copy(bson_iter_value(&a), &w->blo);
        shl_iter_next(&a);
        bson_value_copy(bson_iter_value(&a), &w->bhi);
        lo = &w->blo;
        hi = &w->bhi;
        bool lnum = query_value_is_number(lo), hnum = query_value_is_number(hi);
        bool ldate = lo->value_type == BSON_TYPE_DATE_TIME,
             hdate = hi->value_type == BSON_TYPE_DATE_TIME;
        if (w->unit < 0) {
            if ((lnum && hdate) || (ldate && hnum)) {
                SHL_FAIL(st, 5733406,
                         "a bounding array must contain either both dates or both numeric types");
            }
            if (ldate && hdate) {
                SHL_FAIL(st, 5733410, "A bounding array of dates must be specified with a unit");
            }
            if (!lnum || !hnum) {
                SHL_FAIL(st, 5733402,
                         "the bounds in a range statement must be the string 'full', 'partition', "
                         "or an ascending array of two numbers or two dates");
            }
        } else {
            if (lnum && hnum) {
                SHL_FAIL(st, 5733409, "numeric bounds may not have unit parameter");
            }
            if (!ldate || !hdate) {
                SHL_FAIL(st, 5733402,
                         "a bounding array must be an ascending array of either two dates or two "
                         "numbers");
            }
        }
        if (shl_bson_value_compare(lo, hi) > 0) {
            SHL_FAIL(st, 5733402,
                     "the bounds in a range statement must be the string 'full', 'partition', or "
                     "an ascending array of two numbers or two dates");
        }
        w->bounds_mode = 2;
    } else {
        SHL_FAIL(st, 5733402,
                 "the bounds in a range statement must be the string 'full', 'partition', or an "
                 "ascending array of two numbers or two dates");
    }
done:
    return ret;
}

static int
parse_densify(query_wstage_t *w, const bson_iter_t *arg, shl_status_t *st)
{
    int ret = 0;
    bson_t view, range, pf, sort = BSON_INITIALIZER;
    bson_iter_t it;
    bool have_range = false, have_pf = false;

    w->unit = -1;
    w->blo.value_type = w->bhi.value_type = BSON_TYPE_EOD;
    if (!view_of(arg, &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "The $densify stage specification must be an object, found %s",
                 shl_bson_type_name(shl_iter_type(arg)));
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "field") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$densify.field' is the wrong type '%s', expected type "
                         "'string'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            bson_free(w->field);
            w->field = bson_strdup(bson_iter_utf8(&it, NULL));
        } else if (strcmp(k, "partitionByFields") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&it) || !query_bson_view(bson_iter_value(&it), &pf)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$densify.partitionByFields' is the wrong type '%s', expected "
                         "type 'array'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            have_pf = true;
        } else if (strcmp(k, "range") == 0) {
            if (!view_of(&it, &range)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$densify.range' is the wrong type '%s', expected type "
                         "'object'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            have_range = true;
        } else {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                     "BSON field '$densify.%s' is an unknown field.", k);
        }
    }
    if (have_range) {
        SHL_ERR(parse_densify_range(w, &range, st));
    }
    if (w->field == NULL) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '$densify.field' is missing but a required field");
    }
    if (!have_range) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '$densify.range' is missing but a required field");
    }
    SHL_ERR(field_path_check(w->field, st));
    if (have_pf) {
        w->pfields = bson_malloc0((bson_count_keys(&pf) + 1) * sizeof(*w->pfields));
        bson_iter_init(&it, &pf);
        while (shl_iter_next(&it)) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$densify.partitionByFields.%s' is the wrong type '%s', "
                         "expected type 'string'",
                         shl_iter_key(&it), shl_bson_type_name(shl_iter_type(&it)));
            }
            const char *f = bson_iter_utf8(&it, NULL);
            SHL_ERR(field_path_check(f, st));
            if (path_prefix(w->field, f)) {
                SHL_FAIL(st, 8993000,
                         "BSON field '$densify.partitionByFields' contains the field that is being "
                         "densified");
            }
            if (path_prefix(f, w->field)) {
                SHL_FAIL(st, 9554500,
                         "The field that is being densified contains the BSON field "
                         "'$densify.partitionByFields'");
            }
            w->pfields[w->npfields++] = bson_strdup(f);
        }
    }
    if (w->bounds_mode == 1 && w->npfields == 0) {
        SHL_FAIL(st, 5733408,
                 "one may not specify the bounds as 'partition' without specifying a non-empty "
                 "array of partitionByFields. You may have meant to specify 'full' bounds.");
    }
    /* The input wrapped as {p: partition key, d: doc}, sorted by the key, then the field
     * (MongoDB's desugared $sort; the key document keeps a missing partition field apart from
     * a null one, where sorting by the fields themselves would interleave them). */
    BSON_APPEND_INT32(&sort, "p", 1);
    {
        char *k = bson_strdup_printf("d.%s", w->field);
        BSON_APPEND_INT32(&sort, k, 1);
        bson_free(k);
    }
    SHL_ERR(shl_sort_pattern_new(&sort, &w->wrap_pat, st));
done:
    bson_destroy(&sort);
    return ret;
}

/* The value to densify of 'doc' (borrowed), checked against the unit; EOD/null pass. */
static int
densify_value(const query_wstage_t *w, const bson_t *doc, bson_value_t *v, shl_status_t *st)
{
    int ret = 0;

    path_value(doc, w->field, v);
    if (nullish(v)) {
        goto done;
    }
    if (!query_value_is_number(v) && v->value_type != BSON_TYPE_DATE_TIME) {
        SHL_FAIL(st, 5733201, "Densify field type must be numeric or a date");
    }
    if (w->unit >= 0 && v->value_type != BSON_TYPE_DATE_TIME) {
        SHL_FAIL(st, 6053600,
                 "Encountered numeric densify value in collection when step has a date unit.");
    }
    if (w->unit < 0 && v->value_type == BSON_TYPE_DATE_TIME) {
        SHL_FAIL(st, 6053601,
                 "Encountered date densify value in collection when step does not have a date "
                 "unit.");
    }
done:
    return ret;
}

/* The partition key of 'doc': {f1: v1, ...} over the partition fields (missing ones left out). */
static void
densify_pkey(const query_wstage_t *w, const bson_t *doc, bson_t *key)
{
    bson_init(key);
    for (size_t i = 0; i < w->npfields; i++) {
        bson_value_t v;
        path_value(doc, w->pfields[i], &v);
        if (v.value_type != BSON_TYPE_EOD) {
            /* dotted fields make nested documents, as in the generated documents */
            bson_t next = BSON_INITIALIZER;
            query_copy_set_path(key, w->pfields[i], &v, &next);
            bson_destroy(key);
            bson_steal(key, &next);
        }
    }
}

static int
densify_drain(query_wstage_t *w, const shl_pipeline_source_t *in, shl_status_t *st)
{
    int ret = 0;
    const bson_t *doc;
    bson_value_t v;

    w->sorter = shl_sorter_new(w->wrap_pat, 0, w->sort_max_bytes);
    for (;;) {
        SHL_ERR(in->next(in->arg, &doc, st));
        if (doc == NULL) {
            break;
        }
        SHL_ERR(densify_value(w, doc, &v, st));
        if (!nullish(&v)) {
            if (!w->have_gmin || shl_bson_value_compare(&v, &w->gmin) < 0) {
                bson_value_destroy(&w->gmin);
                bson_value_copy(&v, &w->gmin);
            }
            if (!w->have_gmin || shl_bson_value_compare(&v, &w->gmax) > 0) {
                bson_value_destroy(&w->gmax);
                bson_value_copy(&v, &w->gmax);
            }
            w->have_gmin = true;
        }
        bson_t key, wrap = BSON_INITIALIZER;
        densify_pkey(w, doc, &key);
        BSON_APPEND_DOCUMENT(&wrap, "p", &key);
        BSON_APPEND_DOCUMENT(&wrap, "d", doc);
        bson_destroy(&key);
        ret = shl_sorter_add(w->sorter, &wrap, st);
        bson_destroy(&wrap);
        if (ret != 0) {
            goto done;
        }
    }
    shl_sorter_finish(w->sorter);
    w->drained = true;
done:
    return ret;
}

/* cur + step into *out (cur's type kept for integers, double otherwise; dates by unit). */
static bool
densify_add(const query_wstage_t *w, const bson_value_t *cur, bson_value_t *out)
{
    if (w->unit >= 0) {
        int64_t ms = 0;
        out->value_type = BSON_TYPE_DATE_TIME;
        if (!query_date_add_utc(cur->value.v_datetime, w->unit, w->istep, &ms)) {
            return false;
        }
        out->value.v_datetime = ms;
        return true;
    }
    if (w->step_int && is_int_type(cur)) {
        int64_t c = cur->value_type == BSON_TYPE_INT32 ? cur->value.v_int32 : cur->value.v_int64;
        int64_t r = 0;
        if (!__builtin_add_overflow(c, w->istep, &r)) {
            if (cur->value_type == BSON_TYPE_INT32 && r >= INT32_MIN && r <= INT32_MAX) {
                out->value_type = BSON_TYPE_INT32;
                out->value.v_int32 = (int32_t)r;
            } else {
                out->value_type = BSON_TYPE_INT64;
                out->value.v_int64 = r;
            }
            return true;
        }
    }
    out->value_type = BSON_TYPE_DOUBLE;
    out->value.v_double = query_value_as_double(cur) + w->step;
    return isfinite(out->value.v_double);
}

/* Emit the generated document {partition fields..., field: cur} and step cur. */
static int
densify_emit(query_wstage_t *w, const bson_t **doc, shl_status_t *st)
{
    int ret = 0;
    bson_t *o = bson_new();
    bson_value_t nxt;

    if (w->mem >= shl_opt_int(SHL_OPT_internalQueryMaxAllowedDensifyDocs)) {
        bson_destroy(o);
        SHL_FAIL(st, 5897900,
                 "Generated %lld documents in $densify, which is over the limit of %lld. Increase "
                 "the 'internalQueryMaxAllowedDensifyDocs' parameter to allow more generated "
                 "documents",
                 (long long)w->mem + 1,
                 (long long)shl_opt_int(SHL_OPT_internalQueryMaxAllowedDensifyDocs));
    }
    w->mem++; /* $densify counts generated documents here */
    query_copy_set_path(w->have_pkey ? &w->cur_pkey : NULL, w->field, &w->cur, o);
    if (w->out != NULL) {
        bson_destroy(w->out);
    }
    w->out = o;
    *doc = o;
    if (!densify_add(w, &w->cur, &nxt)) {
        w->gen_done = true;
    } else {
        w->cur = nxt;
    }
done:
    return ret;
}

/* Whether 'cur' may still be generated before a document of value 'v' (NULL: the partition's
 * end). */
static bool
densify_wants(const query_wstage_t *w, const bson_value_t *v)
{
    if (w->gen_done || w->cur.value_type == BSON_TYPE_EOD) {
        return false;
    }
    if (w->bounds_mode == 2 && shl_bson_value_compare(&w->cur, &w->bhi) >= 0) {
        return false;
    }
    if (v != NULL) {
        return shl_bson_value_compare(&w->cur, v) < 0;
    }
    if (w->bounds_mode == 0) {
        return w->have_gmin && shl_bson_value_compare(&w->cur, &w->gmax) <= 0;
    }
    return w->bounds_mode == 2;
}

/* Start a partition: where generation begins. */
static void
densify_start(query_wstage_t *w)
{
    w->gen_done = false;
    w->cur.value_type = BSON_TYPE_EOD;
    if (w->bounds_mode == 0 && w->have_gmin) {
        w->cur = w->gmin;
    } else if (w->bounds_mode == 2) {
        w->cur = w->blo;
    }
}

/* The pending wrapper's partition key (a view into it) and its document (w->pend_doc). */
static void
pending_parts(query_wstage_t *w, bson_t *key)
{
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;

    bson_iter_init_find(&it, w->pending, "p");
    bson_iter_document(&it, &len, &data);
    bson_init_static(key, data, len);
    bson_iter_init_find(&it, w->pending, "d");
    bson_iter_document(&it, &len, &data);
    bson_init_static(&w->pend_doc, data, len);
}

static int
densify_next(query_wstage_t *w, const shl_pipeline_source_t *in, const bson_t **doc,
             shl_status_t *st)
{
    int ret = 0;
    bson_value_t v;

    *doc = NULL;
    if (!w->drained) {
        SHL_ERR(densify_drain(w, in, st));
        w->pending = shl_sorter_next(w->sorter);
        if (w->pending != NULL) {
            bson_t pk;
            pending_parts(w, &pk);
            bson_copy_to(&pk, &w->cur_pkey);
            w->have_pkey = true;
            densify_start(w);
        } else if (w->bounds_mode == 2 && w->npfields == 0) {
            /* No input: the explicit range alone is generated. */
            densify_start(w);
        }
    }
    for (;;) {
        if (w->pending == NULL) {
            /* The end of the input: finish the last partition. */
            if (densify_wants(w, NULL)) {
                SHL_ERR(densify_emit(w, doc, st));
            }
            goto done;
        }
        bson_t key;
        pending_parts(w, &key);
        if (shl_bson_doc_compare_coll(&key, &w->cur_pkey, w->coll) != 0) {
            if (densify_wants(w, NULL)) {
                SHL_ERR(densify_emit(w, doc, st));
                goto done;
            }
            bson_destroy(&w->cur_pkey);
            bson_copy_to(&key, &w->cur_pkey);
            densify_start(w);
        }
        SHL_ERR(densify_value(w, &w->pend_doc, &v, st));
        if (!nullish(&v)) {
            if (w->cur.value_type == BSON_TYPE_EOD && w->bounds_mode == 1) {
                w->cur = v; /* "partition": from the partition's first value */
            }
            if (densify_wants(w, &v)) {
                SHL_ERR(densify_emit(w, doc, st));
                goto done;
            }
            /* Past the document: step over its value when it is on the grid. */
            if (!w->gen_done && w->cur.value_type != BSON_TYPE_EOD &&
                shl_bson_value_compare(&w->cur, &v) == 0) {
                bson_value_t nxt;
                if (densify_add(w, &w->cur, &nxt)) {
                    w->cur = nxt;
                } else {
                    w->gen_done = true;
                }
            }
        }
        *doc = &w->pend_doc;
        w->pending = shl_sorter_next(w->sorter);
        goto done;
    }
done:
    return ret;
}

/* ---------------------------------------------------------------- $fill */

int
query_fill_desugar(const bson_iter_t *arg, bson_t *stages, uint32_t *n, shl_status_t *st)
{
    int ret = 0;
    bson_t view, out_view, swf = BSON_INITIALIZER, swf_out = BSON_INITIALIZER,
                           add = BSON_INITIALIZER, pkey = BSON_INITIALIZER;
    bson_iter_t it, o;
    const bson_value_t *part = NULL, *sort_by = NULL;
    bson_value_t pv, sv;
    bson_t pfields;
    bool have_out = false, have_pf = false;
    char key[16];
    const char *kp;

    if (!view_of(arg, &view)) {
        SHL_FAIL(st, SHL_CODE_FAILED_TO_PARSE,
                 "$fill stage specification must be an object, found %s",
                 shl_bson_type_name(shl_iter_type(arg)));
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "partitionBy") == 0) {
            pv = *bson_iter_value(&it);
            part = &pv;
        } else if (strcmp(k, "partitionByFields") == 0) {
            if (!BSON_ITER_HOLDS_ARRAY(&it) || !query_bson_view(bson_iter_value(&it), &pfields)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$fill.partitionByFields' is the wrong type '%s', expected "
                         "type 'array'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            have_pf = true;
        } else if (strcmp(k, "sortBy") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$fill.sortBy' is the wrong type '%s', expected type 'object'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            sv = *bson_iter_value(&it);
            sort_by = &sv;
        } else if (strcmp(k, "output") == 0) {
            if (!view_of(&it, &out_view)) {
                SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                         "BSON field '$fill.output' is the wrong type '%s', expected type 'object'",
                         shl_bson_type_name(shl_iter_type(&it)));
            }
            have_out = true;
        } else {
            SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD, "BSON field '$fill.%s' is an unknown field.",
                     k);
        }
    }
    if (!have_out) {
        SHL_FAIL(st, SHL_CODE_IDL_FAILED_TO_PARSE,
                 "BSON field '$fill.output' is missing but a required field");
    }
    if (bson_empty(&out_view)) {
        SHL_FAIL(st, 6050203, "$fill must specify at least one output field");
    }
    if (part != NULL && have_pf) {
        SHL_FAIL(st, 6050204,
                 "Maximum one of 'partitionBy' and 'partitionByFields' can be specified "
                 "in '$fill'");
    }
    bson_iter_init(&o, &out_view);
    while (shl_iter_next(&o)) {
        const char *f = shl_iter_key(&o);
        bson_t spec, fn;
        bson_iter_t s;
        const bson_value_t *value = NULL, *method = NULL;
        if (!view_of(&o, &spec)) {
            SHL_FAIL(st, 6050200,
                     "Each fill output specification must be an object with exactly one of "
                     "'method' or 'value' fields");
        }
        bson_iter_init(&s, &spec);
        while (shl_iter_next(&s)) {
            if (strcmp(shl_iter_key(&s), "value") == 0 && value == NULL && method == NULL) {
                value = bson_iter_value(&s);
            } else if (strcmp(shl_iter_key(&s), "method") == 0 && value == NULL && method == NULL) {
                method = bson_iter_value(&s);
            } else {
                SHL_FAIL(st, SHL_CODE_IDL_UNKNOWN_FIELD,
                         "BSON field '$fill.output.%s' is an unknown field.", shl_iter_key(&s));
            }
        }
        if (value == NULL && method == NULL) {
            SHL_FAIL(st, 6050200,
                     "Each fill output specification must be an object with exactly one of "
                     "'method' or 'value' fields");
        }
        char *path = bson_strdup_printf("$%s", f);
        if (value != NULL) {
            bson_t ifn, args;
            BSON_APPEND_DOCUMENT_BEGIN(&add, f, &ifn);
            BSON_APPEND_ARRAY_BEGIN(&ifn, "$ifNull", &args);
            BSON_APPEND_UTF8(&args, "0", path);
            bson_append_value(&args, "1", 1, value);
            bson_append_array_end(&ifn, &args);
            bson_append_document_end(&add, &ifn);
        } else {
            const char *m = method->value_type == BSON_TYPE_UTF8 ? method->value.v_utf8.str : "";
            if (strcmp(m, "locf") != 0 && strcmp(m, "linear") != 0) {
                bson_free(path);
                SHL_FAIL(st, 6050202, "Method must be either locf or linear");
            }
            BSON_APPEND_DOCUMENT_BEGIN(&swf_out, f, &fn);
            BSON_APPEND_UTF8(&fn, m[0] == 'l' && m[1] == 'o' ? "$locf" : "$linearFill", path);
            bson_append_document_end(&swf_out, &fn);
        }
        bson_free(path);
    }
    if (!bson_empty(&swf_out)) {
        bson_t body;
        /* partitionByFields [a, "b.c"] is partitionBy {a: "$a", b: {c: "$b.c"}} */
        if (part == NULL && have_pf && !bson_empty(&pfields)) {
            bson_iter_t p;
            bson_iter_init(&p, &pfields);
            while (shl_iter_next(&p)) {
                if (!BSON_ITER_HOLDS_UTF8(&p)) {
                    SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH,
                             "BSON field '$fill.partitionByFields.%s' is the wrong type '%s', "
                             "expected type 'string'",
                             shl_iter_key(&p), shl_bson_type_name(shl_iter_type(&p)));
                }
                const char *pf = bson_iter_utf8(&p, NULL);
                SHL_ERR(field_path_check(pf, st));
                char *pp = bson_strdup_printf("$%s", pf);
                bson_value_t pv2 = {.value_type = BSON_TYPE_UTF8};
                bson_t next = BSON_INITIALIZER;
                pv2.value.v_utf8.str = pp;
                pv2.value.v_utf8.len = (uint32_t)strlen(pp);
                query_copy_set_path(&pkey, pf, &pv2, &next);
                bson_destroy(&pkey);
                bson_steal(&pkey, &next);
                bson_free(pp);
            }
        }
        BSON_APPEND_DOCUMENT_BEGIN(&swf, "$setWindowFields", &body);
        if (part != NULL) {
            bson_append_value(&body, "partitionBy", -1, part);
        } else if (!bson_empty(&pkey)) {
            BSON_APPEND_DOCUMENT(&body, "partitionBy", &pkey);
        }
        if (sort_by != NULL) {
            bson_append_value(&body, "sortBy", -1, sort_by);
        }
        BSON_APPEND_DOCUMENT(&body, "output", &swf_out);
        bson_append_document_end(&swf, &body);
        bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT(stages, kp, &swf);
    }
    if (!bson_empty(&add)) {
        bson_t st_doc = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&st_doc, "$addFields", &add);
        bson_uint32_to_string((*n)++, &kp, key, sizeof(key));
        BSON_APPEND_DOCUMENT(stages, kp, &st_doc);
        bson_destroy(&st_doc);
    }
done:
    bson_destroy(&swf);
    bson_destroy(&swf_out);
    bson_destroy(&add);
    bson_destroy(&pkey);
    return ret;
}

/* ---------------------------------------------------------------- the interface */

int
query_wstage_parse(const char *name, const bson_iter_t *arg, const bson_t *vars,
                   int64_t sort_max_bytes, query_wstage_t **out, shl_status_t *st)
{
    int ret = 0;
    query_wstage_t *w = bson_malloc0(sizeof(*w));

    *out = NULL;
    w->vars = vars;
    w->sort_max_bytes = sort_max_bytes;
    w->max_bytes = shl_opt_int(SHL_OPT_internalDocumentSourceSetWindowFieldsMaxMemoryBytes);
    w->unit = -1;
    if (strcmp(name, "$densify") == 0) {
        w->kind = WK_DENSIFY;
        SHL_ERR(parse_densify(w, arg, st));
    } else {
        w->kind = WK_SWF;
        SHL_ERR(parse_swf(w, arg, st));
    }
    *out = w;
    w = NULL;
done:
    query_wstage_destroy(w);
    return ret;
}

void
query_wstage_set_collator(query_wstage_t *w, shl_collator_t *coll)
{
    w->coll = coll;
    for (size_t i = 0; i < w->nfuncs; i++) {
        w->funcs[i].acc.coll = coll;
    }
    if (w->sort_by != NULL) {
        shl_sort_pattern_set_collator(w->sort_by, coll);
    }
    if (w->wrap_pat != NULL) {
        shl_sort_pattern_set_collator(w->wrap_pat, coll);
    }
}

int
query_wstage_next(query_wstage_t *w, const shl_pipeline_source_t *in, const bson_t **doc,
                  shl_status_t *st)
{
    if (w->kind == WK_DENSIFY) {
        return densify_next(w, in, doc, st);
    }
    return swf_next(w, in, doc, st);
}

void
query_wstage_destroy(query_wstage_t *w)
{
    if (w == NULL) {
        return;
    }
    shl_expr_destroy(w->partition);
    shl_sort_pattern_destroy(w->sort_by);
    bson_free(w->sort_path);
    for (size_t i = 0; i < w->nfuncs; i++) {
        wfunc_t *f = &w->funcs[i];
        if (f->st_init && !f->removable && !f->endpoint && !f->deque && f->cov == 0) {
            query_acc_cleanup(&f->st, &f->acc);
        }
        shl_expr_destroy(f->arg2);
        deque_clear(f);
        bson_free(f->dq_idx);
        bson_free(f->dq_val);
        bson_free(f->field);
        bson_free(f->acc.field);
        shl_expr_destroy(f->acc.arg);
        shl_sort_pattern_destroy(f->acc.sort_by);
        shl_expr_destroy(f->arg);
        bson_value_destroy(&f->def);
        if (w->locf != NULL) {
            bson_value_destroy(&w->locf[i]);
        }
    }
    bson_free(w->funcs);
    bson_free(w->locf);
    shl_sorter_destroy(w->sorter);
    shl_sort_pattern_destroy(w->wrap_pat);
    for (size_t i = 0; i < w->nin; i++) {
        bson_destroy(w->inbuf[i]);
    }
    bson_free(w->inbuf);
    bson_free(w->part);
    bson_free(w->pdata);
    bson_free(w->plen);
    bson_free(w->vals);
    if (w->have_prev_key) {
        bson_destroy(&w->prev_key);
    }
    if (w->out != NULL) {
        bson_destroy(w->out);
    }
    bson_free(w->field);
    for (size_t i = 0; i < w->npfields; i++) {
        bson_free(w->pfields[i]);
    }
    bson_free(w->pfields);
    bson_value_destroy(&w->blo);
    bson_value_destroy(&w->bhi);
    if (w->have_gmin) {
        bson_value_destroy(&w->gmin);
        bson_value_destroy(&w->gmax);
    }
    if (w->have_pkey) {
        bson_destroy(&w->cur_pkey);
    }
    bson_free(w);
}
