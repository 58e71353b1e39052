/*
 * text.h -- MongoDB's text search (textIndexVersion 3) over a text index spec: which fields
 * are indexed with which weights and languages, tokenising with Unicode case and diacritic
 * folding (ICU), stop words, Snowball stemming (Debian's libstemmer), $text's $search
 * language (terms, "phrases", -negations) and the textScore of a document.
 * docs/design/text_search.md.
 */
#ifndef SHL_QUERY_TEXT_H
#define SHL_QUERY_TEXT_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

/* shl_text_index_t -- a parsed text index spec (immutable; shared by threads). */
typedef struct shl_text_index shl_text_index_t;

/*
 * shl_text_index_new --
 *     Parse the text part of index spec 'spec' ({key: {<field>: "text" | <prefix/suffix>: 1,
 *     ...} or the normalised {_fts: "text", _ftsx: 1}, weights, default_language,
 *     language_override, textIndexVersion}). Errors: CannotCreateIndex (67) for a weight
 *     that is not a number in (0, 99999] or a textIndexVersion other than 3, 17262 for an
 *     unsupported default_language, BadValue (2) for a key without a text field. Free with
 *     shl_text_index_destroy. Thread-safe.
 */
int shl_text_index_new(const bson_t *spec, shl_text_index_t **out, shl_status_t *st);
void shl_text_index_destroy(shl_text_index_t *ti);

/*
 * shl_text_index_append_normalized --
 *     Append to 'out' the fields listIndexes shows for this text index beside v/name:
 *     key {<prefix>..., _fts: "text", _ftsx: 1, <suffix>...}, weights (every indexed field,
 *     "$**" for a wildcard), default_language, language_override, textIndexVersion: 3.
 */
void shl_text_index_append_normalized(const shl_text_index_t *ti, bson_t *out);

/*
 * shl_text_language_supported --
 *     Whether 'lang' is a language text index version 3 supports (MongoDB's list: its
 *     names and ISO 639-1 codes, and "none"), case-insensitively.
 */
bool shl_text_language_supported(const char *lang);

/* shl_text_term_fn -- receives one distinct stemmed term of a document and its score. */
typedef void (*shl_text_term_fn)(void *arg, const char *term, size_t len, double score);

/*
 * shl_text_index_terms --
 *     Call 'fn' once per distinct term of 'doc' (its indexed string fields, arrays of
 *     strings included, tokenised in the document's language: its language_override
 *     field, else default_language) with the term's weighted score, MongoDB's formula.
 *     Errors: 17262 for an unsupported language in the document. Thread-safe.
 */
int shl_text_index_terms(const shl_text_index_t *ti, const bson_t *doc, shl_text_term_fn fn,
                         void *arg, shl_status_t *st);

/* shl_text_query_t -- a parsed $text query over one text index (used by one thread). */
typedef struct shl_text_query shl_text_query_t;

/*
 * shl_text_query_new --
 *     Parse the value of $text ({$search: <string>, $language, $caseSensitive,
 *     $diacriticSensitive}) for index 'ti' (borrowed: it must outlive the query). Errors as
 *     MongoDB: BadValue (2) "$search needs a String", "$language needs a String",
 *     "$caseSensitive needs a Boolean", "$diacriticSensitive needs a Boolean", unknown
 *     field; 17262 for an unsupported $language.
 */
int shl_text_query_new(const bson_value_t *text, const shl_text_index_t *ti, shl_text_query_t **out,
                       shl_status_t *st);
void shl_text_query_destroy(shl_text_query_t *q);

/*
 * shl_text_query_match --
 *     Whether 'doc' matches: it holds at least one positive term, every positive phrase
 *     and no negated term or phrase; *score is its textScore (the sum of its scores of the
 *     positive terms; 0 when it does not match).
 */
int shl_text_query_match(shl_text_query_t *q, const bson_t *doc, bool *matched, double *score,
                         shl_status_t *st);

/*
 * SHL_TEXT_SCORE_FIELD -- where a document carries its textScore between the TEXT_MATCH
 * stage and {$meta: "textScore"} (projection, sort, expressions): a top-level field whose
 * name starts with DEL (no application's field), appended to the document when the query
 * asks for the score, and removed from every document a client receives
 * (shl_text_score_strip). A shard keeps it in the documents it sends a router, which merges
 * by it and removes it. docs/design/text_search.md.
 */
#define SHL_TEXT_SCORE_FIELD "\x7ftextScore"

/* shl_text_score_wanted -- whether 'spec' (a projection, a sort or a pipeline) holds
 * {$meta: "textScore"} at any depth. */
bool shl_text_score_wanted(const bson_t *spec);

/* shl_text_score_get -- the score 'doc' carries, false when it has none. */
bool shl_text_score_get(const bson_t *doc, double *score);

/* shl_text_score_strip -- when 'doc' carries a score: true, and *out (initialised) is 'doc'
 * without it; false (out untouched) otherwise. */
bool shl_text_score_strip(const bson_t *doc, bson_t *out);

/*
 * shl_text_find --
 *     The $text a query filter searches with: at its top level, in a top-level $and (nested
 *     $and too) or in a clause of a top-level $or (*in_or); *count is how many there are
 *     (MongoDB takes one: "Too many text expressions"), *out the first one's value (a view
 *     of 'filter'). *count starts at 0.
 */
void shl_text_find(const bson_t *filter, bson_value_t *out, int *count, bool *in_or);

/* shl_text_query_nterms -- the number of distinct positive terms (what an index scans). */
size_t shl_text_query_nterms(const shl_text_query_t *q);

/* shl_text_query_term -- the i-th positive term (borrowed), folded as the index folds. */
const char *shl_text_query_term(const shl_text_query_t *q, size_t i);

#endif
