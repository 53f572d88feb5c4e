/* Assertion shared by the metadata backend tests (include after cmocka.h and te/metadata.h):
 * the value stored under key is want, or (want NULL) the key is absent. */
#ifndef MC_TESTS_META_CHECK_H
#define MC_TESTS_META_CHECK_H

#include <stdlib.h>

static void check_value(mc_meta_t *m, const char *key, const char *want)
{
    char *v = NULL;
    mc_status_t st = mc_meta_get(m, key, &v);
    if (!want) {
        if (st != MC_ERR_OBJECT_NOT_FOUND)
            fail_msg("key '%s': want NOT_FOUND, got %s", key, mc_status_name(st));
        return;
    }
    if (st != MC_OK)
        fail_msg("key '%s': %s", key, mc_status_name(st));
    assert_string_equal(v, want);
    free(v);
}

#endif
