/*
 * expression_private.h -- the parsed form of an aggregation expression, for files that
 * implement operators. To add an operator: write an eval function with the expr_eval_fn
 * signature (arguments are e->args[0..e->nargs), evaluate them with shl_expr_evaluate),
 * and add a row {name, min_args, max_args, fn} to the operator table in expression.c.
 * Operators with named arguments ({$filter: {input:, cond:}}) add a parse function that
 * fills e->args by position (NULL where an optional argument is absent).
 *
 * Operator families live in expr_arith.c, expr_string.c, expr_array.c, expr_date.c and
 * expr_type.c; the table and the core (paths, variables, scopes) in expression.c.
 */
#ifndef SHL_QUERY_EXPRESSION_PRIVATE_H
#define SHL_QUERY_EXPRESSION_PRIVATE_H

#include "query/expression.h"
#include "query/query_private.h"

typedef enum expr_kind {
    EXPR_CONST,  /* constant: a literal value */
    EXPR_FIELD,  /* "$a.b": path relative to $$CURRENT */
    EXPR_VAR,    /* "$$name" or "$$name.a.b" */
    EXPR_OBJECT, /* {a: <expr>, b: <expr>} */
    EXPR_ARRAY,  /* [<expr>, ...] */
    EXPR_OP,     /* {$op: [args]} */
} expr_kind_t;

typedef int (*expr_eval_fn)(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out,
                            shl_status_t *st);

struct expr_op;
/* A custom parser: 'arg' is the operator's argument as written; fill e->args/e->nargs (and
 * e->var / e->names / e->flags / e->nsub as the operator needs). */
typedef int (*expr_parse_fn)(const struct expr_op *op, const bson_value_t *arg, shl_expr_t *e,
                             shl_status_t *st);

typedef struct expr_op {
    const char *name; /* with the '$' */
    int min_args;
    int max_args; /* -1: any number */
    expr_eval_fn eval;
    expr_parse_fn parse; /* NULL: positional arguments (an array, or one value) */
} expr_op_t;

struct shl_expr {
    expr_kind_t kind;
    const expr_op_t *op;
    bson_value_t constant; /* EXPR_CONST, owned */
    char *var;             /* EXPR_VAR name without "$$"; bound variable name of $map/$filter */
    qpath_t path;          /* EXPR_FIELD path / EXPR_VAR sub-path (n == 0 when none) */
    shl_expr_t **args; /* EXPR_OP arguments (may hold NULLs), EXPR_OBJECT / EXPR_ARRAY members */
    char **names;      /* EXPR_OBJECT field names; $let variable names */
    size_t nargs;
    int flags;   /* operator-specific */
    size_t nsub; /* operator-specific count (e.g. $zip inputs, $switch branches) */
};

/* Limits that keep malformed or hostile expressions bounded. */
#define EXPR_MAX_DEPTH 150                      /* nesting of expressions */
#define EXPR_MAX_VALUE_BYTES (64 * 1024 * 1024) /* MongoDB's BufferMaxSize */
#define EXPR_MAX_WORK_BYTES (1ULL << 30)        /* array elements/strings built per evaluation */
#define EXPR_MAX_WORK_ITEMS (8ULL * 1000 * 1000)
/* The limits in force (EXPR_MAX_WORK_*; the fuzz target lowers them to keep runs short). */
extern uint64_t expr_max_work_items;
extern uint64_t expr_max_work_bytes;

/* expr_budget_charge -- count one value of 'bytes' built by the current top-level evaluation;
 * expr_budget_exhausted -- whether it went past EXPR_MAX_WORK_BYTES or EXPR_MAX_WORK_ITEMS
 * (the evaluation then fails with ExceededMemoryLimit). */
void expr_budget_charge(size_t bytes);
bool expr_budget_exhausted(void);

/* Codes with no name in error_codes.def. */
#define QC_COERCE_INT 16003
#define QC_COERCE_LONG 16004
#define QC_COERCE_DOUBLE 16005
#define QC_COERCE_DATE 16006
#define QC_COERCE_STRING 16007
#define QC_BUF_TOO_BIG 13548 /* BufBuilder past the 64MB limit */

/* expr_eval_args -- evaluate every argument into vals[] (caller destroys each). */
int expr_eval_args(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *vals,
                   shl_status_t *st);

/* expr_eval_opt -- evaluate 'e', or yield missing when 'e' is NULL (absent argument). */
int expr_eval_opt(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out,
                  shl_status_t *st);

/* expr_eval_scoped -- evaluate 'e' with variables names[i] = vals[i] bound on top of the
 * current scope (vals may be missing). The binding is visible to 'e' only. */
int expr_eval_scoped(const shl_expr_t *e, const shl_expr_ctx_t *ctx, const char *const *names,
                     const bson_value_t *vals, size_t n, bson_value_t *out, shl_status_t *st);

