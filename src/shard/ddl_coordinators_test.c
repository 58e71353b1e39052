/*
 * ddl_coordinators_test.c -- the dropCollection / dropDatabase coordinators' phases over the
 * fake remote (the config server's catalog answered by a handler, "self" the in-memory store
 * of config.system.sharding_ddl_coordinators), and the DDL lock manager they hold.
 */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "base/unit_test.h"
#include "shard/ddl_coordinators.h"
#include "sharding/remote_fake.h"

#define COLL "system.sharding_ddl_coordinators"
#define UUID_JSON "{'$binary': {'base64': 'AAECAwQFBgcICQoLDA0ODw==', 'subType': '04'}}"

typedef struct env {
    shl_remote_fake_t *fake;
    shl_remote_t remote;
    shl_coord_service_t *svc;
    shard_ddl_locks_t *locks;
    const char *collections; /* the config.collections documents the handler answers */
    pthread_mutex_t mu;
    char log[4096]; /* guarded by mu: "target:command " per request to config and shards */
} env_t;

static const char *
target_name(const shl_remote_target_t *t)
{
    return shl_remote_target_str(t);
}

/* Record each request; answer the config server's finds on config.collections / shards. */
static bool
config_handler(void *arg, const shl_remote_request_t *req, bson_t *reply)
{
    env_t *e = arg;
    bson_iter_t it;
    char buf[2048];
    bson_error_t err;
    bson_t *doc;
    bool find;

    pthread_mutex_lock(&e->mu);
    if (bson_iter_init(&it, req->cmd) && bson_iter_next(&it)) {
        size_t len = strlen(e->log);
        const char *extra = "";
        bson_iter_t f;
        if (bson_iter_init_find(&f, req->cmd, "blockType")) {
            extra = strcmp(bson_iter_utf8(&f, NULL), "Unblock") == 0 ? "(unblock)" : "(block)";
        } else if (bson_iter_init_find(&f, req->cmd, "checkOnly")) {
            extra = "(check)";
        }
        snprintf(e->log + len, sizeof e->log - len, "%s:%s%s ", target_name(&req->target),
                 bson_iter_key(&it), extra);
    }
    pthread_mutex_unlock(&e->mu);
    find = req->target.kind == SHL_REMOTE_CONFIG && bson_iter_init_find(&it, req->cmd, "find");
    if (find) {
        const char *coll = bson_iter_utf8(&it, NULL);
        const char *batch = e->collections;
        bson_iter_t q;
        if (strcmp(coll, "databases") == 0) {
            batch = "[{'_id': 'db', 'primary': 'shA'}]";
        } else if (strcmp(coll, "shards") == 0) {
            batch = "[{'_id': 'shA'}, {'_id': 'shB'}]";
        } else if (strcmp(coll, "collections") == 0 && bson_iter_init(&q, req->cmd) &&
                   bson_iter_find_descendant(&q, "filter._id", &q) && BSON_ITER_HOLDS_UTF8(&q) &&
                   strcmp(bson_iter_utf8(&q, NULL), "db.c") != 0) {
            batch = "[]"; /* only db.c is (maybe) sharded */
        } else if (strcmp(coll, "chunks") == 0) {
            /* every sharded collection of the tests has chunks on both shards */
            batch = "[{'shard': 'shB'}, {'shard': 'shA'}, {'shard': 'shB'}]";
        }
        snprintf(buf, sizeof buf,
                 "{'ok': 1, 'cursor': {'id': 0, 'ns': 'config.x', 'firstBatch': %s}}", batch);
        for (char *p = buf; *p; p++) {
            if (*p == '\'') {
                *p = '"';
            }
        }
        doc = bson_new_from_json((const uint8_t *)buf, -1, &err);
        SHL_INVARIANT(doc != NULL);
        bson_copy_to(doc, reply);
        bson_destroy(doc);
    }
    return find;
}

static void
env_init(env_t *e, const char *collections)
{
    memset(e, 0, sizeof *e);
    pthread_mutex_init(&e->mu, NULL);
    e->fake = shl_remote_fake_new();
    shl_remote_fake_store_self(e->fake);
    shl_remote_fake_set_handler(e->fake, config_handler, e);
    e->remote = shl_remote_fake_remote(e->fake);
    e->svc = shl_coord_service_new(&e->remote);
    e->locks = shard_ddl_locks_new();
    e->collections = collections;
    shard_ddl_coords_setup(e->locks, NULL, NULL);
}

