/*
 * text.c -- text search, textIndexVersion 3 (text.h, docs/design/text_search.md).
 * Words are runs of letters, digits and combining marks; folding (ICU) is NFD with the
 * non-spacing marks removed (diacritics) and Unicode case folding; stop words are dropped;
 * the rest is stemmed by Snowball (libstemmer) in the language's algorithm.
 */
#include "query/text.h"

#include <libstemmer.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf8.h>

#include "bson/bson_iter.h"
#include "bson/bson_util.h"
#include "query/text_stopwords.h"

#define TEXT_MAX_WEIGHT 99999.0
#define UNSUPPORTED_LANGUAGE 17262

/* MongoDB's text search languages: name, ISO 639-1 code, Snowball algorithm (NULL: none). */
static const struct {
    const char *name, *iso, *algorithm;
} languages[] = {
    {"danish", "da", "danish"},       {"dutch", "nl", "dutch"},
    {"english", "en", "english"},     {"finnish", "fi", "finnish"},
    {"french", "fr", "french"},       {"german", "de", "german"},
    {"hungarian", "hu", "hungarian"}, {"italian", "it", "italian"},
    {"norwegian", "nb", "norwegian"}, {"portuguese", "pt", "portuguese"},
    {"romanian", "ro", "romanian"},   {"russian", "ru", "russian"},
    {"spanish", "es", "spanish"},     {"swedish", "sv", "swedish"},
    {"turkish", "tr", "turkish"},     {"none", "none", NULL},
};

/* English stop words (function words that carry no search meaning), already folded. */
static const char *const english_stop[] = {
    "a",      "about",    "above",      "after",   "again",   "against", "all",     "am",
    "an",     "and",      "any",        "are",     "as",      "at",      "be",      "been",
    "before", "being",    "below",      "between", "both",    "but",     "by",      "can",
    "could",  "did",      "do",         "does",    "doing",   "down",    "during",  "each",
    "few",    "for",      "from",       "further", "had",     "has",     "have",    "having",
    "he",     "her",      "here",       "hers",    "herself", "him",     "himself", "his",
    "how",    "i",        "if",         "in",      "into",    "is",      "it",      "its",
    "itself", "me",       "more",       "most",    "my",      "myself",  "no",      "nor",
    "not",    "of",       "off",        "on",      "once",    "only",    "or",      "other",
    "our",    "ours",     "ourselves",  "out",     "over",    "own",     "same",    "she",
    "should", "so",       "some",       "such",    "than",    "that",    "the",     "their",
    "theirs", "them",     "themselves", "then",    "there",   "these",   "they",    "this",
    "those",  "through",  "to",         "too",     "under",   "until",   "up",      "very",
    "was",    "we",       "were",       "what",    "when",    "where",   "which",   "while",
    "who",    "whom",     "why",        "will",    "with",    "would",   "you",     "your",
    "yours",  "yourself", "yourselves",
};

typedef struct text_field {
    char *path; /* dotted; "$**" for the wildcard */
    double weight;
} text_field_t;

struct shl_text_index {
    text_field_t *fields;
    size_t nfields;
    bool wildcard;
    double wildcard_weight;
    char **prefix, **suffix; /* the key's non-text fields before/after the text fields */
    size_t nprefix, nsuffix;
    char *default_language;
    char *language_override;
};

/* ---- languages, folding, stemming ---- */

static int
language_index(const char *lang)
{
    for (size_t i = 0; i < sizeof(languages) / sizeof(languages[0]); i++) {
        if (strcasecmp(lang, languages[i].name) == 0 || strcasecmp(lang, languages[i].iso) == 0) {
            return (int)i;
        }
    }
    return -1;
}

bool
shl_text_language_supported(const char *lang)
{
    return language_index(lang) >= 0;
}

static bool
is_word_char(UChar32 c)
{
    int8_t t = u_charType(c);
    return u_isalnum(c) || t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK;
}

/* 'in' folded: diacritics removed unless 'diacritics', case folded unless 'cased'. The
 * caller frees the result. */
