/*
 * message.c -- parse and build wire-protocol messages (see message.h). Every length
 * read from the network is checked against what remains before it is used.
 */
#include "net/message.h"

#include <string.h>

#include "bson/bson_util.h"

#define KIND_BODY 0
#define KIND_SEQUENCE 1
#define MAX_SEQUENCES 8
/* MongoDB's BSONDepth::kDefaultMaxAllowableDepth: nesting levels below the top document. */
#define MAX_BSON_DEPTH 200

static int32_t
rd_i32(const uint8_t *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return (int32_t)v;
}

static uint32_t
rd_u32(const uint8_t *p)
{
    return (uint32_t)rd_i32(p);
}

static void
wr_i32(uint8_t *p, int32_t v)
{
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)u;
    p[1] = (uint8_t)(u >> 8);
    p[2] = (uint8_t)(u >> 16);
    p[3] = (uint8_t)(u >> 24);
}

void
shl_msg_header_read(const uint8_t *buf, shl_msg_header_t *hdr)
{
    hdr->length = rd_i32(buf);
    hdr->request_id = rd_i32(buf + 4);
    hdr->response_to = rd_i32(buf + 8);
    hdr->opcode = rd_i32(buf + 12);
}

int
shl_msg_header_check(const shl_msg_header_t *hdr, shl_status_t *st)
{
    if (hdr->length <= SHL_MSG_HEADER_LEN || hdr->length > SHL_MAX_MESSAGE_SIZE) {
        return shl_status_set(st, SHL_CODE_PROTOCOL_ERROR,
                              "recv(): message msgLen %d is invalid. Min %d Max: %d", hdr->length,
                              SHL_MSG_HEADER_LEN + 1, SHL_MAX_MESSAGE_SIZE);
    }
    return 0;
}

/* One open document while checking structure; 'end' is one past its last byte. */
typedef struct frame {
    size_t end;
    bool code_w_scope; /* the code-with-scope element around the next frame's scope */
} frame_t;

/*
 * Check the field name at p[*off, end): NUL-terminated. Its bytes are not checked as
 * UTF-8: MongoDB's check of incoming messages (validateBSON's default mode) is
 * structural only and accepts any bytes in field names and strings; UTF-8 is checked
 * only by its "full" mode (validate's checkBSONConformance). So every reader of a
 * request must cope with names that are not UTF-8 (see docs/design/utf8.md). On
 * success *off is just past the NUL.
 */
static int
check_key(const uint8_t *p, size_t end, size_t *off, shl_status_t *st)
{
    int ret = 0;
    const uint8_t *nul = memchr(p + *off, '\0', end - *off);

    if (nul == NULL) {
        SHL_FAIL(st, SHL_CODE_INVALID_BSON, "BSON field name is not terminated");
    }
    *off = (size_t)(nul - p) + 1;
done:
    return ret;
}

/*
 * Check the structure of the document of 'n' bytes at p without recursion: every
 * element's size stays inside its document, every document ends with its EOO byte
 * exactly at its declared length, field names and strings are NUL-terminated, types
 * are known, and nesting is at most MAX_BSON_DEPTH deep: MongoDB's default validation
 * of incoming BSON, plus what libbson's iterators rely on beyond it (an old-binary
 * element's inner length), so no bson_validate pass follows (it cost a tenth of a
 * point find's instructions). libbson's bson_validate (1.23) recurses once per level,
 * so a deep document overflowed a connection thread's stack; it missed a nested
 * document that lacks its EOO byte when another element followed, stops checking at
 * the first code-with-scope element, and refuses field names that are not UTF-8,
 * which MongoDB accepts. Errors: InvalidBSON, Overflow.
 */
