/* Map stores: the file store (store.c) and the MySQL table store. */
#ifndef LIBSHARD_STORE_H
#define LIBSHARD_STORE_H

#include "map.h"

typedef struct store_mysql store_mysql;

/* mysql://USER@HOST:PORT/DATABASE/TABLE?password_env=VAR&socket=PATH&tls_ca=PATH */
int store_mysql_open(const char *uri, store_mysql **out);
void store_mysql_free(store_mysql *m);
int store_mysql_load(store_mysql *m, shard_map **out);
int store_mysql_publish(store_mysql *m, const shard_map *map, uint64_t expected_version);

#endif