static char *
fold(const char *in, size_t len, bool cased, bool diacritics)
{
    UErrorCode err = U_ZERO_ERROR;
    int32_t n = 0, m = 0;
    UChar *a = NULL, *b = NULL;
    char *out = NULL;

    u_strFromUTF8WithSub(NULL, 0, &n, in, (int32_t)len, 0xFFFD, NULL, &err);
    err = U_ZERO_ERROR;
    /* NFD and case folding each expand a string at most threefold. */
    a = bson_malloc(((size_t)n + 1) * sizeof(UChar) * 12);
    b = bson_malloc(((size_t)n + 1) * sizeof(UChar) * 12);
    u_strFromUTF8WithSub(a, n + 1, &n, in, (int32_t)len, 0xFFFD, NULL, &err);
    if (!diacritics) {
        const UNormalizer2 *nfd = unorm2_getNFDInstance(&err);
        m = unorm2_normalize(nfd, a, n, b, (n + 1) * 12, &err);
        n = 0;
        for (int32_t i = 0; i < m;) {
            UChar32 c;
            int32_t start = i;
            U16_NEXT(b, i, m, c);
            if (u_charType(c) != U_NON_SPACING_MARK) {
                for (int32_t k = start; k < i; k++) {
                    a[n++] = b[k];
                }
            }
        }
    }
    if (!cased) {
        m = u_strFoldCase(b, (n + 1) * 12, a, n, U_FOLD_CASE_DEFAULT, &err);
        memcpy(a, b, (size_t)m * sizeof(UChar));
        n = m;
    }
    u_strToUTF8(NULL, 0, &m, a, n, &err);
    err = U_ZERO_ERROR;
    out = bson_malloc((size_t)m + 1);
    u_strToUTF8(out, m + 1, &m, a, n, &err);
    out[U_SUCCESS(err) ? m : 0] = '\0';
    bson_free(a);
    bson_free(b);
    return out;
}

static int cmp_str(const void *a, const void *b);

/* Each language's stop words folded as words are (case and diacritics), sorted; built once
 * (stop_once), read-only after. */
typedef struct stop_list {
    char **v;
    size_t n;
} stop_list_t;
static stop_list_t stop_lists[sizeof(languages) / sizeof(languages[0])];
static pthread_once_t stop_once = PTHREAD_ONCE_INIT;

static void
stop_lists_build(void)
{
    for (size_t l = 0; l < sizeof(languages) / sizeof(languages[0]); l++) {
        const char *const *src = shl_text_stopwords(languages[l].name);
        size_t n = 0;
        stop_list_t *sl = &stop_lists[l];
        if (strcmp(languages[l].name, "english") == 0) {
            n = sizeof(english_stop) / sizeof(english_stop[0]);
            sl->v = bson_malloc0((n + 1) * sizeof(char *));
            for (size_t i = 0; i < n; i++) {
                sl->v[i] = bson_strdup(english_stop[i]);
            }
        } else if (src != NULL) {
            while (src[n] != NULL) {
                n++;
            }
            sl->v = bson_malloc0((n + 1) * sizeof(char *));
            for (size_t i = 0; i < n; i++) {
                sl->v[i] = fold(src[i], strlen(src[i]), false, false);
            }
        }
        sl->n = n;
        if (n > 0) {
            qsort(sl->v, n, sizeof(char *), cmp_str);
        }
    }
}

/* Whether 'w' (folded: case and diacritics) is a stop word of language 'lang'. */
static bool
is_stop_word(int lang, const char *w)
{
    const stop_list_t *sl;
    pthread_once(&stop_once, stop_lists_build);
    sl = &stop_lists[lang];
    return sl->n > 0 && bsearch(&w, sl->v, sl->n, sizeof(char *), cmp_str) != NULL;
}

/* The terms of a string: folded words without stop words, stemmed. */
typedef struct terms {
    char **v;
    size_t n, cap;
} terms_t;

static void
terms_push(terms_t *t, char *s)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->v = bson_realloc(t->v, t->cap * sizeof(char *));
    }
    t->v[t->n++] = s;
}

static void
terms_cleanup(terms_t *t)
{
    for (size_t i = 0; i < t->n; i++) {
        bson_free(t->v[i]);
    }
    bson_free(t->v);
    memset(t, 0, sizeof(*t));
}

#define NLANGUAGES (sizeof(languages) / sizeof(languages[0]))

typedef struct tokenizer {
    int lang;
    struct sb_stemmer *stemmer; /* NULL for "none" */
    bool borrowed;              /* 'stemmer' belongs to a query's cache */
    bool cased, diacritics;
} tokenizer_t;

/* 'cache' (NLANGUAGES stemmers, may be NULL): a single-threaded owner's stemmers, opened
 * once per language instead of once per document. */
static void
tokenizer_init(tokenizer_t *tk, int lang, bool cased, bool diacritics, struct sb_stemmer **cache)
{
    tk->lang = lang;
    tk->cased = cased;
    tk->diacritics = diacritics;
    tk->borrowed = cache != NULL;
    tk->stemmer = NULL;
    if (languages[lang].algorithm != NULL) {
        if (cache == NULL) {
            tk->stemmer = sb_stemmer_new(languages[lang].algorithm, "UTF_8");
        } else {
            if (cache[lang] == NULL) {
                cache[lang] = sb_stemmer_new(languages[lang].algorithm, "UTF_8");
            }
            tk->stemmer = cache[lang];
        }
    }
}

