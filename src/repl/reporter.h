/*
 * reporter.h -- a secondary's durability reporter (repl18j; MongoDB's JournalFlusher and
 * Reporter in one thread): once the fetcher has written a batch into this node's oplog, the
 * reporter flushes the journal (while the fetcher applies the batch and fetches the next one),
 * and when the batch is both flushed and applied it moves this member's progress and sends
 * replSetUpdatePosition to the sync source the batch came from, learning the commit point
 * from the reply. So the fetcher's thread applies while the fsync runs and fetches its next
 * batch while the report travels, and the report leaves as soon as the fsync ends (no hop
 * between threads on the way when the apply finished first). docs/design/replication.md "Fetching and applying".
 * Private to repl; one per fetcher, used by the fetcher's thread only (but the thread it runs).
 */
#ifndef SHL_REPL_REPORTER_H
#define SHL_REPL_REPORTER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct repl_coord repl_coord_t;

typedef struct repl_reporter {
    repl_coord_t *rc;
    pthread_t thread;
    bool running;       /* the thread exists (written by start/stop on the owner's thread) */
    pthread_mutex_t mu; /* guards every field below; a leaf lock (no I/O under it) */
    pthread_cond_t cv;  /* any of them changed */
    char host[256];     /* the sync source the newest written batch came from */
    uint64_t written;   /* newest entry written into our oplog */
    uint64_t applied;   /* newest entry applied */
    uint64_t flushed;   /* newest entry known to be in the journal */
    uint64_t reported;  /* newest position moved and sent */
    bool busy;          /* a flush or a report is running */
    bool flush_failed;  /* the last flush failed (logged); the next written() tries again */
    bool stop;
} repl_reporter_t;

/* repl_reporter_start -- start the thread with every position at 'at' (durable and
 * reported already). Without a thread (pthread_create failed) each call below does its work
 * on the caller's thread. */
void repl_reporter_start(repl_reporter_t *r, repl_coord_t *rc, uint64_t at);

/* repl_reporter_written -- the entries up to 'ts' from 'host' are committed in our oplog:
 * flush them. Does not block on the flush. */
void repl_reporter_written(repl_reporter_t *r, const char *host, uint64_t ts);

/* repl_reporter_applied -- the entries up to 'ts' are applied: once flushed, report them. */
void repl_reporter_applied(repl_reporter_t *r, uint64_t ts);

/* repl_reporter_wait_flushed -- wait until the entries up to 'ts' (written) are in the journal
 * (the report may still be on its way). False if the flush failed. */
bool repl_reporter_wait_flushed(repl_reporter_t *r, uint64_t ts);

/* repl_reporter_drain -- wait until everything written is flushed and what is applied and
 * flushed is reported (before a new sync source, a rollback or a state change: no report
 * crosses to another source). Returns false if the last flush failed (nothing is reported
 * past it). */
bool repl_reporter_drain(repl_reporter_t *r);

/* repl_reporter_reset -- every position back to 'at' (after a rollback or an initial sync
 * moved this member's oplog there). Call after repl_reporter_drain. */
void repl_reporter_reset(repl_reporter_t *r, uint64_t at);

/* repl_reporter_stop -- finish the running step and end the thread. */
void repl_reporter_stop(repl_reporter_t *r);

#endif
