/*
 * fuzz_bson.c -- libFuzzer target for BSON validation as the server does it: the
 * input is a document, framed as the body of an OP_MSG and read through
 * shl_msg_parse (the read_doc path: length checks and the structure check), judged
 * against an independent oracle of MongoDB's default validation (fuzz_bson_check),
 * then walked with iterators the way a command reads its arguments.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_walk.h"
#include "net/message.h"

/* MongoDB's BSONDepth::kDefaultMaxAllowableDepth: levels below the top document. */
#define MAX_DEPTH 200

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

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n = SHL_MSG_HEADER_LEN + 4 + 1 + size;
    uint8_t *buf;
    shl_message_t msg;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t view;
    int rc;

    if (n > SHL_MAX_MESSAGE_SIZE) {
        return 0;
    }
    buf = malloc(n);
    put_i32(buf, (uint32_t)n);
    put_i32(buf + 4, 1);
    put_i32(buf + 8, 0);
    put_i32(buf + 12, SHL_OP_MSG);
    put_i32(buf + 16, 0);
    buf[20] = 0; /* section kind 0: the body */
    memcpy(buf + 21, data, size);

    /*
     * The parser agrees with the oracle (fuzz_bson_check: MongoDB's structural check, no
     * UTF-8), returns the bytes it was given, and what it accepts reads back cleanly.
     * Bytes after the document are read as further sections, so when there are any,
     * only an acceptance is judged, on the document's declared length.
     */
    rc = shl_msg_parse(buf, n, &msg, &st);
    if (rc == 0) {
        uint32_t dl = get_u32(data);
        if (dl > size || fuzz_bson_check(data, dl, MAX_DEPTH) != FUZZ_BSON_OK ||
            !bson_init_static(&view, data, dl) || !fuzz_walk_doc(&view)) {
            abort();
        }
        if (dl == size && memcmp(bson_get_data(&msg.body), data, size) != 0) {
            abort();
        }
        if (!fuzz_walk_doc(&msg.body)) {
            abort();
        }
    } else if (size <= SHL_MAX_BSON_INTERNAL_SIZE && size >= 4 && get_u32(data) == size) {
        fuzz_bson_verdict_t want = fuzz_bson_check(data, size, MAX_DEPTH);
        if (want == FUZZ_BSON_OK || (want == FUZZ_BSON_TOO_DEEP) != (rc == SHL_CODE_OVERFLOW) ||
            (want == FUZZ_BSON_INVALID) != (rc == SHL_CODE_INVALID_BSON)) {
            abort();
        }
    }
    shl_msg_cleanup(&msg);
    free(buf);
    return 0;
}