static void
env_cleanup(env_t *e)
{
    shl_coord_service_destroy(e->svc);
    shard_ddl_locks_destroy(e->locks);
    shl_remote_fake_destroy(e->fake);
    pthread_mutex_destroy(&e->mu);
}

/* The log without the finds (their count varies with retries). */
static bool
log_is(env_t *e, const char *want)
{
    char got[4096] = "";
    char *save = NULL, *tok;
    char copy[4096];
    bool eq;

    pthread_mutex_lock(&e->mu);
    snprintf(copy, sizeof copy, "%s", e->log);
    pthread_mutex_unlock(&e->mu);
    for (tok = strtok_r(copy, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        if (strstr(tok, ":find") == NULL) {
            strncat(got, tok, sizeof got - strlen(got) - 2);
            strcat(got, " ");
        }
    }
    eq = strcmp(got, want) == 0;
    if (!eq) {
        fprintf(stderr, "sent   %s\nwanted %s\n", got, want);
    }
    return eq;
}

static void
sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Wait (up to 60 s, polling) until a thread waits for the DDL lock of 'resource'. */
static bool
await_lock_waiter(shard_ddl_locks_t *l, const char *resource)
{
    for (int i = 0; i < 60000 && shard_ddl_locks_waiting(l, resource) == 0; i++) {
        sleep_ms(1);
    }
    return shard_ddl_locks_waiting(l, resource) > 0;
}

#define SHARDED "[{'_id': 'db.c', 'uuid': " UUID_JSON ", 'key': {'x': 1}}]"

SHL_TEST(drop_coll_runs_its_phases_in_order)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t req;

    env_init(&e, SHARDED);
    ASSERT_INT_EQ(shard_ddl_drop_collection(e.svc, "db.c", NULL, &st), 0);
    /* freeze (stop migrations), block everywhere, commit on the config server, drop
     * everywhere, unblock everywhere */
    ASSERT(log_is(&e, "config:_configsvrSetAllowMigrations shA:_shardsvrParticipantBlock(block) "
                      "shB:_shardsvrParticipantBlock(block) config:_configsvrCommitDropCollection "
                      "shA:_shardsvrDropCollectionParticipant "
                      "shB:_shardsvrDropCollectionParticipant "
                      "shA:_shardsvrParticipantBlock(unblock) "
                      "shB:_shardsvrParticipantBlock(unblock) "));
    ASSERT(shl_remote_fake_nth(e.fake, "config", "_configsvrCommitDropCollection", 0, &req));
    ASSERT_BSON_EQ(&req, "{'_configsvrCommitDropCollection': 'db.c', 'collectionUUID': " UUID_JSON
                         ", 'writeConcern': {'w': 'majority'}}");
    bson_destroy(&req);
    ASSERT(shl_remote_fake_nth(e.fake, "config", "_configsvrSetAllowMigrations", 0, &req));
    ASSERT_BSON_EQ(&req, "{'_configsvrSetAllowMigrations': 'db.c', 'allowMigrations': false, "
                         "'collectionUUID': " UUID_JSON ", 'writeConcern': {'w': 'majority'}}");
    bson_destroy(&req);
    /* a checkpoint per phase (the first inserts), then the document goes */
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "insert"), 1);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "update"), 3);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
    ASSERT(shl_remote_fake_nth(e.fake, "self", "update", 2, &req));
    ASSERT_BSON_EQ(&req, "{'update': 'system.sharding_ddl_coordinators', 'updates': [{'q': "
                         "{'_id': {'namespace': 'db.c', 'operationType': 'dropCollection'}}, "
                         "'u': {'_id': {'namespace': 'db.c', 'operationType': "
                         "'dropCollection'}, 'collInfo': {'_id': 'db.c', 'uuid': " UUID_JSON
                         ", 'key': {'x': 1}}, 'participants': ['shA', 'shB'], "
                         "'phase': 'releaseCriticalSection'}}], "
                         "'writeConcern': {'w': 'majority', 'j': true}}");
    bson_destroy(&req);
    /* the locks are released */
    ASSERT_INT_EQ(shard_ddl_locks_held(e.locks, "db"), 0);
    ASSERT_INT_EQ(shard_ddl_locks_held(e.locks, "db.c"), 0);
    env_cleanup(&e);
}

