/*
 * catalog_types_test.c -- config.shards / databases / collections / chunks documents:
 * round trips through parse and serialize (field names and order as MongoDB 7.0 writes
 * them) and the parse errors.
 */
#include "base/unit_test.h"
#include "sharding/catalog_types.h"

/* The documents below are what a MongoDB 7.0 config server holds. */
static const char *SHARD_DOC =
    "{'_id': 'shard01', 'host': 'rs1/127.0.0.1:27018,127.0.0.1:27019', 'draining': true, "
    "'tags': ['NYC', 'SF'], 'state': 1, 'topologyTime': {'$timestamp': {'t': 1700000000, 'i': 3}}}";

static const char *DB_DOC =
    "{'_id': 'test', 'primary': 'shard01', 'version': {'uuid': {'$binary': {'base64': "
    "'sPnDcFNrQCi/fisNrTY5Wg==', 'subType': '04'}}, 'timestamp': {'$timestamp': {'t': "
    "1626966433, 'i': 34}}, 'lastMod': 1}}";

static const char *COLL_DOC =
    "{'_id': 'test.coll', 'lastmodEpoch': {'$oid': '60f989a2430bfdd95d8cfa20'}, "
    "'lastmod': {'$date': '2021-07-22T15:07:14.301Z'}, 'timestamp': {'$timestamp': {'t': "
    "1626966434, 'i': 13}}, 'uuid': {'$binary': {'base64': 'yI6SN66LRS6diby9yqdj2w==', "
    "'subType': '04'}}, 'key': {'num': 1}, 'unique': false, 'noBalance': false}";

static const char *CHUNK_DOC =
    "{'_id': {'$oid': '60f989a2430bfdd95d8cfa21'}, 'uuid': {'$binary': {'base64': "
    "'yI6SN66LRS6diby9yqdj2w==', 'subType': '04'}}, 'min': {'num': {'$minKey': 1}}, 'max': "
    "{'num': 0}, 'shard': 'shard02', 'lastmod': {'$timestamp': {'t': 2, 'i': 1}}, 'jumbo': true, "
    "'onCurrentShardSince': {'$timestamp': {'t': 1626966500, 'i': 1}}, 'history': [{'validAfter': "
    "{'$timestamp': {'t': 1626966500, 'i': 1}}, 'shard': 'shard02'}, {'validAfter': {'$timestamp': "
    "{'t': 1626966434, 'i': 13}}, 'shard': 'shard01'}]}";

SHL_TEST(catalog_shard_round_trip)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *doc = shl_test_bson(SHARD_DOC), out;
    shl_shard_type_t t;

    ASSERT_INT_EQ(shl_shard_type_parse(doc, &t, &st), 0);
    ASSERT_STR_EQ(t.name, "shard01");
    ASSERT(t.draining);
    ASSERT_INT_EQ(t.ntags, 2);
    ASSERT_STR_EQ(t.tags[1], "SF");
    ASSERT_INT_EQ(t.topology_time.i, 3);
    shl_shard_type_to_bson(&t, &out);
    ASSERT_BSON_EQ(&out, SHARD_DOC);
    bson_destroy(&out);
    shl_shard_type_cleanup(&t);
    bson_destroy(doc);

    /* minimal: a freshly added shard has only _id, host, state and topologyTime */
    doc = shl_test_bson("{'_id': 's', 'host': 'h:1'}");
    ASSERT_INT_EQ(shl_shard_type_parse(doc, &t, &st), 0);
    shl_shard_type_to_bson(&t, &out);
    ASSERT_BSON_EQ(&out, "{'_id': 's', 'host': 'h:1'}");
    bson_destroy(&out);
    shl_shard_type_cleanup(&t);
    bson_destroy(doc);
}

