// Catch2 2.x (Debian 12) or 3.x, whichever the build found.
#pragma once
// Each assertion without its own try/catch: an exception in a CHECK ends its
// test case (still a failure); the tests compile about a tenth faster.
#define CATCH_CONFIG_FAST_COMPILE
#if SIGPROP_CATCH3
#include <catch2/catch_all.hpp>
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
