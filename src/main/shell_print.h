/*
 * shell_print.h -- BSON rendered the way mongosh prints it (Node's util.inspect with
 * mongosh's type names): unquoted identifier keys, single-quoted strings, ObjectId('..'),
 * Timestamp({ t, i }), Long('..'), MinKey(); a document stays on one line when it fits
 * in 72 columns, otherwise one field per line indented by two. `shale status` uses it.
 */
#ifndef SHL_MAIN_SHELL_PRINT_H
#define SHL_MAIN_SHELL_PRINT_H

#include <bson/bson.h>

/*
 * shl_shell_doc_new --
 *     'doc' as mongosh prints it, as an array when 'is_array'. 'indent' is the column
 *     the text starts at (continuation lines are indented relative to it). Returns a
 *     new string; free it with bson_free.
 */
char *shl_shell_doc_new(const bson_t *doc, bool is_array, int indent);

/* shl_shell_value_new -- one value as mongosh prints it (same rules); free with bson_free. */
char *shl_shell_value_new(const bson_value_t *v, int indent);

#endif