/* expr_parse_operand -- parse a sub-expression (respects the nesting limit). */
int expr_parse_operand(const bson_value_t *spec, shl_expr_t **out, shl_status_t *st);

/*
 * expr_parse_named --
 *     Parse an object of named arguments: e->args[i] is the parsed value of keys[i] or NULL.
 *     Not an object: 'notobj_code' ("<op> only supports an object as its argument"); an
 *     unknown key: 'unknown_code'. Required keys are checked by the caller.
 */
int expr_parse_named(const expr_op_t *op, const bson_value_t *arg, const char *const *keys,
                     size_t nkeys, shl_expr_t *e, int notobj_code, int unknown_code,
                     shl_status_t *st);

/* expr_check_user_var_name -- MongoDB's rules for a variable a user defines (16866..16871). */
int expr_check_user_var_name(const char *name, shl_status_t *st);

/* Value constructors (all fully initialise *v). */
void expr_value_missing(bson_value_t *v);
void expr_value_null(bson_value_t *v);
void expr_value_bool(bson_value_t *v, bool b);
void expr_value_int32(bson_value_t *v, int32_t x);
void expr_value_int64(bson_value_t *v, int64_t x);
void expr_value_int_or_long(bson_value_t *v, int64_t x);
void expr_value_double(bson_value_t *v, double x);
void expr_value_date(bson_value_t *v, int64_t ms);
void expr_value_utf8(bson_value_t *v, const char *s, size_t len);
void expr_value_copy(const bson_value_t *src, bson_value_t *dst);
/* expr_value_take_bson -- move 'b' (destroyed) into *out as a document or array. */
void expr_value_take_bson(bson_t *b, bson_type_t type, bson_value_t *out);

/* null, undefined or missing */
bool expr_nullish(const bson_value_t *v);
/* a number whose value is integral and fits in int64 (*out gets it) */
bool expr_integral64(const bson_value_t *v, int64_t *out);
/* a number whose value is integral and fits in int32 */
bool expr_integral32(const bson_value_t *v, int32_t *out);
/* double -> decimal128 value */
void expr_value_decimal_from_double(bson_value_t *v, double d);
/* number -> int64 with truncation (like Value::coerceToLong); non-numbers give 0 */
int64_t expr_as_int64(const bson_value_t *v);
/* type name for messages, "missing" for EOD */
const char *expr_type_name(const bson_value_t *v);

/* An array being built. Appending past EXPR_MAX_VALUE_BYTES marks it oversized; finish then
 * fails with BSONObjectTooLarge-style error 10334 and yields nothing. */
typedef struct expr_arr {
    bson_t b;
    uint32_t n;
    bool too_big;
} expr_arr_t;

void expr_arr_init(expr_arr_t *a);
/* missing values become null, as in MongoDB's arrays */
void expr_arr_append(expr_arr_t *a, const bson_value_t *v);
int expr_arr_finish(expr_arr_t *a, bson_value_t *out, shl_status_t *st);
void expr_arr_cleanup(expr_arr_t *a);

/* Values of an array value (borrowed views into 'arr'); *n elements. Caller bson_free()s. */
bson_value_t *expr_array_values(const bson_value_t *arr, size_t *n);

/* The date of a value (Date, Timestamp, ObjectId); false otherwise. */
bool expr_value_as_date(const bson_value_t *v, int64_t *ms);

/* Operators by family. */
#define EXPR_FN(fn)                                                                                \
    int fn(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st)
#define EXPR_PARSE(fn)                                                                             \
    int fn(const expr_op_t *op, const bson_value_t *arg, shl_expr_t *e, shl_status_t *st)

/* expr_arith.c */
EXPR_FN(expr_op_subtract);
EXPR_FN(expr_op_divide);
EXPR_FN(expr_op_mod);
EXPR_FN(expr_op_abs);
EXPR_FN(expr_op_ceil);
EXPR_FN(expr_op_floor);
EXPR_FN(expr_op_round);
EXPR_FN(expr_op_trunc);
EXPR_FN(expr_op_pow);
EXPR_FN(expr_op_sqrt);
EXPR_FN(expr_op_exp);
EXPR_FN(expr_op_ln);
EXPR_FN(expr_op_log);
EXPR_FN(expr_op_log10);
EXPR_FN(expr_op_rand);
EXPR_FN(expr_op_sum);
EXPR_FN(expr_op_avg);
EXPR_FN(expr_op_max);
EXPR_FN(expr_op_min);

/* expr_string.c */
EXPR_FN(expr_op_substr_bytes);
EXPR_FN(expr_op_substr_cp);
EXPR_FN(expr_op_to_lower);
EXPR_FN(expr_op_to_upper);
EXPR_FN(expr_op_split);
EXPR_FN(expr_op_strlen_cp);
EXPR_FN(expr_op_strlen_bytes);
EXPR_FN(expr_op_index_of_cp);
EXPR_FN(expr_op_index_of_bytes);
EXPR_FN(expr_op_strcasecmp);
EXPR_PARSE(expr_parse_trim);
EXPR_FN(expr_op_trim);
EXPR_PARSE(expr_parse_regex);
EXPR_FN(expr_op_regex_match);
EXPR_FN(expr_op_regex_find);
EXPR_FN(expr_op_regex_find_all);
EXPR_PARSE(expr_parse_replace);
EXPR_FN(expr_op_replace_one);
EXPR_FN(expr_op_replace_all);

