/*
 * fiber_test.c -- parked requests (fiber.h) under a fake executor: a fiber parks, its fd is
 * armed with its tag, another thread's event resumes it there with its request-locals and
 * log context; a stale event is ignored; a parked fiber past its timeout is kicked.
 * Sanitizer builds never park (fiber.h): the tests then check only that.
 */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/unit_test.h"
#include "net/fiber.h"

static int armed_fd = -1;
static uint64_t armed_tag;
static bool armed_kick;
static int arms;

static bool
fake_arm(int fd, uint64_t tag, bool kick)
{
    armed_fd = fd;
    armed_tag = tag;
    armed_kick = kick;
    arms++;
    return true;
}

static const shl_fiber_driver_t fake_driver = {fake_arm};

static __thread int tl_request_value;

static void *
request_value_addr(void)
{
    return &tl_request_value;
}

static bool
setup(void)
{
    static bool registered;
    if (!registered) {
        shl_fiber_local_register(request_value_addr, sizeof(tl_request_value));
        registered = true;
    }
    shl_fiber_want();
    shl_fiber_set_driver(&fake_driver);
    return shl_fiber_active();
}

typedef struct job {
    int fd;
    int64_t timeout_ms;
    bool parked_ok;
    bool finished;
    pthread_t ran_after_park;
    int value_after_park;
    char ctx_after_park[32];
} job_t;

static void
request(void *arg)
{
    job_t *j = arg;

    j->parked_ok = !shl_fiber_may_park();
    shl_fiber_park_allow(true);
    j->parked_ok = j->parked_ok && shl_fiber_may_park();
    tl_request_value = 42;
    shl_log_set_thread_ctx("conn7");
    shl_fiber_wait_readable(j->fd, j->timeout_ms);
    j->ran_after_park = pthread_self();
    j->value_after_park = tl_request_value;
    snprintf(j->ctx_after_park, sizeof(j->ctx_after_park), "%s", shl_log_get_thread_ctx());
    shl_fiber_park_allow(false);
    j->finished = true;
}

static void *
deliver(void *arg)
{
    shl_log_set_thread_ctx("worker");
    tl_request_value = 1;
    shl_fiber_event(*(uint64_t *)arg);
    return NULL;
}

SHL_TEST(a_parked_request_resumes_on_another_thread_with_its_locals)
{
    job_t j = {.fd = 5, .timeout_ms = 1000};
    pthread_t t;
    uint64_t tag;
    int before = arms;

    if (!setup()) {
        shl_fiber_run(request, &j); /* no fibers here: it must not park, and runs through */
        ASSERT(j.finished && !j.parked_ok);
        return;
    }
    shl_fiber_run(request, &j);
    ASSERT(j.parked_ok && !j.finished);
    ASSERT(arms == before + 1 && armed_fd == 5 && !armed_kick && shl_fiber_is_tag(armed_tag));
    tl_request_value = 7;
    tag = armed_tag;
    ASSERT(pthread_create(&t, NULL, deliver, &tag) == 0);
    ASSERT(pthread_join(t, NULL) == 0);
    ASSERT(j.finished && pthread_equal(j.ran_after_park, t));
    ASSERT(j.value_after_park == 42 && strcmp(j.ctx_after_park, "conn7") == 0);
    ASSERT(tl_request_value == 7);
    /* A stale event (the request ended) is ignored. */
    shl_fiber_event(tag);
    ASSERT(arms == before + 1);
}

SHL_TEST(a_parked_request_past_its_timeout_is_kicked)
{
    job_t j = {.fd = 9, .timeout_ms = 1};
    pthread_t t;
    uint64_t tag;

    if (!setup()) {
        return;
    }
    shl_fiber_run(request, &j);
    ASSERT(!j.finished && armed_fd == 9 && !armed_kick);
    ASSERT(shl_fiber_expire(shl_clock_mono_us()) != 0);
    ASSERT(!armed_kick); /* not yet due */
    shl_sleep_ms(5);
    shl_fiber_expire(shl_clock_mono_us());
    ASSERT(armed_kick && armed_fd == 9);
    tag = armed_tag;
    ASSERT(pthread_create(&t, NULL, deliver, &tag) == 0);
    ASSERT(pthread_join(t, NULL) == 0);
    ASSERT(j.finished);
    ASSERT(shl_fiber_expire(shl_clock_mono_us()) == 0);
}