SHL_TEST(drop_coll_of_an_unsharded_collection_skips_the_config_server)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t req;

    env_init(&e, "[]");
    ASSERT_INT_EQ(shard_ddl_drop_collection(e.svc, "db.u", NULL, &st), 0);
    /* only the primary holds an unsharded collection: shB is no participant */
    ASSERT(log_is(&e, "shA:_shardsvrParticipantBlock(block) "
                      "shA:_shardsvrDropCollectionParticipant "
                      "shA:_shardsvrParticipantBlock(unblock) "));
    ASSERT(shl_remote_fake_nth(e.fake, "shA", "_shardsvrDropCollectionParticipant", 0, &req));
    ASSERT_BSON_EQ(&req, "{'_shardsvrDropCollectionParticipant': 'u', 'writeConcern': {'w': "
                         "'majority'}}");
    bson_destroy(&req);
    env_cleanup(&e);
}

SHL_TEST(drop_coll_retries_retryable_errors)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e, SHARDED);
    /* shB unreachable for the first 6 participant drops: the remote's own retries (5), then
     * the framework runs the phase again */
    shl_remote_fake_script_error(e.fake, "shB", "_shardsvrDropCollectionParticipant",
                                 SHL_CODE_HOST_UNREACHABLE, 6);
    ASSERT_INT_EQ(shard_ddl_drop_collection(e.svc, "db.c", NULL, &st), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "shB", "_shardsvrDropCollectionParticipant"), 7);
    /* the phase ran twice: its config commit too (idempotent) */
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "config", "_configsvrCommitDropCollection"), 2);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
    env_cleanup(&e);
}

SHL_TEST(drop_coll_resumes_at_its_document_phase)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *doc, *other;
    bson_error_t err;

    env_init(&e, "[]"); /* the config server no longer has the collection: resumed */
    doc = bson_new_from_json(
        (const uint8_t *)"{\"_id\": {\"namespace\": \"db.c\", \"operationType\": "
                         "\"dropCollection\"}, \"phase\": \"dropCollection\", \"collInfo\": "
                         "{\"_id\": \"db.c\", \"key\": {\"x\": 1}}, "
                         "\"participants\": [\"shA\", \"shB\"]}",
        -1, &err);
    other =
        bson_new_from_json((const uint8_t *)"{\"_id\": {\"namespace\": \"db2\", \"operationType\": "
                                            "\"dropDatabase\"}, \"phase\": \"drop\"}",
                           -1, &err);
    SHL_INVARIANT(doc != NULL && other != NULL);
    shl_remote_fake_store_insert(e.fake, COLL, doc);
    shl_remote_fake_store_insert(e.fake, COLL, other);
    /* only its own type's documents */
    ASSERT_INT_EQ(shl_coord_service_recover(e.svc, &shard_drop_coll_type, &st), 0);
    for (int i = 0; i < 500 && shl_coord_service_count(e.svc) > 0; i++) {
        sleep_ms(10);
    }
    ASSERT_INT_EQ(shl_coord_service_count(e.svc), 0);
    /* no freeze, no block: from the drop on, with the remembered collInfo */
    ASSERT(log_is(&e, "config:_configsvrCommitDropCollection "
                      "shA:_shardsvrDropCollectionParticipant "
                      "shB:_shardsvrDropCollectionParticipant "
                      "shA:_shardsvrParticipantBlock(unblock) "
                      "shB:_shardsvrParticipantBlock(unblock) "));
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 1); /* the dropDatabase one */
    bson_destroy(doc);
    bson_destroy(other);
    env_cleanup(&e);
}

