/*
 * message.h -- MongoDB wire protocol: the 16-byte header, OP_MSG (flag bits, body
 * and document-sequence sections, CRC-32C checksum), the legacy OP_QUERY handshake
 * and OP_REPLY. Parsing validates every BSON document it returns.
 */
#ifndef SHL_NET_MESSAGE_H
#define SHL_NET_MESSAGE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define SHL_OP_REPLY 1
#define SHL_OP_UPDATE 2001 /* legacy writes and reads: removed in MongoDB 6.0 */
#define SHL_OP_INSERT 2002
#define SHL_OP_QUERY 2004
#define SHL_OP_GET_MORE 2005
#define SHL_OP_DELETE 2006
#define SHL_OP_KILL_CURSORS 2007
#define SHL_OP_COMPRESSED 2012
#define SHL_OP_MSG 2013

#define SHL_MSG_HEADER_LEN 16
#define SHL_MAX_BSON_SIZE (16 * 1024 * 1024)
/* A command may exceed a user document's limit by this much (MongoDB's internal max). */
#define SHL_MAX_BSON_INTERNAL_SIZE (SHL_MAX_BSON_SIZE + 16 * 1024)
/* The largest document a cursor batch carries: the internal limit less room for the reply
 * around it (cursor fields, ns, ok, $clusterTime, ...). Aggregation may build larger
 * documents inside a pipeline, as MongoDB's may; one that leaves it fails. */
#define SHL_MAX_REPLY_DOC_SIZE (SHL_MAX_BSON_INTERNAL_SIZE - 4 * 1024)
#define SHL_MAX_MESSAGE_SIZE 48000000
#define SHL_MAX_WRITE_BATCH 100000

#define SHL_MSG_CHECKSUM_PRESENT (1u << 0)
#define SHL_MSG_MORE_TO_COME (1u << 1)
#define SHL_MSG_EXHAUST_ALLOWED (1u << 16)

typedef struct shl_msg_header {
    int32_t length;
    int32_t request_id;
    int32_t response_to;
    int32_t opcode;
} shl_msg_header_t;

/* A parsed request or reply. */
typedef struct shl_message {
    shl_msg_header_t hdr;
    uint32_t flags;      /* OP_MSG flagBits (0 for OP_QUERY) */
    bool legacy;         /* arrived as OP_QUERY */
    char legacy_ns[256]; /* OP_QUERY fullCollectionName */
    bson_t body;         /* the command, document sequences merged in as arrays; owned */
} shl_message_t;

/* shl_msg_header_read -- decode a header from 16 bytes. */
void shl_msg_header_read(const uint8_t *buf, shl_msg_header_t *hdr);

/*
 * shl_msg_header_check --
 *     Whether a header's length is acceptable (16 < length <= 48000000). Errors:
 *     ProtocolError (the connection must be closed).
 */
int shl_msg_header_check(const shl_msg_header_t *hdr, shl_status_t *st);

/*
 * shl_msg_parse --
 *     Parse a whole message ('buf' holds 'len' bytes, header included). OP_MSG and
 *     OP_QUERY are understood; OP_REPLY is not a request. msg->body is always
 *     initialised (empty on error) and must be released with shl_msg_cleanup. Documents
 *     pass shl_msg_check_bson: as in MongoDB, their field names and strings (and document
 *     sequence identifiers) need not be UTF-8. Errors (MongoDB's): ChecksumMismatch,
 * IllegalOpMsgFlag, InvalidBSON, BSONObjectTooLarge, Location40430..40433 (section structure),
 * ProtocolError, UnsupportedOpQueryCommand is left to the caller. Errors in
 *     SHL_CAT_CONNECTION_FATAL_MESSAGE_ERROR or ProtocolError mean: close the connection.
 */
int shl_msg_parse(const uint8_t *buf, size_t len, shl_message_t *msg, shl_status_t *st);

/*
 * shl_msg_parse_view --
 *     shl_msg_parse, except that an OP_MSG without document sequences gets a body that is
 *     a read-only view of 'buf' (no copy): it is valid only while 'buf' is unchanged. The
 *     server's request path, whose buffer outlives the request.
 */