static int
check_structure(const uint8_t *p, size_t n, shl_status_t *st)
{
    int ret = 0;
    frame_t frames[MAX_BSON_DEPTH + 1];
    int depth = 0;
    size_t off = 4, end, len;
    const uint8_t *nul;

    frames[0].end = n;
    frames[0].code_w_scope = false;
    for (;;) {
        uint8_t type;

        end = frames[depth].end;
        if (off >= end) {
            SHL_FAIL(st, SHL_CODE_INVALID_BSON, "BSON size is larger than buffer size");
        }
        type = p[off++];
        if (type == BSON_TYPE_EOD) {
            if (off != end) {
                SHL_FAIL(st, SHL_CODE_INVALID_BSON, "incorrect BSON length");
            }
            if (depth == 0) {
                break;
            }
            depth--;
            if (frames[depth].code_w_scope) {
                /* The scope must end exactly where the code-with-scope element does. */
                if (off != frames[depth].end) {
                    SHL_FAIL(st, SHL_CODE_INVALID_BSON, "incorrect BSON length");
                }
                depth--;
            }
            continue;
        }
        SHL_ERR(check_key(p, end, &off, st));
        switch (type) {
        case BSON_TYPE_UNDEFINED:
        case BSON_TYPE_NULL:
        case BSON_TYPE_MINKEY:
        case BSON_TYPE_MAXKEY:
            len = 0;
            break;
        case BSON_TYPE_BOOL:
            if (off < end && p[off] > 1) {
                SHL_FAIL(st, SHL_CODE_INVALID_BSON, "BSON bool is neither false nor true");
            }
            len = 1;
            break;
        case BSON_TYPE_INT32:
            len = 4;
            break;
        case BSON_TYPE_DOUBLE:
        case BSON_TYPE_DATE_TIME:
        case BSON_TYPE_TIMESTAMP:
        case BSON_TYPE_INT64:
            len = 8;
            break;
        case BSON_TYPE_OID:
            len = 12;
            break;
        case BSON_TYPE_DECIMAL128:
            len = 16;
            break;
        case BSON_TYPE_UTF8:
        case BSON_TYPE_CODE:
        case BSON_TYPE_SYMBOL:
        case BSON_TYPE_DBPOINTER:
            if (end - off < 4) {
                SHL_FAIL(st, SHL_CODE_INVALID_BSON, "BSON size is larger than buffer size");
            }
            len = rd_u32(p + off);
            if (len == 0 || len > end - off - 4 || p[off + 4 + len - 1] != '\0') {
                SHL_FAIL(st, SHL_CODE_INVALID_BSON, "Not null terminated string");
            }
            len += 4 + (type == BSON_TYPE_DBPOINTER ? 12 : 0);
            break;
        case BSON_TYPE_BINARY:
            if (end - off < 5) {
                SHL_FAIL(st, SHL_CODE_INVALID_BSON, "BSON size is larger than buffer size");
            }
            len = rd_u32(p + off);
            /* Subtype 2 (old binary) repeats the length inside the data. */
            if (p[off + 4] == BSON_SUBTYPE_BINARY_DEPRECATED &&
                (len < 4 || len > end - off - 5 || (size_t)rd_u32(p + off + 5) + 4 != len)) {
                SHL_FAIL(st, SHL_CODE_INVALID_BSON, "invalid BSON binary subtype 2 length");
            }
            len += 5;
            break;
        case BSON_TYPE_REGEX:
            /* Two C strings: the pattern and the options. */
            nul = memchr(p + off, '\0', end - off);
            if (nul != NULL) {
                nul = memchr(nul + 1, '\0', end - (size_t)(nul + 1 - p));
            }
            if (nul == NULL) {
                SHL_FAIL(st, SHL_CODE_INVALID_BSON, "BSON regex is not terminated");
            }
            len = (size_t)(nul + 1 - (p + off));
            break;
        case BSON_TYPE_DOCUMENT:
        case BSON_TYPE_ARRAY:
        case BSON_TYPE_CODEWSCOPE: {
            bool cws = type == BSON_TYPE_CODEWSCOPE;

            if (end - off < 4) {
                SHL_FAIL(st, SHL_CODE_INVALID_BSON, "BSON size is larger than buffer size");
            }
            len = rd_u32(p + off);
            if (len < (cws ? 14u : 5u) || len >= end - off) {
                SHL_FAIL(st, SHL_CODE_INVALID_BSON, "Nested BSON object has an invalid size");
            }
            /* As in MongoDB, code with scope counts two levels: the element and its scope. */
            if (depth + (cws ? 2 : 1) > MAX_BSON_DEPTH) {
                SHL_FAIL(st, SHL_CODE_OVERFLOW, "BSONObj exceeded maximum nested object depth: %d",
                         MAX_BSON_DEPTH);
            }
            if (cws) {
                /* int32 total size, string code, document scope filling the rest. */
                size_t clen = rd_u32(p + off + 4);
                frames[++depth] = (frame_t){.end = off + len, .code_w_scope = true};
                if (clen == 0 || clen > len - 8 - 5 || p[off + 8 + clen - 1] != '\0') {
                    SHL_FAIL(st, SHL_CODE_INVALID_BSON, "Not null terminated string");
                }
                off += 8 + clen;
                len = rd_u32(p + off);
                if (off + len != frames[depth].end) {
                    SHL_FAIL(st, SHL_CODE_INVALID_BSON, "incorrect BSON length");
                }
            }
            frames[++depth] = (frame_t){.end = off + len, .code_w_scope = false};
            off += 4;
            continue;
        }
        default:
            SHL_FAIL(st, SHL_CODE_INVALID_BSON, "Unrecognized BSON type %u", (unsigned)type);
        }
        if (len >= end - off) {
            SHL_FAIL(st, SHL_CODE_INVALID_BSON, "BSON size is larger than buffer size");
        }
        off += len;
    }
done:
    return ret;
}

