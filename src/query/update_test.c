/*
 * update_test.c -- table-driven update cases.
 */
#include "base/unit_test.h"