SHL_TEST(drop_db_drops_sharded_collections_then_the_database)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t req;

    env_init(&e, "[{'_id': 'db.a', 'uuid': " UUID_JSON "}, {'_id': 'db.b'}]");
    ASSERT_INT_EQ(shard_ddl_drop_database(e.svc, "db", NULL, &st), 0);
    ASSERT(log_is(&e, "config:_configsvrSetAllowMigrations config:_configsvrCommitDropCollection "
                      "config:_configsvrSetAllowMigrations config:_configsvrCommitDropCollection "
                      "shA:_shardsvrDropDatabaseParticipant shB:_shardsvrDropDatabaseParticipant "
                      "config:_configsvrCommitDropDatabase shA:_flushDatabaseCacheUpdates "
                      "shB:_flushDatabaseCacheUpdates "));
    ASSERT(shl_remote_fake_nth(e.fake, "config", "_configsvrCommitDropCollection", 1, &req));
    ASSERT_BSON_EQ(&req, "{'_configsvrCommitDropCollection': 'db.b', 'writeConcern': {'w': "
                         "'majority'}}");
    bson_destroy(&req);
    /* the participants were made durable in the middle of the phase, before any metadata
     * went: a resumed phase still reaches shB after db.a's chunks are gone */
    ASSERT(shl_remote_fake_nth(e.fake, "self", "update", 0, &req));
    ASSERT_BSON_EQ(&req, "{'update': 'system.sharding_ddl_coordinators', 'updates': [{'q': "
                         "{'_id': {'namespace': 'db', 'operationType': 'dropDatabase'}}, 'u': "
                         "{'_id': {'namespace': 'db', 'operationType': 'dropDatabase'}, 'phase': "
                         "'drop', 'participants': ['shA', 'shB']}}], 'writeConcern': {'w': "
                         "'majority', 'j': true}}");
    bson_destroy(&req);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
    ASSERT_INT_EQ(shard_ddl_locks_held(e.locks, "db"), 0);
    env_cleanup(&e);
}

typedef struct bg_drop {
    env_t *e;
    int ret;
} bg_drop_t;

static void *
bg_drop_db(void *arg)
{
    bg_drop_t *b = arg;
    shl_status_t st = SHL_STATUS_INIT;

    b->ret = shard_ddl_drop_database(b->e->svc, "db", NULL, &st);
    return NULL;
}

SHL_TEST(drop_db_waits_for_the_database_lock)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bg_drop_t b = {.e = &e, .ret = -1};
    pthread_t t;

    env_init(&e, "[]");
    /* a collection DDL holds the database in IX */
    ASSERT_INT_EQ(shard_ddl_lock_acquire(e.locks, "db", SHARD_DDL_IX, "test", 0, NULL, NULL, &st),
                  0);
    pthread_create(&t, NULL, bg_drop_db, &b);
    ASSERT(await_lock_waiter(e.locks, "db"));
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "_shardsvrDropDatabaseParticipant"), 0);
    ASSERT_INT_EQ(b.ret, -1);
    shard_ddl_lock_release(e.locks, "db", SHARD_DDL_IX);
    pthread_join(t, NULL);
    ASSERT_INT_EQ(b.ret, 0);
    /* no sharded collection: the primary is the only participant */
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "shA", "_shardsvrDropDatabaseParticipant"), 1);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "_shardsvrDropDatabaseParticipant"), 1);
    env_cleanup(&e);
}

SHL_TEST(ddl_locks_ix_shares_x_excludes)
{
    shard_ddl_locks_t *l = shard_ddl_locks_new();
    shl_status_t st = SHL_STATUS_INIT;
    bson_t out = BSON_INITIALIZER;

    ASSERT_INT_EQ(shard_ddl_lock_acquire(l, "db", SHARD_DDL_IX, "a", 0, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(shard_ddl_lock_acquire(l, "db", SHARD_DDL_IX, "b", 0, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(shard_ddl_locks_held(l, "db"), 2);
    ASSERT_INT_EQ(shard_ddl_lock_acquire(l, "db", SHARD_DDL_X, "c", 50, NULL, NULL, &st),
                  SHL_CODE_LOCK_BUSY);
    ASSERT_INT_EQ(shard_ddl_lock_acquire(l, "db.c", SHARD_DDL_X, "drop", 0, NULL, NULL, &st), 0);
    ASSERT_INT_EQ(shard_ddl_lock_acquire(l, "db.c", SHARD_DDL_IX, "d", 50, NULL, NULL, &st),
                  SHL_CODE_LOCK_BUSY);
    shard_ddl_locks_report(l, &out);
    ASSERT_BSON_EQ(&out, "{'0': {'resource': 'db.c', 'type': 'DDLCollection', 'mode': 'X', "
                         "'holders': 1, 'reason': 'drop'}, '1': {'resource': 'db', 'type': "
                         "'DDLDatabase', 'mode': 'IX', 'holders': 2, 'reason': 'b'}}");
    shard_ddl_lock_release(l, "db.c", SHARD_DDL_X);
    shard_ddl_lock_release(l, "db", SHARD_DDL_IX);
    shard_ddl_lock_release(l, "db", SHARD_DDL_IX);
    ASSERT_INT_EQ(shard_ddl_lock_acquire(l, "db", SHARD_DDL_X, "e", 50, NULL, NULL, &st), 0);
    shard_ddl_lock_release(l, "db", SHARD_DDL_X);
    ASSERT_INT_EQ(shard_ddl_locks_held(l, "db"), 0);
    bson_destroy(&out);
    shard_ddl_locks_destroy(l);
}

SHL_TEST(drop_coll_takes_over_a_document_an_earlier_failure_left)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *left;
    bson_error_t err;

    env_init(&e, SHARDED);
    /* an earlier coordinator ended with a non-retryable error and left its document */
    left = bson_new_from_json((const uint8_t *)"{\"_id\": {\"namespace\": \"db.c\", "
                                               "\"operationType\": \"dropCollection\"}, "
                                               "\"phase\": \"enterCriticalSection\"}",
                              -1, &err);
    SHL_INVARIANT(left != NULL);
    shl_remote_fake_store_insert(e.fake, COLL, left);
    ASSERT_INT_EQ(shard_ddl_drop_collection(e.svc, "db.c", NULL, &st), 0);
    /* the insert met the old document; the checkpoint replaced it, and the drop ran whole */
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "insert"), 1);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "config", "_configsvrSetAllowMigrations"), 1);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "*", "_shardsvrDropCollectionParticipant"), 2);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
    bson_destroy(left);
    env_cleanup(&e);
}