/*
 * Read one BSON document at p (with 'avail' bytes left): checks its declared
 * length, its size limit and its structure. On success *doclen is its length and
 * 'view' is a static view of it.
 */
static int
read_doc(const uint8_t *p, size_t avail, uint32_t max_size, bson_t *view, uint32_t *doclen,
         shl_status_t *st)
{
    int ret = 0;
    int32_t n;

    if (avail < 5) {
        SHL_FAIL(st, SHL_CODE_INVALID_BSON, "BSON document truncated: %zu bytes left", avail);
    }
    n = rd_i32(p);
    if (n < 5 || (size_t)n > avail) {
        SHL_FAIL(st, SHL_CODE_INVALID_BSON,
                 "BSON document length %d is invalid (%zu bytes available)", n, avail);
    }
    if ((uint32_t)n > max_size) {
        SHL_FAIL(st, SHL_CODE_BSON_OBJECT_TOO_LARGE,
                 "BSONObj size: %d (0x%X) is invalid. Size must be between 0 and %u(16MB)", n,
                 (unsigned)n, (unsigned)SHL_MAX_BSON_SIZE);
    }
    SHL_ERR(check_structure(p, (size_t)n, st));
    if (!bson_init_static(view, p, (size_t)n)) {
        SHL_FAIL(st, SHL_CODE_INVALID_BSON, "invalid BSON document");
    }
    *doclen = (uint32_t)n;
done:
    return ret;
}

typedef struct sequence {
    char ident[64];
    const uint8_t *docs;
    size_t len;
} sequence_t;

static bool
body_has_field(const bson_t *body, const char *name)
{
    bson_iter_t it;
    return shl_bson_iter_find_key(&it, body, name);
}

/* Append each document of a sequence as an array element named 'ident' in 'out'. */
static int
append_sequence(bson_t *out, const sequence_t *seq, shl_status_t *st)
{
    int ret = 0;
    bson_t arr, doc;
    size_t off = 0;
    uint32_t i = 0, dl = 0;
    char idx[16];
    const char *key;

    bson_append_array_begin(out, seq->ident, -1, &arr);
    while (off < seq->len) {
        SHL_ERR(
            read_doc(seq->docs + off, seq->len - off, SHL_MAX_BSON_INTERNAL_SIZE, &doc, &dl, st));
        bson_uint32_to_string(i++, &key, idx, sizeof(idx));
        bson_append_document(&arr, key, -1, &doc);
        off += dl;
    }
done:
    bson_append_array_end(out, &arr);
    return ret;
}

