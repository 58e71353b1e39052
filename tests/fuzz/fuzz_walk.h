/*
 * fuzz_walk.h -- shared by the fuzz targets: walk a validated document the way
 * command code reads one (iterators, typed accessors, recursion, JSON for logs).
 */
#ifndef SHL_FUZZ_WALK_H
#define SHL_FUZZ_WALK_H

#include <bson/bson.h>

/*
 * fuzz_walk_doc --
 *     Visit every element of 'doc' (recursing into documents, arrays and code with
 *     scope), read each value with its typed accessor, and render the document as
 *     extended JSON with libbson and as log lines do (shl_log_json_from_bson, which must
 *     give valid JSON in valid UTF-8 whatever the names and strings hold: it aborts
 *     otherwise). Returns false if some part cannot be read as well-formed BSON
 *     (a nested document that is not one, an unterminated string, nesting deeper
 *     than MongoDB's 200 levels): the server must never accept such a document.
 */
bool fuzz_walk_doc(const bson_t *doc);

typedef enum fuzz_bson_verdict {
    FUZZ_BSON_OK,
    FUZZ_BSON_INVALID,  /* what the server answers with InvalidBSON */
    FUZZ_BSON_TOO_DEEP, /* what it answers with Overflow */
} fuzz_bson_verdict_t;

/*
 * fuzz_bson_check --
 *     The oracle for the server's check of incoming BSON, written independently of it
 *     (recursive, from bsonspec.org): MongoDB's default validation, which is structural
 *     only -- lengths, NUL terminators, EOO bytes, known types, bools 0 or 1, at most
 *     'max_depth' levels below the top (code with scope counts two) -- and does not check
 *     UTF-8 in field names or strings. One addition libbson's iterators need: an old
 *     binary (subtype 2) repeats its length inside. The first fault in document order
 *     decides the verdict.
 */
fuzz_bson_verdict_t fuzz_bson_check(const uint8_t *data, size_t len, int max_depth);

#endif
