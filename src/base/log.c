/*
 * log.c -- MongoDB-format JSON log lines (compact relaxed extended JSON, rendered
 * here so lines carry no spaces and stay valid JSON whatever bytes a value holds),
 * and a ring of recent lines for getLog.
 */
#include "base/log.h"
#include "base/utf8.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RECENT_MAX 1024

static int log_fd = STDERR_FILENO;
static char *log_path; /* --logpath, set once at start-up; NULL: stderr */

/* Serialises rotations (the fd number log_fd never changes: dup2 swaps the file under it). */
static pthread_mutex_t rotate_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int verbosity;
static _Thread_local char thread_ctx[32] = "main";

/* Guards the ring of recent lines. */
static pthread_mutex_t recent_lock = PTHREAD_MUTEX_INITIALIZER;
static char *recent[RECENT_MAX]; /* guarded by recent_lock */
static int recent_next;          /* guarded by recent_lock */
static int recent_count;         /* guarded by recent_lock */
static int64_t recent_total;     /* lines ever written; guarded by recent_lock */

static const char *const comp_names[SHL_LOG_COMP_COUNT] = {
    "-",     "CONTROL", "NETWORK",  "COMMAND", "STORAGE", "RECOVERY",
    "QUERY", "WRITE",   "SHARDING", "REPL",    "TXN",     "ASSERT", "ACCESS",
};

int
shl_log_open(const char *path)
{
    int ret = 0;
    if (path != NULL) {
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            ret = errno;
        } else {
            log_fd = fd;
            log_path = bson_strdup(path);
        }
    }
    return ret;
}