static int
parse_op_msg(const uint8_t *buf, size_t len, bool borrow, shl_message_t *msg, shl_status_t *st)
{
    int ret = 0;
    size_t off = SHL_MSG_HEADER_LEN + 4, end = len;
    bson_t body_view;
    bool have_body = false;
    sequence_t seqs[MAX_SEQUENCES];
    int nseq = 0;
    uint32_t dl;

    if (len < SHL_MSG_HEADER_LEN + 5) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "OP_MSG too short");
    }
    msg->flags = (uint32_t)rd_i32(buf + SHL_MSG_HEADER_LEN);
    /* Bits 0-15 are "required": a receiver must refuse ones it does not know. */
    if ((msg->flags & 0xFFFFu & ~(SHL_MSG_CHECKSUM_PRESENT | SHL_MSG_MORE_TO_COME)) != 0) {
        SHL_FAIL(st, SHL_CODE_ILLEGAL_OP_MSG_FLAG, "Message contains illegal flags value: Flag %u",
                 (unsigned)msg->flags);
    }
    if (msg->flags & SHL_MSG_CHECKSUM_PRESENT) {
        if (len < SHL_MSG_HEADER_LEN + 4 + 1 + 4) {
            SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "OP_MSG too short for a checksum");
        }
        end = len - 4;
        if ((uint32_t)rd_i32(buf + end) != shl_crc32c(buf, end)) {
            SHL_FAIL(st, SHL_CODE_CHECKSUM_MISMATCH, "Invalid checksum");
        }
    }
    while (off < end) {
        uint8_t kind = buf[off++];
        if (kind == KIND_BODY) {
            if (have_body) {
                SHL_FAIL(st, 40430, "Multiple body sections in message");
            }
            SHL_ERR(
                read_doc(buf + off, end - off, SHL_MAX_BSON_INTERNAL_SIZE, &body_view, &dl, st));
            have_body = true;
            off += dl;
        } else if (kind == KIND_SEQUENCE) {
            int32_t slen;
            const uint8_t *p, *nul;
            if (end - off < 4) {
                SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "truncated document sequence");
            }
            slen = rd_i32(buf + off);
            if (slen < 5 || (size_t)slen > end - off) {
                SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "invalid document sequence size %d", slen);
            }
            p = buf + off + 4;
            nul = memchr(p, '\0', (size_t)slen - 4);
            /* The identifier becomes a field name of the body: like any field name it
             * may hold bytes that are not UTF-8 (MongoDB reads it as a C string). */
            if (nul == NULL || nul == p || (size_t)(nul - p) >= sizeof(seqs[0].ident)) {
                SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "invalid document sequence identifier");
            }
            if (nseq == MAX_SEQUENCES) {
                SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "too many document sequences");
            }
            memcpy(seqs[nseq].ident, p, (size_t)(nul - p) + 1);
            for (int i = 0; i < nseq; i++) {
                if (strcmp(seqs[i].ident, seqs[nseq].ident) == 0) {
                    SHL_FAIL(st, 40431, "Duplicate document sequence: %s", seqs[i].ident);
                }
            }
            seqs[nseq].docs = nul + 1;
            seqs[nseq].len = (size_t)slen - 4 - (size_t)(nul + 1 - p);
            nseq++;
            off += (size_t)slen;
        } else {
            SHL_FAIL(st, 40432, "Unknown section kind %u", (unsigned)kind);
        }
    }
    if (!have_body) {
        SHL_FAIL(st, 40587, "OP_MSG messages must have a body");
    }
    /*
     * The body's bytes are copied whole and the sequences appended after them:
     * re-appending each element through libbson would also make it complain on
     * stderr about arrays whose keys are not "0", "1", ... (found by fuzz_message).
     */
    bson_destroy(&msg->body);
    if (borrow && nseq == 0) {
        /* The usual request: no sequence to merge in, so the body is a view of the
         * caller's buffer (no allocation and copy per request). */
        bson_init_static(&msg->body, bson_get_data(&body_view), body_view.len);
    } else {
        bson_copy_to(&body_view, &msg->body);
    }
    for (int i = 0; i < nseq; i++) {
        if (body_has_field(&body_view, seqs[i].ident)) {
            SHL_FAIL(st, 40433, "Duplicate field between body and document sequence: %s",
                     seqs[i].ident);
        }
        SHL_ERR(append_sequence(&msg->body, &seqs[i], st));
    }
done:
    return ret;
}

static int
parse_op_query(const uint8_t *buf, size_t len, shl_message_t *msg, shl_status_t *st)
{
    int ret = 0;
    size_t off = SHL_MSG_HEADER_LEN + 4;
    const uint8_t *nul;
    bson_t q;
    uint32_t dl;

    if (len < off + 1) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "OP_QUERY too short");
    }
    nul = memchr(buf + off, '\0', len - off);
    if (nul == NULL || (size_t)(nul - (buf + off)) >= sizeof(msg->legacy_ns)) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "OP_QUERY namespace invalid");
    }
    memcpy(msg->legacy_ns, buf + off, (size_t)(nul - (buf + off)) + 1);
    off = (size_t)(nul - buf) + 1 + 8; /* numberToSkip, numberToReturn */
    if (off > len) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "OP_QUERY too short");
    }
    SHL_ERR(read_doc(buf + off, len - off, SHL_MAX_BSON_INTERNAL_SIZE, &q, &dl, st));
    msg->legacy = true;
    bson_destroy(&msg->body);
    bson_copy_to(&q, &msg->body);
