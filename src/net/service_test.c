/*
 * service_test.c -- the command dispatch's last bound on a reply: a command whose reply grew
 * past the internal limit answers BSONObjectTooLarge (docs/limits.md).
 */
#include <string.h>

#include "base/unit_test.h"
#include "net/command.h"
#include "net/message.h"
#include "net/service.h"
#include "net/service_context.h"

/* {big: n}: a reply with a string of n bytes. */
static int
cmd_big(shl_op_ctx_t *op, const bson_t *cmd, bson_t *reply, shl_status_t *st)
{
    bson_iter_t it;
    size_t n;
    char *pad;

    (void)op;
    (void)st;
    n = bson_iter_init_find(&it, cmd, "big") ? (size_t)bson_iter_as_int64(&it) : 0;
    pad = bson_malloc(n + 1);
    memset(pad, 'x', n);
    pad[n] = '\0';
    BSON_APPEND_UTF8(reply, "pad", pad);
    bson_free(pad);
    return 0;
}

static const shl_command_t big_command = {"big", {NULL}, cmd_big, 0, "a reply of n bytes"};

/* Run {big: n} and return the reply's code (0 when ok). */
static int
run_big(shl_service_ctx_t *svc, int64_t n, uint32_t *len)
{
    bson_t *body = BCON_NEW("big", BCON_INT64(n), "$db", BCON_UTF8("admin"));
    bson_t reply;
    bson_iter_t it;
    int code = 0;

    shl_service_run_command(svc, NULL, body, "admin", &reply);
    if (bson_iter_init_find(&it, &reply, "code")) {
        code = bson_iter_as_int64(&it);
    }
    *len = reply.len;
    bson_destroy(&reply);
    bson_destroy(body);
    return code;
}

SHL_TEST(reply_past_the_internal_limit_is_bson_object_too_large)
{
    shl_service_ctx_t svc;
    shl_command_registry_t *reg = shl_command_registry_new();
    uint32_t len = 0;

    shl_service_ctx_init(&svc, SHL_ROLE_STANDALONE);
    shl_command_registry_add(reg, &big_command);
    svc.commands = reg;
    /* A 16 MiB string still fits (the internal limit leaves 16 KiB for the rest). */
    ASSERT_INT_EQ(run_big(&svc, SHL_MAX_BSON_SIZE, &len), 0);
    ASSERT(len > SHL_MAX_BSON_SIZE && len <= SHL_MAX_BSON_INTERNAL_SIZE);
    /* Past it: an error a driver can read, not a 17 MiB message. */
    ASSERT_INT_EQ(run_big(&svc, SHL_MAX_BSON_SIZE + 1024 * 1024, &len), 10334);
    ASSERT(len < 1024);
    shl_service_ctx_cleanup(&svc);
    shl_command_registry_destroy(reg);
}

SHL_TEST(reply_doc_check_leaves_room_for_the_envelope)
{
    shl_status_t st = SHL_STATUS_INIT;

    ASSERT_INT_EQ(shl_msg_reply_doc_check(SHL_MAX_BSON_SIZE, &st), 0);
    ASSERT_INT_EQ(shl_msg_reply_doc_check(SHL_MAX_REPLY_DOC_SIZE, &st), 0);
    ASSERT_INT_EQ(shl_msg_reply_doc_check(SHL_MAX_REPLY_DOC_SIZE + 1, &st), 10334);
    ASSERT(SHL_MAX_REPLY_DOC_SIZE + 1024 < SHL_MAX_BSON_INTERNAL_SIZE);
}
