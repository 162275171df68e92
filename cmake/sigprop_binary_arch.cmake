# Instruction set of the project's own binaries: the command-line tool, the
# examples and the tests. Never applied to the installed interface target
# sigprop::sigprop, whose users choose their own flags.
#
#   SIGPROP_BINARY_ARCH=auto      x86-64-v3 (AVX2, FMA: four doubles per
#                                 register) when the compiler targets x86-64
#                                 and the build host runs such code, unless
#                                 CMAKE_CXX_FLAGS already choose the target;
#                                 otherwise the compiler's default
#   SIGPROP_BINARY_ARCH=portable  the compiler's default (x86-64: SSE2)
#   SIGPROP_BINARY_ARCH=<value>   -march=<value>, e.g. native or x86-64-v4
#
# Any -march comes with -ffp-contract=off, so the scalar code forms a*b + c
# in two roundings, as the portable build does (docs/performance.md, "Build
# flags").
set(SIGPROP_BINARY_ARCH auto CACHE STRING
  "Instruction set of the project's own binaries: auto, portable, or a -march value")
set_property(CACHE SIGPROP_BINARY_ARCH PROPERTY STRINGS auto portable x86-64-v3 native)

function(sigprop_binary_arch_flags out)
  set(flags "")
  set(reason "")
  if(SIGPROP_BINARY_ARCH STREQUAL "")
    message(FATAL_ERROR "SIGPROP_BINARY_ARCH is empty; valid: auto, portable, or a -march value")
  elseif(SIGPROP_BINARY_ARCH STREQUAL "portable")
    set(reason "SIGPROP_BINARY_ARCH=portable")
  elseif(SIGPROP_BINARY_ARCH STREQUAL "auto")
    string(TOUPPER "${CMAKE_BUILD_TYPE}" config)
    set(user_flags "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${config}}")
    if(user_flags MATCHES "-march=|-mavx|-msse|-mfma")
      set(reason "CMAKE_CXX_FLAGS choose the target")
    elseif(CMAKE_CROSSCOMPILING)
      set(reason "cross-compiling")
    elseif(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
      set(reason "compiler ${CMAKE_CXX_COMPILER_ID}")
    elseif(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
      set(reason "processor ${CMAKE_SYSTEM_PROCESSOR}")
    else()
      include(CheckCXXSourceRuns)
      set(CMAKE_REQUIRED_FLAGS "-march=x86-64-v3")
      set(CMAKE_REQUIRED_QUIET ON)
      # Feature names both g++ and clang++ know; a host with these has the
      # rest of x86-64-v3 in practice.
      check_cxx_source_runs([[
        int main() {
          __builtin_cpu_init();
          return (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2")) ? 0 : 1;
        }]] SIGPROP_HOST_RUNS_X86_64_V3)
      if(SIGPROP_HOST_RUNS_X86_64_V3)
        set(flags -march=x86-64-v3 -ffp-contract=off)
      else()
        set(reason "the build host lacks AVX2/FMA or the compiler lacks -march=x86-64-v3")
      endif()
    endif()
  else()
    set(flags -march=${SIGPROP_BINARY_ARCH} -ffp-contract=off)
  endif()
  if(flags)
    string(REPLACE ";" " " shown "${flags}")
    message(STATUS "sigprop: own binaries built with ${shown}")
  else()
    message(STATUS "sigprop: own binaries built without an -march of their own (${reason})")
  endif()
  set(${out} ${flags} PARENT_SCOPE)
endfunction()
