/*
 * fiber.c -- parked requests for the shared executor (fiber.h).
 *
 * A fiber is a stack and a saved stack pointer; switching is a few instructions (the
 * callee-saved registers and the floating-point control words, x86-64 only), no syscall.
 * Fibers are made on demand, kept for reuse (one spare per worker thread, then a free list)
 * and never freed: a stale epoll event may name one long after its request ended.
 *
 * States: RUNNING (on some thread) -> PARKING (switched out; its worker arms the fd) ->
 * PARKED (in the epoll set; an event or the monitor's kick takes it) -> RUNNING, or at the
 * end DONE -> free. The monitor holds a PARKED fiber in KICKING while it re-arms its fd; a
 * worker whose event names a PARKING or KICKING fiber waits for it to be PARKED.
 *
 * A function whose frame spans a switch may resume on another thread, and compilers may
 * keep a thread-local's address across calls: this file reaches its thread-locals only
 * through the accessors below, which are never inlined nor analysed across calls.
 */
#include "net/fiber.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include <bson/bson.h>

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define FIBER_SUPPORTED 1
#else
#define FIBER_SUPPORTED 0
#endif

/* As a connection's thread (server.c): requests recurse as deep on a fiber. */
#define FIBER_STACK_SIZE (4 * 1024 * 1024)
#define FIBER_GUARD_SIZE 4096
#define FIBER_MAX 4096
#define FIBER_WAIT_MAX_MS 100
#define LOCALS_MAX 64
#define LOCAL_VARS_MAX 4

enum { F_FREE, F_RUNNING, F_PARKING, F_PARKED, F_KICKING, F_DONE };

struct shl_fiber {
    void *sp; /* the saved stack pointer while switched out; only its owner touches it */
    void *stack;
    void (*fn)(void *);
    void *arg;
    atomic_int state;
    int fd;                      /* what a parked fiber waits on */
    _Atomic int64_t wake_at_us;  /* a parked fiber's timeout (monotonic); 0: none */
    bool allow;                  /* parking allowed (shl_fiber_park_allow) */
    char log_ctx[32];            /* the log context, carried over a park */
    uint8_t locals[LOCALS_MAX];  /* the registered thread-locals, carried over a park */
    struct shl_fiber *next_free; /* guarded by pool_lock */
};

static atomic_bool wanted;
static const shl_fiber_driver_t *_Atomic driver;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static shl_fiber_t *free_list;      /* guarded by pool_lock */
static shl_fiber_t *all[FIBER_MAX]; /* [0, nall) written once each, under pool_lock */
static atomic_int nall;             /* published after all[nall - 1] is written */
static atomic_llong nparks;

/* The registered request-locals; written at start-up only. */
static void *(*local_addr[LOCAL_VARS_MAX])(void);
static size_t local_size[LOCAL_VARS_MAX];
static int nlocals;
static size_t locals_used;

static __thread shl_fiber_t *tl_current; /* the fiber this thread runs, NULL on its own stack */
static __thread void *tl_worker_sp;      /* the worker's stack pointer while a fiber runs */
static __thread shl_fiber_t *tl_spare;   /* a finished fiber kept for this worker's next */

#define NO_CSE __attribute__((noinline, noipa))

static NO_CSE shl_fiber_t *
current_get(void)
{
    return tl_current;
}

static NO_CSE void *
worker_sp_get(void)
{
    return tl_worker_sp;
}

#if FIBER_SUPPORTED
/* Save the callee-saved registers and the control words on this stack, store the stack
 * pointer in *save, switch to 'to' (saved the same way) and return there. */
void shl_fiber_switch_raw(void **save, void *to);
__asm__(".text\n"
        ".globl shl_fiber_switch_raw\n"
        ".hidden shl_fiber_switch_raw\n"
        ".type shl_fiber_switch_raw,@function\n"
        "shl_fiber_switch_raw:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size shl_fiber_switch_raw, .-shl_fiber_switch_raw\n");
#endif

static void
fiber_switch(void **save, void *to)
{
#if FIBER_SUPPORTED
    shl_fiber_switch_raw(save, to);
#else
    (void)save;
    (void)to;
#endif
}

