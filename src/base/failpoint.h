/*
 * failpoint.h -- fail points declared where they fire, switched by configureFailPoint.
 * Off costs one relaxed atomic load. Modes as MongoDB's: off, alwaysOn, {times: n},
 * {skip: n}, {activationProbability: p}; optional 'data' document.
 */
#ifndef SHL_BASE_FAILPOINT_H
#define SHL_BASE_FAILPOINT_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "base/status.h"

typedef enum shl_fp_mode {
    SHL_FP_OFF,
    SHL_FP_ALWAYS_ON,
    SHL_FP_TIMES,
    SHL_FP_SKIP,
    SHL_FP_PROBABILITY,
} shl_fp_mode_t;

typedef struct shl_failpoint {
    const char *name;
    atomic_int active;          /* fast path: nonzero when mode != off */
    pthread_mutex_t lock;       /* guards the fields below */
    pthread_cond_t changed;     /* broadcast on every configure */
    shl_fp_mode_t mode;         /* guarded by lock */
    int64_t n;                  /* times left / skips left; guarded by lock */
    double probability;         /* guarded by lock */
    bson_t *data;               /* guarded by lock; NULL when none */
    int64_t times_entered;      /* guarded by lock */
    struct shl_failpoint *next; /* registry link, set once at load time */
} shl_failpoint_t;

/* Define a fail point at file scope in the .c file where it fires. */
#define SHL_FAILPOINT_DEFINE(fpname)                                                               \
    shl_failpoint_t shl_fp_##fpname = {                                                            \
        .name = #fpname, .lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};  \
    __attribute__((constructor)) static void shl_fp_register_##fpname(void)                        \
    {                                                                                              \
        shl_failpoint_register(&shl_fp_##fpname);                                                  \
    }

/* Declare a fail point defined in another file of the same module. */
#define SHL_FAILPOINT_DECLARE(fpname) extern shl_failpoint_t shl_fp_##fpname

/* The fail point object, for the functions below. */
#define SHL_FAILPOINT(fpname) (&shl_fp_##fpname)

/* True when the fail point fires now (consumes one activation). No data. */
#define SHL_FAILPOINT_FIRES(fpname)                                                                \
    (__builtin_expect(atomic_load_explicit(&shl_fp_##fpname.active, memory_order_relaxed), 0) &&   \
     shl_failpoint_evaluate(&shl_fp_##fpname, NULL, NULL, NULL))

/* shl_failpoint_register -- add to the process registry (called by SHL_FAILPOINT_DEFINE). */
void shl_failpoint_register(shl_failpoint_t *fp);

/* shl_failpoint_find -- the fail point named 'name', or NULL. */
shl_failpoint_t *shl_failpoint_find(const char *name);

/*
 * shl_failpoint_evaluate --
 *     Whether 'fp' fires now. If 'filter' is given it is asked first with the
 *     fail point's data; a fail point whose filter says no neither fires nor uses
 *     up an activation (failCommand's rule). When it fires and 'data_out' is not
 *     NULL, *data_out receives a copy of the data (empty if none); the caller
 *     destroys it. *data_out is initialised whenever it is given.
 */
bool shl_failpoint_evaluate(shl_failpoint_t *fp, bool (*filter)(const bson_t *data, void *arg),
                            void *arg, bson_t *data_out);

/*
 * shl_failpoint_configure --
 *     Apply a configureFailPoint request: 'mode' is the value of the mode field
 *     ("alwaysOn", "off", {times: n}, {skip: n}, {activationProbability: p});
 *     'data' may be NULL. *times_entered receives the count before the change.
 *     Errors: BadValue.
 */
int shl_failpoint_configure(shl_failpoint_t *fp, const bson_iter_t *mode, const bson_t *data,
                            int64_t *times_entered, shl_status_t *st);

/*
 * shl_failpoint_pause_while_set --
 *     Block while 'fp' is on (for "hang..." fail points); returns when it is
 *     switched off, or when *cancel becomes true (checked every 100 ms).
 */
void shl_failpoint_pause_while_set(shl_failpoint_t *fp, const atomic_bool *cancel);

/* shl_failpoint_list -- append {name: {mode, timesEntered}} of every fail point. */
void shl_failpoint_list(bson_t *out);

#endif
