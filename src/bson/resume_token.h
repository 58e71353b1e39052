/*
 * resume_token.h -- change stream resume tokens in MongoDB's format: {_data: "<hex>"}, the
 * upper-case hex of a KeyString (MongoDB's V1 byte format, not Shale's index KeyString) of
 * the values clusterTime, version, tokenType, txnOpIndex, fromInvalidate, uuid (absent for
 * events without a collection and for high-water marks) and the event identifier (a
 * document; absent in high-water marks). KeyString order is the stream order, so two tokens
 * compare as their hex strings: a high-water mark (tokenType 0) sorts before every event
 * (tokenType 128) at the same clusterTime. docs/design/change_streams.md "Resume tokens".
 */
#ifndef SHL_BSON_RESUME_TOKEN_H
#define SHL_BSON_RESUME_TOKEN_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

/* The token version Shale writes (MongoDB 7.0's default). */
#define SHL_RESUME_TOKEN_VERSION 2
#define SHL_RESUME_TOKEN_HWM 0
#define SHL_RESUME_TOKEN_EVENT 128

/* The fields of a token. 'event_id' is borrowed (NULL: none). */
typedef struct shl_resume_token {
    uint64_t cluster_time; /* packed Timestamp: seconds << 32 | increment */
    int32_t version;
    int32_t token_type;
    int64_t txn_op_index;
    bool from_invalidate;
    bool has_uuid;
    uint8_t uuid[16];
    const bson_t *event_id;
} shl_resume_token_t;

/*
 * shl_resume_token_append --
 *     Append {_data: "<hex>"} under 'key' of 'out'. Values of the event identifier that MongoDB
 *     encodes with type bits (doubles, longs, decimals) are encoded by value only; the token
 *     has no _typeBits field (docs/design/change_streams.md says where this differs).
 */
void shl_resume_token_append(bson_t *out, const char *key, const shl_resume_token_t *t);

/*
 * shl_resume_token_hex --
 *     The hex string of 't' (bson_free it).
 */
char *shl_resume_token_hex(const shl_resume_token_t *t);

/*
 * shl_resume_token_fragment_hex --
 *     The token of fragment 'fragment' (0-based) of a split event ($changeStreamSplitLargeEvent)
 *     whose own token is 'event_hex': MongoDB's fragmentNum after the event identifier, so
 *     an event's token sorts before its fragments' and those in order (bson_free it).
 */
char *shl_resume_token_fragment_hex(const char *event_hex, int64_t fragment);

/*
 * shl_resume_token_parse --
 *     Decode the leading fields of a token document {_data: "<hex>", _typeBits?: BinData}:
 *     *out gets them (event_id NULL) and *hex_out (may be NULL) a borrowed view of the hex
 *     string, valid while 'doc' is. False (with a message in 'why', 128 bytes) when the
 *     document is not a token this codec can read.
 */
bool shl_resume_token_parse(const bson_t *doc, shl_resume_token_t *out, const char **hex_out,
                            char *why);

/*
 * shl_resume_token_doc_hex --
 *     The hex of token document 'doc' (borrowed from it), or NULL if it has no string _data.
 */
const char *shl_resume_token_doc_hex(const bson_t *doc);

#endif
