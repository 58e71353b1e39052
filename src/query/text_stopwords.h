/*
 * text_stopwords.h -- the stop word lists of the text search languages other than English
 * (text_stopwords.c, generated from Debian's liblingua-stopwords-perl by
 * scripts/gen_text_stopwords.py; docs/design/text_search.md).
 */
#ifndef SHL_QUERY_TEXT_STOPWORDS_H
#define SHL_QUERY_TEXT_STOPWORDS_H

/* shl_text_stopwords -- the NULL-terminated list of language 'language' (a text index
 * language's full name, e.g. "french"; UTF-8, lower case, not folded), NULL when there is
 * none. Thread-safe. */
const char *const *shl_text_stopwords(const char *language);

#endif
