/*
 * chunk_version_test.c -- versions: wire forms (MongoDB 7.0's and the legacy positional
 * ones), special values, ordering, the bump rules of seeds/000, database versions and the
 * StaleConfig / StaleDbVersion extra info.
 */
#include <string.h>

#include "base/unit_test.h"
#include "sharding/chunk_version.h"

static bson_oid_t
oid(const char *hex)
{
    bson_oid_t o;
    bson_oid_init_from_string(&o, hex);
    return o;
}

static const char *EPOCH = "5f1a2b3c4d5e6f7081920304";

static shl_chunk_version_t
cv(uint32_t t, uint32_t major, uint32_t minor)
{
    bson_oid_t e = oid(EPOCH);
    if (t != 10) {
        e.bytes[11] = (uint8_t)t; /* a different generation has a different epoch */
    }
    return shl_chunk_version_make(&e, (shl_ts_t){t, 1}, major, minor);
}

/* Parse the value of field 'f' of 'json' as a shard version. */
static int
parse_sv(const char *json, shl_shard_version_t *out, shl_status_t *st)
{
    bson_t *doc = shl_test_bson(json);
    bson_iter_t it;
    int ret;
    bson_iter_init_find(&it, doc, "f");
    ret = shl_shard_version_parse(&it, out, st);
    bson_destroy(doc);
    return ret;
}

SHL_TEST(chunk_version_wire_form)
{
    bson_t b = BSON_INITIALIZER;
    shl_chunk_version_t v = cv(10, 3, 4);
    shl_shard_version_t sv = shl_shard_version_make(&v);

    shl_chunk_version_append(&b, "c", &v);
    shl_shard_version_append(&b, "s", &sv);
    sv.has_index_version = true;
    sv.index_version = (shl_ts_t){7, 8};
    shl_shard_version_append(&b, "si", &sv);
    ASSERT_BSON_EQ(
        &b, "{'c': {'e': {'$oid': '5f1a2b3c4d5e6f7081920304'}, "
            "'t': {'$timestamp': {'t': 10, 'i': 1}}, 'v': {'$timestamp': {'t': 3, 'i': 4}}}, "
            "'s': {'e': {'$oid': '5f1a2b3c4d5e6f7081920304'}, "
            "'t': {'$timestamp': {'t': 10, 'i': 1}}, 'v': {'$timestamp': {'t': 3, 'i': 4}}}, "
            "'si': {'e': {'$oid': '5f1a2b3c4d5e6f7081920304'}, "
            "'t': {'$timestamp': {'t': 10, 'i': 1}}, 'v': {'$timestamp': {'t': 3, 'i': 4}}, "
            "'i': {'$timestamp': {'t': 7, 'i': 8}}}}");
    bson_destroy(&b);
}

/* The shard version written as raw bytes is byte-identical to the appended chunk version. */
SHL_TEST(shard_version_raw_form_same_bytes)
{
    shl_chunk_version_t v = cv(0xfffffffeu, 0x80000001u, 7);
    shl_shard_version_t sv = shl_shard_version_make(&v);
    bson_t a = BSON_INITIALIZER, b = BSON_INITIALIZER;

    shl_chunk_version_append(&a, "shardVersion", &v);
    shl_shard_version_append(&b, "shardVersion", &sv);
    ASSERT_INT_EQ((int)a.len, (int)b.len);
    ASSERT(memcmp(bson_get_data(&a), bson_get_data(&b), a.len) == 0);
    bson_destroy(&a);
    bson_destroy(&b);
}

