#include <doctest/doctest.h>

#include "tandem/units.hpp"

using namespace tandem;
using namespace std::chrono_literals;

TEST_CASE("sizes: binary and decimal units, bare bytes") {
  CHECK(parse_size("3221225472") == 3221225472ULL);
  CHECK(parse_size("3GiB") == 3221225472ULL);
  CHECK(parse_size("115GiB") == 115ULL << 30);
  CHECK(parse_size("115 GiB") == 115ULL << 30);
  CHECK(parse_size("500MB") == 500000000ULL);
  CHECK(parse_size("1.5KiB") == 1536ULL);
  CHECK(parse_size("2TiB") == 2ULL << 40);
  CHECK(parse_size("0") == 0ULL);
}

TEST_CASE("sizes: malformed input is refused with a reason") {
  ParseError err;
  CHECK_FALSE(parse_size("115GiBs", &err));
  CHECK(err.what == "unknown size unit 'GiBs'");
  CHECK_FALSE(parse_size("-3GiB", &err));
  CHECK(err.what == "a size cannot be negative");
  CHECK_FALSE(parse_size("GiB", &err));
  CHECK(err.what == "a size starts with a number");
  CHECK_FALSE(parse_size("1.2.3GiB", &err));
  CHECK(err.what == "malformed number '1.2.3'");
  CHECK_FALSE(parse_size("12.5", &err));
  CHECK(err.what == "a byte count must be a whole number");
  CHECK_FALSE(parse_size("99999999TiB", &err));
  CHECK(err.what == "size is too large");
}

TEST_CASE("durations: units are required and may be combined") {
  CHECK(parse_duration("70m") == Duration(70min));
  CHECK(parse_duration("1h30m") == Duration(90min));
  CHECK(parse_duration("500ms") == Duration(500ms));
  CHECK(parse_duration("2h") == Duration(2h));
  CHECK(parse_duration("1d") == Duration(24h));
  CHECK(parse_duration("1.5s") == Duration(1500ms));
  ParseError err;
  CHECK_FALSE(parse_duration("70", &err));
  CHECK(err.what == "missing unit after '70' (use ms, s, m, h or d)");
  CHECK_FALSE(parse_duration("70x", &err));
  CHECK(err.what == "unknown duration unit 'x' (use ms, s, m, h or d)");
  CHECK_FALSE(parse_duration("-5m", &err));
  CHECK(err.what == "a duration cannot be negative");
  CHECK_FALSE(parse_duration("m", &err));
}

TEST_CASE("formatting sizes and durations for people") {
  CHECK(format_size(115ULL << 30) == "115 GiB");
  CHECK(format_size(512) == "512 B");
  CHECK(format_size(1536) == "1.50 KiB");
  CHECK(format_duration(70min) == "1h10m");
  CHECK(format_duration(45s) == "45s");
  CHECK(format_duration(250ms) == "250ms");
  CHECK(format_duration(90s) == "1m30s");
}