SHL_TEST(catalog_shard_errors)
{
    static const struct {
        const char *doc;
        int code;
        const char *reason;
    } cases[] = {
        {"{'host': 'h:1'}", SHL_CODE_NO_SUCH_KEY, "Missing expected field \"_id\""},
        {"{'_id': 's'}", SHL_CODE_NO_SUCH_KEY, "Missing expected field \"host\""},
        {"{'_id': 5, 'host': 'h:1'}", SHL_CODE_TYPE_MISMATCH,
         "\"_id\" had the wrong type. Expected string, found int"},
        {"{'_id': 's', 'host': ''}", SHL_CODE_NO_SUCH_KEY, "missing host field"},
        {"{'_id': 's', 'host': 'h:1', 'state': 7}", SHL_CODE_FAILED_TO_PARSE,
         "Invalid shard state value: 7"},
        {"{'_id': 's', 'host': 'h:1', 'tags': [1]}", SHL_CODE_BAD_VALUE,
         "Elements in \"tags\" array must be strings but found int"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        shl_status_t st = SHL_STATUS_INIT;
        bson_t *doc = shl_test_bson(cases[i].doc);
        shl_shard_type_t t;
        int ret = shl_shard_type_parse(doc, &t, &st);
        bson_destroy(doc);
        if (ret != cases[i].code || strcmp(st.reason, cases[i].reason) != 0) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu: %d '%s'", i, ret, st.reason);
            return;
        }
        ASSERT(t.name == NULL && t.host == NULL);
    }
}

SHL_TEST(catalog_database_round_trip)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *doc = shl_test_bson(DB_DOC), out;
    shl_database_type_t t;

    ASSERT_INT_EQ(shl_database_type_parse(doc, &t, &st), 0);
    ASSERT_STR_EQ(t.name, "test");
    ASSERT_STR_EQ(t.primary, "shard01");
    ASSERT_INT_EQ(t.version.last_mod, 1);
    ASSERT_INT_EQ(t.version.timestamp.t, 1626966433);
    shl_database_type_to_bson(&t, &out);
    ASSERT_BSON_EQ(&out, DB_DOC);
    bson_destroy(&out);
    shl_database_type_cleanup(&t);
    bson_destroy(doc);

    /* a 6.0 document's 'partitioned' is accepted and not written back */
    doc = shl_test_bson("{'_id': 'test', 'primary': 'shard01', 'partitioned': true, 'version': "
                        "{'uuid': {'$binary': {'base64': 'sPnDcFNrQCi/fisNrTY5Wg==', 'subType': "
                        "'04'}}, 'timestamp': {'$timestamp': {'t': 1626966433, 'i': 34}}, "
                        "'lastMod': 1}}");
    ASSERT_INT_EQ(shl_database_type_parse(doc, &t, &st), 0);
    shl_database_type_to_bson(&t, &out);
    ASSERT_BSON_EQ(&out, DB_DOC);
    bson_destroy(&out);
    shl_database_type_cleanup(&t);
    bson_destroy(doc);

    doc = shl_test_bson("{'_id': 'test', 'version': {}}");
    ASSERT_INT_EQ(shl_database_type_parse(doc, &t, &st), SHL_CODE_IDL_FAILED_TO_PARSE);
    ASSERT_STR_EQ(st.reason, "BSON field 'DatabaseVersion.uuid' is missing but a required field");
    bson_destroy(doc);
    doc = shl_test_bson("{'_id': 'test', 'version': {'uuid': {'$binary': {'base64': "
                        "'sPnDcFNrQCi/fisNrTY5Wg==', 'subType': '04'}}, 'timestamp': "
                        "{'$timestamp': {'t': 1, 'i': 1}}, 'lastMod': 1}}");
    ASSERT_INT_EQ(shl_database_type_parse(doc, &t, &st), SHL_CODE_IDL_FAILED_TO_PARSE);
    ASSERT_STR_EQ(st.reason, "BSON field 'DatabaseType.primary' is missing but a required field");
    bson_destroy(doc);
    doc = shl_test_bson("{'_id': 'a.b', 'primary': 's', 'version': {'uuid': {'$binary': "
                        "{'base64': 'sPnDcFNrQCi/fisNrTY5Wg==', 'subType': '04'}}, 'timestamp': "
                        "{'$timestamp': {'t': 1, 'i': 1}}, 'lastMod': 1}}");
    ASSERT_INT_EQ(shl_database_type_parse(doc, &t, &st), SHL_CODE_INVALID_NAMESPACE);
    bson_destroy(doc);
}