SHL_TEST(chunk_version_special_values)
{
    bson_t b = BSON_INITIALIZER;
    shl_shard_version_t u = shl_shard_version_unsharded(), g = shl_shard_version_ignored();
    shl_chunk_version_t first;
    bson_oid_t e = oid(EPOCH);

    shl_shard_version_append(&b, "u", &u);
    shl_shard_version_append(&b, "g", &g);
    ASSERT_BSON_EQ(&b,
                   "{'u': {'e': {'$oid': '000000000000000000000000'}, "
                   "'t': {'$timestamp': {'t': 0, 'i': 0}}, 'v': {'$timestamp': {'t': 0, 'i': 0}}}, "
                   "'g': {'e': {'$oid': '00000000ffffffffffffffff'}, "
                   "'t': {'$timestamp': {'t': 4294967295, 'i': 4294967295}}, "
                   "'v': {'$timestamp': {'t': 0, 'i': 0}}}}");
    ASSERT(shl_chunk_version_is_unsharded(&u.placement));
    ASSERT(!shl_chunk_version_is_ignored(&u.placement));
    ASSERT(shl_chunk_version_is_ignored(&g.placement));
    ASSERT(!shl_chunk_version_is_set(&u.placement));
    first = shl_chunk_version_first(&e, (shl_ts_t){10, 1});
    ASSERT_INT_EQ(first.major, 1);
    ASSERT_INT_EQ(first.minor, 0);
    ASSERT(shl_chunk_version_is_set(&first));
    bson_destroy(&b);
}

SHL_TEST(shard_version_round_trip)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_shard_version_t in = shl_shard_version_make(&(shl_chunk_version_t){0}), out;
    bson_t b = BSON_INITIALIZER;
    bson_iter_t it;

    in.placement = cv(10, 2, 9);
    in.has_index_version = true;
    in.index_version = (shl_ts_t){5, 6};
    in.has_placement_conflict_time = true;
    in.placement_conflict_time = (shl_ts_t){11, 12};
    shl_shard_version_append(&b, "shardVersion", &in);
    ASSERT(bson_iter_init_find(&it, &b, "shardVersion"));
    ASSERT_INT_EQ(shl_shard_version_parse(&it, &out, &st), 0);
    ASSERT(shl_shard_version_equal(&in, &out));
    ASSERT(out.has_placement_conflict_time);
    ASSERT_INT_EQ(out.placement_conflict_time.t, 11);
    out.has_index_version = false;
    ASSERT(!shl_shard_version_equal(&in, &out));
    bson_destroy(&b);
}

SHL_TEST(shard_version_legacy_positional_forms)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_shard_version_t v;

    /* [Timestamp(major, minor), epoch, timestamp] */
    ASSERT_INT_EQ(
        parse_sv("{'f': [{'$timestamp': {'t': 3, 'i': 4}}, "
                 "{'$oid': '5f1a2b3c4d5e6f7081920304'}, {'$timestamp': {'t': 10, 'i': 1}}]}",
                 &v, &st),
        0);
    shl_chunk_version_t want = cv(10, 3, 4);
    ASSERT(shl_chunk_version_equal(&v.placement, &want));
    /* a 5.0 router's canThrowSSVOnIgnored bool is skipped */
    ASSERT_INT_EQ(parse_sv("{'f': [{'$timestamp': {'t': 3, 'i': 4}}, "
                           "{'$oid': '5f1a2b3c4d5e6f7081920304'}, true, "
                           "{'$timestamp': {'t': 10, 'i': 1}}]}",
                           &v, &st),
                  0);
    ASSERT(shl_chunk_version_equal(&v.placement, &want));
    /* the same positions wrongly encoded as an object */
    ASSERT_INT_EQ(parse_sv("{'f': {'0': {'$timestamp': {'t': 3, 'i': 4}}, "
                           "'1': {'$oid': '5f1a2b3c4d5e6f7081920304'}, "
                           "'2': {'$timestamp': {'t': 10, 'i': 1}}}}",
                           &v, &st),
                  0);
    ASSERT(shl_chunk_version_equal(&v.placement, &want));
    /* UNSHARDED and IGNORED may omit the timestamp */
    ASSERT_INT_EQ(parse_sv("{'f': [{'$timestamp': {'t': 0, 'i': 0}}, "
                           "{'$oid': '000000000000000000000000'}]}",
                           &v, &st),
                  0);
    ASSERT(shl_chunk_version_is_unsharded(&v.placement));
    ASSERT_INT_EQ(parse_sv("{'f': [{'$timestamp': {'t': 0, 'i': 0}}, "
                           "{'$oid': '00000000ffffffffffffffff'}]}",
                           &v, &st),
                  0);
    ASSERT(shl_chunk_version_is_ignored(&v.placement));
    /* ...a real epoch may not */
    ASSERT_INT_EQ(parse_sv("{'f': [{'$timestamp': {'t': 1, 'i': 0}}, "
                           "{'$oid': '5f1a2b3c4d5e6f7081920304'}]}",
                           &v, &st),
                  SHL_CODE_TYPE_MISMATCH);
    ASSERT_STR_EQ(st.reason, "Invalid type missing for version timestamp part.");
    ASSERT_INT_EQ(parse_sv("{'f': []}", &v, &st), SHL_CODE_BAD_VALUE);
    ASSERT_STR_EQ(st.reason, "Unexpected empty version array");
    ASSERT_INT_EQ(parse_sv("{'f': [5]}", &v, &st), SHL_CODE_TYPE_MISMATCH);
    ASSERT_STR_EQ(st.reason, "Invalid type int for version major and minor part.");
}

