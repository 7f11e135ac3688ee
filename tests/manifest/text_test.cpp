// common/'s one UTF-8 module and one SHA-256 spelling (tandem/utf8.hpp, tandem/sha256.hpp): the
// tokenizer, the chat templates, the manifest and request checks, the agent and the controller all
// read bytes and write digests through them.
#include <doctest/doctest.h>

#include <string>

#include "tandem/sha256.hpp"
#include "tandem/utf8.hpp"

using namespace tandem;

TEST_CASE("utf8::decode reads code points; each invalid or truncated subpart is one U+FFFD") {
  CHECK(utf8::decode("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") == std::u32string{U'a', 0xE9, 0x20AC, 0x1F600});
  // A truncated three-byte sequence is one maximal subpart, a lone continuation byte another.
  CHECK(utf8::decode("\xe2\x82" "x\x80") == std::u32string{0xFFFD, U'x', 0xFFFD});
  // Overlong forms and surrogates are not characters.
  CHECK(utf8::decode("\xc0\xaf") == std::u32string{0xFFFD, 0xFFFD});
  CHECK(utf8::decode("\xed\xa0\x80") == std::u32string{0xFFFD, 0xFFFD, 0xFFFD});
  CHECK(utf8::encode(utf8::decode("h\xc3\xa9llo \xf0\x9f\x98\x80")) == "h\xc3\xa9llo \xf0\x9f\x98\x80");
  CHECK(utf8::length("h\xc3\xa9llo") == 5);
  CHECK(utf8::is_ascii("plain"));
  CHECK_FALSE(utf8::is_ascii("caf\xc3\xa9"));
}

TEST_CASE("utf8::invalid_at names the first bad character; boundary_before never splits one") {
  CHECK(utf8::invalid_at("ok \xc3\xa9") == std::string::npos);
  CHECK(utf8::invalid_at("ok \xc3") == 3);            // truncated at the end
  CHECK(utf8::invalid_at("ab\xed\xa0\x80") == 2);     // a surrogate
  CHECK(utf8::invalid_at("abc\xf4\x90\x80\x80") == 3);  // above U+10FFFF
  const std::string s = "ab\xe2\x82\xac" "cd";  // the euro sign is bytes 2..4
  CHECK(utf8::boundary_before(s, 2) == 2);
  CHECK(utf8::boundary_before(s, 3) == 2);
  CHECK(utf8::boundary_before(s, 4) == 2);
  CHECK(utf8::boundary_before(s, 5) == 5);
  CHECK(utf8::boundary_before(s, 99) == s.size());
}

TEST_CASE("utf8::clip keeps short text whole and cuts long text at a character boundary, marked") {
  const std::string s = "ab\xe2\x82\xac" "cd";  // the euro sign is bytes 2..4
  CHECK(utf8::clip(s, 7) == s);
  CHECK(utf8::clip(s, 99) == s);
  CHECK(utf8::clip(s, 6) == "ab\xe2\x82\xac" "c...");
  CHECK(utf8::clip(s, 4) == "ab...");  // not half the euro sign
  CHECK(utf8::clip(s, 0) == "...");
  CHECK(utf8::clip("", 0).empty());
}

TEST_CASE("sha256_hex is lowercase hex of SHA-256 (FIPS 180-2 test vectors)") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const unsigned char bytes[] = {0x00, 0x0f, 0xa5, 0xff};
  CHECK(hex_lower(bytes, sizeof bytes) == "000fa5ff");
}