/* expr_array.c */
EXPR_FN(expr_op_array_elem_at);
EXPR_FN(expr_op_first);
EXPR_FN(expr_op_last);
EXPR_PARSE(expr_parse_filter);
EXPR_FN(expr_op_filter);
EXPR_PARSE(expr_parse_map);
EXPR_FN(expr_op_map);
EXPR_PARSE(expr_parse_reduce);
EXPR_FN(expr_op_reduce);
EXPR_FN(expr_op_in);
EXPR_FN(expr_op_slice);
EXPR_FN(expr_op_concat_arrays);
EXPR_FN(expr_op_reverse_array);
EXPR_FN(expr_op_range);
EXPR_FN(expr_op_index_of_array);
EXPR_FN(expr_op_is_array);
EXPR_PARSE(expr_parse_zip);
EXPR_FN(expr_op_zip);
EXPR_FN(expr_op_array_to_object);
EXPR_FN(expr_op_object_to_array);
EXPR_PARSE(expr_parse_sort_array);
EXPR_FN(expr_op_sort_array);
EXPR_FN(expr_op_set_union);
EXPR_FN(expr_op_set_intersection);
EXPR_FN(expr_op_set_difference);
EXPR_FN(expr_op_set_equals);
EXPR_FN(expr_op_set_is_subset);
EXPR_FN(expr_op_any_element_true);
EXPR_FN(expr_op_all_elements_true);
EXPR_FN(expr_op_merge_objects);
EXPR_PARSE(expr_parse_get_field);
EXPR_FN(expr_op_get_field);
EXPR_PARSE(expr_parse_set_field);
EXPR_FN(expr_op_set_field);
EXPR_PARSE(expr_parse_unset_field);

/* expr_date.c */
EXPR_PARSE(expr_parse_date_part);
EXPR_FN(expr_op_year);
EXPR_FN(expr_op_month);
EXPR_FN(expr_op_day_of_month);
EXPR_FN(expr_op_hour);
EXPR_FN(expr_op_minute);
EXPR_FN(expr_op_second);
EXPR_FN(expr_op_millisecond);
EXPR_FN(expr_op_day_of_week);
EXPR_FN(expr_op_day_of_year);
EXPR_FN(expr_op_week);
EXPR_FN(expr_op_iso_week);
EXPR_FN(expr_op_iso_week_year);
EXPR_FN(expr_op_iso_day_of_week);
EXPR_PARSE(expr_parse_date_to_string);
EXPR_FN(expr_op_date_to_string);
EXPR_PARSE(expr_parse_date_from_string);
EXPR_FN(expr_op_date_from_string);
EXPR_PARSE(expr_parse_date_add);
EXPR_FN(expr_op_date_add);
EXPR_FN(expr_op_date_subtract);
EXPR_PARSE(expr_parse_date_diff);
EXPR_FN(expr_op_date_diff);
EXPR_PARSE(expr_parse_date_trunc);
EXPR_FN(expr_op_date_trunc);
/* the ISO-8601 rendering $toString and $convert use for dates */
void expr_date_iso_string(int64_t ms, char *buf, size_t len);
/* parse a date string as $dateFromString without format does; false on failure */
bool expr_date_parse_iso(const char *s, int64_t *ms);

/* expr_tz.c: Olson zones from the system tz database (cached, immutable, thread-safe). */
typedef struct expr_tzzone expr_tzzone_t;
/* expr_tz_lookup -- the zone named 'name' ("Europe/Paris"), or NULL if there is none. */
const expr_tzzone_t *expr_tz_lookup(const char *name);
/* expr_tz_zone_offset -- the zone's UTC offset in milliseconds at instant 'utc_ms'. */
int64_t expr_tz_zone_offset(const expr_tzzone_t *z, int64_t utc_ms);

/* expr_type.c */
EXPR_FN(expr_op_type);
EXPR_PARSE(expr_parse_convert);
EXPR_FN(expr_op_convert);
EXPR_FN(expr_op_to_string);
EXPR_FN(expr_op_to_int);
EXPR_FN(expr_op_to_long);
EXPR_FN(expr_op_to_double);
EXPR_FN(expr_op_to_decimal);
EXPR_FN(expr_op_to_bool);
EXPR_FN(expr_op_to_object_id);
EXPR_FN(expr_op_to_date);
EXPR_FN(expr_op_is_number);
EXPR_FN(expr_op_to_hashed_index_key);

#endif