/* ------------------------------------------------ createCollection / rename / collMod / refine */

static bson_t *
json(const char *j)
{
    char buf[1024];
    bson_error_t err;
    bson_t *b;

    snprintf(buf, sizeof buf, "%s", j);
    for (char *p = buf; *p; p++) {
        if (*p == '\'') {
            *p = '"';
        }
    }
    b = bson_new_from_json((const uint8_t *)buf, -1, &err);
    SHL_INVARIANT(b != NULL);
    return b;
}

SHL_TEST(create_coll_runs_its_phases_in_order)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *req = json("{'shardKey': {'x': 'hashed'}, 'numInitialChunks': 4}");
    bson_t reply = BSON_INITIALIZER, seen;

    env_init(&e, "[]");
    ASSERT_INT_EQ(shard_ddl_create_collection(e.svc, "db.n", req, NULL, &reply, &st), 0);
    ASSERT(log_is(&e, "self:_shardsvrParticipantBlock(block) config:_configsvrShardCollection "
                      "self:_shardsvrNotifyShardingEvent "
                      "self:_shardsvrParticipantBlock(unblock) "));
    /* The change stream event, in the critical section: the request's fields. */
    ASSERT(shl_remote_fake_nth(e.fake, "self", "_shardsvrNotifyShardingEvent", 0, &seen));
    ASSERT_BSON_EQ(&seen, "{'_shardsvrNotifyShardingEvent': 1, 'eventType': 'collectionSharded', "
                          "'details': {'ns': 'db.n', 'description': {'shardKey': {'x': 'hashed'}, "
                          "'unique': false, 'numInitialChunks': 4}}, "
                          "'writeConcern': {'w': 'majority'}}");
    bson_destroy(&seen);
    ASSERT(shl_remote_fake_nth(e.fake, "config", "_configsvrShardCollection", 0, &seen));
    ASSERT_BSON_EQ(&seen, "{'_configsvrShardCollection': 'db.n', 'key': {'x': 'hashed'}, "
                          "'unique': false, 'numInitialChunks': 4, 'writeConcern': {'w': "
                          "'majority'}}");
    bson_destroy(&seen);
    /* checkPreconditions is not checkpointed: the first write is enterCriticalSection's */
    ASSERT(shl_remote_fake_nth(e.fake, "self", "insert", 0, &seen));
    ASSERT_BSON_EQ(&seen, "{'insert': 'system.sharding_ddl_coordinators', 'documents': [{'_id': "
                          "{'namespace': 'db.n', 'operationType': 'createCollection'}, "
                          "'shardKey': {'x': 'hashed'}, 'unique': false, 'numInitialChunks': 4, "
                          "'phase': 'enterCriticalSection'}], 'writeConcern': {'w': 'majority', "
                          "'j': true}}");
    bson_destroy(&seen);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "update"), 2);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
    ASSERT_INT_EQ(shard_ddl_locks_held(e.locks, "db.n"), 0);
    bson_destroy(&reply);
    bson_destroy(req);
    env_cleanup(&e);
}

