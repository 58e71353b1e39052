/*
 * write_concern_test.c -- parsing write concerns (write_concern.h): an absent or empty
 * document is the default, a client's keeps its fields and a router's provenance.
 */
#include <string.h>

#include "base/unit_test.h"
#include "net/write_concern.h"

SHL_TEST(write_concern_absent_or_empty_is_the_default)
{
    bson_t *empty = shl_test_bson("{}");
    shl_write_concern_t wc;
    shl_status_t st = SHL_STATUS_INIT;

    ASSERT_INT_EQ(shl_write_concern_parse(NULL, &wc, &st), 0);
    ASSERT(wc.is_default && !wc.w_majority && wc.w == 1);
    ASSERT_STR_EQ(wc.provenance, "implicitDefault");
    ASSERT_INT_EQ(shl_write_concern_parse(empty, &wc, &st), 0);
    ASSERT(wc.is_default && !wc.w_majority && wc.w == 1);
    ASSERT_STR_EQ(wc.provenance, "implicitDefault");
    shl_write_concern_set_default(&wc, true, "internalWriteDefault");
    ASSERT(wc.is_default && wc.w_majority && shl_write_concern_needs_journal(&wc));
    ASSERT(!shl_write_concern_unacknowledged(&wc) && wc.wtimeout_ms == 0);
    ASSERT_STR_EQ(wc.provenance, "internalWriteDefault");
    bson_destroy(empty);
}

SHL_TEST(write_concern_a_client_or_router_concern_is_kept)
{
    bson_t *w0 = shl_test_bson("{'w': 0}");
    bson_t *routed = shl_test_bson("{'w': 'majority', 'wtimeout': 0, "
                                   "'provenance': 'implicitDefault'}");
    shl_write_concern_t wc;
    shl_status_t st = SHL_STATUS_INIT;

    ASSERT_INT_EQ(shl_write_concern_parse(w0, &wc, &st), 0);
    ASSERT(!wc.is_default && shl_write_concern_unacknowledged(&wc));
    ASSERT_STR_EQ(wc.provenance, "clientSupplied");
    ASSERT_INT_EQ(shl_write_concern_parse(routed, &wc, &st), 0);
    ASSERT(!wc.is_default && wc.w_majority);
    ASSERT_STR_EQ(wc.provenance, "implicitDefault");
    bson_destroy(w0);
    bson_destroy(routed);
}
