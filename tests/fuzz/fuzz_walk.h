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
 *     extended JSON. Returns false if some part cannot be read as well-formed BSON
 *     (a nested document that is not one, an unterminated string, nesting deeper
 *     than MongoDB's 200 levels): the server must never accept such a document.
 */
bool fuzz_walk_doc(const bson_t *doc);

#endif
