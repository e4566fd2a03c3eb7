/*
 * tests/base_map.h: the two-pair shard map the unit tests of the map start
 * from (tests/unit_map.c, tests/unit_alloc.c), and the lookups every test
 * of it expects. The map's credentials are each test's own:
 *
 *     static const char base_map[] = BASE_MAP_HEAD
 *         " \"credentials\": {...},"
 *         BASE_MAP_TAIL;
 *
 * Static functions: each test program is built on its own from its one .c
 * file.
 */
#ifndef LIBSHARD_TESTS_BASE_MAP_H
#define LIBSHARD_TESTS_BASE_MAP_H

#include <check.h>
#include <libshard.h>

#define BASE_MAP_HEAD "{\"version\": 7, \"open_shards\": 64, \"database_format\": \"db%05d\","

#define BASE_MAP_TAIL                                                                        \
    " \"objects\": {\"pins\": 1, \"boards\": 2, \"users\": 3},"                              \
    " \"mappings\": {\"board_has_pins\": {\"reverse\": \"pin_owned_by_board\"},"             \
    "                \"user_likes_pins\": {}},"                                              \
    " \"pairs\": {"                                                                          \
    "   \"MySQL001\": {\"master\": \"127.0.0.1:33061\", \"standby\": \"127.0.0.1:33062\"},"  \
    "   \"MySQL002\": {\"master\": \"unix:/var/run/mysqld/b.sock\","                         \
    "                  \"standby\": \"127.0.0.1:33064\"}},"                                  \
    " \"id_shards\": [{\"range\": [0, 31], \"pair\": \"MySQL001\"},"                         \
    "                {\"range\": [32, 63], \"pair\": \"MySQL002\"}],"                        \
    " \"mod_shards\": {\"count\": 16, \"database_format\": \"modshard%05d\","                \
    "   \"tables\": [\"users_by_email\", \"users_by_name\"],"                                \
    "   \"ranges\": [{\"range\": [0, 15], \"pair\": \"MySQL001\"}]}}"

/* What a map parsed from base_map answers: its sizes, the pairs of shards
 * on either side of the split and past the end, of mod shards, a pair's
 * addresses, types by name and number, database names. */
static __attribute__((unused)) void assert_base_map_lookups(const shard_map *m)
{
    const char *pair, *master, *standby, *name;
    unsigned type;
    char db[65]; /* MySQL's 64 characters plus NUL */

    ck_assert_uint_eq(shard_map_version(m), 7);
    ck_assert_uint_eq(shard_map_open_shards(m), 64);
    ck_assert_uint_eq(shard_map_mod_count(m), 16);
    ck_assert_uint_eq(shard_map_pair_count(m), 2);
    ck_assert_int_eq(shard_map_pair_of(m, 31, &pair), 0);
    ck_assert_str_eq(pair, "MySQL001");
    ck_assert_int_eq(shard_map_pair_of(m, 32, &pair), 0);
    ck_assert_str_eq(pair, "MySQL002");
    ck_assert_int_eq(shard_map_pair_of(m, 64, &pair), SHARD_ENOSHARD);
    ck_assert_int_eq(shard_map_mod_pair_of(m, 15, &pair), 0);
    ck_assert_str_eq(pair, "MySQL001");
    ck_assert_int_eq(shard_map_mod_pair_of(m, 16, &pair), SHARD_ENOSHARD);
    ck_assert_int_eq(shard_map_pair_addrs(m, "MySQL002", &master, &standby), 0);
    ck_assert_str_eq(master, "unix:/var/run/mysqld/b.sock");
    ck_assert_str_eq(standby, "127.0.0.1:33064");
    ck_assert_int_eq(shard_map_type_of(m, "boards", &type), 0);
    ck_assert_uint_eq(type, 2);
    ck_assert_int_eq(shard_map_type_of(m, "nope", &type), SHARD_ENOTFOUND);
    ck_assert_int_eq(shard_map_type_name(m, 3, &name), 0);
    ck_assert_str_eq(name, "users");
    ck_assert_int_eq(shard_map_type_name(m, 4, &name), SHARD_ENOTFOUND);
    ck_assert_int_eq(shard_map_database(m, 3429, db, sizeof db), 0);
    ck_assert_str_eq(db, "db03429");
    ck_assert_int_eq(shard_map_mod_database(m, 5, db, sizeof db), 0);
    ck_assert_str_eq(db, "modshard00005");
}

#endif /* LIBSHARD_TESTS_BASE_MAP_H */
