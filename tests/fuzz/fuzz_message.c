/*
 * fuzz_message.c -- libFuzzer target for the wire-protocol parser (shl_msg_parse,
 * src/net/message.c). Each input is parsed twice: as raw bytes, and with the header's
 * messageLength (and an OP_MSG checksum, if flagged) patched to be right, so mutations
 * reach the section and document parsing behind those checks.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_walk.h"
#include "net/message.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
put_i32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t
get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/*
 * Parse one message; when it is accepted, check what the parser promises: the body
 * is well-formed BSON (as MongoDB checks it: field names need not be UTF-8) that a
 * command can walk, and an OP_MSG rebuilt from it parses back
 * to the same body.
 */
static void
parse_one(const uint8_t *buf, size_t len)
{
    shl_message_t msg, again;
    shl_status_t st = SHL_STATUS_INIT;
    shl_msg_header_t hdr;

    if (len >= SHL_MSG_HEADER_LEN) {
        shl_msg_header_read(buf, &hdr);
        (void)shl_msg_header_check(&hdr, &st);
    }
    if (shl_msg_parse(buf, len, &msg, &st) == 0) {
        size_t n;
        uint8_t *out;

        /* A sequence's documents sit two levels down in the body (array, document). */
        if (fuzz_bson_check(bson_get_data(&msg.body), msg.body.len, 200 + 2) != FUZZ_BSON_OK ||
            !fuzz_walk_doc(&msg.body)) {
            abort();
        }
        out = shl_msg_build_op_msg(msg.hdr.request_id, 0, msg.flags & SHL_MSG_CHECKSUM_PRESENT,
                                   &msg.body, &n);
        if (shl_msg_parse(out, n, &again, &st) != 0 || !bson_equal(&msg.body, &again.body)) {
            abort();
        }
        shl_msg_cleanup(&again);
        bson_free(out);
    } else if (st.code == 0 || msg.body.len != 5) {
        abort(); /* an error must carry a code and leave an empty body */
    }
    shl_msg_cleanup(&msg);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy;

    /* Raw: the bytes exactly as a peer could send them. */
    parse_one(data, size);

    /* Patched: a consistent length (and checksum) so the mutation lands deeper. */
    if (size < SHL_MSG_HEADER_LEN || size > SHL_MAX_MESSAGE_SIZE) {
        return 0;
    }
    copy = malloc(size);
    memcpy(copy, data, size);
    put_i32(copy, (uint32_t)size);
    if (get_u32(copy + 12) == SHL_OP_MSG && size >= SHL_MSG_HEADER_LEN + 4 + 4 &&
        (get_u32(copy + SHL_MSG_HEADER_LEN) & SHL_MSG_CHECKSUM_PRESENT)) {
        put_i32(copy + size - 4, shl_crc32c(copy, size - 4));
    }
    parse_one(copy, size);
    free(copy);
    return 0;
}