SHL_TEST(shard_version_parse_errors)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_shard_version_t v;

    ASSERT_INT_EQ(parse_sv("{'f': {'t': {'$timestamp': {'t': 1, 'i': 1}}, "
                           "'v': {'$timestamp': {'t': 1, 'i': 0}}}}",
                           &v, &st),
                  SHL_CODE_IDL_FAILED_TO_PARSE);
    ASSERT_STR_EQ(st.reason, "BSON field 'ShardVersion.e' is missing but a required field");
    ASSERT_INT_EQ(parse_sv("{'f': {'e': 1, 't': {'$timestamp': {'t': 1, 'i': 1}}, "
                           "'v': {'$timestamp': {'t': 1, 'i': 0}}}}",
                           &v, &st),
                  SHL_CODE_TYPE_MISMATCH);
    ASSERT_STR_EQ(st.reason,
                  "BSON field 'ShardVersion.e' is the wrong type 'int', expected type 'objectId'");
    ASSERT_INT_EQ(parse_sv("{'f': 'x'}", &v, &st), SHL_CODE_TYPE_MISMATCH);
    /* unknown fields are ignored (the IDL struct is not strict) */
    ASSERT_INT_EQ(parse_sv("{'f': {'e': {'$oid': '5f1a2b3c4d5e6f7081920304'}, "
                           "'t': {'$timestamp': {'t': 10, 'i': 1}}, "
                           "'v': {'$timestamp': {'t': 1, 'i': 0}}, 'zzz': 1}}",
                           &v, &st),
                  0);
}

SHL_TEST(chunk_version_ordering)
{
    shl_chunk_version_t a = cv(10, 1, 0), b = cv(10, 1, 1), c = cv(10, 2, 0), d = cv(20, 1, 0);
    shl_chunk_version_t a2 = cv(10, 1, 0);

    ASSERT(shl_chunk_version_is_older_than(&a, &b));
    ASSERT(shl_chunk_version_is_older_than(&b, &c));
    ASSERT(!shl_chunk_version_is_older_than(&c, &b));
    ASSERT(!shl_chunk_version_is_older_than(&a, &a2));
    ASSERT(shl_chunk_version_is_older_or_equal(&a, &a2));
    ASSERT(shl_chunk_version_equal(&a, &a2));
    /* a newer generation is newer whatever its placement */
    ASSERT(shl_chunk_version_is_older_than(&c, &d));
    ASSERT(!shl_chunk_version_same_generation(&c, &d));
    ASSERT(shl_chunk_version_same_generation(&a, &c));
    ASSERT(shl_chunk_version_write_compatible(&a, &b));
    ASSERT(!shl_chunk_version_write_compatible(&a, &c));
    ASSERT(!shl_chunk_version_write_compatible(&a, &d));

    char buf[SHL_CHUNK_VERSION_STR_MAX];
    shl_chunk_version_to_string(&b, buf);
    ASSERT_STR_EQ(buf, "1|1||5f1a2b3c4d5e6f7081920304||Timestamp(10, 1)");
}

