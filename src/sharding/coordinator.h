/*
 * coordinator.h -- the coordinator framework (issue 17 item 2; seeds/000 "Sharding DDL
 * Coordinator": serialization and joinability, execution, resiliency): MongoDB's
 * primary-only-service pattern. An operation is a state document in one collection of the
 * owning process ("config.<type->coll>"), run as a sequence of phases on a thread of its own;
 * a phase marked 'checkpoint' first writes the document durably (w: majority, j: true, as
 * the node has them) so a restart resumes there; at startup every document left behind
 * resumes; a second request with the same _id joins the running one if the type says it is
 * the same operation, else fails with ConflictingOperationInProgress (117); a phase failing
 * with a retryable error is run again (bounded); the document is deleted at the end.
 * Persistence and every remote call go through remote.h (the state document through the
 * "self" target), so unit tests run it over the fake remote.
 *
 * Fail points (data {type: <type name>, phase: <phase name>}, either field optional):
 *   hangBeforeCoordinatorPhase  -- hold before the phase (and its checkpoint) runs;
 *   crashBeforeCoordinatorPhase -- kill the process (SIGKILL) there, for kill -9 tests.
 * See docs/design/coordinators.md.
 */
#ifndef SHL_SHARDING_COORDINATOR_H
#define SHL_SHARDING_COORDINATOR_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "sharding/remote.h"

typedef struct shl_coord_service shl_coord_service_t;
typedef struct shl_coord shl_coord_t;

/* One phase of a coordinator type. */
typedef struct shl_coord_phase {
    const char *name;
    /* Run the phase. It reads and may replace the state document (shl_coord_doc /
     * shl_coord_doc_set) and the result (shl_coord_set_result). Returns 0 or an error;
     * a retryable one (shl_remote_is_retryable) runs the phase again, up to the type's
     * bound. Phases must be idempotent: after a crash one may run twice. */
    int (*run)(shl_coord_t *c, shl_status_t *st);
    /* Write the state document durably before the phase runs (insert the first time). */
    bool checkpoint;
} shl_coord_phase_t;

typedef struct shl_coord_type {
    const char *name; /* e.g. "TransactionCoordinator"; currentOp's desc and fail point data */
    const char *coll; /* the state documents' collection in database "config" */
    const shl_coord_phase_t *phases;
    size_t nphases;
    /* The phase a persisted document resumes at. NULL: its "phase" field names it (the
     * framework then stores the phase name there at each checkpoint). */
    int (*resume_phase)(const bson_t *doc);
    /* Whether 'request' (a new request's initial document) is the operation 'running'
     * already runs (join) or a different one with the same _id (ConflictingOperation-
     * InProgress). NULL: the documents must be equal apart from "phase". */
    bool (*same)(const bson_t *running, const bson_t *request);
    /* Whether a document of 'coll' belongs to this type (types may share a collection, as
     * MongoDB's DDL coordinators share config.system.sharding_ddl_coordinators). NULL: all. */
    bool (*owns)(const bson_t *doc);
    /* Run on the coordinator's thread before its first phase (also after a resume), e.g. to
     * take the operation's locks; an error ends the operation with it (the document stays).
     * NULL: nothing. */
    int (*acquire)(shl_coord_t *c, shl_status_t *st);
    /* Run on the coordinator's thread at its end when 'acquire' succeeded (or there is no
     * 'acquire'). NULL: nothing. */
    void (*release)(shl_coord_t *c);
    /* Append fields to the operation's currentOp entry 'op' while what 'acquire' took is
     * held (e.g. the locks), from its state document 'doc'. Called under the service lock;
     * must not block. NULL: nothing. */
    void (*report_held)(const bson_t *doc, bson_t *op);
    /* The phase after which the callers waiting for the operation (shl_coord_run/join) get
     * its result while the later phases go on (MongoDB's transaction coordinator answers
     * once its decision is durable); the result must not change afterwards. NULL: they wait
     * for the end. */
    const char *answers_after;
    /* When set, asked as an operation starts: the phase to answer after instead of
     * 'answers_after' (a runtime setting; NULL: the end). */
    const char *(*answers_after_now)(void);
    /* The first checkpoint's insert of the state document does not wait for the journal;
     * the phase after it makes the document durable before anything outside this node
     * depends on it -- by a durable write of its own on this node (journal flushes cover
     * every earlier write: the log is one) or shl_coord_persist. shl_coord_doc_unflushed
     * tells the phase. A document found on disk was durable already. */
    bool first_insert_unflushed;
    int max_attempts;  /* per phase for retryable errors; 0: 10; -1: forever */
    int64_t backoff_ms; /* between attempts (0: 100 ms) */
    void *arg;          /* the type's own context (shl_coord_type_arg) */
} shl_coord_type_t;

/*
 * shl_coord_service_new --
 *     The process's coordinators. 'remote' (borrowed, must outlive the service) carries the
 *     state document writes to "self" and the phases' remote calls. Does no I/O.
 */
shl_coord_service_t *shl_coord_service_new(const shl_remote_t *remote);

/*
 * shl_coord_service_destroy --
 *     Ask running coordinators to stop (shl_coord_interrupted turns true), wait for their
 *     threads and for the callers waiting on them (they get the coordinators' errors,
 *     InterruptedAtShutdown), and free everything. Their documents stay for the next start. NULL: no-op.
 */
void shl_coord_service_destroy(shl_coord_service_t *svc);

