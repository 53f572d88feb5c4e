/* Capacity planner: the seed's exact numbers (003 §2) and input validation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "conductor/plan.h"

#include <math.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024.0 * 1024.0)

/* equal to 1e-9 relative: (1 - 0.8) is not exact in binary floating point */
static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

static void test_plan_seed_numbers(void **state)
{
    mc_conductor_plan_input_t in;
    mc_conductor_plan_t p;
    mc_conductor_plan_defaults(&in);
    assert_int_equal(mc_conductor_plan_compute(&in, &p), MC_OK);
    assert_true(close_to(p.kv_bytes_per_token, 128 * 1024));
    assert_true(close_to(p.kv_bytes_per_request, GIB));
    assert_true(close_to(p.new_kv_rate, 20 * GIB));
    assert_true(close_to(p.working_set, 6000 * GIB));
    assert_true(close_to(p.physical, 12000 * GIB));
    assert_true(fabs(p.node_usable / GIB - 358.4) < 1e-9);
    assert_int_equal(p.nodes_capacity, 34);
    assert_true(close_to(p.remote_read_rate, 80 * GIB));
    assert_true(close_to(p.replica_write_rate, 40 * GIB));
    assert_true(close_to(p.aggregate_rate, 120 * GIB));
    assert_int_equal(p.endpoints_read, 4);
    assert_int_equal(p.endpoints_aggregate, 6);
    assert_int_equal(p.nodes_needed, 34);
    assert_true(close_to(p.chunk_bytes, 32 * MIB));
    assert_true(close_to(p.chunks, 192000));
    assert_true(close_to(p.keys, 1536000));
    assert_true(close_to(p.metadata_bytes, 1536000.0 * 512));
    assert_true(fabs(p.metadata_bytes / GIB - 0.73) < 0.005);
}

static void test_plan_measured_bytes_per_object(void **state)
{
    mc_conductor_plan_input_t in;
    mc_conductor_plan_t p;
    mc_conductor_plan_defaults(&in);
    in.bytes_per_object = 1400; /* e.g. measured by the master benchmark */
    assert_int_equal(mc_conductor_plan_compute(&in, &p), MC_OK);
    assert_true(close_to(p.metadata_bytes, 1536000.0 * 1400));
    /* exact ratios do not get rounded up by float noise: 120/20 = 6, not 7 */
    in.endpoint_bw = 30 * GIB;
    assert_int_equal(mc_conductor_plan_compute(&in, &p), MC_OK);
    assert_int_equal(p.endpoints_aggregate, 4);
    assert_int_equal(p.endpoints_read, 3);
}

static void test_plan_shapes(void **state)
{
    mc_conductor_plan_input_t in;
    mc_conductor_plan_t p;
    double b;
    mc_conductor_plan_defaults(&in);
    assert_int_equal(mc_conductor_dtype_bytes("fp8", &b), MC_OK);
    in.dtype_bytes = b;
    in.reuse_share = 1.0;
    assert_int_equal(mc_conductor_plan_compute(&in, &p), MC_OK);
    assert_true(close_to(p.kv_bytes_per_token, 64 * 1024));
    assert_true(close_to(p.new_kv_rate, 0));
    assert_int_equal(p.nodes_capacity, 0);
    assert_true(close_to(p.remote_read_rate, 50 * GIB));
    assert_int_equal(mc_conductor_dtype_bytes("fp12", &b), MC_ERR_INVALID_PARAMS);
}

static void test_plan_rejects_bad_inputs(void **state)
{
    mc_conductor_plan_input_t in;
    mc_conductor_plan_t p;
    mc_conductor_plan_defaults(&in);
    in.reuse_share = 1.5;
    assert_int_equal(mc_conductor_plan_compute(&in, &p), MC_ERR_INVALID_PARAMS);
    mc_conductor_plan_defaults(&in);
    in.utilization = 0;
    assert_int_equal(mc_conductor_plan_compute(&in, &p), MC_ERR_INVALID_PARAMS);
    mc_conductor_plan_defaults(&in);
    in.tp = 0;
    assert_int_equal(mc_conductor_plan_compute(&in, &p), MC_ERR_INVALID_PARAMS);
    mc_conductor_plan_defaults(&in);
    in.endpoint_bw = NAN;
    assert_int_equal(mc_conductor_plan_compute(&in, &p), MC_ERR_INVALID_PARAMS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_seed_numbers),
        cmocka_unit_test(test_plan_measured_bytes_per_object),
        cmocka_unit_test(test_plan_shapes),
        cmocka_unit_test(test_plan_rejects_bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
