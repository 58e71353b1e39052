/*
 * bson_iter.c -- the element types shl_iter_next leaves out of line: the same offsets and the
 * same checks as libbson's iterator (see bson_iter.h).
 */
#include "bson/bson_iter.h"

static bool
rare_binary(bson_iter_t *it, uint32_t o, uint32_t len)
{
    uint32_t l;

    if (o >= len - 4) {
        return shl_iter__invalid(it, o);
    }
    it->d2 = o + 4;
    it->d3 = o + 5;
    l = shl_iter_u32_at(it->raw + o);
    if (l >= len - o - 4) {
        return shl_iter__invalid(it, o);
    }
    if (it->raw[it->d2] == BSON_SUBTYPE_BINARY_DEPRECATED) {
        /* Subtype 2 repeats its length inside the data. */
        if (l < 4) {
            return shl_iter__invalid(it, o);
        }
        if ((int32_t)shl_iter_u32_at(it->raw + it->d3) + 4 != (int32_t)l) {
            return shl_iter__invalid(it, it->d3);
        }
    }
    it->next_off = o + 5 + l;
    return true;
}

static bool
rare_regex(bson_iter_t *it, uint32_t o, uint32_t len)
{
    const uint8_t *data = it->raw;

    while (o < len && data[o] != 0) {
        o++;
    }
    if (o >= len) {
        return shl_iter__invalid(it, it->next_off);
    }
    it->d2 = ++o;
    while (o < len && data[o] != 0) {
        o++;
    }
    if (o >= len) {
        return shl_iter__invalid(it, it->next_off);
    }
    it->next_off = o + 1;
    /* libbson's final bounds check reports the options' end here, not the value's start. */
    return it->next_off < len || shl_iter__invalid(it, o);
}

static bool
rare_dbpointer(bson_iter_t *it, uint32_t o, uint32_t len)
{
    uint32_t l;

    if (o >= len - 4) {
        return shl_iter__invalid(it, o);
    }
    it->d2 = o + 4;
    l = shl_iter_u32_at(it->raw + o);
    if (l == 0 || l > len - o - 4) {
        return shl_iter__invalid(it, o);
    }
    if (it->raw[o + l + 3] != 0) {
        return shl_iter__invalid(it, o + l + 3);
    }
    it->d3 = o + 4 + l;
    it->next_off = o + 4 + l + 12;
    return true;
}

static bool
rare_code_w_scope(bson_iter_t *it, uint32_t o, uint32_t len)
{
    uint32_t l, doclen;

    if (len < 19 || o >= len - 14) {
        return shl_iter__invalid(it, o);
    }
    it->d2 = o + 4;
    it->d3 = o + 8;
    l = shl_iter_u32_at(it->raw + o);
    if (l < 14 || l >= len - o) {
        return shl_iter__invalid(it, o);
    }
    it->next_off = o + l;
    if (it->next_off >= len) {
        return shl_iter__invalid(it, o);
    }
    l = shl_iter_u32_at(it->raw + it->d2);
    if (l == 0 || l >= len - o - 4 - 4) {
        return shl_iter__invalid(it, o);
    }
    if (o + 4 + 4 + l + 4 >= it->next_off) {
        return shl_iter__invalid(it, o + 4);
    }
    it->d4 = o + 4 + 4 + l;
    doclen = shl_iter_u32_at(it->raw + it->d4);
    if (o + 4 + 4 + l + doclen != it->next_off) {
        return shl_iter__invalid(it, o + 4 + 4 + l);
    }
    return true;
}

bool
shl_iter__rare(bson_iter_t *it, uint32_t o, uint32_t len)
{
    bool ok = true;

    switch (it->raw[it->type]) {
    case BSON_TYPE_CODE:
    case BSON_TYPE_SYMBOL:
        ok = shl_iter__string(it, o, len);
        break;
    case BSON_TYPE_BINARY:
        ok = rare_binary(it, o, len);
        break;
    case BSON_TYPE_REGEX:
        ok = rare_regex(it, o, len);
        break;
    case BSON_TYPE_DBPOINTER:
        ok = rare_dbpointer(it, o, len);
        break;
    case BSON_TYPE_CODEWSCOPE:
        ok = rare_code_w_scope(it, o, len);
        break;
    case BSON_TYPE_DECIMAL128:
        it->next_off = o + 16;
        break;
    case BSON_TYPE_MAXKEY:
    case BSON_TYPE_MINKEY:
    case BSON_TYPE_UNDEFINED:
        it->next_off = o;
        break;
    default: /* end of document, or a type BSON does not have */
        ok = shl_iter__invalid(it, o);
        break;
    }
    return ok;
}