static void
tokenizer_cleanup(tokenizer_t *tk)
{
    if (tk->stemmer != NULL && !tk->borrowed) {
        sb_stemmer_delete(tk->stemmer);
    }
}

static void
add_word(tokenizer_t *tk, const char *w, size_t len, terms_t *out)
{
    char *f = fold(w, len, tk->cased, tk->diacritics);
    /* Stop words are found case- and diacritic-insensitively whatever the query asks. */
    char *lower = tk->cased || tk->diacritics ? fold(w, len, false, false) : NULL;
    bool stop = is_stop_word(tk->lang, lower != NULL ? lower : f);
    bson_free(lower);
    if (stop || f[0] == '\0') {
        bson_free(f);
        return;
    }
    if (tk->stemmer != NULL) {
        const sb_symbol *s = sb_stemmer_stem(tk->stemmer, (const sb_symbol *)f, (int)strlen(f));
        if (s != NULL) {
            char *st = bson_strndup((const char *)s, (size_t)sb_stemmer_length(tk->stemmer));
            bson_free(f);
            f = st;
        }
    }
    terms_push(out, f);
}

static void
tokenize(tokenizer_t *tk, const char *s, size_t len, terms_t *out)
{
    int32_t i = 0, n = (int32_t)len, start = -1;
    while (i < n) {
        UChar32 c;
        int32_t at = i;
        U8_NEXT(s, i, n, c);
        bool word = c >= 0 && is_word_char(c);
        if (word && start < 0) {
            start = at;
        } else if (!word && start >= 0) {
            add_word(tk, s + start, (size_t)(at - start), out);
            start = -1;
        }
    }
    if (start >= 0) {
        add_word(tk, s + start, (size_t)(n - start), out);
    }
}

/* ---- the index spec ---- */

void
shl_text_index_destroy(shl_text_index_t *ti)
{
    if (ti == NULL) {
        return;
    }
    for (size_t i = 0; i < ti->nfields; i++) {
        bson_free(ti->fields[i].path);
    }
    for (size_t i = 0; i < ti->nprefix; i++) {
        bson_free(ti->prefix[i]);
    }
    for (size_t i = 0; i < ti->nsuffix; i++) {
        bson_free(ti->suffix[i]);
    }
    bson_free(ti->fields);
    bson_free(ti->prefix);
    bson_free(ti->suffix);
    bson_free(ti->default_language);
    bson_free(ti->language_override);
    bson_free(ti);
}

static void
set_weight(shl_text_index_t *ti, const char *path, double w)
{
    if (strcmp(path, "$**") == 0) {
        ti->wildcard = true;
        ti->wildcard_weight = w;
        return;
    }
    for (size_t i = 0; i < ti->nfields; i++) {
        if (strcmp(ti->fields[i].path, path) == 0) {
            ti->fields[i].weight = w;
            return;
        }
    }
    ti->fields = bson_realloc(ti->fields, (ti->nfields + 1) * sizeof(text_field_t));
    ti->fields[ti->nfields].path = bson_strdup(path);
    ti->fields[ti->nfields].weight = w;
    ti->nfields++;
}