SHL_TEST(chunk_version_bump_rules)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_chunk_version_t coll = cv(10, 4, 2), out[3], moved, control, merged, refined;
    bson_oid_t e2 = oid("aaaaaaaaaaaaaaaaaaaaaaaa");

    /* split into n pieces: minors mcv+1..mcv+n, same major */
    ASSERT_INT_EQ(shl_chunk_version_after_split(&coll, 3, out, &st), 0);
    for (int i = 0; i < 3; i++) {
        ASSERT_INT_EQ(out[i].major, 4);
        ASSERT_INT_EQ(out[i].minor, 3 + i);
        ASSERT(shl_chunk_version_same_generation(&out[i], &coll));
    }
    /* merge: mcv+1 */
    ASSERT_INT_EQ(shl_chunk_version_after_merge(&coll, &merged, &st), 0);
    ASSERT_INT_EQ(merged.major, 4);
    ASSERT_INT_EQ(merged.minor, 3);
    /* move: the moved chunk Mcv+1|0, the control chunk Mcv+1|1 */
    ASSERT_INT_EQ(shl_chunk_version_after_move(&coll, &moved, &control, &st), 0);
    ASSERT_INT_EQ(moved.major, 5);
    ASSERT_INT_EQ(moved.minor, 0);
    ASSERT_INT_EQ(control.major, 5);
    ASSERT_INT_EQ(control.minor, 1);
    /* refine: new generation, same placement */
    refined = shl_chunk_version_after_refine(&out[1], &e2, (shl_ts_t){30, 0});
    ASSERT_INT_EQ(refined.major, 4);
    ASSERT_INT_EQ(refined.minor, 4);
    ASSERT(!shl_chunk_version_same_generation(&refined, &out[1]));
    ASSERT(shl_chunk_version_is_older_than(&out[1], &refined));

    /* overflow is MongoDB's 31180 / 31181 */
    shl_chunk_version_t top = cv(10, UINT32_MAX, UINT32_MAX);
    ASSERT_INT_EQ(shl_chunk_version_after_split(&top, 1, out, &st), 31181);
    ASSERT_STR_EQ(shl_code_name(st.code), "Location31181");
    ASSERT_INT_EQ(shl_chunk_version_after_move(&top, &moved, &control, &st), 31180);
}

SHL_TEST(database_version_rules)
{
    shl_status_t st = SHL_STATUS_INIT;
    shl_database_version_t a = shl_database_version_new((shl_ts_t){100, 2}), b, f, parsed;
    bson_t doc = BSON_INITIALIZER;
    bson_iter_t it;

    ASSERT_INT_EQ(a.last_mod, 1);
    ASSERT(!shl_database_version_is_fixed(&a));
    b = shl_database_version_after_move_primary(&a);
    ASSERT_INT_EQ(b.last_mod, 2);
    ASSERT(shl_uuid_eq(&a.uuid, &b.uuid));
    ASSERT(shl_database_version_is_older_than(&a, &b));
    ASSERT(!shl_database_version_equal(&a, &b));
    f = shl_database_version_fixed();
    ASSERT(shl_database_version_is_fixed(&f));
    /* a re-created database (later timestamp) is newer whatever its lastMod */
    shl_database_version_t c = shl_database_version_new((shl_ts_t){200, 0});
    ASSERT(shl_database_version_is_older_than(&b, &c));

    shl_database_version_append(&doc, "databaseVersion", &a);
    ASSERT(bson_iter_init_find(&it, &doc, "databaseVersion"));
    ASSERT_INT_EQ(shl_database_version_parse(&it, &parsed, &st), 0);
    ASSERT(shl_database_version_equal(&a, &parsed));
    ASSERT(shl_uuid_eq(&a.uuid, &parsed.uuid));
    bson_destroy(&doc);

    bson_t *bad = shl_test_bson("{'uuid': {'$binary': {'base64': 'AAAAAAAAAAAAAAAAAAAAAA==', "
                                "'subType': '04'}}, 'lastMod': 1}");
    ASSERT_INT_EQ(shl_database_version_parse_doc(bad, &parsed, &st), SHL_CODE_IDL_FAILED_TO_PARSE);
    ASSERT_STR_EQ(st.reason,
                  "BSON field 'DatabaseVersion.timestamp' is missing but a required field");
    bson_destroy(bad);

    /* the wire form: {uuid, timestamp, lastMod} */
    shl_database_version_t z;
    memset(&z, 0, sizeof(z));
    z.timestamp = (shl_ts_t){5, 1};
    z.last_mod = 3;
    bson_t w = BSON_INITIALIZER;
    shl_database_version_append(&w, "v", &z);
    ASSERT_BSON_EQ(&w, "{'v': {'uuid': {'$binary': {'base64': 'AAAAAAAAAAAAAAAAAAAAAA==', "
                       "'subType': '04'}}, 'timestamp': {'$timestamp': {'t': 5, 'i': 1}}, "
                       "'lastMod': 3}}");
    bson_destroy(&w);
}

