/* RFC 7386 JSON merge patch. */
#include "object.h"

json_t *merge_patch(json_t *target, json_t *patch)
{
    const char *key;
    json_t *value;
    json_t *result;

    if (!json_is_object(patch))
        return json_deep_copy(patch);
    result = json_is_object(target) ? json_deep_copy(target) : json_object();
    if (!result)
        return NULL;
    json_object_foreach(patch, key, value) {
        if (json_is_null(value)) {
            json_object_del(result, key);
        } else {
            json_t *merged = merge_patch(json_object_get(result, key), value);
            if (!merged || json_object_set_new(result, key, merged)) {
                json_decref(result);
                return NULL;
            }
        }
    }
    return result;
}
