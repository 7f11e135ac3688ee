# One place for compiler warnings; every tandem target links tandem_warnings.
add_library(tandem_warnings INTERFACE)
target_compile_options(tandem_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
     -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wconversion -Wsign-conversion
     -Wformat=2 -Wimplicit-fallthrough>)
if(TANDEM_WERROR)
  target_compile_options(tandem_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
