// Catch2 2.x main, compiled once and linked into every test executable.
#define CATCH_CONFIG_MAIN
#define CATCH_CONFIG_FAST_COMPILE  // as tests/catch.hpp
#include <catch2/catch.hpp>
