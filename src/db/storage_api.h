/*
 * storage_api.h -- the storage engine's headers as the db module includes them.
 * storage/catalog.h defines SHL_NS_MAX and SHL_DB_NAME_MAX again (base/namespace.h owns
 * them, with SHL_DB_NAME_MAX 64 there and 63 in storage), which -Werror turns into a
 * build failure wherever both are seen; this header hides storage's copies until the
 * storage headers drop them. TODO(#3): remove once storage/catalog.h no longer defines them.
 */
#ifndef SHL_DB_STORAGE_API_H
#define SHL_DB_STORAGE_API_H

#include "base/namespace.h"

#undef SHL_NS_MAX
#undef SHL_DB_NAME_MAX
#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/oplog.h"
#include "storage/record_store.h"
#include "storage/storage.h"
#include "storage/write.h"
#undef SHL_NS_MAX
#undef SHL_DB_NAME_MAX
#define SHL_DB_NAME_MAX 64
#define SHL_NS_MAX 255

#endif
