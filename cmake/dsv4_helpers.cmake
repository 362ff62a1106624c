# Shared build helpers. Every module folder is one static library built from the .cpp (and, for CUDA modules,
# .cu) files it holds, so adding a source file needs no CMake edit.

function(dsv4_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>)
  if(DSV4_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

# dsv4_module(NAME dir DEPS a b c): static library dsv4_<NAME> from dir/*.cpp
function(dsv4_module name)
  cmake_parse_arguments(ARG "" "" "DEPS;PRIVATE_DEPS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  if(NOT sources)  # a module with headers only so far
    add_library(dsv4_${name} INTERFACE)
    target_include_directories(dsv4_${name} INTERFACE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(dsv4_${name} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(dsv4_${name} STATIC ${sources})
  target_include_directories(dsv4_${name} PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(dsv4_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  dsv4_warnings(dsv4_${name})
endfunction()

# dsv4_test_dir(dir LABEL label DEPS ...): one gtest executable per folder of tests, tests discovered at test time.
function(dsv4_test_dir dir)
  cmake_parse_arguments(ARG "" "LABEL" "DEPS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${dir}/*.cpp)
  if(NOT sources)
    return()
  endif()
  get_filename_component(leaf ${dir} NAME)
  get_filename_component(parent ${dir} DIRECTORY)
  get_filename_component(parent_leaf ${parent} NAME)
  set(exe dsv4_${parent_leaf}_${leaf}_tests)
  add_executable(${exe} ${sources})
  target_link_libraries(${exe} PRIVATE ${ARG_DEPS} dsv4_testing GTest::gtest GTest::gtest_main)
  dsv4_warnings(${exe})
  # GPU tests take seconds each; a kernel that hangs should fail its test in minutes, not hold the GPU for ctest's
  # default 25 minutes (the device watchdog in common/mbarrier.cuh traps after ~10 s, this catches the rest).
  set(timeout 1500)
  if(ARG_LABEL STREQUAL "gpu")
    set(timeout 180)
  endif()
  gtest_discover_tests(${exe} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "${ARG_LABEL}" TIMEOUT ${timeout}
                       ENVIRONMENT "DSV4_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