int
shl_text_index_new(const bson_t *spec, shl_text_index_t **out, shl_status_t *st)
{
    int ret = 0;
    bson_iter_t it, k;
    bool seen_text = false, after_text = false;
    shl_text_index_t *ti = bson_malloc0(sizeof(*ti));

    *out = NULL;
    ti->default_language = bson_strdup("english");
    ti->language_override = bson_strdup("language");
    if (!bson_iter_init_find(&it, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &k)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "text index spec needs a key document");
    }
    while (shl_iter_next(&k)) {
        const char *f = shl_iter_key(&k);
        bool text = BSON_ITER_HOLDS_UTF8(&k) && strcmp(bson_iter_utf8(&k, NULL), "text") == 0;
        if (strcmp(f, "_fts") == 0 || strcmp(f, "_ftsx") == 0) {
            seen_text = after_text = true; /* the normalised form: fields come from weights */
        } else if (text) {
            set_weight(ti, f, 1.0);
            seen_text = after_text = true;
        } else if (!seen_text) {
            ti->prefix = bson_realloc(ti->prefix, (ti->nprefix + 1) * sizeof(char *));
            ti->prefix[ti->nprefix++] = bson_strdup(f);
        } else {
            ti->suffix = bson_realloc(ti->suffix, (ti->nsuffix + 1) * sizeof(char *));
            ti->suffix[ti->nsuffix++] = bson_strdup(f);
        }
    }
    if (!after_text) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "text index key has no text field");
    }
    if (bson_iter_init_find(&it, spec, "weights")) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &k)) {
            SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "weights must be an object");
        }
        while (shl_iter_next(&k)) {
            double w;
            if (!shl_bson_type_is_number(bson_iter_type(&k))) {
                SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                         "weight for text index needs numeric type");
            }
            w = shl_bson_value_as_double(bson_iter_value(&k));
            if (!(w > 0 && w <= TEXT_MAX_WEIGHT)) {
                SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                         "text index weight must be in the exclusive interval (0,99999] but "
                         "found: %g",
                         w);
            }
            set_weight(ti, shl_iter_key(&k), w);
        }
    }
    if (bson_iter_init_find(&it, spec, "default_language")) {
        if (!BSON_ITER_HOLDS_UTF8(&it) || !shl_text_language_supported(bson_iter_utf8(&it, NULL))) {
            SHL_FAIL(st, UNSUPPORTED_LANGUAGE,
                     "default_language is not valid: unsupported language for text index "
                     "version 3");
        }
        bson_free(ti->default_language);
        ti->default_language = bson_strdup(bson_iter_utf8(&it, NULL));
    }
    if (bson_iter_init_find(&it, spec, "language_override")) {
        if (!BSON_ITER_HOLDS_UTF8(&it) || bson_iter_utf8(&it, NULL)[0] == '\0') {
            SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX, "language_override must be a field name");
        }
        bson_free(ti->language_override);
        ti->language_override = bson_strdup(bson_iter_utf8(&it, NULL));
    }
    if (bson_iter_init_find(&it, spec, "textIndexVersion") &&
        (!shl_bson_type_is_number(bson_iter_type(&it)) ||
         shl_bson_value_as_double(bson_iter_value(&it)) != 3)) {
        SHL_FAIL(st, SHL_CODE_CANNOT_CREATE_INDEX,
                 "Currently only textIndexVersion 3 is supported");
    }
    if (ti->nfields == 0 && !ti->wildcard) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "text index has no weighted field");
    }
    *out = ti;
    ti = NULL;
done:
    shl_text_index_destroy(ti);
    return ret;
}

void
shl_text_index_append_normalized(const shl_text_index_t *ti, bson_t *out)
{
    bson_t key, w;
    BSON_APPEND_DOCUMENT_BEGIN(out, "key", &key);
    for (size_t i = 0; i < ti->nprefix; i++) {
        BSON_APPEND_DOUBLE(&key, ti->prefix[i], 1);
    }
    BSON_APPEND_UTF8(&key, "_fts", "text");
    BSON_APPEND_INT32(&key, "_ftsx", 1);
    for (size_t i = 0; i < ti->nsuffix; i++) {
        BSON_APPEND_DOUBLE(&key, ti->suffix[i], 1);
    }
    bson_append_document_end(out, &key);
    BSON_APPEND_DOCUMENT_BEGIN(out, "weights", &w);
    if (ti->wildcard) {
        BSON_APPEND_INT32(&w, "$**", (int32_t)ti->wildcard_weight);
    }
    for (size_t i = 0; i < ti->nfields; i++) {
        if (ti->fields[i].weight == floor(ti->fields[i].weight)) {
            BSON_APPEND_INT32(&w, ti->fields[i].path, (int32_t)ti->fields[i].weight);
        } else {
            BSON_APPEND_DOUBLE(&w, ti->fields[i].path, ti->fields[i].weight);
        }
    }
    bson_append_document_end(out, &w);
    BSON_APPEND_UTF8(out, "default_language", ti->default_language);
    BSON_APPEND_UTF8(out, "language_override", ti->language_override);
    BSON_APPEND_INT32(out, "textIndexVersion", 3);
}

/* ---- a document's strings ---- */

typedef void (*string_fn)(void *arg, const char *path, const char *s, size_t len, double w);

/* Every string at 'path' (components from 'comp'), arrays traversed, passed to 'fn'. */
static void
strings_at(const bson_t *doc, const char *comp, const char *full, double w, string_fn fn, void *arg)
{
    bson_iter_t it;
    const char *dot = strchr(comp, '.');
    size_t len = dot != NULL ? (size_t)(dot - comp) : strlen(comp);
    if (!bson_iter_init(&it, doc)) {
        return;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bson_t sub;
        const uint8_t *data;
        uint32_t dlen;
        if (strlen(k) != len || memcmp(k, comp, len) != 0) {
            continue;
        }
        if (dot == NULL && BSON_ITER_HOLDS_UTF8(&it)) {
            uint32_t sl;
            const char *s = bson_iter_utf8(&it, &sl);
            fn(arg, full, s, sl, w);
        } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t ai;
            bson_iter_recurse(&it, &ai);
            while (shl_iter_next(&ai)) {
                if (dot == NULL && BSON_ITER_HOLDS_UTF8(&ai)) {
                    uint32_t sl;
                    const char *s = bson_iter_utf8(&ai, &sl);
                    fn(arg, full, s, sl, w);
                } else if (dot != NULL && BSON_ITER_HOLDS_DOCUMENT(&ai)) {
                    bson_iter_document(&ai, &dlen, &data);
                    if (bson_init_static(&sub, data, dlen)) {
                        strings_at(&sub, dot + 1, full, w, fn, arg);
                    }
                }
            }
        } else if (dot != NULL && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_document(&it, &dlen, &data);
            if (bson_init_static(&sub, data, dlen)) {
                strings_at(&sub, dot + 1, full, w, fn, arg);
            }
        }
    }
}