SHL_TEST(create_coll_of_a_sharded_collection_answers_or_refuses_at_once)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *same = json("{'shardKey': {'x': 1}}"), *other = json("{'shardKey': {'y': 1}}");
    bson_t reply = BSON_INITIALIZER;

    env_init(&e, SHARDED);
    ASSERT_INT_EQ(shard_ddl_create_collection(e.svc, "db.c", same, NULL, &reply, &st), 0);
    ASSERT_BSON_EQ(&reply, "{'collectionsharded': 'db.c', 'collectionUUID': " UUID_JSON "}");
    ASSERT_INT_EQ(shard_ddl_create_collection(e.svc, "db.c", other, NULL, &reply, &st),
                  SHL_CODE_ALREADY_INITIALIZED);
    /* nothing written, nothing sent but the catalog reads */
    ASSERT(log_is(&e, ""));
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "*"), 0);
    bson_destroy(&reply);
    bson_destroy(same);
    bson_destroy(other);
    env_cleanup(&e);
}

SHL_TEST(create_coll_refused_by_the_config_server_leaves_nothing)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *req = json("{'shardKey': {'x': 1}, 'numInitialChunks': 3}");
    bson_t reply = BSON_INITIALIZER;

    env_init(&e, "[]");
    shl_remote_fake_script(e.fake, "config", "_configsvrShardCollection",
                           "{'ok': 0, 'code': 72, 'codeName': 'InvalidOptions', 'errmsg': 'no'}",
                           1);
    ASSERT_INT_EQ(shard_ddl_create_collection(e.svc, "db.n", req, NULL, &reply, &st),
                  SHL_CODE_INVALID_OPTIONS);
    /* the critical section is left, the document deleted, not retried */
    ASSERT(log_is(&e, "self:_shardsvrParticipantBlock(block) config:_configsvrShardCollection "
                      "self:_shardsvrParticipantBlock(unblock) "));
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "delete"), 1);
    bson_destroy(&reply);
    bson_destroy(req);
    env_cleanup(&e);
}

SHL_TEST(rename_runs_its_phases_in_order)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t seen;

    env_init(&e, SHARDED);
    ASSERT_INT_EQ(shard_ddl_rename_collection(e.svc, "db.c", "db.d", false, NULL, &st), 0);
    ASSERT(log_is(&e, "shA:listCollections shA:listCollections "
                      "shA:_shardsvrRenameCollectionParticipant(check) "
                      "shB:listCollections shB:listCollections "
                      "shB:_shardsvrRenameCollectionParticipant(check) "
                      "config:_configsvrSetAllowMigrations "
                      "shA:_shardsvrRenameCollectionParticipant "
                      "shB:_shardsvrRenameCollectionParticipant "
                      "config:_configsvrRenameCollectionMetadata "
                      "shA:_shardsvrRenameCollectionUnblockParticipant "
                      "shB:_shardsvrRenameCollectionUnblockParticipant "));
    ASSERT(shl_remote_fake_nth(e.fake, "config", "_configsvrRenameCollectionMetadata", 0, &seen));
    ASSERT_BSON_EQ(&seen, "{'_configsvrRenameCollectionMetadata': 'db.c', 'to': 'db.d', "
                          "'sourceUUID': " UUID_JSON ", 'writeConcern': {'w': 'majority'}}");
    bson_destroy(&seen);
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
    ASSERT_INT_EQ(shard_ddl_locks_held(e.locks, "db.d"), 0);
    env_cleanup(&e);
}

SHL_TEST(rename_refused_by_a_check_leaves_nothing)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;

    env_init(&e, SHARDED);
    /* a migration runs on shB: 117 from the check, even a retryable error is not retried */
    shl_remote_fake_script(e.fake, "shB", "_shardsvrRenameCollectionParticipant",
                           "{'ok': 0, 'code': 117, 'codeName': 'ConflictingOperationInProgress', "
                           "'errmsg': 'migration'}",
                           1);
    ASSERT_INT_EQ(shard_ddl_rename_collection(e.svc, "db.c", "db.d", false, NULL, &st),
                  SHL_CODE_CONFLICTING_OPERATION_IN_PROGRESS);
    shl_remote_fake_script_error(e.fake, "shB", "listCollections", SHL_CODE_HOST_UNREACHABLE, -1);
    ASSERT_INT_EQ(shard_ddl_rename_collection(e.svc, "db.c", "db.d", false, NULL, &st),
                  SHL_CODE_HOST_UNREACHABLE);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "config", "_configsvrSetAllowMigrations"), 0);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "self", "*"), 0);
    env_cleanup(&e);
}