SHL_TEST(catalog_collection_round_trip)
{
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *doc = shl_test_bson(COLL_DOC), out;
    shl_collection_type_t t;
    shl_chunk_version_t gen;

    ASSERT_INT_EQ(shl_collection_type_parse(doc, &t, &st), 0);
    ASSERT_STR_EQ(t.ns, "test.coll");
    ASSERT(t.has_epoch);
    ASSERT_INT_EQ(t.timestamp.i, 13);
    ASSERT_BSON_EQ(t.key, "{'num': 1}");
    ASSERT(!t.unique && !t.no_balance && t.others == NULL);
    gen = shl_collection_type_generation(&t);
    ASSERT_INT_EQ(gen.timestamp.t, 1626966434);
    ASSERT(!shl_chunk_version_is_set(&gen));
    shl_collection_type_to_bson(&t, &out);
    ASSERT_BSON_EQ(&out, COLL_DOC);
    bson_destroy(&out);
    shl_collection_type_cleanup(&t);
    bson_destroy(doc);

    /* optional fields in IDL order; unmodelled ones kept after them */
    static const char *full =
        "{'_id': 'test.coll', 'lastmodEpoch': {'$oid': '60f989a2430bfdd95d8cfa20'}, "
        "'lastmod': {'$date': '2021-07-22T15:07:14.301Z'}, 'timestamp': {'$timestamp': {'t': 1, "
        "'i': 2}}, 'uuid': {'$binary': {'base64': 'yI6SN66LRS6diby9yqdj2w==', 'subType': '04'}}, "
        "'key': {'a': 'hashed'}, 'defaultCollation': {'locale': 'simple'}, 'unique': true, "
        "'maxChunkSizeBytes': {'$numberLong': '1048576'}, 'defragmentCollection': false, "
        "'enableAutoMerge': true, "
        "'noBalance': true, 'allowMigrations': false, 'permitMigrations': false, 'indexVersion': "
        "{'$timestamp': {'t': 3, 'i': 4}}, 'reshardingFields': {'uuid': 1}}";
    doc = shl_test_bson(full);
    ASSERT_INT_EQ(shl_collection_type_parse(doc, &t, &st), 0);
    ASSERT(t.unique && t.no_balance && t.has_allow_migrations && !t.allow_migrations);
    ASSERT_INT_EQ(t.max_chunk_size_bytes, 1048576);
    shl_collection_type_to_bson(&t, &out);
    ASSERT_BSON_EQ(&out, full);
    bson_destroy(&out);
    shl_collection_type_cleanup(&t);
    bson_destroy(doc);

    doc = shl_test_bson("{'_id': 'test.coll', 'timestamp': {'$timestamp': {'t': 1, 'i': 2}}}");
    ASSERT_INT_EQ(shl_collection_type_parse(doc, &t, &st), SHL_CODE_IDL_FAILED_TO_PARSE);
    ASSERT_STR_EQ(st.reason, "BSON field 'CollectionType.lastmod' is missing but a required field");
    bson_destroy(doc);
    doc = shl_test_bson("{'_id': 'test.coll', 'lastmod': 5}");
    ASSERT_INT_EQ(shl_collection_type_parse(doc, &t, &st), SHL_CODE_TYPE_MISMATCH);
    ASSERT_STR_EQ(st.reason,
                  "BSON field 'CollectionType.lastmod' is the wrong type 'int', expected type "
                  "'date'");
    bson_destroy(doc);
}

static shl_chunk_version_t
coll_generation(void)
{
    bson_oid_t e;
    bson_oid_init_from_string(&e, "60f989a2430bfdd95d8cfa20");
    return shl_chunk_version_make(&e, (shl_ts_t){1626966434, 13}, 0, 0);
}