/* Every string anywhere in 'doc' for the wildcard, unless an explicit field covers it. */
static void
all_strings(const shl_text_index_t *ti, const bson_t *doc, const char *prefix, string_fn fn,
            void *arg)
{
    bson_iter_t it;
    if (!bson_iter_init(&it, doc)) {
        return;
    }
    while (shl_iter_next(&it)) {
        char *path = prefix[0] != '\0' ? bson_strdup_printf("%s.%s", prefix, shl_iter_key(&it))
                                       : bson_strdup(shl_iter_key(&it));
        bool explicit = false;
        for (size_t i = 0; i < ti->nfields && !explicit; i++) {
            explicit = strcmp(ti->fields[i].path, path) == 0;
        }
        if (!explicit) {
            if (BSON_ITER_HOLDS_UTF8(&it)) {
                uint32_t sl;
                const char *s = bson_iter_utf8(&it, &sl);
                fn(arg, path, s, sl, ti->wildcard_weight);
            } else if (BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)) {
                const uint8_t *data;
                uint32_t dlen;
                bson_t sub;
                bson_iter_document(&it, &dlen, &data);
                if (BSON_ITER_HOLDS_ARRAY(&it)) {
                    bson_iter_array(&it, &dlen, &data);
                }
                if (bson_init_static(&sub, data, dlen)) {
                    /* array elements keep the array's path (strings in arrays index alike) */
                    all_strings(ti, &sub, BSON_ITER_HOLDS_ARRAY(&it) ? prefix : path, fn, arg);
                }
            }
        }
        bson_free(path);
    }
}

static void
each_string(const shl_text_index_t *ti, const bson_t *doc, string_fn fn, void *arg)
{
    for (size_t i = 0; i < ti->nfields; i++) {
        strings_at(doc, ti->fields[i].path, ti->fields[i].path, ti->fields[i].weight, fn, arg);
    }
    if (ti->wildcard) {
        all_strings(ti, doc, "", fn, arg);
    }
}

/* The language of 'doc': its language_override field when a string, else the default. */
static int
doc_language(const shl_text_index_t *ti, const bson_t *doc, shl_status_t *st)
{
    bson_iter_t it;
    const char *lang = ti->default_language;
    int idx;
    if (bson_iter_init_find(&it, doc, ti->language_override) && BSON_ITER_HOLDS_UTF8(&it)) {
        lang = bson_iter_utf8(&it, NULL);
    }
    idx = language_index(lang);
    if (idx < 0) {
        shl_status_set(st, UNSUPPORTED_LANGUAGE, "language override unsupported: %s", lang);
    }
    return idx;
}

/* ---- scoring ---- */

typedef struct scored {
    char *term;
    double score;
} scored_t;

typedef struct score_ctx {
    tokenizer_t tk;
    scored_t *v;
    size_t n, cap;
} score_ctx_t;

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
cmp_scored(const void *a, const void *b)
{
    return strcmp(((const scored_t *)a)->term, ((const scored_t *)b)->term);
}

/* One string of weight 'w': MongoDB's per-term score, a damped frequency (1, 1/2, 1/4 ...
 * for repeats) times 0.5 + 0.5 * (share of the string's terms), 1.1 times when the term is
 * the whole string. */
static void
score_string(void *arg, const char *path, const char *s, size_t len, double w)
{
    score_ctx_t *sc = arg;
    terms_t t = {0};
    (void)path;
    tokenize(&sc->tk, s, len, &t);
    qsort(t.v, t.n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < t.n;) {
        size_t j = i;
        while (j < t.n && strcmp(t.v[j], t.v[i]) == 0) {
            j++;
        }
        size_t count = j - i;
        double freq = 2.0 - pow(2.0, 1.0 - (double)count);
        double coeff = 0.5 * (double)count / (double)t.n + 0.5;
        double adj = strlen(t.v[i]) == len && strncasecmp(t.v[i], s, len) == 0 ? 1.1 : 1.0;
        if (sc->n == sc->cap) {
            sc->cap = sc->cap ? sc->cap * 2 : 16;
            sc->v = bson_realloc(sc->v, sc->cap * sizeof(scored_t));
        }
        sc->v[sc->n].term = t.v[i];
        t.v[i] = NULL;
        sc->v[sc->n].score = w * freq * coeff * adj;
        sc->n++;
        i = j;
    }
    terms_cleanup(&t);
}

