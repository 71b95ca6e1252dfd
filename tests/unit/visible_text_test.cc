// VisibleText / JsonForTerminal / FirstHiddenCharacter (core/visible_text.h): what the
// CLI prints of stored text, and which characters codes may not hold.
#include "core/visible_text.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dsync {
namespace {

TEST(VisibleText, EscapesWhatATerminalActsOnAndNothingElse) {
  EXPECT_EQ(VisibleText("plain caf\u00e9 \u65e5\u672c \\ back"), "plain caf\u00e9 \u65e5\u672c \\ back");
  EXPECT_EQ(VisibleText("a\x1b]0;title\x07z"), "a\\x1b]0;title\\x07z");
  EXPECT_EQ(VisibleText("l1\nl2\r\tx\x7f"), "l1\\nl2\\r\\tx\\x7f");
  EXPECT_EQ(VisibleText("csi\u009b2J"), "csi\\u009b2J");
  EXPECT_EQ(VisibleText("rtl\u202Etxt.exe"), "rtl\\u202etxt.exe");
  EXPECT_EQ(VisibleText("zw\u200B\u200C\u200D\u2060\uFEFF."), "zw\\u200b\\u200c\\u200d\\u2060\\ufeff.");
  EXPECT_EQ(VisibleText("iso\u2066\u2069 lrm\u200E"), "iso\\u2066\\u2069 lrm\\u200e");
  EXPECT_EQ(VisibleText(std::string("nul\0x", 5)), "nul\\x00x");
  // Bytes that are not UTF-8 (stray continuation, overlong, surrogate, truncated).
  EXPECT_EQ(VisibleText("a\x80" "b"), "a\\x80b");
  EXPECT_EQ(VisibleText("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(VisibleText("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(VisibleText("end\xe2\x80"), "end\\xe2\\x80");
}

TEST(VisibleText, JsonForTerminalIsTheSameJsonWithoutRawHiddenCharacters) {
  const nlohmann::json value = {{"code", "evil-\x1b]0;x\x07\u202Egpj"}, {"note", "del\x7f c1\u0085 ok \u00e9"}};
  const std::string text = JsonForTerminal(value, 2);
  for (const char* raw : {"\x1b", "\x07", "\x7f", "\u202E", "\u0085"}) {
    EXPECT_EQ(text.find(raw), std::string::npos) << "raw " << VisibleText(raw) << " in " << text;
  }
  EXPECT_NE(text.find("\\u202e"), std::string::npos);
  EXPECT_NE(text.find("\u00e9"), std::string::npos);  // visible text stays as it is
  EXPECT_EQ(nlohmann::json::parse(text), value);       // the same value for a parser
  EXPECT_NE(text.find("\n  \""), std::string::npos);  // indentation kept
  // Invalid UTF-8 does not throw (dump would): replaced.
  EXPECT_NO_THROW(JsonForTerminal(nlohmann::json("bad \xff byte")));
}

TEST(VisibleText, HiddenCharactersAndInvalidUtf8AreFound) {
  EXPECT_FALSE(FirstHiddenCharacter("order-42 caf\u00e9 ok").has_value());
  EXPECT_EQ(FirstHiddenCharacter("a\u200Bb\u202E").value(), 0x200Bu);
  EXPECT_EQ(FirstHiddenCharacter("tab\t").value(), 0x09u);
  EXPECT_EQ(FirstHiddenCharacter("\u061C").value(), 0x061Cu);
  EXPECT_EQ(FirstHiddenCharacter("\u2028").value(), 0x2028u);
  EXPECT_FALSE(FirstHiddenCharacter("\u00a0nbsp \u2010 hyphen").has_value());
  EXPECT_FALSE(FirstInvalidUtf8("caf\u00e9").has_value());
  EXPECT_EQ(FirstInvalidUtf8("ab\xff").value(), 2u);
  EXPECT_EQ(CodePointName(0x202E), "U+202E");
  EXPECT_EQ(CodePointName(0x1b), "U+001B");
}

}  // namespace
}  // namespace dsync
