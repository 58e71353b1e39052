/*
 * storage_api.h -- the storage engine's public headers, as the db module includes them.
 */
#ifndef SHL_DB_STORAGE_API_H
#define SHL_DB_STORAGE_API_H

#include "storage/catalog.h"
#include "storage/index.h"
#include "storage/oplog.h"
#include "storage/record_store.h"
#include "storage/storage.h"
#include "storage/write.h"

#endif