SHL_TEST(catalog_chunk_round_trip)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_chunk_version_t gen = coll_generation();
    bson_t *doc = shl_test_bson(CHUNK_DOC), out;
    shl_chunk_type_t c, s, copy;

    ASSERT_INT_EQ(shl_chunk_type_parse_config(doc, &gen, &c, &st), 0);
    ASSERT(c.has_id && c.has_uuid && c.jumbo);
    ASSERT_STR_EQ(c.shard, "shard02");
    ASSERT_INT_EQ(c.version.major, 2);
    ASSERT_INT_EQ(c.version.minor, 1);
    ASSERT(shl_chunk_version_same_generation(&c.version, &gen));
    ASSERT_INT_EQ(c.nhistory, 2);
    ASSERT_STR_EQ(c.history[1].shard, "shard01");
    ASSERT_INT_EQ(shl_chunk_type_validate(&c, &st), 0);
    shl_chunk_type_to_config_bson(&c, &out);
    ASSERT_BSON_EQ(&out, CHUNK_DOC);
    bson_destroy(&out);

    /* the shard's cached form */
    shl_chunk_type_to_shard_bson(&c, &out);
    ASSERT_BSON_EQ(&out,
                   "{'_id': {'num': {'$minKey': 1}}, 'max': {'num': 0}, 'shard': 'shard02', "
                   "'lastmod': {'$timestamp': {'t': 2, 'i': 1}}, 'onCurrentShardSince': "
                   "{'$timestamp': {'t': 1626966500, 'i': 1}}, 'history': [{'validAfter': "
                   "{'$timestamp': {'t': 1626966500, 'i': 1}}, 'shard': 'shard02'}, {'validAfter': "
                   "{'$timestamp': {'t': 1626966434, 'i': 13}}, 'shard': 'shard01'}]}");
    ASSERT_INT_EQ(shl_chunk_type_parse_shard(&out, &gen, &s, &st), 0);
    ASSERT_BSON_EQ(s.min, "{'num': {'$minKey': 1}}");
    ASSERT_INT_EQ(s.nhistory, 2);
    shl_chunk_type_cleanup(&s);
    bson_destroy(&out);

    shl_chunk_type_copy(&c, &copy);
    shl_chunk_type_cleanup(&c);
    shl_chunk_type_to_config_bson(&copy, &out);
    ASSERT_BSON_EQ(&out, CHUNK_DOC);
    bson_destroy(&out);
    shl_chunk_type_cleanup(&copy);
    bson_destroy(doc);
}