/* A fiber's life: run what it is given, then hand the thread back, and again on reuse. */
static void
fiber_entry(void)
{
    shl_fiber_t *f = current_get();

    for (;;) {
        f->fn(f->arg);
        atomic_store(&f->state, F_DONE);
        fiber_switch(&f->sp, worker_sp_get());
    }
}

/* A new fiber whose first switch enters fiber_entry; NULL when none can be made. */
static shl_fiber_t *
fiber_new(void)
{
    shl_fiber_t *f = NULL;
    uint8_t *stack;
    uintptr_t top;
    uint64_t *p;

    stack = mmap(NULL, FIBER_STACK_SIZE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
        return NULL;
    }
    (void)mprotect(stack, FIBER_GUARD_SIZE, PROT_NONE);
    f = bson_malloc0(sizeof(*f));
    f->stack = stack;
    atomic_init(&f->state, F_FREE);
    /* The first switch pops the control words and six registers, then 'returns' into
     * fiber_entry with the stack aligned as after a call. */
    top = ((uintptr_t)stack + FIBER_STACK_SIZE) & ~(uintptr_t)15;
    p = (uint64_t *)top;
    p[-1] = 0;
    p[-2] = (uint64_t)(uintptr_t)fiber_entry;
    for (int i = 3; i <= 9; i++) {
        p[-i] = 0;
    }
    f->sp = (void *)(top - 72);
    *(uint32_t *)f->sp = 0x1F80;                  /* MXCSR: the default */
    *(uint16_t *)((uint8_t *)f->sp + 4) = 0x037F; /* x87 control word: the default */
    return f;
}

