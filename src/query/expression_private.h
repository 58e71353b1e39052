/*
 * expression_private.h -- the parsed form of an aggregation expression, for files that
 * implement operators. To add an operator: write an eval function with the expr_eval_fn
 * signature (arguments are e->args[0..e->nargs), evaluate them with shl_expr_evaluate),
 * and add a row {name, min_args, max_args, fn} to the operator table in expression.c.
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

typedef struct expr_op {
    const char *name; /* with the '$' */
    int min_args;
    int max_args; /* -1: any number */
    expr_eval_fn eval;
} expr_op_t;

struct shl_expr {
    expr_kind_t kind;
    const expr_op_t *op;
    bson_value_t constant; /* EXPR_CONST, owned */
    char *var;             /* EXPR_VAR name without "$$" */
    qpath_t path;          /* EXPR_FIELD path / EXPR_VAR sub-path (n == 0 when none) */
    shl_expr_t **args;     /* EXPR_OP arguments, EXPR_OBJECT / EXPR_ARRAY members */
    char **names;          /* EXPR_OBJECT field names */
    size_t nargs;
};

/* expr_eval_args -- evaluate every argument into vals[] (caller destroys each). */
int expr_eval_args(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *vals,
                   shl_status_t *st);

#endif