/* Sum the scores of equal terms: sc->v becomes sorted and distinct. */
static void
score_merge(score_ctx_t *sc)
{
    size_t k = 0;
    qsort(sc->v, sc->n, sizeof(scored_t), cmp_scored);
    for (size_t i = 0; i < sc->n; i++) {
        if (k > 0 && strcmp(sc->v[k - 1].term, sc->v[i].term) == 0) {
            sc->v[k - 1].score += sc->v[i].score;
            bson_free(sc->v[i].term);
        } else {
            sc->v[k++] = sc->v[i];
        }
    }
    sc->n = k;
}

static void
score_cleanup(score_ctx_t *sc)
{
    for (size_t i = 0; i < sc->n; i++) {
        bson_free(sc->v[i].term);
    }
    bson_free(sc->v);
    tokenizer_cleanup(&sc->tk);
}

/* The document's distinct terms with their scores, in 'sc' (score_cleanup it). */
static int
doc_scores(const shl_text_index_t *ti, const bson_t *doc, bool cased, bool diacritics,
           struct sb_stemmer **cache, score_ctx_t *sc, shl_status_t *st)
{
    int lang = doc_language(ti, doc, st);
    memset(sc, 0, sizeof(*sc));
    if (lang < 0) {
        return st->code;
    }
    tokenizer_init(&sc->tk, lang, cased, diacritics, cache);
    each_string(ti, doc, score_string, sc);
    score_merge(sc);
    return 0;
}

int
shl_text_index_terms(const shl_text_index_t *ti, const bson_t *doc, shl_text_term_fn fn, void *arg,
                     shl_status_t *st)
{
    score_ctx_t sc;
    int ret = doc_scores(ti, doc, false, false, NULL, &sc, st);
    for (size_t i = 0; ret == 0 && i < sc.n; i++) {
        fn(arg, sc.v[i].term, strlen(sc.v[i].term), sc.v[i].score);
    }
    score_cleanup(&sc);
    return ret;
}

/* ---- queries ---- */

struct shl_text_query {
    const shl_text_index_t *ti;
    int lang; /* $language, or -1: each document's own */
    bool cased, diacritics;
    terms_t pos, neg;                        /* sorted, distinct */
    terms_t ipos; /* pos folded case- and diacritic-insensitively: the index's terms, the score */
    terms_t pos_phrase, neg_phrase;          /* folded as the query asks */
    struct sb_stemmer *stemmers[NLANGUAGES]; /* opened as documents need them */
};

static void
terms_sort_unique(terms_t *t)
{
    size_t k = 0;
    qsort(t->v, t->n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < t->n; i++) {
        if (k > 0 && strcmp(t->v[k - 1], t->v[i]) == 0) {
            bson_free(t->v[i]);
        } else {
            t->v[k++] = t->v[i];
        }
    }
    t->n = k;
}

static bool
terms_has(const terms_t *t, const char *s)
{
    return t->n > 0 && bsearch(&s, t->v, t->n, sizeof(char *), cmp_str) != NULL;
}

/* Split $search: whitespace-separated words ("-" first negates the word), "phrases"
 * ("-" before the quote negates it; a positive phrase's words are positive terms too). */
static void
parse_search(shl_text_query_t *q, tokenizer_t *tk, const char *s, bool index_terms)
{
    size_t i = 0, n = strlen(s);
    while (i < n) {
        bool neg = s[i] == '-' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t' ||
                                   s[i - 1] == '\n' || s[i - 1] == '\r');
        size_t at = neg ? i + 1 : i;
        if (at < n && s[at] == '"') {
            const char *end = strchr(s + at + 1, '"');
            size_t plen = end != NULL ? (size_t)(end - (s + at + 1)) : n - at - 1;
            if (plen > 0 && index_terms) {
                if (!neg) {
                    tokenize(tk, s + at + 1, plen, &q->ipos);
                }
            } else if (plen > 0) {
                terms_push(neg ? &q->neg_phrase : &q->pos_phrase,
                           fold(s + at + 1, plen, q->cased, q->diacritics));
                if (!neg) {
                    tokenize(tk, s + at + 1, plen, &q->pos);
                }
            }
            i = at + 1 + plen + (end != NULL ? 1 : 0);
        } else if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
            i++;
        } else {
            size_t j = at;
            while (j < n && s[j] != ' ' && s[j] != '\t' && s[j] != '\n' && s[j] != '\r' &&
                   s[j] != '"') {
                j++;
            }
            if (!index_terms) {
                tokenize(tk, s + at, j - at, neg ? &q->neg : &q->pos);
            } else if (!neg) {
                tokenize(tk, s + at, j - at, &q->ipos);
            }
            i = j > i ? j : i + 1;
        }
    }
}

