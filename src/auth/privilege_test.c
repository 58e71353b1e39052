/*
 * privilege_test.c -- built-in roles against the commands they must and must not allow,
 * and resource pattern matching (system collections are never covered by a database or
 * any-normal pattern).
 */
#include "auth/privilege.h"

#include "base/unit_test.h"

/* Whether role@db may run 'json' (a command document) on database 'on'. */
static bool
may(const char *role, const char *rdb, const char *on, const char *json)
{
    shl_privilege_list_t l = {0};
    shl_required_t req;
    bson_error_t err;
    bson_t *cmd = bson_new_from_json((const uint8_t *)json, -1, &err);
    bool ok = true;
    const char *name;
    bson_iter_t it;

    shl_builtin_role_privileges(role, rdb, &l);
    bson_iter_init(&it, cmd);
    bson_iter_next(&it);
    name = bson_iter_key(&it);
    shl_command_required_privileges(name, false, on, cmd, &req);
    for (size_t i = 0; i < req.n; i++) {
        ok = ok && shl_privileges_allow(&l, &req.res[i], req.act[i]);
    }
    shl_privilege_list_cleanup(&l);
    bson_destroy(cmd);
    return ok;
}

SHL_TEST(roles_read_and_write)
{
    ASSERT(may("read", "test", "test", "{\"find\": \"c\"}"));
    ASSERT(!may("read", "test", "other", "{\"find\": \"c\"}"));
    ASSERT(!may("read", "test", "test", "{\"insert\": \"c\"}"));
    ASSERT(may("readWrite", "test", "test", "{\"insert\": \"c\"}"));
    ASSERT(may("readWrite", "test", "test", "{\"update\": \"c\"}"));
    ASSERT(!may("readWrite", "test", "test", "{\"dropDatabase\": 1}"));
    ASSERT(may("dbAdmin", "test", "test", "{\"dropDatabase\": 1}"));
    ASSERT(!may("dbAdmin", "test", "test", "{\"find\": \"c\"}"));
    ASSERT(may("dbOwner", "test", "test", "{\"find\": \"c\"}"));
    ASSERT(!may("readWrite", "test", "test", "{\"serverStatus\": 1}"));
    ASSERT(may("clusterMonitor", "admin", "admin", "{\"serverStatus\": 1}"));
    ASSERT(!may("clusterMonitor", "admin", "admin", "{\"shutdown\": 1}"));
    ASSERT(may("hostManager", "admin", "admin", "{\"shutdown\": 1}"));
    ASSERT(may("clusterAdmin", "admin", "admin", "{\"addShard\": \"x\"}"));
    ASSERT(may("readAnyDatabase", "admin", "x", "{\"find\": \"c\"}"));
    ASSERT(!may("readAnyDatabase", "admin", "x", "{\"insert\": \"c\"}"));
    ASSERT(may("readWriteAnyDatabase", "admin", "x", "{\"insert\": \"c\"}"));
    ASSERT(may("root", "admin", "x", "{\"insert\": \"c\"}"));
    ASSERT(!may("root", "admin", "admin", "{\"_shardsvrMoveRange\": \"x.c\"}"));
    ASSERT(may("__system", "admin", "admin", "{\"_shardsvrMoveRange\": \"x.c\"}"));
    /* The AnyDatabase roles exist only on admin. */
    ASSERT(!shl_builtin_role_is("root", "test"));
    ASSERT(shl_builtin_role_is("read", "test"));
    /* A database-wide grant does not reach its system collections. */
    ASSERT(!may("readWrite", "test", "test", "{\"insert\": \"system.users\"}"));
    /* aggregate with $out needs write actions too. */
    ASSERT(!may("read", "test", "test", "{\"aggregate\": \"c\", \"pipeline\": [{\"$out\": \"d\"}]}"));
    ASSERT(may("readWrite", "test", "test",
               "{\"aggregate\": \"c\", \"pipeline\": [{\"$out\": \"d\"}]}"));
    /* Full namespaces name their database. */
    ASSERT(may("clusterManager", "admin", "admin", "{\"shardCollection\": \"x.c\"}"));
    ASSERT(!may("readWrite", "x", "admin", "{\"shardCollection\": \"x.c\"}"));
}

SHL_TEST(privilege_parse_roundtrip)
{
    shl_privilege_t p;
    shl_status_t st = SHL_STATUS_INIT;
    bson_error_t err;
    bson_t *d = bson_new_from_json(
        (const uint8_t *)"{\"resource\": {\"db\": \"t\", \"collection\": \"\"}, \"actions\": "
                         "[\"find\", \"insert\"]}",
        -1, &err);
    bson_t *bad = bson_new_from_json(
        (const uint8_t *)"{\"resource\": {\"db\": \"t\", \"collection\": \"\"}, \"actions\": "
                         "[\"fly\"]}",
        -1, &err);
    ASSERT_INT_EQ(shl_privilege_parse(d, &p, &st), 0);
    ASSERT_INT_EQ(p.res.kind, SHL_RES_DB);
    ASSERT(shl_action_set_has(&p.actions, SHL_ACT_FIND));
    ASSERT(!shl_action_set_has(&p.actions, SHL_ACT_REMOVE));
    ASSERT(shl_privilege_parse(bad, &p, &st) != 0);
    bson_destroy(d);
    bson_destroy(bad);
}