done:
    return ret;
}

static int
parse(const uint8_t *buf, size_t len, bool borrow, shl_message_t *msg, shl_status_t *st)
{
    int ret = 0;

    memset(msg, 0, sizeof(*msg));
    bson_init(&msg->body);
    if (len < SHL_MSG_HEADER_LEN) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "message shorter than its header");
    }
    shl_msg_header_read(buf, &msg->hdr);
    if ((size_t)msg->hdr.length != len) {
        SHL_FAIL(st, SHL_CODE_PROTOCOL_ERROR, "message length %d does not match %zu bytes read",
                 msg->hdr.length, len);
    }
    switch (msg->hdr.opcode) {
    case SHL_OP_MSG:
        ret = parse_op_msg(buf, len, borrow, msg, st);
        break;
    case SHL_OP_QUERY:
        ret = parse_op_query(buf, len, msg, st);
        break;
    default:
        ret = shl_status_set(st, SHL_CODE_PROTOCOL_ERROR, "Unsupported opcode %d", msg->hdr.opcode);
        break;
    }
done:
    if (ret != 0) {
        /* Not bson_reinit: a borrowed body is a read-only view. */
        bson_destroy(&msg->body);
        bson_init(&msg->body);
    }
    return ret;
}

int
shl_msg_parse(const uint8_t *buf, size_t len, shl_message_t *msg, shl_status_t *st)
{
    return parse(buf, len, false, msg, st);
}

int
shl_msg_parse_view(const uint8_t *buf, size_t len, shl_message_t *msg, shl_status_t *st)
{
    return parse(buf, len, true, msg, st);
}

void
shl_msg_cleanup(shl_message_t *msg)
{
    bson_destroy(&msg->body);
}

static void
write_header(uint8_t *p, size_t len, int32_t request_id, int32_t response_to, int32_t opcode)
{
    wr_i32(p, (int32_t)len);
    wr_i32(p + 4, request_id);
    wr_i32(p + 8, response_to);
    wr_i32(p + 12, opcode);
}

size_t
shl_msg_reply_prefix(uint8_t out[SHL_MSG_REPLY_PREFIX_MAX], int32_t opcode, int32_t request_id,
                     int32_t response_to, uint32_t flags, size_t body_len)
{
    size_t n;

    if (opcode == SHL_OP_REPLY) {
        n = SHL_MSG_HEADER_LEN + 20;
        memset(out + SHL_MSG_HEADER_LEN, 0, 20);
        /* responseFlags 8 = AwaitCapable, as MongoDB sets; cursorID 0, startingFrom 0. */
        wr_i32(out + SHL_MSG_HEADER_LEN, 8);
        wr_i32(out + SHL_MSG_HEADER_LEN + 16, 1);
    } else {
        SHL_INVARIANT(opcode == SHL_OP_MSG && !(flags & SHL_MSG_CHECKSUM_PRESENT));
        n = SHL_MSG_HEADER_LEN + 5;
        wr_i32(out + SHL_MSG_HEADER_LEN, (int32_t)flags);
        out[SHL_MSG_HEADER_LEN + 4] = KIND_BODY;
    }
    write_header(out, n + body_len, request_id, response_to, opcode);
    return n;
}

uint8_t *
shl_msg_build_op_msg(int32_t request_id, int32_t response_to, uint32_t flags, const bson_t *body,
                     size_t *len)
{
    bool checksum = (flags & SHL_MSG_CHECKSUM_PRESENT) != 0;
    size_t n = SHL_MSG_HEADER_LEN + 4 + 1 + body->len + (checksum ? 4 : 0);
    uint8_t *buf = bson_malloc(n);
    size_t pre = shl_msg_reply_prefix(buf, SHL_OP_MSG, request_id, response_to,
                                      flags & ~SHL_MSG_CHECKSUM_PRESENT, n - 5 - SHL_MSG_HEADER_LEN);

    /* The prefix never carries the checksum bit: it is set here, with the checksum. */
    wr_i32(buf + SHL_MSG_HEADER_LEN, (int32_t)flags);
    memcpy(buf + pre, bson_get_data(body), body->len);
    if (checksum) {
        wr_i32(buf + n - 4, (int32_t)shl_crc32c(buf, n - 4));
    }
    *len = n;
    return buf;
}

