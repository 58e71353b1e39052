/*
 * query_private.h -- helpers shared by the query engines (matcher, projection, sort,
 * update, expressions) and not part of any public contract: dotted field paths, small
 * growable arrays, BSON value helpers, and the MongoDB error codes that have no name in
 * base/error_codes.def (MongoDB's "Location<N>" assertion codes).
 */
#ifndef SHL_QUERY_PRIVATE_H
#define SHL_QUERY_PRIVATE_H

#include <bson/bson.h>

#include "bson/bson_util.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* MongoDB assertion codes used by the query engines (numbers as MongoDB 7.0's). */
#define QC_FIELD_PATH_TOO_LONG 5729100
#define QC_REGEX_INVALID 51091
#define QC_REGEX_BAD_FLAG 51108
#define QC_REGEX_OPTIONS_TWICE_A 51074
#define QC_REGEX_OPTIONS_TWICE_B 51075
#define QC_SORT_ILLEGAL_KEY 15974
#define QC_SORT_BAD_ORDER 15975
#define QC_SORT_META_ONLY 17312
#define QC_TEXT_SCORE_UNAVAILABLE 40218
#define QC_PROJ_EXCLUSION_IN_INCLUSION 31254
#define QC_PROJ_INCLUSION_IN_EXCLUSION 31253
#define QC_PROJ_PATH_COLLISION 31250
#define QC_PROJ_POSITIONAL_NO_MATCH 51246
#define QC_UPDATE_DOC_TOO_LARGE 17419
#define QC_FIELDPATH_EMPTY 40352
#define QC_FIELDPATH_DOLLAR 16410
#define QC_FIELDPATH_DOT_END 40353
#define QC_FIELDPATH_NULL_BYTE 16411
#define QC_EXPR_BAD_ARGC 16020
#define QC_EXPR_UNKNOWN 168

/*
 * $jsonSchema (json_schema.c): shl_jschema_parse compiles 'schema' (borrowed: the tree keeps
 * views into it, so it must outlive the tree -- the matcher's own filter copy). Errors:
 * FailedToParse (9) "Unknown $jsonSchema keyword: x" / "... is not currently supported",
 * TypeMismatch (14), BadValue (2) for unknown type names. shl_jschema_match_doc is
 * thread-safe.
 */
typedef struct jschema shl_jschema_t;
int shl_jschema_parse(const bson_t *schema, shl_jschema_t **out, shl_status_t *st);
bool shl_jschema_match_doc(const shl_jschema_t *s, const bson_t *doc);
void shl_jschema_destroy(shl_jschema_t *s);

#define QUERY_MAX_PATH_DEPTH 200
#define QUERY_MAX_USER_DOC_SIZE (16 * 1024 * 1024)

/* A dotted field path split into components ("a.0.b" -> "a", "0", "b"). */
typedef struct qpath {
    char *dotted;  /* the whole path, owned */
    size_t n;      /* number of components (>= 1; "" is one empty component) */
    char **parts;  /* component strings, owned (point into one allocation) */
    bool *numeric; /* component is all digits (an array position candidate) */
} qpath_t;

/* qpath_init -- split 'dotted' (length 'len'). Always succeeds; free with qpath_cleanup. */
void qpath_init(qpath_t *p, const char *dotted, size_t len);
void qpath_cleanup(qpath_t *p);
void qpath_copy(qpath_t *dst, const qpath_t *src);

/* qpath_dotted_prefix -- new string holding components [0, n). Caller bson_free()s. */
char *qpath_dotted_prefix(const qpath_t *p, size_t n);

/* qpath_is_prefix -- whether 'a' is a (component-wise) prefix of 'b' or equal to it. */
bool qpath_is_prefix(const qpath_t *a, const qpath_t *b);

/* all_digits -- non-empty and only '0'..'9'. */
bool query_all_digits(const char *s);

/* query_array_index -- parse a numeric path component as an array index; false if
 * it is not all digits or does not fit (leading zeros are allowed, as MongoDB's update
 * path parsing allows them). */
bool query_array_index(const char *s, size_t *out);

/* A growable array of pointers. */
typedef struct ptrvec {
    void **v;
    size_t n, cap;
} ptrvec_t;

void ptrvec_push(ptrvec_t *pv, void *p);
void ptrvec_cleanup(ptrvec_t *pv);

/* Values. A bson_value_t whose value_type is BSON_TYPE_EOD means "missing". */
bool query_value_is_number(const bson_value_t *v);
double query_value_as_double(const bson_value_t *v);
/* truthiness as in the aggregation language (false, 0, null, undefined, missing are false) */
bool query_value_truthy(const bson_value_t *v);

/* query_value_to_json -- relaxed extended JSON of one value, for error messages
 * (MongoDB prints BSON in errors; the exact rendering is ours). Caller bson_free()s. */
char *query_value_to_json(const bson_value_t *v);

/* query_bson_view -- a borrowed bson_t over a document/array value; false (and an empty
 * document in *view) if 'v' is not one or is malformed. */
bool query_bson_view(const bson_value_t *v, bson_t *view);

/* query_append_value -- bson_append_value with a key of known length. */
void query_append_value(bson_t *doc, const char *key, int keylen, const bson_value_t *v);

/* Integer parsing with MongoDB's rules (parseIntegerElementToLong). Errors FailedToParse. */
int query_parse_int64(const bson_value_t *v, int64_t *out, const char *what, shl_status_t *st);

/* $addFields / $set stage semantics (projection.c): parse {path: <expression>, ...} into a
 * projection that keeps every field and replaces or appends the computed ones. Apply it with
 * shl_projection_apply. */
struct shl_projection;
int query_addfields_new(const bson_t *spec, struct shl_projection **out, shl_status_t *st);

/* $dateAdd's units (expr_date.c): query_date_unit gives 0 ("millisecond") .. 8 ("year") or -1
 * for an unknown name; query_date_add_utc adds 'amount' units to 'ms' in UTC (months clamp the
 * day to the month's length), false on overflow. */
int query_date_unit(const char *name);
bool query_date_add_utc(int64_t ms, int unit, int64_t amount, int64_t *out);

#endif
