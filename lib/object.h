/* Objects: shared by the single-object calls, multi-get, transactions and scans. */
#ifndef LIBSHARD_OBJECT_H
#define LIBSHARD_OBJECT_H

#include "exec.h"

#include <jansson.h>

/* Flags for parsing caller JSON: NUL in strings is data, duplicates are not. */
#define OBJECT_JSON_FLAGS (JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL)

json_t *merge_patch(json_t *target, json_t *patch);
/* Parse text as a JSON object, or fail with SHARD_EINVAL naming the problem. */
int object_parse(const char *json, size_t len, json_t **out);
/* A merge patch: a JSON object, or SHARD_EINVAL naming what it is instead. */
int object_parse_patch(const char *json, size_t len, json_t **out);
/* Whether stored object text is soft-deleted ("active": false), judged on
 * the parsed document, never on the text. */
bool object_deleted(const char *text, size_t len);
bool object_deleted_json(const json_t *obj);
/* The table of a type in this map, or SHARD_EINVAL naming the type. */
int object_table(const shard_map *map, unsigned type, const char **table);
/* Check an ID is valid and its type registered; the table name is returned. */
int object_check_id(const shard_map *map, uint64_t id, const char **table);
/* Serialise a JSON object compactly into a libshard-owned string. */
int object_dump(const json_t *obj, char **text, size_t *len);

/* The statements themselves, on a connection already routed to db. */
/*
 * The statement text of object_insert (one parameter: the JSON) and of a
 * hard delete. With fence, the statement itself writes nothing while db is
 * fenced (sql_fence_clear): one autocommit round trip (EXEC_ONE). With
 * bound_ms (an insert under the lease, without fence), it is sent bounded
 * (sql_write_bound); a hard delete's caller adds the bound itself.
 */
void object_insert_sql(sqlbuf *q, const char *db, const char *table, bool fence,
                       unsigned bound_ms);
void object_delete_sql(sqlbuf *q, const char *db, const char *table, uint64_t id, bool fence);
/* With fence (object_insert_sql), a fenced db is SHARD_EMOVED, nothing written. */
int object_insert(shard_conn *c, const char *db, const char *table, unsigned shard,
                  unsigned type, const char *json, size_t len, bool fence, unsigned bound_ms,
                  uint64_t *id);
/*
 * n objects of one type with as few statements as the packet limit allows:
 * multi-row INSERT ... RETURNING of hex literals (a text too big for one as
 * hex, but not as bytes, goes alone as a prepared statement's parameter).
 * Each returned row is checked (count, local id range, stored length
 * against the length sent); the IDs, in input order, into ids[0..n), all
 * 0 on failure. Some rows may have been written when it fails: only inside
 * a transaction, which the caller rolls back. *statements (may be NULL):
 * how many statements ran.
 */
/* SHARD_ETOOBIG naming the first of len[0..n) that no statement on c can
 * carry (before anything is sent); else 0. */
int object_check_sizes(const shard_conn *c, const size_t *len, size_t n);
int object_insert_many(shard_conn *c, const char *db, const char *table, unsigned shard,
                       unsigned type, const char *const *json, const size_t *len, size_t n,
                       uint64_t *ids, size_t *statements);
/* for_update: SELECT ... FOR UPDATE, in a transaction that checked the
 * fence. Else the hot-path read, which checks the fence in the same
 * statement: *fenced (may be NULL only inside such a transaction) tells. */
/* The hot-path read of one object; with check, the fence in the same
 * statement (*fenced tells, may be NULL); without, the object alone (under
 * a lease: exec_fence_skip). SHARD_ENOTFOUND for none or soft-deleted. */
int object_get(shard_conn *c, const char *db, const char *table, uint64_t id, bool check,
               bool *fenced, char **json, size_t *len);
int object_select(shard_conn *c, const char *db, const char *table, uint64_t id,
                  bool for_update, bool *fenced, char **json, size_t *len);
int object_write(shard_conn *c, const char *db, const char *table, uint64_t id,
                 const char *json, size_t len);

/* txn.c: object_insert_many on the transaction's shard, each text
 * validated first as shard_txn_object_create(3) does (a text that is not
 * a JSON object fails the call, naming it, before anything is written);
 * a failed statement fails the transaction, which must be rolled back. */
int txn_object_create_many(shard_txn *t, unsigned type, const char *const *json,
                           const size_t *len, size_t n, uint64_t *ids, size_t *statements);

/* mapping.c: shared with transactions. */
void mapping_upsert_sql(sqlbuf *q, const char *db, const char *table, uint64_t from,
                        uint64_t to, int64_t seq);
/* A mapping row's upsert or (remove) delete; with fence it changes nothing
 * while db is fenced (sql_fence_clear), for one autocommit round trip. */
void mapping_write_sql(sqlbuf *q, const char *db, const char *table, uint64_t from,
                       uint64_t to, int64_t seq, bool remove, bool fence);
int64_t mapping_now(void);

#endif
