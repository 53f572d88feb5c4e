/* Clocks (time.h): CLOCK_MONOTONIC for every deadline and interval, CLOCK_REALTIME only for
 * wall-clock stamps, and a sleep that resumes after signals. */
#include "common/time.h"

#include <time.h>

uint64_t mc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t mc_now_ms(void)
{
    return mc_now_ns() / 1000000ull;
}

uint64_t mc_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

void mc_sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}
