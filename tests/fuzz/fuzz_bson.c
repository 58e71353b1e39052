/*
 * fuzz_bson.c -- libFuzzer target for BSON validation as the server does it: the
 * input is a document, framed as the body of an OP_MSG and read through
 * shl_msg_parse (the read_doc path: length checks, bson_init_static, bson_validate),
 * then walked with iterators the way a command reads its arguments.
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

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n = SHL_MSG_HEADER_LEN + 4 + 1 + size;
    uint8_t *buf;
    shl_message_t msg;
    shl_status_t st = SHL_STATUS_INIT;
    bson_t view;

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
     * The parser accepts only documents that read back cleanly, returns the bytes it
     * was given, and refuses a document libbson and a strict walk both accept only
     * when it nests too deep. (Bytes after the document are read as further
     * sections, so there only the document's declared length counts.)
     */
    if (shl_msg_parse(buf, n, &msg, &st) == 0) {
        uint32_t dl = get_u32(data);
        if (dl > size || !bson_init_static(&view, data, dl) ||
            !bson_validate(&view, BSON_VALIDATE_NONE, NULL) || !fuzz_walk_doc(&view)) {
            abort();
        }
        if (dl == size && memcmp(bson_get_data(&msg.body), data, size) != 0) {
            abort();
        }
        if (!fuzz_walk_doc(&msg.body)) {
            abort();
        }
    } else if (st.code != SHL_CODE_OVERFLOW && size <= SHL_MAX_BSON_INTERNAL_SIZE &&
               bson_init_static(&view, data, size) &&
               bson_validate(&view, BSON_VALIDATE_NONE, NULL) && fuzz_walk_doc(&view)) {
        abort();
    }
    shl_msg_cleanup(&msg);
    free(buf);
    return 0;
}