int shl_msg_parse_view(const uint8_t *buf, size_t len, shl_message_t *msg, shl_status_t *st);

/* shl_msg_cleanup -- release msg->body. */
void shl_msg_cleanup(shl_message_t *msg);

/*
 * shl_msg_build_op_msg --
 *     A complete OP_MSG with one body section. Returns a buffer the caller frees
 *     with bson_free; *len receives its size.
 */
uint8_t *shl_msg_build_op_msg(int32_t request_id, int32_t response_to, uint32_t flags,
                              const bson_t *body, size_t *len);

/*
 * shl_msg_build_op_msg_db --
 *     shl_msg_build_op_msg(request_id, 0, 0, body) for the body 'cmd' followed by
 *     `clientOperationKey: UUID(key)` when 'key' (16 bytes) is not NULL, then `$db: db`,
 *     written straight into the message (no bson_t in between). 'cmd' must hold neither
 *     field. The body is *len - SHL_MSG_HEADER_LEN - 5 bytes long.
 */
uint8_t *shl_msg_build_op_msg_db(int32_t request_id, const bson_t *cmd, const uint8_t *key,
                                 const char *db, size_t *len);

/* The most bytes shl_msg_reply_prefix writes (OP_REPLY's header and fixed fields). */
#define SHL_MSG_REPLY_PREFIX_MAX (SHL_MSG_HEADER_LEN + 20)

/*
 * shl_msg_reply_prefix --
 *     The bytes that come before a body document of 'body_len' bytes in an OP_MSG
 *     (opcode SHL_OP_MSG: header, 'flags', section kind 0) or an OP_REPLY (SHL_OP_REPLY:
 *     header, responseFlags AwaitCapable, cursorID 0, startingFrom 0, numberReturned 1;
 *     'flags' unused), written into 'out'; returns their count. The message is the prefix
 *     followed by the document, so a reply goes out in one writev without being copied.
 *     'flags' must not ask for a checksum (it would follow the document).
 */
size_t shl_msg_reply_prefix(uint8_t out[SHL_MSG_REPLY_PREFIX_MAX], int32_t opcode,
                            int32_t request_id, int32_t response_to, uint32_t flags,
                            size_t body_len);

/*
 * shl_msg_build_op_reply --
 *     A complete OP_REPLY carrying one document (the legacy handshake's answer).
 */
uint8_t *shl_msg_build_op_reply(int32_t request_id, int32_t response_to, const bson_t *doc,
                                size_t *len);

/* shl_crc32c -- CRC-32C (Castagnoli) of 'len' bytes, as OP_MSG checksums use. */
uint32_t shl_crc32c(const uint8_t *buf, size_t len);

/*
 * shl_msg_check_bson --
 *     The check every document received from the network passes before libbson reads it:
 *     the non-recursive structure check (sizes, EOO bytes, NUL-terminated field names and
 *     strings, known types, depth <= 200), MongoDB's default validation. Like MongoDB's, it
 *     does not check UTF-8: field names and strings may hold any bytes but NUL. For code
 *     (the validate command, fuzz targets, tests) that builds a bson_t over untrusted bytes
 *     without a message around them. Errors: InvalidBSON, Overflow.
 */
int shl_msg_check_bson(const uint8_t *p, size_t n, shl_status_t *st);

/*
 * shl_msg_reply_doc_check --
 *     Whether a document of 'len' bytes may go into a reply's cursor batch
 *     (SHL_MAX_REPLY_DOC_SIZE). Errors: BSONObjectTooLarge, as MongoDB fails a result document
 *     it cannot serialise.
 */
int shl_msg_reply_doc_check(size_t len, shl_status_t *st);

/*
 * shl_msg_reply_check --
 *     Whether 'reply' fits in a reply (SHL_MAX_BSON_INTERNAL_SIZE): the last check before a
 *     reply is sent, so a command whose reply grew past the limit answers BSONObjectTooLarge
 *     instead of a message a driver refuses. Errors: BSONObjectTooLarge.
 */
int shl_msg_reply_check(const bson_t *reply, shl_status_t *st);

#endif
