/*
 * fiber.h -- parked requests for the shared service executor (issue 22): a request can run
 * on a fiber (its own stack, switched in user space) instead of on the worker's own stack,
 * so that while it waits for another process's reply (a router's shard call) the worker
 * goes back to the executor's epoll set and serves other connections. The reply's socket
 * waits in the same epoll set; whichever worker takes its event resumes the request.
 *
 * Only what asks for it parks: a worker runs requests on fibers only once the process
 * wants them (shl_fiber_want: the router) and the executor drives them (shl_fiber_set_driver),
 * and a request parks only inside a shl_fiber_park_allow(true) region (the router's
 * single-shard calls outside transactions). Everything else waits as before, blocking the
 * worker. Sanitizer builds and other machines than x86-64 never park.
 *
 * A parked request holds no lock (the caller of shl_fiber_park_allow must not) and may
 * resume on another thread: thread-local state of a request is carried over by
 * shl_fiber_local_register, the log context always.
 */
#ifndef SHL_NET_FIBER_H
#define SHL_NET_FIBER_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

typedef struct shl_fiber shl_fiber_t;

/*
 * What the executor does for a parking fiber: 'arm' makes 'fd' report readability (and, with
 * 'kick', writability too, so that it reports at once: the wake-up at a parked fiber's
 * timeout) once through the executor's set, with 'tag' as the event's data, after which the
 * executor calls shl_fiber_event(tag). False if it could not.
 */
typedef struct shl_fiber_driver {
    bool (*arm)(int fd, uint64_t tag, bool kick);
} shl_fiber_driver_t;

/* shl_fiber_want -- this process parks requests (the router; start-up, before serving). */
void shl_fiber_want(void);

/* shl_fiber_set_driver -- the shared executor drives fibers ('d' borrowed for good). */
void shl_fiber_set_driver(const shl_fiber_driver_t *d);

/* shl_fiber_active -- requests run on fibers (wanted, driven, supported by this build). */
bool shl_fiber_active(void);

/*
 * shl_fiber_run --
 *     Run fn(arg) on a fiber on the calling (worker) thread. Returns when fn returned or
 *     parked; a parked fiber is resumed later by shl_fiber_event on some worker. Falls back
 *     to calling fn(arg) on the caller's stack when no fiber can be had.
 */
void shl_fiber_run(void (*fn)(void *), void *arg);

/* shl_fiber_thread_exit -- a worker thread leaves: the fiber it kept goes back to the pool. */
void shl_fiber_thread_exit(void);

/* shl_fiber_is_tag -- whether an event's data is a fiber's tag (else it is a pointer). */
static inline bool
shl_fiber_is_tag(uint64_t data)
{
    return (data & 1) != 0;
}

/* shl_fiber_event -- the executor saw the event tagged 'tag': resume its fiber here (a stale
 * event, for a fiber no longer parked, is ignored). */
void shl_fiber_event(uint64_t tag);

/* shl_fiber_expire -- wake every parked fiber whose timeout passed ('now_us' monotonic), by
 * kicking its fd; the executor's monitor calls it by the time it returns. Returns the
 * earliest timeout still ahead (monotonic us), or 0 when no fiber is parked. */
int64_t shl_fiber_expire(int64_t now_us);

/*
 * shl_fiber_park_allow --
 *     Allow (or forbid) the calling request to park in shl_fiber_wait_readable; returns the
 *     previous setting, for the caller to put back. No-op (false) outside a fiber.
 */
bool shl_fiber_park_allow(bool allow);

/* shl_fiber_may_park -- the calling code runs on a fiber that may park now. */
bool shl_fiber_may_park(void);

/*
 * shl_fiber_wait_readable --
 *     Park the calling fiber (shl_fiber_may_park must hold) until 'fd' is readable or about
 *     'timeout_ms' passed (< 0: no bound; the wait is cut to 100 ms anyway, so callers look
 *     at their interruption and deadlines at least that often). Returns 1 when readable, 0
 *     when woken for the time (the fd may be readable all the same).
 */
int shl_fiber_wait_readable(int fd, int64_t timeout_ms);

/* shl_fiber_stats -- how many times requests parked, and the fibers made, since start-up. */
void shl_fiber_stats(int64_t *parks, int64_t *fibers);

/*
 * shl_fiber_local_register --
 *     A thread-local variable that belongs to the request, not the thread: 'addr' returns
 *     the calling thread's copy; its 'size' bytes are saved when a request parks and put
 *     back where it resumes. At start-up only; at most 64 bytes in all.
 */
void shl_fiber_local_register(void *(*addr)(void), size_t size);

#endif
