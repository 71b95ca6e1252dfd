// Text from the database shown to a person, and the characters codes may not hold.
//
// Anything stored may hold any bytes: a plain-SQL producer writes codes and payloads,
// steps write error texts, nodes write their metadata. Printed raw, an ESC or OSC
// sequence in such text drives the operator's terminal (moves the cursor, rewrites
// the title, hides what follows), and a right-to-left override or a zero-width space
// makes one code look like another. The CLI passes every stored string it prints in
// a table or a field through VisibleText; its --json output goes through
// JsonForTerminal.
//
//   std::cout << VisibleText(event.last_error);      // "boom \x1b[2J" shown as typed
//   if (auto cp = FirstHiddenCharacter(code)) ...    // a code holding U+202E is refused
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsync {

// Characters that change how other text looks without being seen themselves: C0 and
// C1 controls and DEL; the bidirectional controls U+061C, U+200E, U+200F,
// U+202A-U+202E, U+2066-U+2069; the zero-width U+200B-U+200D, U+2060 and U+FEFF; the
// line and paragraph separators U+2028, U+2029.
bool IsHiddenCharacter(uint32_t code_point);

// The first code point of `text` for which IsHiddenCharacter holds; nullopt when
// there is none. Invalid UTF-8 is not looked at here (see FirstInvalidUtf8).
std::optional<uint32_t> FirstHiddenCharacter(std::string_view text);

// Byte offset of the first byte that is not part of well-formed UTF-8 (overlong
// forms, surrogates and code points above U+10FFFF included); nullopt when valid.
std::optional<size_t> FirstInvalidUtf8(std::string_view text);

// "U+202E" for a code point.
std::string CodePointName(uint32_t code_point);

// `text` with every hidden character written out visibly: \n, \r, \t, other bytes
// below 0x20 and DEL as \xNN, C1 controls and the other hidden characters as \uNNNN,
// a byte that is not UTF-8 as \xNN. Everything else (backslashes included) unchanged.
std::string VisibleText(std::string_view text);

// The JSON text of `value` (indented like json::dump(indent)) with the hidden
// characters that JSON leaves raw (DEL, C1 controls, bidi, zero-width, separators)
// written as \u escapes, and invalid UTF-8 replaced by U+FFFD: the same JSON value
// for a parser, nothing a terminal acts on.
std::string JsonForTerminal(const nlohmann::json& value, int indent = 2);

}  // namespace dsync
