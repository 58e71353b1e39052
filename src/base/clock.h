/*
 * clock.h -- wall-clock and monotonic time. The one seam where tests may fake time.
 */
#ifndef SHL_BASE_CLOCK_H
#define SHL_BASE_CLOCK_H

#include <pthread.h>
#include <stdint.h>

/* shl_clock_wall_ms -- milliseconds since the Unix epoch (or the fake clock if set). */
int64_t shl_clock_wall_ms(void);

/* shl_clock_mono_us -- monotonic microseconds, for deadlines and durations. */
int64_t shl_clock_mono_us(void);

/* shl_clock_set_fake_wall_ms -- tests only: pin the wall clock; 0 restores the real one. */
void shl_clock_set_fake_wall_ms(int64_t ms);

/* shl_sleep_ms -- sleep, restarting on signals. */
void shl_sleep_ms(int64_t ms);

/*
 * shl_cond_timedwait_ms --
 *     pthread_cond_timedwait for at most 'ms' milliseconds on a condition variable of the
 *     default clock (CLOCK_REALTIME); the caller holds 'mu'. Returns what
 *     pthread_cond_timedwait returns (0, or ETIMEDOUT).
 */
int shl_cond_timedwait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);

#endif