/* A fiber for a new request: this thread's spare, a free one, or a new one (NULL: none). */
static shl_fiber_t *
fiber_acquire(void)
{
    shl_fiber_t *f = tl_spare;

    if (f != NULL) {
        tl_spare = NULL;
        return f;
    }
    pthread_mutex_lock(&pool_lock);
    f = free_list;
    if (f != NULL) {
        free_list = f->next_free;
    } else if (atomic_load(&nall) < FIBER_MAX) {
        f = fiber_new();
        if (f != NULL) {
            int n = atomic_load(&nall);
            all[n] = f;
            atomic_store_explicit(&nall, n + 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&pool_lock);
    return f;
}

static void
free_push(shl_fiber_t *f)
{
    pthread_mutex_lock(&pool_lock);
    f->next_free = free_list;
    free_list = f;
    pthread_mutex_unlock(&pool_lock);
}

static void
fiber_release(shl_fiber_t *f)
{
    atomic_store(&f->state, F_FREE);
    if (tl_spare == NULL) {
        tl_spare = f;
    } else {
        free_push(f);
    }
}

static uint64_t
tag_of(shl_fiber_t *f)
{
    return (uint64_t)(uintptr_t)f | 1;
}

/* Run 'f' (RUNNING) on this worker until it ends or parks, then finish its switch out. */
static void
resume_here(shl_fiber_t *f)
{
    const shl_fiber_driver_t *d = atomic_load(&driver);

    tl_current = f;
    fiber_switch(&tl_worker_sp, f->sp);
    tl_current = NULL;
    if (atomic_load(&f->state) == F_DONE) {
        fiber_release(f);
        return;
    }
    /* Parking: its stack is free now. It stays PARKING until its fd is armed, so that no
     * event or kick can resume it before this worker's last touch of it. */
    if (d->arm(f->fd, tag_of(f), false)) {
        atomic_store(&f->state, F_PARKED);
    } else {
        atomic_store(&f->state, F_RUNNING);
        f->allow = false; /* it waits blocking from now on */
        resume_here(f);
    }
}

void
shl_fiber_want(void)
{
    atomic_store(&wanted, true);
}

void
shl_fiber_set_driver(const shl_fiber_driver_t *d)
{
    atomic_store(&driver, d);
}

bool
shl_fiber_active(void)
{
    return FIBER_SUPPORTED && atomic_load_explicit(&wanted, memory_order_relaxed) &&
           atomic_load_explicit(&driver, memory_order_relaxed) != NULL;
}

void
shl_fiber_run(void (*fn)(void *), void *arg)
{
    shl_fiber_t *f = shl_fiber_active() && tl_current == NULL ? fiber_acquire() : NULL;

    if (f == NULL) {
        fn(arg);
        return;
    }
    f->fn = fn;
    f->arg = arg;
    f->allow = false;
    atomic_store(&f->state, F_RUNNING);
    resume_here(f);
}

void
shl_fiber_event(uint64_t tag)
{
    shl_fiber_t *f = (shl_fiber_t *)(uintptr_t)(tag & ~(uint64_t)1);

    for (;;) {
        int s = F_PARKED;
        if (atomic_compare_exchange_strong(&f->state, &s, F_RUNNING)) {
            resume_here(f);
            return;
        }
        if (s != F_KICKING && s != F_PARKING) {
            return; /* stale: the fiber was resumed by another event, or has ended */
        }
        sched_yield();
    }
}

int64_t
shl_fiber_expire(int64_t now_us)
{
    const shl_fiber_driver_t *d = atomic_load(&driver);
    int n = atomic_load_explicit(&nall, memory_order_acquire);
    int64_t next = 0;

    for (int i = 0; d != NULL && i < n; i++) {
        shl_fiber_t *f = all[i];
        int64_t at = atomic_load(&f->wake_at_us);
        int s = F_PARKED;
        if (at != 0 && now_us >= at && atomic_compare_exchange_strong(&f->state, &s, F_KICKING)) {
            (void)d->arm(f->fd, tag_of(f), true);
            atomic_store(&f->state, F_PARKED);
        } else if (at != 0 && (next == 0 || at < next)) {
            next = at < now_us ? now_us : at;
        }
    }
    return next;
}

bool
shl_fiber_park_allow(bool allow)
{
    shl_fiber_t *f = current_get();
    bool prev = false;

    if (f != NULL) {
        prev = f->allow;
        f->allow = allow;
    }
    return prev;
}

bool
shl_fiber_may_park(void)
{
    shl_fiber_t *f = current_get();
    return f != NULL && f->allow;
}

int
shl_fiber_wait_readable(int fd, int64_t timeout_ms)
{
    shl_fiber_t *f = current_get();
    int64_t ms = timeout_ms < 0 || timeout_ms > FIBER_WAIT_MAX_MS ? FIBER_WAIT_MAX_MS : timeout_ms;
    size_t off = 0;

    f->fd = fd;
    for (int i = 0; i < nlocals; i++) {
        memcpy(f->locals + off, local_addr[i](), local_size[i]);
        off += local_size[i];
    }
    snprintf(f->log_ctx, sizeof(f->log_ctx), "%s", shl_log_get_thread_ctx());
    atomic_store(&f->wake_at_us, shl_clock_mono_us() + ms * 1000);
    atomic_fetch_add_explicit(&nparks, 1, memory_order_relaxed);
    atomic_store(&f->state, F_PARKING);
    fiber_switch(&f->sp, worker_sp_get());
    /* Resumed, perhaps on another thread. */
    atomic_store(&f->wake_at_us, 0);
    off = 0;
    for (int i = 0; i < nlocals; i++) {
        memcpy(local_addr[i](), f->locals + off, local_size[i]);
        off += local_size[i];
    }
    shl_log_set_thread_ctx(f->log_ctx);
    return 1;
}

void
shl_fiber_local_register(void *(*addr)(void), size_t size)
{
    SHL_INVARIANT(nlocals < LOCAL_VARS_MAX && locals_used + size <= LOCALS_MAX);
    local_addr[nlocals] = addr;
    local_size[nlocals++] = size;
    locals_used += size;
}

void
shl_fiber_stats(int64_t *parks, int64_t *fibers)
{
    *parks = atomic_load(&nparks);
    *fibers = atomic_load(&nall);
}

void
shl_fiber_thread_exit(void)
{
    shl_fiber_t *f = tl_spare;

    if (f != NULL) {
        tl_spare = NULL;
        free_push(f);
    }
}
