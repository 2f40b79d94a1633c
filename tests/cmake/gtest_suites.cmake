# cmake -DTEST_BINARY=<GoogleTest program> -DOUTPUT=<file> -P gtest_suites.cmake
# Writes a CTest file with one test per GoogleTest suite of the program: `<Suite>` runs
# `--gtest_filter=<Suite>.*`. Run after each build of the program (tests/CMakeLists.txt says why).
execute_process(COMMAND ${TEST_BINARY} --gtest_list_tests
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE result TIMEOUT 120)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${TEST_BINARY} --gtest_list_tests failed (${result}):\n${errors}")
endif()
# Suites start a line and end with a dot; their tests follow, indented. A parameterised suite or
# test ends its line with a comment ("  # GetParam() = ..."), which may hold anything.
string(REPLACE ";" "," listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
set(suites 0)
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #]+)\\.")
    set(suite ${CMAKE_MATCH_1})
    string(APPEND content "add_test([==[${suite}]==] [==[${TEST_BINARY}]==] "
                          "[==[--gtest_filter=${suite}.*]==])\n")
    math(EXPR suites "${suites} + 1")
  endif()
endforeach()
if(suites EQUAL 0)
  message(FATAL_ERROR "${TEST_BINARY} lists no test suite:\n${listing}")
endif()
file(WRITE ${OUTPUT}.new "${content}")
file(RENAME ${OUTPUT}.new ${OUTPUT})  # whole or not at all, for a CTest reading it meanwhile
