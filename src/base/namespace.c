/*
 * namespace.c -- see namespace.h. Rules as MongoDB's NamespaceString::validDBName and
 * validCollectionName (facts only).
 */
#include "base/namespace.h"

#include <string.h>

int
shl_ns_check_db(const char *db, shl_status_t *st)
{
    size_t n = strlen(db);
    if (n == 0 || n >= SHL_DB_NAME_MAX) {
        return shl_status_set(st, SHL_CODE_INVALID_NAMESPACE,
                              n == 0 ? "Invalid database name: ''"
                                     : "db name is too long: '%s' (max 63 characters)",
                              db);
    }
    if (strpbrk(db, "/\\. \"$*<>:|?") != NULL) {
        return shl_status_set(st, SHL_CODE_INVALID_NAMESPACE, "Invalid database name: '%s'", db);
    }
    return 0;
}

static bool
special_dollar_name(const char *coll)
{
    return strcmp(coll, "oplog.$main") == 0 || strcmp(coll, "$cmd") == 0 ||
           strncmp(coll, "$cmd.", 5) == 0;
}

int
shl_ns_make(shl_ns_t *ns, const char *db, const char *coll, shl_status_t *st)
{
    int ret = 0;
    size_t dn, cn;

    SHL_ERR(shl_ns_check_db(db, st));
    dn = strlen(db);
    cn = strlen(coll);
    if (cn == 0 || coll[0] == '.' || (strchr(coll, '$') != NULL && !special_dollar_name(coll))) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE, "Invalid collection name: %s", coll);
    }
    if (dn + 1 + cn > SHL_NS_MAX) {
        SHL_FAIL(st, SHL_CODE_INVALID_NAMESPACE,
                 "Fully qualified namespace is too long. Namespace: %s.%s Max: %d", db, coll,
                 SHL_NS_MAX);
    }
    memcpy(ns->db, db, dn + 1);
    memcpy(ns->coll, coll, cn + 1);
    memcpy(ns->full, db, dn);
    ns->full[dn] = '.';
    memcpy(ns->full + dn + 1, coll, cn + 1);
done:
    return ret;
}

int
shl_ns_parse(shl_ns_t *ns, const char *full, shl_status_t *st)
{
    const char *dot = strchr(full, '.');
    char db[SHL_DB_NAME_MAX];

    if (dot == NULL || dot == full || (size_t)(dot - full) >= sizeof(db)) {
        return shl_status_set(st, SHL_CODE_INVALID_NAMESPACE, "Invalid namespace specified '%s'",
                              full);
    }
    memcpy(db, full, (size_t)(dot - full));
    db[dot - full] = '\0';
    return shl_ns_make(ns, db, dot + 1, st);
}

bool
shl_ns_is_system(const shl_ns_t *ns)
{
    return strncmp(ns->coll, "system.", 7) == 0;
}

bool
shl_ns_is_internal_db(const char *db)
{
    return strcmp(db, "admin") == 0 || strcmp(db, "config") == 0 || strcmp(db, "local") == 0;
}