SHL_TEST(coll_mod_runs_here_first_then_everywhere)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *req = json("{'validator': {'v': 1}}");
    bson_t reply = BSON_INITIALIZER;

    env_init(&e, SHARDED);
    ASSERT_INT_EQ(shard_ddl_coll_mod(e.svc, "db.c", req, NULL, &reply, &st), 0);
    ASSERT(log_is(&e, "config:_configsvrSetAllowMigrations self:_shardsvrCollModParticipant "
                      "shA:_shardsvrCollModParticipant shB:_shardsvrCollModParticipant "
                      "config:_configsvrSetAllowMigrations "));
    /* a refusal here: migrations run again, the document goes, nothing else is sent */
    shl_remote_fake_reset_calls(e.fake);
    shl_remote_fake_script(e.fake, "self", "_shardsvrCollModParticipant",
                           "{'ok': 0, 'code': 27, 'codeName': 'IndexNotFound', 'errmsg': 'no'}", 1);
    pthread_mutex_lock(&e.mu);
    e.log[0] = '\0';
    pthread_mutex_unlock(&e.mu);
    ASSERT_INT_EQ(shard_ddl_coll_mod(e.svc, "db.c", req, NULL, &reply, &st),
                  SHL_CODE_INDEX_NOT_FOUND);
    ASSERT(log_is(&e, "config:_configsvrSetAllowMigrations self:_shardsvrCollModParticipant "
                      "config:_configsvrSetAllowMigrations "));
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
    bson_destroy(&reply);
    bson_destroy(req);
    env_cleanup(&e);
}

SHL_TEST(refine_freezes_commits_and_resumes)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *key = json("{'x': 1, 'y': 1}"), *same = json("{'x': 1}");

    env_init(&e, SHARDED);
    ASSERT_INT_EQ(shard_ddl_refine(e.svc, "db.c", key, NULL, &st), 0);
    ASSERT(log_is(&e,
                  "config:_configsvrSetAllowMigrations config:_configsvrRefineCollectionShardKey "
                  "self:_shardsvrNotifyShardingEvent config:_configsvrSetAllowMigrations "));
    /* already the key: done at once; not sharded: NamespaceNotSharded */
    ASSERT_INT_EQ(shard_ddl_refine(e.svc, "db.c", same, NULL, &st), 0);
    ASSERT_INT_EQ(shard_ddl_refine(e.svc, "db.other", key, NULL, &st),
                  SHL_CODE_NAMESPACE_NOT_SHARDED);
    ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "config", "_configsvrRefineCollectionShardKey"), 1);
    bson_destroy(key);
    bson_destroy(same);
    env_cleanup(&e);
}

/* ---------------------------------------------- the databaseVersion, again after the locks */

typedef struct db_check {
    int calls;
    bool stale; /* the database was dropped and created again meanwhile */
} db_check_t;

static int
fake_db_check(void *arg, const char *ns, const bson_t *dbv, shl_status_t *st)
{
    db_check_t *d = arg;
    int ret = 0;

    (void)dbv;
    d->calls++;
    if (d->stale) {
        SHL_FAIL(st, SHL_CODE_STALE_DB_VERSION, "database version mismatch detected for %s", ns);
    }
done:
    return ret;
}

typedef struct bg_drop_coll {
    env_t *e;
    const bson_t *dbv;
    int ret;
} bg_drop_coll_t;

static void *
bg_drop_coll(void *arg)
{
    bg_drop_coll_t *b = arg;
    shl_status_t st = SHL_STATUS_INIT;

    b->ret = shard_ddl_drop_collection(b->e->svc, "db.c", b->dbv, &st);
    return NULL;
}

