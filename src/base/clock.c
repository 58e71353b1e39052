/*
 * clock.c -- time sources (see clock.h).
 */
#include "base/clock.h"

#include <errno.h>
#include <stdatomic.h>
#include <time.h>

static _Atomic int64_t fake_wall_ms;

int64_t
shl_clock_wall_ms(void)
{
    struct timespec ts;
    int64_t fake = atomic_load(&fake_wall_ms);
    if (fake != 0) {
        return fake;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
shl_clock_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void
shl_clock_set_fake_wall_ms(int64_t ms)
{
    atomic_store(&fake_wall_ms, ms);
}

int
shl_cond_timedwait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(cv, mu, &ts);
}

void
shl_sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}
