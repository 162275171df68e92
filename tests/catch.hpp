// Catch2 2.x (Debian 12) or 3.x, whichever the build found.
#pragma once
#if SIGPROP_CATCH3
#include <catch2/catch_all.hpp>
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
