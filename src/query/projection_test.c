/*
 * projection_test.c -- table-driven projection cases.
 */
#include "base/unit_test.h"
