/*
 * expression_test.c -- table-driven expression cases.
 */
#include "base/unit_test.h"