/*
 * shl_coord_service_step_down --
 *     This member stopped being primary (MongoDB's onStepDown of a primary-only service):
 *     ask every running coordinator to stop at its next check (before each phase and attempt,
 *     in a fail point's hang, where a phase asks shl_coord_check_halted), with
 *     InterruptedDueToReplStateChange (11602) for its callers; their documents stay for the
 *     next primary. Waits up to 'wait_ms' for them to end (a phase in a remote call ends it
 *     first), so that the step-up recovery of a re-elected member finds none still running.
 *     Coordinators started later run normally. Returns how many were asked.
 */
size_t shl_coord_service_step_down(shl_coord_service_t *svc, int64_t wait_ms);

/*
 * shl_coord_service_recover --
 *     Read every document of type 't' (borrowed; must outlive the service) from
 *     config.<t->coll> on self and resume each at its phase on its own thread. Call once per
 *     type at startup, before requests arrive. Errors: the read's.
 */
int shl_coord_service_recover(shl_coord_service_t *svc, const shl_coord_type_t *t,
                              shl_status_t *st);

/*
 * shl_coord_run --
 *     Start the operation described by 'doc' (its _id is the key), or join the running one
 *     with that _id, and wait for it to end or to pass its type's 'answers_after' (wait_ms: <= 0 forever; else give up waiting
 *     with ExceededTimeLimit while it keeps running). On success *result (initialised by
 *     the callee) holds the copy of what the operation set with shl_coord_set_result.
 *     Errors: ConflictingOperationInProgress (117) when a different operation with the same
 *     _id runs; the operation's own error; InterruptedAtShutdown.
 */
int shl_coord_run(shl_coord_service_t *svc, const shl_coord_type_t *t, const bson_t *doc,
                  int64_t wait_ms, bson_t *result, shl_status_t *st);

/*
 * shl_coord_start --
 *     Start the operation described by 'doc' on a thread of its own and return at once (the
 *     caller learns its outcome some other way, e.g. through state the type's phases share
 *     with it). Errors: ConflictingOperationInProgress (117) when an operation with the same
 *     _id runs; InterruptedAtShutdown.
 */
int shl_coord_start(shl_coord_service_t *svc, const shl_coord_type_t *t, const bson_t *doc,
                    shl_status_t *st);

/*
 * shl_coord_join --
 *     Wait for the running operation with _id 'id' (a document {_id: ...}'s value given as
 *     the document 'id_doc' = {_id: <value>}) like shl_coord_run, without starting one.
 *     Errors: NoSuchKey (4) when none runs; as shl_coord_run.
 */
int shl_coord_join(shl_coord_service_t *svc, const shl_coord_type_t *t, const bson_t *id_doc,
                   int64_t wait_ms, bson_t *result, shl_status_t *st);

/*
 * shl_coord_service_report --
 *     Append one currentOp entry per running coordinator to the array 'inprog' starting at
 *     index *n (advanced): {type: "op", desc: <type name>, active: true, phase, ...doc}.
 *     Takes the service lock.
 */
void shl_coord_service_report(shl_coord_service_t *svc, bson_t *inprog, uint32_t *n);

/* shl_coord_service_remote -- the remote it was made with (borrowed). */
const shl_remote_t *shl_coord_service_remote(const shl_coord_service_t *svc);

/* shl_coord_service_count -- coordinators running now (tests). */
size_t shl_coord_service_count(shl_coord_service_t *svc);
/* shl_coord_service_count_coll -- coordinators running now whose type keeps its documents in
 * config.<coll> (e.g. the DDL coordinators). Takes the service lock. */
size_t shl_coord_service_count_coll(shl_coord_service_t *svc, const char *coll);

/* Accessors for phases (called on the coordinator's thread). */
const bson_t *shl_coord_doc(const shl_coord_t *c);            /* the state document */
void shl_coord_doc_set(shl_coord_t *c, const bson_t *doc);     /* copied */
void shl_coord_set_result(shl_coord_t *c, const bson_t *res);  /* copied */
const shl_remote_t *shl_coord_remote(const shl_coord_t *c);
/* shl_coord_persist -- write the state document durably now, in the middle of a phase (what
 * a phase learnt that a resume of the same phase must reuse). Errors: the write's. */
int shl_coord_persist(shl_coord_t *c, shl_status_t *st);
/* shl_coord_doc_unflushed -- the state document's last write did not wait for the journal
 * (the type's first_insert_unflushed; false again after shl_coord_persist). */
bool shl_coord_doc_unflushed(const shl_coord_t *c);
void *shl_coord_type_arg(const shl_coord_t *c);
/* shl_coord_finish -- end the operation successfully after the running phase: the later
 * phases are skipped and the document is deleted (e.g. a create that finds the collection
 * already sharded as asked). */
void shl_coord_finish(shl_coord_t *c);
/* shl_coord_abort -- the error the running phase returns ends the operation "cleanly not
 * done", even a retryable one (not retried): the document is deleted instead of left for the
 * next start. The phase must have undone what the operation did. MongoDB's DDL coordinators
 * do this before their point of no return (a request the checks or the config server
 * refuse). */
void shl_coord_abort(shl_coord_t *c);
bool shl_coord_interrupted(const shl_coord_t *c); /* shutting down or stepped down: stop */
/* shl_coord_check_halted -- 0, or the error to end with when shl_coord_interrupted
 * (InterruptedAtShutdown, InterruptedDueToReplStateChange). */
int shl_coord_check_halted(const shl_coord_t *c, shl_status_t *st);
bool shl_coord_resumed(const shl_coord_t *c);     /* started by recovery */

#endif