int
shl_text_query_new(const bson_value_t *text, const shl_text_index_t *ti, shl_text_query_t **out,
                   shl_status_t *st)
{
    int ret = 0;
    bson_t view;
    bson_iter_t it;
    const char *search = NULL, *lang = NULL;
    tokenizer_t tk;
    bool tk_open = false;
    shl_text_query_t *q = bson_malloc0(sizeof(*q));

    *out = NULL;
    q->ti = ti;
    q->lang = -1;
    if (text->value_type != BSON_TYPE_DOCUMENT ||
        !bson_init_static(&view, text->value.v_doc.data, text->value.v_doc.data_len)) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$text expects an object");
    }
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        if (strcmp(k, "$search") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$search needs a String");
            }
            search = bson_iter_utf8(&it, NULL);
        } else if (strcmp(k, "$language") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$language needs a String");
            }
            lang = bson_iter_utf8(&it, NULL);
        } else if (strcmp(k, "$caseSensitive") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$caseSensitive needs a Boolean");
            }
            q->cased = bson_iter_bool(&it);
        } else if (strcmp(k, "$diacriticSensitive") == 0) {
            if (!BSON_ITER_HOLDS_BOOL(&it)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$diacriticSensitive needs a Boolean");
            }
            q->diacritics = bson_iter_bool(&it);
        } else {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "extra fields in $text: %s", k);
        }
    }
    if (search == NULL) {
        SHL_FAIL(st, SHL_CODE_BAD_VALUE, "$search required");
    }
    if (lang != NULL) {
        q->lang = language_index(lang);
        if (q->lang < 0) {
            SHL_FAIL(st, UNSUPPORTED_LANGUAGE, "language \"%s\" is not supported", lang);
        }
    }
    tokenizer_init(&tk, q->lang >= 0 ? q->lang : language_index(ti->default_language), q->cased,
                   q->diacritics, NULL);
    tk_open = true;
    parse_search(q, &tk, search, false);
    terms_sort_unique(&q->pos);
    terms_sort_unique(&q->neg);
    tokenizer_cleanup(&tk);
    /* The index holds insensitive terms: a sensitive query scans (and scores) by those. */
    tokenizer_init(&tk, q->lang >= 0 ? q->lang : language_index(ti->default_language), false, false,
                   NULL);
    parse_search(q, &tk, search, true);
    terms_sort_unique(&q->ipos);
    *out = q;
    q = NULL;
done:
    if (tk_open) {
        tokenizer_cleanup(&tk);
    }
    shl_text_query_destroy(q);
    return ret;
}

void
shl_text_query_destroy(shl_text_query_t *q)
{
    if (q == NULL) {
        return;
    }
    terms_cleanup(&q->pos);
    terms_cleanup(&q->ipos);
    terms_cleanup(&q->neg);
    terms_cleanup(&q->pos_phrase);
    terms_cleanup(&q->neg_phrase);
    for (size_t i = 0; i < NLANGUAGES; i++) {
        if (q->stemmers[i] != NULL) {
            sb_stemmer_delete(q->stemmers[i]);
        }
    }
    bson_free(q);
}

size_t
shl_text_query_nterms(const shl_text_query_t *q)
{
    return q->ipos.n;
}

const char *
shl_text_query_term(const shl_text_query_t *q, size_t i)
{
    return q->ipos.v[i];
}

typedef struct phrase_ctx {
    const shl_text_query_t *q;
    const terms_t *phrases;
    bool *found; /* per phrase */
} phrase_ctx_t;

static void
phrase_string(void *arg, const char *path, const char *s, size_t len, double w)
{
    phrase_ctx_t *pc = arg;
    char *f = fold(s, len, pc->q->cased, pc->q->diacritics);
    (void)path;
    (void)w;
    for (size_t i = 0; i < pc->phrases->n; i++) {
        pc->found[i] = pc->found[i] || strstr(f, pc->phrases->v[i]) != NULL;
    }
    bson_free(f);
}

/* How many of 'phrases' some indexed string of 'doc' contains. */
static size_t
phrases_found(const shl_text_query_t *q, const bson_t *doc, const terms_t *phrases)
{
    size_t n = 0;
    bool *found = bson_malloc0(phrases->n + 1);
    phrase_ctx_t pc = {q, phrases, found};
    each_string(q->ti, doc, phrase_string, &pc);
    for (size_t i = 0; i < phrases->n; i++) {
        n += found[i] ? 1 : 0;
    }
    bson_free(found);
    return n;
}

