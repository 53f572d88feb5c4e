/* MC_TEST_EVICTION_POLICY=lru|adaptive: ctest runs the master suites once per eviction policy
 * (tests/master/CMakeLists.txt); unset = the config's own (lru by default). */
#ifndef MC_TEST_POLICY_ENV_H
#define MC_TEST_POLICY_ENV_H

#include "master/master.h"

#include <stdio.h>
#include <stdlib.h>

static inline void test_policy_from_env(mc_master_config_t *cfg)
{
    const char *p = getenv("MC_TEST_EVICTION_POLICY");
    if (p && mc_evict_policy_parse(p, &cfg->eviction_policy) != MC_OK) {
        fprintf(stderr, "bad MC_TEST_EVICTION_POLICY '%s'\n", p);
        abort();
    }
}

#endif
