# Configures, builds and runs tests/consumer against sigprop.
#   MODE=subdirectory: the consumer calls add_subdirectory(SOURCE_DIR).
#   MODE=package:      sigprop is installed to a prefix first, then found with
#                      find_package(sigprop CONFIG).
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(consumer ${CMAKE_CURRENT_LIST_DIR})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}")
  endif()
endfunction()

if(MODE STREQUAL "subdirectory")
  run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/build -DCMAKE_CXX_COMPILER=${CXX}
      -DSIGPROP_SOURCE_DIR=${SOURCE_DIR})
else()
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/sigprop-build -DCMAKE_CXX_COMPILER=${CXX}
      -DSIGPROP_BUILD_TESTS=OFF -DSIGPROP_BUILD_EXAMPLES=OFF -DSIGPROP_INSTALL=ON
      -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/sigprop-build)
  run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/build -DCMAKE_CXX_COMPILER=${CXX}
      -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
endif()
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)