SHL_TEST(ddl_rechecks_the_database_version_after_waiting_for_its_locks)
{
    env_t e;
    shl_status_t st = SHL_STATUS_INIT;
    db_check_t d = {.calls = 0, .stale = false};
    bson_t *dbv = json("{'uuid': 1, 'timestamp': 1, 'lastMod': 1}");
    bg_drop_coll_t b = {.e = &e, .dbv = dbv, .ret = -1};
    pthread_t t;

    env_init(&e, SHARDED);
    shard_ddl_coords_setup(e.locks, fake_db_check, &d);
    /* a dropDatabase holds the database in X; the drop waits behind it */
    ASSERT_INT_EQ(shard_ddl_lock_acquire(e.locks, "db", SHARD_DDL_X, "test", 0, NULL, NULL, &st),
                  0);
    pthread_create(&t, NULL, bg_drop_coll, &b);
    ASSERT(await_lock_waiter(e.locks, "db"));
    ASSERT_INT_EQ(d.calls, 0);
    d.stale = true; /* ... and the database was created again before it let go */
    shard_ddl_lock_release(e.locks, "db", SHARD_DDL_X);
    pthread_join(t, NULL);
    /* checked once the locks were held: StaleDbVersion, nothing sent, no document, locks
     * released */
    ASSERT_INT_EQ(d.calls, 1);
    ASSERT_INT_EQ(b.ret, SHL_CODE_STALE_DB_VERSION);
    ASSERT(log_is(&e, ""));
    ASSERT_INT_EQ(shl_remote_fake_store_count(e.fake, COLL), 0);
    ASSERT_INT_EQ(shard_ddl_locks_held(e.locks, "db"), 0);
    ASSERT_INT_EQ(shard_ddl_locks_held(e.locks, "db.c"), 0);
    /* the same version still current: the drop runs; without a version nothing is checked */
    d.stale = false;
    ASSERT_INT_EQ(shard_ddl_drop_collection(e.svc, "db.c", dbv, &st), 0);
    ASSERT_INT_EQ(d.calls, 2);
    ASSERT_INT_EQ(shard_ddl_drop_collection(e.svc, "db.c", NULL, &st), 0);
    ASSERT_INT_EQ(d.calls, 2);
    shard_ddl_coords_setup(e.locks, NULL, NULL);
    bson_destroy(dbv);
    env_cleanup(&e);
}

/* ------------------------------------------------------------ the base's lock order */

typedef struct bg_rename {
    env_t *e;
    const char *from, *to;
    int ret;
} bg_rename_t;

static void *
bg_rename(void *arg)
{
    bg_rename_t *b = arg;
    shl_status_t st = SHL_STATUS_INIT;

    b->ret = shard_ddl_rename_collection(b->e->svc, b->from, b->to, false, NULL, &st);
    return NULL;
}

SHL_TEST(rename_locks_both_names_and_releases_them)
{
    /* the target sorts before the source ("db.a" < "db.c") and after it ("db.d"): the
     * coordinator waits for each name held by someone else, then releases all three */
    const char *targets[] = {"db.a", "db.d"};

    for (size_t k = 0; k < 2; k++) {
        env_t e;
        shl_status_t st = SHL_STATUS_INIT;
        bg_rename_t b = {.e = &e, .from = "db.c", .to = targets[k], .ret = -1};
        pthread_t t;

        env_init(&e, SHARDED);
        ASSERT_INT_EQ(
            shard_ddl_lock_acquire(e.locks, targets[k], SHARD_DDL_X, "test", 0, NULL, NULL, &st),
            0);
        pthread_create(&t, NULL, bg_rename, &b);
        ASSERT(await_lock_waiter(e.locks, targets[k]));
        ASSERT(log_is(&e, "")); /* waiting for the target's lock: nothing sent */
        ASSERT_INT_EQ(shard_ddl_locks_held(e.locks, "db"), 1);
        ASSERT_INT_EQ(b.ret, -1);
        shard_ddl_lock_release(e.locks, targets[k], SHARD_DDL_X);
        pthread_join(t, NULL);
        ASSERT_INT_EQ(b.ret, 0);
        ASSERT_INT_EQ(shl_remote_fake_count(e.fake, "config", "_configsvrRenameCollectionMetadata"),
                      1);
        ASSERT_INT_EQ(shard_ddl_locks_held(e.locks, "db"), 0);
        ASSERT_INT_EQ(shard_ddl_locks_held(e.locks, "db.c"), 0);
        ASSERT_INT_EQ(shard_ddl_locks_held(e.locks, targets[k]), 0);
        env_cleanup(&e);
    }
}
