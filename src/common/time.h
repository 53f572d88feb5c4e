/* Monotonic and wall clocks. All deadlines in the project are CLOCK_MONOTONIC nanoseconds. */
#ifndef MC_COMMON_TIME_H
#define MC_COMMON_TIME_H

#include <stdint.h>

uint64_t mc_now_ns(void);       /* CLOCK_MONOTONIC */
uint64_t mc_now_ms(void);       /* CLOCK_MONOTONIC */
uint64_t mc_wall_ms(void);      /* CLOCK_REALTIME, ms since the epoch */
void mc_sleep_ms(uint32_t ms);

#endif