SHL_TEST(stale_config_extra_info)
{
    shl_status_t st = SHL_STATUS_INIT, parse_st = SHL_STATUS_INIT;
    shl_stale_config_info_t info, back;
    bson_t extra, reply = BSON_INITIALIZER;

    memset(&info, 0, sizeof(info));
    strcpy(info.ns, "test.foo");
    strcpy(info.shard_id, "shard01");
    info.received = shl_shard_version_make(&(shl_chunk_version_t){0});
    info.received.placement = cv(10, 1, 0);
    info.has_wanted = true;
    info.wanted = shl_shard_version_make(&(shl_chunk_version_t){0});
    info.wanted.placement = cv(10, 2, 0);

    ASSERT_INT_EQ(
        shl_status_set_stale_config(&st, &info, "placement version mismatch for %s", info.ns),
        SHL_CODE_STALE_CONFIG);
    ASSERT_STR_EQ(st.reason, "placement version mismatch for test.foo");
    ASSERT(shl_status_extra_get(&st, &extra));
    ASSERT_INT_EQ(shl_stale_config_info_parse(&extra, &back, &parse_st), 0);
    ASSERT_STR_EQ(back.ns, "test.foo");
    ASSERT_STR_EQ(back.shard_id, "shard01");
    ASSERT(shl_shard_version_equal(&back.received, &info.received));
    ASSERT(back.has_wanted && shl_shard_version_equal(&back.wanted, &info.wanted));

    /* the error reply a router receives */
    shl_status_append_reply(&st, &reply);
    ASSERT_BSON_EQ(&reply, "{'ok': 0.0, 'errmsg': 'placement version mismatch for test.foo', "
                           "'code': 13388, 'codeName': 'StaleConfig', 'ns': 'test.foo', "
                           "'vReceived': {'e': {'$oid': '5f1a2b3c4d5e6f7081920304'}, "
                           "'t': {'$timestamp': {'t': 10, 'i': 1}}, "
                           "'v': {'$timestamp': {'t': 1, 'i': 0}}}, "
                           "'vWanted': {'e': {'$oid': '5f1a2b3c4d5e6f7081920304'}, "
                           "'t': {'$timestamp': {'t': 10, 'i': 1}}, "
                           "'v': {'$timestamp': {'t': 2, 'i': 0}}}, 'shardId': 'shard01'}");
    bson_destroy(&reply);

    bson_t *noshard = shl_test_bson("{'ns': 'a.b'}");
    ASSERT_INT_EQ(shl_stale_config_info_parse(noshard, &back, &parse_st), SHL_CODE_NO_SUCH_KEY);
    ASSERT_STR_EQ(parse_st.reason, "The shardId field is missing");
    bson_destroy(noshard);
}

SHL_TEST(stale_db_extra_info)
{
    shl_status_t st = SHL_STATUS_INIT, parse_st = SHL_STATUS_INIT;
    shl_stale_db_info_t info, back;
    bson_t extra;

    memset(&info, 0, sizeof(info));
    strcpy(info.db, "test");
    info.received = shl_database_version_new((shl_ts_t){1, 1});
    ASSERT_INT_EQ(shl_status_set_stale_db(&st, &info, "dbVersion mismatch"),
                  SHL_CODE_STALE_DB_VERSION);
    ASSERT(shl_status_extra_get(&st, &extra));
    ASSERT_INT_EQ(shl_stale_db_info_parse(&extra, &back, &parse_st), 0);
    ASSERT_STR_EQ(back.db, "test");
    ASSERT(!back.has_wanted);
    ASSERT(shl_database_version_equal(&back.received, &info.received));
    ASSERT(bson_has_field(&extra, "vReceived.lastMod"));
    ASSERT(!bson_has_field(&extra, "vWanted"));
}
