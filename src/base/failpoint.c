/*
 * failpoint.c -- the fail point registry and its modes. STYLE.md "Fail points".
 */
#include "base/failpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

/* Written only by load-time constructors (single-threaded), read afterwards. */
static shl_failpoint_t *registry;

void
shl_failpoint_register(shl_failpoint_t *fp)
{
    fp->next = registry;
    registry = fp;
}

shl_failpoint_t *
shl_failpoint_find(const char *name)
{
    shl_failpoint_t *fp = registry;
    while (fp != NULL && strcmp(fp->name, name) != 0) {
        fp = fp->next;
    }
    return fp;
}

/* Called with fp->lock held: decide and consume one activation. */
static bool
fire_locked(shl_failpoint_t *fp)
{
    bool fire = false;

    switch (fp->mode) {
    case SHL_FP_OFF:
        break;
    case SHL_FP_ALWAYS_ON:
        fire = true;
        break;
    case SHL_FP_TIMES:
        if (fp->n > 0) {
            fire = true;
            if (--fp->n == 0) {
                fp->mode = SHL_FP_OFF;
                atomic_store(&fp->active, 0);
            }
        }
        break;
    case SHL_FP_SKIP:
        if (fp->n > 0) {
            fp->n--;
        } else {
            fire = true;
        }
        break;
    case SHL_FP_PROBABILITY:
        fire = ((double)random() / (double)RAND_MAX) < fp->probability;
        break;
    }
    if (fire) {
        fp->times_entered++;
    }
    return fire;
}

bool
shl_failpoint_evaluate(shl_failpoint_t *fp, bool (*filter)(const bson_t *data, void *arg),
                       void *arg, bson_t *data_out)
{
    bool fire = false;
    bson_t empty = BSON_INITIALIZER;

    if (data_out != NULL) {
        bson_init(data_out);
    }
    if (atomic_load_explicit(&fp->active, memory_order_relaxed) == 0) {
        return false;
    }
    pthread_mutex_lock(&fp->lock);
    if (fp->mode != SHL_FP_OFF &&
        (filter == NULL || filter(fp->data != NULL ? fp->data : &empty, arg))) {
        fire = fire_locked(fp);
        if (fire && data_out != NULL && fp->data != NULL) {
            bson_destroy(data_out);
            bson_copy_to(fp->data, data_out);
        }
    }
    pthread_mutex_unlock(&fp->lock);
    bson_destroy(&empty);
    return fire;
}

int
shl_failpoint_configure(shl_failpoint_t *fp, const bson_iter_t *mode, const bson_t *data,
                        int64_t *times_entered, shl_status_t *st)
{
    int ret = 0;
    shl_fp_mode_t m = SHL_FP_OFF;
    int64_t n = 0;
    double p = 0;

    if (BSON_ITER_HOLDS_UTF8(mode)) {
        const char *s = bson_iter_utf8(mode, NULL);
        if (strcmp(s, "alwaysOn") == 0) {
            m = SHL_FP_ALWAYS_ON;
        } else if (strcmp(s, "off") == 0) {
            m = SHL_FP_OFF;
        } else {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unknown mode: %s", s);
        }
    } else if (BSON_ITER_HOLDS_DOCUMENT(mode)) {
        bson_iter_t child;
        if (!bson_iter_recurse(mode, &child) || !bson_iter_next(&child) ||
            !BSON_ITER_HOLDS_NUMBER(&child)) {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                     "'mode' must be a string or a document "
                     "{times|skip|activationProbability: <number>}");
        }
        const char *key = bson_iter_key(&child);
        if (strcmp(key, "times") == 0 || strcmp(key, "skip") == 0) {
            n = bson_iter_as_int64(&child);
            if (n < 0) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE, "'%s' must be nonnegative", key);
            }
            m = key[0] == 't' ? SHL_FP_TIMES : SHL_FP_SKIP;
            if (m == SHL_FP_TIMES && n == 0) {
                m = SHL_FP_OFF;
            }
        } else if (strcmp(key, "activationProbability") == 0) {
            p = bson_iter_as_double(&child);
            if (!(p >= 0.0 && p <= 1.0)) {
                SHL_FAIL(st, SHL_CODE_BAD_VALUE,
                         "activationProbability must be between 0.0 and 1.0");
            }
            m = SHL_FP_PROBABILITY;
        } else {
            SHL_FAIL(st, SHL_CODE_BAD_VALUE, "unrecognized mode field: %s", key);
        }
    } else {
        SHL_FAIL(st, SHL_CODE_TYPE_MISMATCH, "'mode' must be a string or a document");
    }

    pthread_mutex_lock(&fp->lock);
    *times_entered = fp->times_entered;
    fp->mode = m;
    fp->n = n;
    fp->probability = p;
    if (fp->data != NULL) {
        bson_destroy(fp->data);
        fp->data = NULL;
    }
    if (data != NULL) {
        fp->data = bson_copy(data);
    }
    atomic_store(&fp->active, m != SHL_FP_OFF);
    pthread_cond_broadcast(&fp->changed);
    pthread_mutex_unlock(&fp->lock);
done:
    return ret;
}

void
shl_failpoint_pause_while_set(shl_failpoint_t *fp, const atomic_bool *cancel)
{
    pthread_mutex_lock(&fp->lock);
    while (fp->mode != SHL_FP_OFF && (cancel == NULL || !atomic_load(cancel))) {
        shl_cond_timedwait_ms(&fp->changed, &fp->lock, 100);
    }
    pthread_mutex_unlock(&fp->lock);
}

void
shl_failpoint_list(bson_t *out)
{
    static const char *const mode_names[] = {"off", "alwaysOn", "times", "skip",
                                             "activationProbability"};
    for (shl_failpoint_t *fp = registry; fp != NULL; fp = fp->next) {
        bson_t doc;
        pthread_mutex_lock(&fp->lock);
        BSON_APPEND_DOCUMENT_BEGIN(out, fp->name, &doc);
        BSON_APPEND_UTF8(&doc, "mode", mode_names[fp->mode]);
        BSON_APPEND_INT64(&doc, "timesEntered", fp->times_entered);
        bson_append_document_end(out, &doc);
        pthread_mutex_unlock(&fp->lock);
    }
}