SHL_TEST(catalog_chunk_errors)
{
    static const struct {
        const char *doc;
        int code;
        const char *reason; /* prefix */
    } cases[] = {
        {"{'_id': {'$oid': '60f989a2430bfdd95d8cfa21'}, 'uuid': {'$binary': {'base64': "
         "'yI6SN66LRS6diby9yqdj2w==', 'subType': '04'}}, 'min': {'a': 5}, 'max': {'a': 1}, "
         "'shard': 's', 'lastmod': {'$timestamp': {'t': 1, 'i': 0}}}",
         SHL_CODE_BAD_VALUE, "min: { a: 5 } should be less than max: { a: 1 }"},
        {"{'_id': {'$oid': '60f989a2430bfdd95d8cfa21'}, 'uuid': {'$binary': {'base64': "
         "'yI6SN66LRS6diby9yqdj2w==', 'subType': '04'}}, 'min': {}, 'max': {'a': 1}, "
         "'shard': 's', 'lastmod': {'$timestamp': {'t': 1, 'i': 0}}}",
         SHL_CODE_BAD_VALUE, "min field is empty"},
        {"{'_id': {'$oid': '60f989a2430bfdd95d8cfa21'}, 'uuid': {'$binary': {'base64': "
         "'yI6SN66LRS6diby9yqdj2w==', 'subType': '04'}}, 'min': {'a': 1}, 'max': {'a': 5}, "
         "'lastmod': {'$timestamp': {'t': 1, 'i': 0}}}",
         SHL_CODE_NO_SUCH_KEY, "Missing expected field \"shard\""},
        {"{'_id': {'$oid': '60f989a2430bfdd95d8cfa21'}, 'uuid': {'$binary': {'base64': "
         "'yI6SN66LRS6diby9yqdj2w==', 'subType': '04'}}, 'min': {'a': 1}, 'max': {'a': 5}, "
         "'shard': 's'}",
         SHL_CODE_NO_SUCH_KEY, "No version found"},
        {"{'_id': {'$oid': '60f989a2430bfdd95d8cfa21'}, 'min': {'a': 1}, 'max': {'a': 5}, "
         "'shard': 's', 'lastmod': {'$timestamp': {'t': 1, 'i': 0}}}",
         SHL_CODE_NO_SUCH_KEY, "Missing expected field \"uuid\""},
        {"{'uuid': {'$binary': {'base64': 'yI6SN66LRS6diby9yqdj2w==', 'subType': '04'}}, "
         "'min': {'a': 1}, 'max': {'a': 5}, 'shard': 's', 'lastmod': {'$timestamp': {'t': 1, "
         "'i': 0}}}",
         SHL_CODE_NO_SUCH_KEY, "Missing expected field \"_id\""},
        {"{'_id': {'$oid': '60f989a2430bfdd95d8cfa21'}, 'uuid': {'$binary': {'base64': "
         "'yI6SN66LRS6diby9yqdj2w==', 'subType': '04'}}, 'min': {'a': 1}, 'max': {'a': 5}, "
         "'shard': 's', 'lastmod': {'$timestamp': {'t': 1, 'i': 0}}, 'onCurrentShardSince': "
         "{'$timestamp': {'t': 9, 'i': 0}}, 'history': [{'validAfter': {'$timestamp': {'t': 8, "
         "'i': 0}}, 'shard': 's'}]}",
         SHL_CODE_BAD_VALUE, "The first `validAfter` in the chunk's history is not consistent"},
        {"{'_id': {'$oid': '60f989a2430bfdd95d8cfa21'}, 'uuid': {'$binary': {'base64': "
         "'yI6SN66LRS6diby9yqdj2w==', 'subType': '04'}}, 'min': {'a': 1}, 'max': {'a': 5}, "
         "'shard': 's', 'lastmod': {'$timestamp': {'t': 1, 'i': 0}}, 'history': [{'shard': 's'}]}",
         SHL_CODE_IDL_FAILED_TO_PARSE,
         "BSON field 'ChunkHistoryBase.validAfter' is missing but a required field"},
        {"{'_id': {'$oid': '60f989a2430bfdd95d8cfa21'}, 'uuid': 'x', 'min': {'a': 1}, "
         "'max': {'a': 5}, 'shard': 's', 'lastmod': {'$timestamp': {'t': 1, 'i': 0}}}",
         SHL_CODE_TYPE_MISMATCH, "BSON field 'ChunkType.uuid' is the wrong type 'string'"},
    };
    shl_chunk_version_t gen = coll_generation();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        shl_status_t st = SHL_STATUS_INIT;
        bson_t *doc = shl_test_bson(cases[i].doc);
        shl_chunk_type_t c;
        int ret = shl_chunk_type_parse_config(doc, &gen, &c, &st);
        bson_destroy(doc);
        if (ret != cases[i].code ||
            strncmp(st.reason, cases[i].reason, strlen(cases[i].reason)) != 0) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu: %d '%s'", i, ret, st.reason);
            return;
        }
        ASSERT(c.min == NULL && c.shard == NULL && c.history == NULL);
    }

    /* validate(): the newest history entry must name the current shard */
    shl_status_t st = SHL_STATUS_INIT;
    bson_t *doc = shl_test_bson(CHUNK_DOC);
    shl_chunk_type_t c;
    ASSERT_INT_EQ(shl_chunk_type_parse_config(doc, &gen, &c, &st), 0);
    bson_free(c.shard);
    c.shard = bson_strdup("shard03");
    ASSERT_INT_EQ(shl_chunk_type_validate(&c, &st), SHL_CODE_BAD_VALUE);
    ASSERT_STR_EQ(st.reason, "Latest entry of chunk history refer to shard shard02 that does not "
                             "match the current shard shard03");
    shl_chunk_type_cleanup(&c);
    bson_destroy(doc);
}
