/* The statements that create a shard's tables: shared by shard_schema_apply
 * (schema.c) and shard_shards_open (topology.c). */
#ifndef LIBSHARD_SCHEMA_H
#define LIBSHARD_SCHEMA_H

#include "ctx.h"

/* CREATE TABLE IF NOT EXISTS of an object table / a mapping table, into q. */
void schema_object_table(sqlbuf *q, const char *db, const char *table);
void schema_mapping_table(sqlbuf *q, const char *db, const char *table);

#endif
