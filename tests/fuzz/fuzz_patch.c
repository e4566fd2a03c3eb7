/*
 * Fuzz the RFC 7386 merge patch (lib/patch.c) and object_parse(). The
 * input is TARGET NUL PATCH (no NUL: the target is {}), each any JSON text.
 * Checked: the result follows RFC 7386 member by member (null members
 * removed, other members merged, untouched members kept, an object
 * whenever the patch is one, the patch itself when it is not one);
 * applying the same patch again changes nothing (idempotence); neither
 * input is modified; an object result survives object_dump() and
 * object_parse() unchanged and object_deleted() reads it right.
 */
#include "fuzz.h"

#include <jansson.h>
#include <libshard.h>

#include "object.h"

#define ANY_FLAGS (JSON_DECODE_ANY | OBJECT_JSON_FLAGS)

/* result == MergePatch(target, patch), member by member (RFC 7386, section 2). */
static void check_merge(json_t *target, json_t *patch, json_t *result)
{
    const char *key;
    json_t *v;
    size_t expect = 0;

    CHECK(result != NULL, "no result");
    if (!json_is_object(patch)) {
        CHECK(json_equal(result, patch), "a non-object patch must replace the target");
        return;
    }
    CHECK(json_is_object(result), "an object patch must give an object");
    if (!json_is_object(target))
        target = NULL; /* a non-object target is replaced by {} */
    json_object_foreach(patch, key, v) {
        json_t *r = json_object_get(result, key);
        if (json_is_null(v)) {
            CHECK(r == NULL, "null member \"%s\" not removed", key);
            continue;
        }
        expect++;
        CHECK(r != NULL, "member \"%s\" missing", key);
        check_merge(target ? json_object_get(target, key) : NULL, v, r);
    }
    if (target)
        json_object_foreach(target, key, v) {
            if (json_object_get(patch, key))
                continue;
            expect++;
            CHECK(json_equal(json_object_get(result, key), v),
                  "untouched member \"%s\" changed", key);
        }
    CHECK(json_object_size(result) == expect, "%zu members, expected %zu",
          json_object_size(result), expect);
}

/* object_parse() accepts exactly the JSON objects. */
static json_t *parse_patch(const char *text, size_t len)
{
    json_t *obj = (json_t *)&obj, *any = json_loadb(text, len, ANY_FLAGS, NULL);
    int rc = object_parse(text, len, &obj);

    if (json_is_object(any)) {
        CHECK(rc == 0, "object rejected: %s", shard_errmsg());
        CHECK(json_equal(obj, any), "object_parse changed the object");
        json_decref(any);
        return obj;
    }
    CHECK(rc == SHARD_EINVAL, "non-object accepted (rc %d)", rc);
    CHECK(obj == (json_t *)&obj, "output written on failure");
    return any; /* NULL when not JSON at all */
}

static void check_dump(json_t *result)
{
    char *text = NULL;
    size_t len = 0;
    json_t *back = NULL;
    int active_false;

    CHECK(object_dump(result, &text, &len) == 0, "object_dump: %s", shard_errmsg());
    CHECK(strlen(text) <= len && text[len] == '\0', "dump length");
    CHECK(object_parse(text, len, &back) == 0, "dump rejected: %s\n%s", shard_errmsg(),
          text);
    CHECK(json_equal(back, result), "dump changed the object: %s", text);
    active_false = json_is_false(json_object_get(result, "active"));
    CHECK(object_deleted(text, len) == (active_false != 0), "object_deleted(%s)", text);
    json_decref(back);
    shard_free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    const char *ptext = (const char *)(nul ? nul + 1 : data);
    size_t plen = nul ? size - (size_t)(nul - data) - 1 : size;
    json_t *target, *patch, *tcopy, *pcopy, *r1, *r2;

    target = nul ? json_loadb((const char *)data, (size_t)(nul - data), ANY_FLAGS, NULL)
                 : json_object();
    patch = parse_patch(ptext, plen);
    if (!patch) {
        json_decref(target);
        return 0;
    }
    tcopy = json_deep_copy(target);
    pcopy = json_deep_copy(patch);

    r1 = merge_patch(target, patch);
    check_merge(target, patch, r1);
    r2 = merge_patch(r1, patch);
    CHECK(r2 && json_equal(r1, r2), "applying the patch twice differs from once");
    /* A NULL target (an absent member) merges like a non-object one. */
    {
        json_t *r3 = merge_patch(NULL, patch);
        check_merge(NULL, patch, r3);
        json_decref(r3);
    }
    CHECK(json_equal(target, tcopy) || (!target && !tcopy), "merge_patch changed the target");
    CHECK(json_equal(patch, pcopy), "merge_patch changed the patch");
    if (json_is_object(r1))
        check_dump(r1);

    json_decref(r1);
    json_decref(r2);
    json_decref(tcopy);
    json_decref(pcopy);
    json_decref(target);
    json_decref(patch);
    return 0;
}