int
shl_log_rotate(char *renamed, size_t n, bool *rotated)
{
    char when[32], target[4096];
    struct tm tm;
    time_t now = time(NULL);
    int ret = 0, fd = -1;

    *rotated = false;
    if (n > 0) {
        renamed[0] = '\0';
    }
    if (log_path == NULL) {
        return 0;
    }
    pthread_mutex_lock(&rotate_lock);
    gmtime_r(&now, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H-%M-%S", &tm);
    snprintf(target, sizeof(target), "%s.%s", log_path, when);
    /* Two rotations within a second keep both files. */
    for (int i = 1; access(target, F_OK) == 0 && i < 1000; i++) {
        snprintf(target, sizeof(target), "%s.%s.%d", log_path, when, i);
    }
    if (rename(log_path, target) != 0) {
        ret = errno;
    } else if ((fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0) {
        ret = errno;
    } else if (dup2(fd, log_fd) < 0) {
        ret = errno;
    } else {
        *rotated = true;
        snprintf(renamed, n, "%s", target);
    }
    if (fd >= 0) {
        close(fd);
    }
    pthread_mutex_unlock(&rotate_lock);
    return ret;
}

void
shl_log_set_verbosity(int level)
{
    atomic_store(&verbosity, level);
}

int
shl_log_get_verbosity(void)
{
    return atomic_load(&verbosity);
}

void
shl_log_set_thread_ctx(const char *ctx)
{
    snprintf(thread_ctx, sizeof(thread_ctx), "%s", ctx);
}

const char *
shl_log_get_thread_ctx(void)
{
    return thread_ctx;
}

bool
shl_log_enabled(shl_log_severity_t sev)
{
    return (int)sev <= SHL_SEV_INFO + atomic_load(&verbosity);
}

static const char *
sev_code(shl_log_severity_t sev)
{
    switch (sev) {
    case SHL_SEV_FATAL:
        return "F";
    case SHL_SEV_ERROR:
        return "E";
    case SHL_SEV_WARNING:
        return "W";
    case SHL_SEV_INFO:
        return "I";
    case SHL_SEV_DEBUG1:
        return "D1";
    case SHL_SEV_DEBUG2:
        return "D2";
    default:
        return "D3";
    }
}

static void
remember(const char *line, size_t len)
{
    char *copy = bson_strndup(line, len);
    pthread_mutex_lock(&recent_lock);
    bson_free(recent[recent_next]);
    recent[recent_next] = copy;
    recent_next = (recent_next + 1) % RECENT_MAX;
    if (recent_count < RECENT_MAX) {
        recent_count++;
    }
    recent_total++;
    pthread_mutex_unlock(&recent_lock);
}

/*
 * A growable character buffer for rendering lines; aborts on out-of-memory like
 * every allocation here.
 */
typedef struct jbuf {
    char *p;
    size_t len, cap;
} jbuf_t;

static void
jb_reserve(jbuf_t *b, size_t more)
{
    if (b->len + more + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + more + 1) {
            cap *= 2;
        }
        b->p = bson_realloc(b->p, cap);
        b->cap = cap;
    }
}

static void
jb_put(jbuf_t *b, const char *s, size_t n)
{
    jb_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void
jb_puts(jbuf_t *b, const char *s)
{
    jb_put(b, s, strlen(s));
}

static void jb_printf(jbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
jb_printf(jbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    char small[128];
    int n;

    va_start(ap, fmt);
    n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    if ((size_t)n < sizeof(small)) {
        jb_put(b, small, (size_t)n);
        return;
    }
    jb_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/*
 * A JSON string: quotes, backslashes and control characters escaped; bytes that are
 * not UTF-8 (BSON from the network need not be) become U+FFFD so a line stays JSON.
 */
static void
json_string(jbuf_t *b, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, run = 0;

    jb_reserve(b, n + 2);
    jb_put(b, "\"", 1);
    while (i < n) {
        unsigned char c = s[i];
        size_t seq;
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            i++;
            run++;
            continue;
        }
        jb_put(b, str + i - run, run);
        run = 0;
        switch (c) {
        case '"':
            jb_put(b, "\\\"", 2);
            i++;
            continue;
        case '\\':
            jb_put(b, "\\\\", 2);
            i++;
            continue;
        case '\n':
            jb_put(b, "\\n", 2);
            i++;
            continue;
        case '\r':
            jb_put(b, "\\r", 2);
            i++;
            continue;
        case '\t':
            jb_put(b, "\\t", 2);
            i++;
            continue;
        case '\b':
            jb_put(b, "\\b", 2);
            i++;
            continue;
        case '\f':
            jb_put(b, "\\f", 2);
            i++;
            continue;
        default:
            break;
        }
        if (c < 0x20) {
            jb_printf(b, "\\u%04x", c);
            i++;
        } else if ((seq = shl_utf8_seq_len(s + i, n - i)) == 0) {
            jb_put(b, "\\ufffd", 6);
            i++;
        } else {
            jb_put(b, str + i, seq);
            i += seq;
        }
    }
    jb_put(b, str + i - run, run);
    jb_put(b, "\"", 1);
}

/* A double in the shortest form that reads back exactly; integral values keep ".0". */
static void
json_double(jbuf_t *b, double v)
{
    char tmp[40];

    if (v != v) {
        jb_puts(b, "{\"$numberDouble\":\"NaN\"}");
        return;
    }
    if (v == 1.0 / 0.0 || v == -1.0 / 0.0) {
        jb_puts(b,
                v > 0 ? "{\"$numberDouble\":\"Infinity\"}" : "{\"$numberDouble\":\"-Infinity\"}");
        return;
    }
    snprintf(tmp, sizeof(tmp), "%.15g", v);
    if (strtod(tmp, NULL) != v) {
        snprintf(tmp, sizeof(tmp), "%.17g", v);
    }
    jb_puts(b, tmp);
    if (strpbrk(tmp, ".eE") == NULL) {
        jb_puts(b, ".0");
    }
}

static void
json_date(jbuf_t *b, int64_t ms)
{
    time_t secs = (time_t)(ms / 1000);
    int frac = (int)(ms % 1000);
    struct tm tm;

    if (frac < 0) {
        frac += 1000;
        secs--;
    }
    if (ms < 0 || ms > 253402300799999LL || gmtime_r(&secs, &tm) == NULL) {
        /* Outside years 1970..9999 relaxed extended JSON keeps the number. */
        jb_printf(b, "{\"$date\":{\"$numberLong\":\"%" PRId64 "\"}}", ms);
        return;
    }
    jb_printf(b, "{\"$date\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\"}", tm.tm_year + 1900,
              tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

static void
json_base64(jbuf_t *b, const uint8_t *data, uint32_t n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    jb_reserve(b, ((size_t)n + 2) / 3 * 4);
    for (uint32_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        char q[4];
        if (i + 1 < n) {
            v |= (uint32_t)data[i + 1] << 8;
        }
        if (i + 2 < n) {
            v |= data[i + 2];
        }
        q[0] = tbl[(v >> 18) & 63];
        q[1] = tbl[(v >> 12) & 63];
        q[2] = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
        q[3] = i + 2 < n ? tbl[v & 63] : '=';
        jb_put(b, q, 4);
    }
}

#define JSON_MAX_DEPTH 100

static void json_doc(jbuf_t *b, const bson_iter_t *it, bool array, int depth);

static void
json_value(jbuf_t *b, const bson_iter_t *it, int depth)
{
    switch (bson_iter_type(it)) {
    case BSON_TYPE_DOUBLE:
        json_double(b, bson_iter_double(it));
        break;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: {
        uint32_t n;
        const char *s =
            BSON_ITER_HOLDS_UTF8(it) ? bson_iter_utf8(it, &n) : bson_iter_symbol(it, &n);
        json_string(b, s, n);
        break;
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        bson_iter_t child;
        bool array = BSON_ITER_HOLDS_ARRAY(it);
        if (depth >= JSON_MAX_DEPTH) {
            jb_puts(b, array ? "[\"...\"]" : "{\"...\":\"...\"}");
        } else if (bson_iter_recurse(it, &child)) {
            json_doc(b, &child, array, depth + 1);
        } else {
            jb_puts(b, array ? "[]" : "{}");
        }
        break;
    }
    case BSON_TYPE_BINARY: {
        bson_subtype_t sub;
        uint32_t n;
        const uint8_t *data;
        bson_iter_binary(it, &sub, &n, &data);
        if (sub == BSON_SUBTYPE_UUID && n == 16) {
            jb_printf(b,
                      "{\"$uuid\":\"%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x"
                      "%02x%02x\"}",
                      data[0], data[1], data[2], data[3], data[4], data[5], data[6], data[7],
                      data[8], data[9], data[10], data[11], data[12], data[13], data[14], data[15]);
        } else {
            jb_puts(b, "{\"$binary\":{\"base64\":\"");
            json_base64(b, data, n);
            jb_printf(b, "\",\"subType\":\"%02x\"}}", (unsigned)sub);
        }
        break;
    }
    case BSON_TYPE_UNDEFINED:
        jb_puts(b, "{\"$undefined\":true}");
        break;
    case BSON_TYPE_OID: {
        char hex[25];
        bson_oid_to_string(bson_iter_oid(it), hex);
        jb_printf(b, "{\"$oid\":\"%s\"}", hex);
        break;
    }
    case BSON_TYPE_BOOL:
        jb_puts(b, bson_iter_bool(it) ? "true" : "false");
        break;
    case BSON_TYPE_DATE_TIME:
        json_date(b, bson_iter_date_time(it));
        break;
    case BSON_TYPE_NULL:
        jb_puts(b, "null");
        break;
    case BSON_TYPE_REGEX: {
        const char *opts;
        const char *re = bson_iter_regex(it, &opts);
        jb_puts(b, "{\"$regularExpression\":{\"pattern\":");
        json_string(b, re, strlen(re));
        jb_puts(b, ",\"options\":");
        json_string(b, opts, strlen(opts));
        jb_puts(b, "}}");
        break;
    }
    case BSON_TYPE_DBPOINTER: {
        uint32_t n;
        const char *coll;
        const bson_oid_t *oid;
        char hex[25];
        bson_iter_dbpointer(it, &n, &coll, &oid);
        bson_oid_to_string(oid, hex);
        jb_puts(b, "{\"$dbPointer\":{\"$ref\":");
        json_string(b, coll, n);
        jb_printf(b, ",\"$id\":{\"$oid\":\"%s\"}}}", hex);
        break;
    }
    case BSON_TYPE_CODE:
    case BSON_TYPE_CODEWSCOPE: {
        uint32_t n, slen;
        const uint8_t *scope;
        const char *code = BSON_ITER_HOLDS_CODE(it) ? bson_iter_code(it, &n)
                                                    : bson_iter_codewscope(it, &n, &slen, &scope);
        jb_puts(b, "{\"$code\":");
        json_string(b, code, n);
        jb_puts(b, "}");
        break;
    }
    case BSON_TYPE_INT32:
        jb_printf(b, "%" PRId32, bson_iter_int32(it));
        break;
    case BSON_TYPE_TIMESTAMP: {
        uint32_t t, i;
        bson_iter_timestamp(it, &t, &i);
        jb_printf(b, "{\"$timestamp\":{\"t\":%" PRIu32 ",\"i\":%" PRIu32 "}}", t, i);
        break;
    }
    case BSON_TYPE_INT64:
        jb_printf(b, "%" PRId64, bson_iter_int64(it));
        break;
    case BSON_TYPE_DECIMAL128: {
        bson_decimal128_t d;
        char str[BSON_DECIMAL128_STRING];
        bson_iter_decimal128(it, &d);
        bson_decimal128_to_string(&d, str);
        jb_printf(b, "{\"$numberDecimal\":\"%s\"}", str);
        break;
    }
    case BSON_TYPE_MAXKEY:
        jb_puts(b, "{\"$maxKey\":1}");
        break;
    case BSON_TYPE_MINKEY:
        jb_puts(b, "{\"$minKey\":1}");
        break;
    case BSON_TYPE_EOD:
    default:
        jb_puts(b, "null");
        break;
    }
}

static void
json_doc(jbuf_t *b, const bson_iter_t *start, bool array, int depth)
{
    bson_iter_t it = *start;
    bool first = true;

    jb_put(b, array ? "[" : "{", 1);
    while (bson_iter_next(&it)) {
        if (!first) {
            jb_put(b, ",", 1);
        }
        first = false;
        if (!array) {
            json_string(b, bson_iter_key(&it), bson_iter_key_len(&it));
            jb_put(b, ":", 1);
        }
        json_value(b, &it, depth);
    }
    jb_put(b, array ? "]" : "}", 1);
}

char *
shl_log_json_from_bson(const bson_t *doc, bool array, size_t *len)
{
    jbuf_t b = {0};
    bson_iter_t it;

    jb_reserve(&b, 64);
    if (bson_iter_init(&it, doc)) {
        json_doc(&b, &it, array, 0);
    } else {
        jb_puts(&b, array ? "[]" : "{}");
    }
    if (len != NULL) {
        *len = b.len;
    }
    return b.p;
}

void
shl_log_emit(shl_log_severity_t sev, shl_log_component_t comp, int id, const char *msg, ...)
{
    bson_t attr = BSON_INITIALIZER;
    bcon_append_ctx_t ctx;
    va_list ap;
    struct timeval tv;
    struct tm tm;
    jbuf_t line = {0};
    bson_iter_t it;

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);

    bcon_append_ctx_init(&ctx);
    va_start(ap, msg);
    bcon_append_ctx_va(&attr, &ctx, &ap);
    va_end(ap);

    /* MongoDB's field order and spelling; no spaces, one line. */
    jb_reserve(&line, 256);
    jb_printf(&line,
              "{\"t\":{\"$date\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03d+00:00\"},\"s\":\"%s\","
              "\"c\":\"%s\",\"id\":%d,\"ctx\":",
              tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
              (int)(tv.tv_usec / 1000), sev_code(sev), comp_names[comp], id);
    json_string(&line, thread_ctx, strlen(thread_ctx));
    jb_puts(&line, ",\"msg\":");
    json_string(&line, msg, strlen(msg));
    if (!bson_empty(&attr) && bson_iter_init(&it, &attr)) {
        jb_puts(&line, ",\"attr\":");
        json_doc(&line, &it, false, 0);
    }
    jb_put(&line, "}", 1);
    remember(line.p, line.len);
    jb_put(&line, "\n", 1);
    ssize_t w = write(log_fd, line.p, line.len);
    (void)w;
    bson_free(line.p);
    bson_destroy(&attr);
}

void
shl_log_recent(bson_t *arr, int max)
{
    char idx[16];
    const char *key;
    int n, start;

    pthread_mutex_lock(&recent_lock);
    n = recent_count < max ? recent_count : max;
    start = (recent_next - n + RECENT_MAX) % RECENT_MAX;
    for (int i = 0; i < n; i++) {
        bson_uint32_to_string((uint32_t)i, &key, idx, sizeof(idx));
        bson_append_utf8(arr, key, -1, recent[(start + i) % RECENT_MAX], -1);
    }
    pthread_mutex_unlock(&recent_lock);
}

int64_t
shl_log_lines_written(void)
{
    int64_t n;
    pthread_mutex_lock(&recent_lock);
    n = recent_total;
    pthread_mutex_unlock(&recent_lock);
    return n;
}