uint8_t *
shl_msg_build_op_msg_db(int32_t request_id, const bson_t *cmd, const uint8_t *key, const char *db,
                        size_t *len)
{
    static const char key_name[] = "clientOperationKey";
    size_t dblen = strlen(db);
    /* The key element: type, name with its NUL, binary length, subtype, 16 bytes. */
    size_t key_len = key != NULL ? 1 + sizeof(key_name) + 4 + 1 + 16 : 0;
    /* cmd without its EOO, the key, then type, "$db\0", string length, db with its NUL, EOO. */
    size_t body_len = cmd->len + key_len + 1 + 4 + 4 + dblen + 1;
    size_t n = SHL_MSG_HEADER_LEN + 4 + 1 + body_len;
    uint8_t *buf = bson_malloc(n);
    uint8_t *p = buf + SHL_MSG_HEADER_LEN + 5;

    write_header(buf, n, request_id, 0, SHL_OP_MSG);
    wr_i32(buf + SHL_MSG_HEADER_LEN, 0);
    buf[SHL_MSG_HEADER_LEN + 4] = KIND_BODY;
    wr_i32(p, (int32_t)body_len);
    memcpy(p + 4, bson_get_data(cmd) + 4, cmd->len - 5);
    p += cmd->len - 1;
    if (key != NULL) {
        *p++ = BSON_TYPE_BINARY;
        memcpy(p, key_name, sizeof(key_name));
        p += sizeof(key_name);
        wr_i32(p, 16);
        p += 4;
        *p++ = BSON_SUBTYPE_UUID;
        memcpy(p, key, 16);
        p += 16;
    }
    *p++ = BSON_TYPE_UTF8;
    memcpy(p, "$db", 4);
    p += 4;
    wr_i32(p, (int32_t)(dblen + 1));
    p += 4;
    memcpy(p, db, dblen + 1);
    p += dblen + 1;
    *p++ = 0;
    SHL_INVARIANT(p == buf + n);
    *len = n;
    return buf;
}

uint8_t *
shl_msg_build_op_reply(int32_t request_id, int32_t response_to, const bson_t *doc, size_t *len)
{
    size_t n = SHL_MSG_HEADER_LEN + 20 + doc->len;
    uint8_t *buf = bson_malloc(n);
    size_t pre = shl_msg_reply_prefix(buf, SHL_OP_REPLY, request_id, response_to, 0, doc->len);

    memcpy(buf + pre, bson_get_data(doc), doc->len);
    *len = n;
    return buf;
}

int
shl_msg_check_bson(const uint8_t *p, size_t n, shl_status_t *st)
{
    bson_t view;
    int ret = 0;

    if (n < 5 || rd_i32(p) != (int32_t)n) {
        SHL_FAIL(st, SHL_CODE_INVALID_BSON, "BSON document length is invalid");
    }
    SHL_ERR(check_structure(p, n, st));
    if (!bson_init_static(&view, p, n)) {
        SHL_FAIL(st, SHL_CODE_INVALID_BSON, "invalid BSON document");
    }
done:
    return ret;
}

int
shl_msg_reply_doc_check(size_t len, shl_status_t *st)
{
    if (len > SHL_MAX_REPLY_DOC_SIZE) {
        return shl_status_set(st, SHL_CODE_BSON_OBJECT_TOO_LARGE,
                              "BSONObj size: %zu (0x%zX) is invalid. Size must be between 0 and "
                              "%u(16MB): a result document larger than a reply can carry",
                              len, len, (unsigned)SHL_MAX_BSON_INTERNAL_SIZE);
    }
    return 0;
}

int
shl_msg_reply_check(const bson_t *reply, shl_status_t *st)
{
    if (reply->len > SHL_MAX_BSON_INTERNAL_SIZE) {
        return shl_status_set(st, SHL_CODE_BSON_OBJECT_TOO_LARGE,
                              "BSONObj size: %u (0x%X) is invalid. Size must be between 0 and "
                              "%u(16MB): the reply is larger than a reply may be",
                              reply->len, reply->len, (unsigned)SHL_MAX_BSON_INTERNAL_SIZE);
    }
    return 0;
}
