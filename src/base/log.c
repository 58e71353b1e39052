/*
 * log.c -- MongoDB-format JSON log lines, a ring of recent lines for getLog.
 */
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RECENT_MAX 1024

static int log_fd = STDERR_FILENO;
static atomic_int verbosity;
static _Thread_local char thread_ctx[32] = "main";

/* Guards the ring of recent lines. */
static pthread_mutex_t recent_lock = PTHREAD_MUTEX_INITIALIZER;
static char *recent[RECENT_MAX]; /* guarded by recent_lock */
static int recent_next;          /* guarded by recent_lock */
static int recent_count;         /* guarded by recent_lock */

static const char *const comp_names[SHL_LOG_COMP_COUNT] = {
    "-", "CONTROL", "NETWORK", "COMMAND", "STORAGE", "RECOVERY",
    "QUERY", "WRITE", "SHARDING", "REPL", "TXN", "ASSERT",
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
        }
    }
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
    pthread_mutex_unlock(&recent_lock);
}

void
shl_log_emit(shl_log_severity_t sev, shl_log_component_t comp, int id, const char *msg, ...)
{
    bson_t line = BSON_INITIALIZER, attr = BSON_INITIALIZER, t;
    bcon_append_ctx_t ctx;
    va_list ap;
    struct timeval tv;
    struct tm tm;
    char date[64];
    char *json;
    size_t len;

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    snprintf(date, sizeof(date), "%04d-%02d-%02dT%02d:%02d:%02d.%03d+00:00", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000));

    bcon_append_ctx_init(&ctx);
    va_start(ap, msg);
    bcon_append_ctx_va(&attr, &ctx, &ap);
    va_end(ap);

    BSON_APPEND_DOCUMENT_BEGIN(&line, "t", &t);
    BSON_APPEND_UTF8(&t, "$date", date);
    bson_append_document_end(&line, &t);
    BSON_APPEND_UTF8(&line, "s", sev_code(sev));
    BSON_APPEND_UTF8(&line, "c", comp_names[comp]);
    BSON_APPEND_INT32(&line, "id", id);
    BSON_APPEND_UTF8(&line, "ctx", thread_ctx);
    BSON_APPEND_UTF8(&line, "msg", msg);
    if (!bson_empty(&attr)) {
        BSON_APPEND_DOCUMENT(&line, "attr", &attr);
    }
    /* Relaxed extended JSON would render {"$date": ...} for the string; keep it compact. */
    json = bson_as_relaxed_extended_json(&line, &len);
    if (json != NULL) {
        remember(json, len);
        json = bson_realloc(json, len + 2);
        json[len] = '\n';
        json[len + 1] = '\0';
        ssize_t w = write(log_fd, json, len + 1);
        (void)w;
        bson_free(json);
    }
    bson_destroy(&attr);
    bson_destroy(&line);
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
