# Writes a C++ source holding the demo model's base tokenizer.json as a raw string literal, so the
# binary carries it (install trees have no tests/ folder). Run at build time with -DIN= -DOUT=.
file(READ "${IN}" _json)
string(FIND "${_json}" ")TJSON\"" _clash)
if(NOT _clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter")
endif()
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} by engine/serve/embed_tokenizer.cmake; do not edit.\n"
  "#include \"demo_assets.hpp\"\n"
  "namespace tandem::engine::serve {\n"
  "std::string_view demo_base_tokenizer_json() {\n"
  "  static const char text[] = R\"TJSON(${_json})TJSON\";\n"
  "  return {text, sizeof text - 1};\n"
  "}\n"
  "}  // namespace tandem::engine::serve\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