int
shl_text_query_match(shl_text_query_t *q, const bson_t *doc, bool *matched, double *score,
                     shl_status_t *st)
{
    int ret = 0;
    score_ctx_t sc, sens;
    bool any = false, neg = false;
    double total = 0;

    *matched = false;
    *score = 0;
    memset(&sens, 0, sizeof(sens));
    SHL_ERR(doc_scores(q->ti, doc, false, false, q->stemmers, &sc, st));
    if (q->cased || q->diacritics) {
        ret = doc_scores(q->ti, doc, q->cased, q->diacritics, q->stemmers, &sens, st);
    }
    for (size_t i = 0; ret == 0 && i < sc.n; i++) {
        if (terms_has(&q->ipos, sc.v[i].term)) {
            total += sc.v[i].score;
            any = any || !(q->cased || q->diacritics);
        }
    }
    {
        const score_ctx_t *presence = q->cased || q->diacritics ? &sens : &sc;
        for (size_t i = 0; ret == 0 && i < presence->n && !neg; i++) {
            any = any || (presence != &sc && terms_has(&q->pos, presence->v[i].term));
            neg = terms_has(&q->neg, presence->v[i].term);
        }
    }
    if (ret == 0 && any && !neg && phrases_found(q, doc, &q->pos_phrase) == q->pos_phrase.n &&
        phrases_found(q, doc, &q->neg_phrase) == 0) {
        *matched = true;
        *score = total;
    }
    score_cleanup(&sc);
    score_cleanup(&sens);
done:
    return ret;
}

/* ---- the score a document carries ---- */

bool
shl_text_score_wanted(const bson_t *spec)
{
    bson_iter_t it;
    bool wanted = false;
    if (!bson_iter_init(&it, spec)) {
        return false;
    }
    while (!wanted && shl_iter_next(&it)) {
        if (strcmp(shl_iter_key(&it), "$meta") == 0 && BSON_ITER_HOLDS_UTF8(&it)) {
            wanted = strcmp(bson_iter_utf8(&it, NULL), "textScore") == 0;
        } else if (BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)) {
            const uint8_t *data;
            uint32_t len;
            bson_t sub;
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                bson_iter_document(&it, &len, &data);
            } else {
                bson_iter_array(&it, &len, &data);
            }
            wanted = bson_init_static(&sub, data, len) && shl_text_score_wanted(&sub);
        }
    }
    return wanted;
}

bool
shl_text_score_get(const bson_t *doc, double *score)
{
    bson_iter_t it;
    bool found = bson_iter_init_find(&it, doc, SHL_TEXT_SCORE_FIELD) && BSON_ITER_HOLDS_DOUBLE(&it);
    *score = found ? bson_iter_double(&it) : 0;
    return found;
}

bool
shl_text_score_strip(const bson_t *doc, bson_t *out)
{
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, SHL_TEXT_SCORE_FIELD)) {
        return false;
    }
    bson_init(out);
    bson_copy_to_excluding_noinit(doc, out, SHL_TEXT_SCORE_FIELD, NULL);
    return true;
}

/* ---- where a filter's $text is ---- */

static void
text_find(const bson_t *filter, bool top, bson_value_t *out, int *count, bool *in_or)
{
    bson_iter_t it, arr;
    if (!bson_iter_init(&it, filter)) {
        return;
    }
    while (shl_iter_next(&it)) {
        const char *k = shl_iter_key(&it);
        bool is_or = top && strcmp(k, "$or") == 0;
        if (strcmp(k, "$text") == 0) {
            if (*count == 0) {
                *out = *bson_iter_value(&it); /* its data is the filter's */
            }
            (*count)++;
        } else if ((strcmp(k, "$and") == 0 || is_or) && BSON_ITER_HOLDS_ARRAY(&it) &&
                   bson_iter_recurse(&it, &arr)) {
            while (shl_iter_next(&arr)) {
                const uint8_t *data;
                uint32_t len;
                bson_t sub;
                if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
                    continue;
                }
                bson_iter_document(&arr, &len, &data);
                if (bson_init_static(&sub, data, len)) {
                    int before = *count;
                    text_find(&sub, top && !is_or, out, count, in_or);
                    *in_or = *in_or || (is_or && *count > before);
                }
            }
        }
    }
}

void
shl_text_find(const bson_t *filter, bson_value_t *out, int *count, bool *in_or)
{
    *in_or = false;
    text_find(filter, true, out, count, in_or);
}
