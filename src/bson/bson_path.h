/*
 * bson_path.h -- dotted-path lookup ("a.b.0.c") without array expansion: the plain
 * "get this one field" used for shard keys, _id, command options. Arrays are traversed
 * only by numeric components; the matcher's implicit array traversal lives in query/.
 */
#ifndef SHL_BSON_PATH_H
#define SHL_BSON_PATH_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * shl_bson_path_get --
 *     Find 'path' in 'doc': each dot-separated component names a field of the current
 *     document, or an element of the current array (a component that is not an array
 *     index fails there). On success *out is positioned on the value (borrowing 'doc').
 *     False if a component is missing or a value that is neither document nor array would
 *     have to be traversed.
 */
bool shl_bson_path_get(const bson_t *doc, const char *path, bson_iter_t *out);

/* shl_bson_path_get_n -- the same for a path of 'len' bytes (not NUL-terminated). */
bool shl_bson_path_get_n(const bson_t *doc, const char *path, size_t len, bson_iter_t *out);

/*
 * shl_bson_path_get_value --
 *     Like shl_bson_path_get, filling *out with the value (a view into 'doc').
 */
bool shl_bson_path_get_value(const bson_t *doc, const char *path, bson_value_t *out);

/* shl_bson_path_is_array_index -- whether a component is a canonical array index
 * ("0", "17"; not "01", "-1", "" or longer than 9 digits). */
bool shl_bson_path_is_array_index(const char *comp, size_t len);

#endif
