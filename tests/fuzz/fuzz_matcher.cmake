# fuzz_matcher: libFuzzer target over the query parsers (src/query). Included by
# tests/fuzz/CMakeLists.txt (owned by the fuzzing setup): include(fuzz_matcher.cmake).
add_executable(fuzz_matcher ${CMAKE_CURRENT_LIST_DIR}/fuzz_matcher.c)
target_compile_options(fuzz_matcher PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_options(fuzz_matcher PRIVATE -fsanitize=fuzzer,address,undefined)
target_link_libraries(fuzz_matcher PRIVATE shl_query)
