/*
 * sort_test.c -- table-driven sort cases.
 */
#include "base/unit_test.h"
