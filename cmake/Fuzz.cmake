# TANDEM_FUZZ: every file of this build dir is compiled with AddressSanitizer, UBSan (UB aborts:
# it counts as a crash) and libFuzzer's coverage hooks; fuzz/ links the fuzzer main.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "TANDEM_FUZZ needs clang, which ships libFuzzer (Debian: clang and libclang-rt-14-dev); "
                      "configure with -DCMAKE_CXX_COMPILER=clang++ (the compiler is ${CMAKE_CXX_COMPILER_ID})")
endif()
set(TANDEM_SANITIZERS -fsanitize=address,undefined -fno-sanitize-recover=undefined)
add_compile_options(${TANDEM_SANITIZERS} -fsanitize=fuzzer-no-link -fno-omit-frame-pointer)
add_link_options(${TANDEM_SANITIZERS})
message(STATUS "tandem: fuzz build (libFuzzer, ASan, UBSan); only fuzz/ and the libraries it links are built")
